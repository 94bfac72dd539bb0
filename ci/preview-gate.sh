#!/usr/bin/env bash
# Can a real `pulumi preview` run here? It needs AWS (AWS_ROLE_ARN: a role trusting GitHub's OIDC
# provider) and a backend it can log in to, with the stack's secrets provider:
# - Pulumi Cloud (no PULUMI_BACKEND_URL, or an https:// one): PULUMI_ACCESS_TOKEN;
# - a self-managed backend (PULUMI_BACKEND_URL = s3://, gs://, azblob://, file://, postgres://...):
#   no token; PULUMI_CONFIG_PASSPHRASE (the passphrase provider, the default there) or
#   PULUMI_SECRETS_PROVIDER = a KMS URL (awskms://..., gcpkms://, azurekeyvault://, hashivault://).
# Writes has-credentials=true|false and backend=cloud|self-managed|none as step outputs; when something
# is missing (a fork: FORK=true; Dependabot: DEPENDABOT=true; a repository not set up yet) a notice
# names it, the preview is skipped and $RLTRAIN_CI_OUT/preview.unavailable says why (ci/pr_comment.py
# puts it in the comment).
#
# Fails closed: with every credential present, the job's environment (PROTECTED_ENVIRONMENT, default
# `preview`) must have required reviewers (ci/environment_protection.py, read with `gh api`: GH_TOKEN,
# GITHUB_REPOSITORY; the job needs `actions: read`). Without them (a private repository on GitHub Free,
# Pro or Team has none) or when the environment cannot be read, has-credentials=false, an error names
# why, and the step fails. This guards against a repository set up wrongly; it cannot stop a pull
# request that edits this script in a repository without reviewers: there, its run already holds the
# secrets, which is why the docs' setup checklist comes first (docs/pr-review.md).
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=/dev/null
. "$ROOT/ci/lib-github.sh"
mkdir -p "$RLTRAIN_CI_OUT"
rm -f "$RLTRAIN_CI_OUT/preview.unavailable"
# What the credentials are for, in the messages: `pulumi preview` (pr.yml) or `pulumi up` (deploy.yml).
what="${GATE_FOR:-pulumi preview}"

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

# Dependabot's pull_request runs get Dependabot's secrets only, never the Actions or environment ones
# (https://docs.github.com/en/code-security/dependabot/troubleshooting-dependabot/troubleshooting-dependabot-on-github-actions):
# the workflow routes them to the environment without secrets, and the gate says why.
if [ "${DEPENDABOT:-false}" = true ]; then
  output backend none
  output has-credentials false
  why="This pull request is Dependabot's: GitHub gives its runs no Actions or environment secrets, so no real preview runs for it. A maintainer who wants one pushes its branch under another name and opens a pull request from it (docs/pr-review.md)."
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
  environment="${PROTECTED_ENVIRONMENT:-preview}"
  rc=0
  if [ -z "${GITHUB_REPOSITORY:-}" ]; then
    verdict="not protected: GITHUB_REPOSITORY is not set, so the environment \`${environment}\` cannot be read"
    rc=1
  elif ! env_json="$(gh api "repos/${GITHUB_REPOSITORY}/environments/${environment}" 2>&1)"; then
    verdict="not protected: the environment \`${environment}\` could not be read (\`gh api\`: ${env_json//$'\n'/ })"
    rc=1
  else
    verdict="$(printf '%s' "$env_json" | python3 "$ROOT/ci/environment_protection.py" "$environment")" || rc=$?
  fi
  if [ "$rc" -ne 0 ]; then
    output has-credentials false
    why="${what} refused: ${verdict#not protected: }. The credentials are used only behind an approval: give the environment required reviewers (docs/pr-review.md \"Setting it up\")."
    printf '%s\n' "$why" > "$RLTRAIN_CI_OUT/preview.unavailable"
    printf '::error title=Environment not protected::%s\n' "$why"
    exit 1
  fi
  while IFS= read -r line; do
    case "$line" in
      warning:*) printf '::warning title=Environment %s::%s\n' "$environment" "${line#warning: }" ;;
      *) echo "$line" ;;
    esac
  done <<< "$verdict"
  output has-credentials true
else
  output has-credentials false
  list="$(printf '%s, ' "${missing[@]}")"
  why="${what} skipped: ${list%, } not available to this run (a repository whose \`${PROTECTED_ENVIRONMENT:-preview}\` environment is not set up yet: docs/pr-review.md \"Setting it up\"). The offline job still runs the tests and the impact review."
  printf '%s\n' "$why" > "$RLTRAIN_CI_OUT/preview.unavailable"
  notice "${what^} skipped" "$why"
fi
