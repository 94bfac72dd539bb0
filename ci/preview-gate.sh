#!/usr/bin/env bash
# Can a real `pulumi preview` run here? It needs AWS (AWS_ROLE_ARN: a role trusting GitHub's OIDC
# provider) and a backend it can log in to, with the stack's secrets provider:
# - Pulumi Cloud (no PULUMI_BACKEND_URL, or an https:// one): PULUMI_ACCESS_TOKEN;
# - a self-managed backend (PULUMI_BACKEND_URL = s3://, gs://, azblob://, file://, postgres://...):
#   no token; PULUMI_CONFIG_PASSPHRASE (the passphrase provider, the default there) or
#   PULUMI_SECRETS_PROVIDER = a KMS URL (awskms://..., gcpkms://, azurekeyvault://, hashivault://).
# Writes has-credentials=true|false and backend=cloud|self-managed|none as step outputs; when something
# is missing (a fork: FORK=true; Dependabot; a repository not set up yet) a notice names it, the preview
# is skipped and $RLTRAIN_CI_OUT/preview.unavailable says why (ci/pr_comment.py puts it in the comment).
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=/dev/null
. "$ROOT/ci/lib-github.sh"
mkdir -p "$RLTRAIN_CI_OUT"
rm -f "$RLTRAIN_CI_OUT/preview.unavailable"

# A pull request from a fork: GitHub gives it no secrets and a read-only token, and its code never
# runs with the cloud role (docs/pr-review.md "Pull requests from forks").
if [ "${FORK:-false}" = true ]; then
  output backend none
  output has-credentials false
  why="This pull request comes from a fork: GitHub gives its workflows no secrets, so no real preview runs for it. Previews run after a maintainer approves: see docs/pr-review.md \"Pull requests from forks\"."
  printf '%s\n' "$why" > "$RLTRAIN_CI_OUT/preview.unavailable"
  notice "Pulumi preview skipped" "$why"
  exit 0
fi

missing=()
[ -n "${AWS_ROLE_ARN:-}" ] || missing+=("the secret AWS_ROLE_ARN")
case "${PULUMI_BACKEND_URL:-}" in
  "" | https://* | http://*)
    backend=cloud
    [ -n "${PULUMI_ACCESS_TOKEN:-}" ] || missing+=("the secret PULUMI_ACCESS_TOKEN (Pulumi Cloud)")
    ;;
  *)
    backend=self-managed
    case "${PULUMI_SECRETS_PROVIDER:-}" in
      "" | default | passphrase)
        [ -n "${PULUMI_CONFIG_PASSPHRASE:-}" ] ||
          missing+=("the secret PULUMI_CONFIG_PASSPHRASE or a KMS PULUMI_SECRETS_PROVIDER (self-managed backend)")
        ;;
    esac
    ;;
esac
output backend "$backend"
if [ "${#missing[@]}" -eq 0 ]; then
  output has-credentials true
else
  output has-credentials false
  list="$(printf '%s, ' "${missing[@]}")"
  why="pulumi preview skipped: ${list%, } not available to this run (Dependabot, or a repository whose \`preview\` environment is not set up yet: docs/pr-review.md). The offline job still runs the tests and the impact review."
  printf '%s\n' "$why" > "$RLTRAIN_CI_OUT/preview.unavailable"
  notice "Pulumi preview skipped" "$why"
fi
