#!/usr/bin/env bash
# A stack's real `pulumi preview`, its whole output captured for the pull-request comment.
#
#   ci/preview.sh STACK
#
# Logs in (PULUMI_BACKEND_URL, else Pulumi Cloud with PULUMI_ACCESS_TOKEN), selects the stack or
# creates it when it does not exist yet (`pulumi stack select --create`, with PULUMI_SECRETS_PROVIDER
# when set: a KMS URL; the default is Pulumi Cloud's provider, or the passphrase on a self-managed
# backend, PULUMI_CONFIG_PASSPHRASE), then previews with the diff and the policy pack. Everything it
# prints goes to the log and to $RLTRAIN_CI_OUT/preview-STACK.txt, its exit code to
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

preview() {
  if [ -n "${PULUMI_BACKEND_URL:-}" ]; then
    pulumi login --non-interactive "$PULUMI_BACKEND_URL" || return
  else
    pulumi login --non-interactive || return
  fi
  pulumi stack select --non-interactive --create --secrets-provider "${PULUMI_SECRETS_PROVIDER:-default}" "$ref" || return
  echo "stack ${ref} selected"
  local policy=()
  if [ -f policy/PulumiPolicy.yaml ]; then
    policy=(--policy-pack policy)
  fi
  pulumi preview --non-interactive --stack "$ref" --diff --suppress-progress --color never "${policy[@]}"
}

preview 2>&1 | tee "$log"
rc="${PIPESTATUS[0]}"
echo "$rc" > "$RLTRAIN_CI_OUT/preview-${stack}.rc"
exit "$rc"
