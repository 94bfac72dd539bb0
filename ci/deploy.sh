#!/usr/bin/env bash
# shellcheck disable=SC2016  # backquotes are Markdown code spans here, not command substitution
# Apply, on merge to main, exactly the update plan the pull request's review showed.
#
#   ci/deploy.sh STACK
#   env: PLAN_DIR (the `plan-STACK` artifact of the reviewed run: plan-STACK.json, plan-STACK.meta),
#        BEFORE (main before the push: github.event.before; default HEAD^1), the backend's
#        (PULUMI_BACKEND_URL, PULUMI_ACCESS_TOKEN, PULUMI_CONFIG_PASSPHRASE, PULUMI_SECRETS_PROVIDER,
#        PULUMI_ORG) and the cloud role's credentials
#
# Refuses, with a message naming what to do, and changes nothing:
# 1. when the impact guard refuses the change (ci/render-review.sh --base BEFORE STACK: the same render
#    and the same refusals as the pull request's review: data loss without the stack's opt-in, what
#    AWS refuses, what never finishes);
# 2. when there is no reviewed plan for the stack (its preview was skipped or failed, or the pull
#    request came from a fork and was never mirrored);
# 3. when main's tree is not the tree the plan was made on (main moved between the review and the
#    merge: the reviewed merge is not what was merged);
# 4. when `pulumi up --plan` stops: the plan no longer applies (the live stack or its state changed
#    since the review: drift, another deploy) or an operation failed. Pulumi checks each step against
#    the plan as the update runs and fails at the first one the plan does not allow
#    (https://www.pulumi.com/docs/iac/operations/stack-management/update-plans/), so nothing outside
#    the plan is applied; steps before that one may have been.
# Writes $RLTRAIN_CI_OUT/deploy-STACK.txt (the up's output) and deploy-STACK.refused (why, when it
# refused). Exit 0 when applied; 1 when refused.
set -uo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=/dev/null
. "$ROOT/ci/lib-github.sh"
cd "$ROOT" || exit 1

stack="${1:?usage: ci/deploy.sh STACK}"
plan_dir="${PLAN_DIR:?PLAN_DIR not set (the downloaded plan-STACK artifact)}"
for name in PULUMI_ACCESS_TOKEN PULUMI_CONFIG_PASSPHRASE PULUMI_SECRETS_PROVIDER PULUMI_BACKEND_URL PULUMI_ORG; do
  [ -n "${!name:-}" ] || unset "$name"
done
ref="$(stack_ref "$stack")"
mkdir -p "$RLTRAIN_CI_OUT"
log="$RLTRAIN_CI_OUT/deploy-${stack}.txt"
refused="$RLTRAIN_CI_OUT/deploy-${stack}.refused"
rm -f "$log" "$refused"

refuse() {
  printf 'REFUSED: %s\n' "$1" | tee "$refused"
  printf '::error title=Deploy of %s refused::%s\n' "$stack" "$1"
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    printf '### `pulumi up` of `%s`: refused\n\n%s\n\n' "$stack" "$1" >> "$GITHUB_STEP_SUMMARY"
  fi
  exit 1
}

# 1. The impact guard, as the review ran it (against main before this push).
before="${BEFORE:-}"
if [ -z "$before" ] || [[ "$before" =~ ^0+$ ]]; then
  before='HEAD^1'
fi
guard=0
# RLTRAIN_IMPACT_GUARD: a stand-in for the tests of this script (tests/test_deploy_scripts.py); the
# guard itself is ci/render-review.sh, tested on its own (tests/test_review_flow.py).
"${RLTRAIN_IMPACT_GUARD:-ci/render-review.sh}" --base "$before" "$stack" > "$RLTRAIN_CI_OUT/deploy-guard-${stack}.txt" 2>&1 || guard=$?
if [ "$guard" -ne 0 ]; then
  grep -h 'REFUSED' "$RLTRAIN_CI_OUT/render.log" "$RLTRAIN_CI_OUT/deploy-guard-${stack}.txt" 2>/dev/null | head -n 20
  refuse "the impact guard refuses this change of ${stack} (ci/render-review.sh --base ${before} ${stack}, exit ${guard}: its summary is ci-out/summary.md). The render refused it the same way; set the stack's opt-in in a new pull request, or revert."
fi

# 2. The reviewed plan.
plan="$plan_dir/plan-${stack}.json"
meta="$plan_dir/plan-${stack}.meta"
if [ ! -s "$plan" ] || [ ! -f "$meta" ] || [ -L "$plan" ] || [ -L "$meta" ]; then
  refuse "no reviewed plan for ${stack}: the pull request's preview of ${stack} saved none (skipped, failed, or a fork's pull request that no maintainer mirrored). Nothing was applied; deploy through a pull request whose preview of ${stack} succeeded."
fi
planned_stack="$(sed -n 's/^stack=//p' "$meta")"
planned_tree="$(sed -n 's/^tree=//p' "$meta")"
planned_commit="$(sed -n 's/^commit=//p' "$meta")"
if [ "$planned_stack" != "$stack" ]; then
  refuse "the plan in ${plan_dir} is for stack '${planned_stack}', not ${stack}."
fi

# 3. What was reviewed is what was merged: the same tree.
tree="$(git rev-parse 'HEAD^{tree}')"
if [ "$planned_tree" != "$tree" ]; then
  refuse "main moved since the review: the plan was made on tree ${planned_tree:0:12} (the pull request's merge commit ${planned_commit:0:12}), main is tree ${tree:0:12} at $(git rev-parse --short=12 HEAD). What was reviewed is not what was merged, so nothing was applied. Require branches to be up to date before merging (branch protection), or open a pull request of main's current state and deploy it."
fi

# 4. The plan, applied.
up() {
  if [ -n "${PULUMI_BACKEND_URL:-}" ]; then
    pulumi login --non-interactive "$PULUMI_BACKEND_URL" || return
  else
    pulumi login --non-interactive || return
  fi
  pulumi stack select --non-interactive "$ref" || return
  local policy=()
  if [ -f policy/PulumiPolicy.yaml ]; then
    policy=(--policy-pack policy)
  fi
  # --refresh as the reviewed preview did: the plan was made against the refreshed live stack, so the
  # update compares with the same, and a change of what is live since the review breaks the plan.
  pulumi up --yes --non-interactive --stack "$ref" --refresh --plan "$plan" --diff --suppress-progress --color never "${policy[@]}"
}
up 2>&1 | tee "$log"
rc="${PIPESTATUS[0]}"
if [ "$rc" -ne 0 ]; then
  refuse "pulumi up --plan of ${stack} stopped (exit ${rc}): the reviewed plan no longer applies (the live stack or its state changed since the review: drift, another deploy) or an operation failed; see the errors above. Pulumi stops at the first step the plan does not allow, so nothing outside the reviewed plan was applied. Review again: a new pull request's preview shows the drift and saves a new plan."
fi
echo "applied the plan reviewed on ${planned_commit:0:12} to ${ref}"
