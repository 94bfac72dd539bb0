#!/usr/bin/env bash
# A stack's real `pulumi preview`, its whole output captured for the pull-request comment.
#
#   ci/preview.sh STACK
#
# Logs in (PULUMI_BACKEND_URL, else Pulumi Cloud with PULUMI_ACCESS_TOKEN), selects the stack or
# creates it when it does not exist yet (`pulumi stack select --create`, with PULUMI_SECRETS_PROVIDER
# when set: a KMS URL; the default is Pulumi Cloud's provider, or the passphrase on a self-managed
# backend, PULUMI_CONFIG_PASSPHRASE). Then:
# 1. drift: `pulumi refresh --preview-only` (reads the live resources, changes nothing, not even the
#    state): what differs between the live stack and its state, whatever this pull request does.
#    Output to $RLTRAIN_CI_OUT/drift-STACK.txt, exit code to drift-STACK.rc; the comment shows it
#    apart (ci/pr_comment.py). A failed drift check does not stop the preview.
# 2. `pulumi preview --refresh --diff` with the policy pack: this change against what is live, so a
#    drifted resource is not mistaken for the change (nor hidden by it), saving the update plan
#    (`--save-plan`, https://www.pulumi.com/docs/iac/operations/stack-management/update-plans/) to
#    plan-STACK.json with plan-STACK.meta (the commit and tree it was made on): what the deploy
#    applies on merge with `pulumi up --plan` (ci/deploy.sh), and only when main's tree is this one.
# Everything the preview prints goes to the log and to preview-STACK.txt, its exit code to
# preview-STACK.rc; the exit code is the script's.
set -uo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=/dev/null
. "$ROOT/ci/lib-github.sh"
cd "$ROOT" || exit 1

stack="${1:?usage: ci/preview.sh STACK}"
# A secret the repository does not have reaches here as an empty variable: for the CLI an empty
# PULUMI_CONFIG_PASSPHRASE is a passphrase, so empty ones are removed.
for name in PULUMI_ACCESS_TOKEN PULUMI_CONFIG_PASSPHRASE PULUMI_SECRETS_PROVIDER PULUMI_BACKEND_URL PULUMI_ORG; do
  [ -n "${!name:-}" ] || unset "$name"
done
ref="$(stack_ref "$stack")"
mkdir -p "$RLTRAIN_CI_OUT"
log="$RLTRAIN_CI_OUT/preview-${stack}.txt"
rm -f "$log" "$RLTRAIN_CI_OUT/preview-${stack}.rc"

select_stack() {
  if [ -n "${PULUMI_BACKEND_URL:-}" ]; then
    pulumi login --non-interactive "$PULUMI_BACKEND_URL" || return
  else
    pulumi login --non-interactive || return
  fi
  pulumi stack select --non-interactive --create --secrets-provider "${PULUMI_SECRETS_PROVIDER:-default}" "$ref" || return
  echo "stack ${ref} selected"
}

policy=()
if [ -f policy/PulumiPolicy.yaml ]; then
  policy=(--policy-pack policy)
fi
drift="$RLTRAIN_CI_OUT/drift-${stack}.txt"
plan="$RLTRAIN_CI_OUT/plan-${stack}.json"
rm -f "$drift" "$RLTRAIN_CI_OUT/drift-${stack}.rc" "$plan" "$RLTRAIN_CI_OUT/plan-${stack}.meta"

select_stack 2>&1 | tee "$log"
rc="${PIPESTATUS[0]}"
if [ "$rc" -eq 0 ]; then
  echo "--- drift: pulumi refresh --preview-only (the live stack against its state)"
  pulumi refresh --preview-only --non-interactive --stack "$ref" --diff --suppress-progress --color never 2>&1 | tee "$drift"
  echo "${PIPESTATUS[0]}" > "$RLTRAIN_CI_OUT/drift-${stack}.rc"
  echo "--- pulumi preview --refresh (this change against the live stack)"
  pulumi preview --non-interactive --stack "$ref" --refresh --diff --suppress-progress --color never \
    --save-plan "$plan" "${policy[@]}" 2>&1 | tee -a "$log"
  rc="${PIPESTATUS[0]}"
  if [ "$rc" -eq 0 ] && [ -s "$plan" ]; then
    printf 'stack=%s\ncommit=%s\ntree=%s\n' "$stack" "$(git rev-parse HEAD)" "$(git rev-parse 'HEAD^{tree}')" \
      > "$RLTRAIN_CI_OUT/plan-${stack}.meta"
  fi
fi
echo "$rc" > "$RLTRAIN_CI_OUT/preview-${stack}.rc"
exit "$rc"
