#!/usr/bin/env bash
# shellcheck disable=SC2016  # backquotes are Markdown code spans here, not command substitution
# Apply, on merge to main, exactly the update plan the pull request's approved review made.
#
#   ci/deploy.sh STACK
#   env: REVIEWED_RUN_ID (the pull-request run whose approved preview reviewed this merge:
#        ci/deploy-find-plan.sh), PLAN_STORE_URL (where that preview kept its plan: ci/plan-store.sh),
#        GITHUB_REPOSITORY, GITHUB_SHA (the commit being deployed; default HEAD), DEPLOY_BRANCH (default
#        main), GH_TOKEN (for `gh`), BEFORE (main before the push: github.event.before; default HEAD^1),
#        the backend's (PULUMI_BACKEND_URL, PULUMI_ACCESS_TOKEN, PULUMI_CONFIG_PASSPHRASE,
#        PULUMI_SECRETS_PROVIDER, PULUMI_ORG) and the cloud role's credentials
#
# Refuses, with a message naming what to do, and changes nothing:
# 1. when that run kept no plan for the stack (its preview was skipped or failed, or it is not the run
#    that reviewed this merge: a plan is read only from the reviewed run's place in the store, which only
#    the approved preview can write, never from an artifact) or the plan's record names another stack or
#    run;
# 2. when main's tree is not the tree the plan was made on (main moved between the review and the
#    merge: the reviewed merge is not what was merged);
# 3. when the impact guard refuses the change (ci/render-review.sh --base BEFORE STACK: the same render
#    and the same refusals as the pull request's review: data loss without the stack's opt-in, what
#    AWS refuses, what never finishes);
# 4. when main no longer points at the commit being deployed, read from GitHub immediately before
#    `pulumi up` (`GET git/ref/heads/main`, https://docs.github.com/en/rest/git/refs#get-a-reference): a
#    newer merge is deployed by its own run, and a re-run of an older deploy must not apply its plan
#    over the newer state;
# 5. when `pulumi up --plan` stops: the plan no longer applies (the live stack or its state changed
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
run="${REVIEWED_RUN_ID:-}"
branch="${DEPLOY_BRANCH:-main}"
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

head="$(git rev-parse HEAD)"
deployed="${GITHUB_SHA:-$head}"
if [ "$deployed" != "$head" ]; then
  refuse "the checkout is ${head:0:12}, not the pushed commit ${deployed:0:12}."
fi

# 1. The reviewed plan: from the reviewed run's place in the plan store, nowhere else.
if [[ ! "$run" =~ ^[0-9]+$ ]]; then
  refuse "no reviewed run (REVIEWED_RUN_ID is '${run}'): ci/deploy-find-plan.sh found no approved review of this merge, so nothing was applied."
fi
plan_dir="$(mktemp -d)"
trap 'rm -rf "$plan_dir"' EXIT
plan="$plan_dir/plan-${stack}.json"
meta="$plan_dir/plan-${stack}.meta"
if ! "$ROOT/ci/plan-store.sh" get "$stack" "$run" "$plan_dir" || [ ! -s "$plan" ]; then
  refuse "no reviewed plan for ${stack}: run ${run}, whose preview was approved, kept none in the plan store (its preview of ${stack} was skipped or failed). Nothing was applied; deploy through a pull request whose preview of ${stack} succeeded."
fi
planned() { sed -n "s/^$1=//p" "$meta" | head -n 1; }
planned_stack="$(planned stack)"
planned_tree="$(planned tree)"
planned_commit="$(planned commit)"
planned_run="$(planned run)"
if [ "$planned_stack" != "$stack" ] || [ "$planned_run" != "$run" ]; then
  refuse "the plan kept for ${stack} by run ${run} says it is ${planned_stack:-no stack}'s, made by run ${planned_run:-unknown}: not this review's plan, so nothing was applied."
fi

# 2. What was reviewed is what was merged: the same tree.
tree="$(git rev-parse 'HEAD^{tree}')"
if [ "$planned_tree" != "$tree" ]; then
  refuse "main moved since the review: the plan was made on tree ${planned_tree:0:12} (the pull request's merge commit ${planned_commit:0:12}), main is tree ${tree:0:12} at ${head:0:12}. What was reviewed is not what was merged, so nothing was applied. Require branches to be up to date before merging (branch protection), or open a pull request of main's current state and deploy it."
fi

# 3. The impact guard, as the review ran it (against main before this push).
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

# 4. Log in and select the stack; then, immediately before `up`, main must still be this commit.
select_stack() {
  if [ -n "${PULUMI_BACKEND_URL:-}" ]; then
    pulumi login --non-interactive "$PULUMI_BACKEND_URL" || return
  else
    pulumi login --non-interactive || return
  fi
  pulumi stack select --non-interactive "$ref"
}
select_stack 2>&1 | tee "$log"
rc="${PIPESTATUS[0]}"
if [ "$rc" -ne 0 ]; then
  refuse "the stack ${ref} could not be selected (exit ${rc}): see the errors above. Nothing was applied."
fi
if [ -z "${GITHUB_REPOSITORY:-}" ]; then
  refuse "GITHUB_REPOSITORY is not set: where ${branch} points now cannot be read, so nothing was applied."
fi
if ! now="$(gh api "repos/${GITHUB_REPOSITORY}/git/ref/heads/${branch}" --jq .object.sha 2>&1)"; then
  refuse "where ${branch} points now could not be read (gh api: ${now//$'\n'/ }), so nothing was applied."
fi
if [ "$now" != "$deployed" ]; then
  refuse "${branch} is now ${now:0:12}, no longer ${deployed:0:12}, the commit this deploy applies: a newer merge is deployed by its own run (a re-run of an older deploy would apply an old plan over newer state), so nothing was applied."
fi

# 5. The plan, applied.
policy=()
if [ -f policy/PulumiPolicy.yaml ]; then
  policy=(--policy-pack policy)
fi
# --refresh as the reviewed preview did: the plan was made against the refreshed live stack, so the
# update compares with the same, and a change of what is live since the review breaks the plan.
pulumi up --yes --non-interactive --stack "$ref" --refresh --plan "$plan" --diff --suppress-progress --color never \
  "${policy[@]}" 2>&1 | tee -a "$log"
rc="${PIPESTATUS[0]}"
if [ "$rc" -ne 0 ]; then
  refuse "pulumi up --plan of ${stack} stopped (exit ${rc}): the reviewed plan no longer applies (the live stack or its state changed since the review: drift, another deploy) or an operation failed; see the errors above. Pulumi stops at the first step the plan does not allow, so nothing outside the reviewed plan was applied. Review again: a new pull request's preview shows the drift and saves a new plan."
fi
echo "applied the plan reviewed by run ${run} on ${planned_commit:0:12} to ${ref}"
