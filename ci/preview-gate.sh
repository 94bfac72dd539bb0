#!/usr/bin/env bash
# Can a real `pulumi preview` run here? It needs AWS (AWS_ROLE_ARN: a role trusting GitHub's OIDC
# provider) and a backend it can log in to, with the stack's secrets provider:
# - Pulumi Cloud (no PULUMI_BACKEND_URL, or an https:// one): PULUMI_ACCESS_TOKEN;
# - a self-managed backend (PULUMI_BACKEND_URL = s3://, gs://, azblob://, file://, postgres://...):
#   no token; PULUMI_CONFIG_PASSPHRASE (the passphrase provider, the default there) or
#   PULUMI_SECRETS_PROVIDER = a KMS URL (awskms://..., gcpkms://, azurekeyvault://, hashivault://).
# Writes has-credentials=true|false and backend=cloud|self-managed as step outputs; when something is
# missing (a fork, Dependabot, a repository not set up yet) a notice names it and the preview is skipped.
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/lib-github.sh"

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
  notice "Pulumi preview skipped" "pulumi preview skipped: ${list%, } not available to this run (a fork, Dependabot, or a repository without them; docs/review-flow.md). The offline job still runs the tests and the impact review."
fi
