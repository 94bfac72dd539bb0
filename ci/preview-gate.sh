#!/usr/bin/env bash
# May a real `pulumi preview` (or `pulumi up`) run here with the environment's credentials? It needs AWS (a
# role trusting GitHub's OIDC provider) and a backend it can log in to, with the stack's secrets provider:
# - Pulumi Cloud (no PULUMI_BACKEND_URL, or an https:// one): PULUMI_ACCESS_TOKEN;
# - a self-managed backend (s3://, gs://, azblob://, file://, postgres://...): no token;
#   PULUMI_CONFIG_PASSPHRASE (the passphrase provider, the default there) or a KMS PULUMI_SECRETS_PROVIDER.
# This step never sees a secret: the workflow hands it only whether each is set (GitHub expressions
# evaluated before the step runs: `secrets.X != ''`), as HAS_AWS_ROLE_ARN, HAS_PULUMI_ACCESS_TOKEN,
# HAS_PULUMI_CONFIG_PASSPHRASE (true|false), BACKEND_IS_CLOUD (true|false: no backend URL, or an http(s)
# one) and PASSPHRASE_PROVIDER (true|false: the secrets provider is unset, `default` or `passphrase`).
# Writes has-credentials=true|false and backend=cloud|self-managed|none as step outputs; when something
# is missing (a fork: FORK=true; Dependabot: DEPENDABOT=true; a repository not set up yet) a notice
# names it, the preview is skipped and $RLTRAIN_CI_OUT/preview.unavailable says why (ci/pr_comment.py
# puts it in the comment).
#
# Fails closed, with every credential present, unless ci/environment_protection.py accepts both the
# job's environment (PROTECTED_ENVIRONMENT, default `preview`: required reviewers, no administrator
# bypass, self-review prevented; with DEPLOY_BRANCH, deployments from that branch only) and this run's
# approval of it (GITHUB_RUN_ID's review history: approved by someone other than PR_AUTHOR and
# GITHUB_TRIGGERING_ACTOR, GitHub's default variable naming who started this run or its re-run:
# https://docs.github.com/en/actions/reference/variables-reference#default-environment-variables).
# Read with `gh api` (GH_TOKEN, GITHUB_REPOSITORY; the job needs
# `actions: read`). Then has-credentials=false, an error names why, and the step fails. This guards
# against a repository set up wrongly and against a run nobody else approved; it cannot stop a pull
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
[ "${HAS_AWS_ROLE_ARN:-false}" = true ] || missing+=("the secret AWS_ROLE_ARN")
if [ "${BACKEND_IS_CLOUD:-true}" = true ]; then
  backend=cloud
  [ "${HAS_PULUMI_ACCESS_TOKEN:-false}" = true ] || missing+=("the secret PULUMI_ACCESS_TOKEN (Pulumi Cloud)")
else
  backend=self-managed
  if [ "${PASSPHRASE_PROVIDER:-true}" = true ] && [ "${HAS_PULUMI_CONFIG_PASSPHRASE:-false}" != true ]; then
    missing+=("the secret PULUMI_CONFIG_PASSPHRASE or a KMS PULUMI_SECRETS_PROVIDER (self-managed backend)")
  fi
fi
output backend "$backend"
if [ "${#missing[@]}" -eq 0 ]; then
  environment="${PROTECTED_ENVIRONMENT:-preview}"
  rc=0
  scratch="$(mktemp -d)"
  trap 'rm -rf "$scratch"' EXIT
  read_api() {  # read_api FILE PATH: the answer in FILE, or a verdict naming what failed
    local answer
    if ! answer="$(gh api "$2" 2>&1)"; then
      verdict="not protected: \`gh api $2\` failed: ${answer//$'\n'/ }"
      return 1
    fi
    printf '%s' "$answer" > "$1"
  }
  check=(--environment "$scratch/environment.json" --approvals "$scratch/approvals.json")
  if [ -z "${GITHUB_REPOSITORY:-}" ] || [ -z "${GITHUB_RUN_ID:-}" ]; then
    verdict="not protected: GITHUB_REPOSITORY or GITHUB_RUN_ID is not set, so neither the environment \`${environment}\` nor this run's approval can be read"
    rc=1
  elif ! read_api "$scratch/environment.json" "repos/${GITHUB_REPOSITORY}/environments/${environment}" ||
    ! read_api "$scratch/approvals.json" "repos/${GITHUB_REPOSITORY}/actions/runs/${GITHUB_RUN_ID}/approvals"; then
    rc=1
  elif [ -n "${DEPLOY_BRANCH:-}" ] &&
    ! read_api "$scratch/policies.json" "repos/${GITHUB_REPOSITORY}/environments/${environment}/deployment-branch-policies"; then
    rc=1
  else
    [ -z "${DEPLOY_BRANCH:-}" ] || check+=(--branch "$DEPLOY_BRANCH" --branch-policies "$scratch/policies.json")
    for login in "${PR_AUTHOR:-}" "${GITHUB_TRIGGERING_ACTOR:-}"; do
      [ -z "$login" ] || check+=(--not-by "$login")
    done
    verdict="$(python3 "$ROOT/ci/environment_protection.py" "$environment" "${check[@]}")" || rc=$?
  fi
  if [ "$rc" -ne 0 ]; then
    output has-credentials false
    reasons="$(sed -n 's/^not protected: //p' <<< "$verdict" | awk 'NR > 1 { printf "; " } { printf "%s", $0 }')"
    why="${what} refused: ${reasons:-${verdict}}. The credentials are used only by a run someone else approved, in an environment set up as docs/pr-review.md \"Setting it up\" says."
    printf '%s\n' "$why" > "$RLTRAIN_CI_OUT/preview.unavailable"
    printf '::error title=Environment not protected::%s\n' "$why"
    exit 1
  fi
  echo "$verdict"
  output has-credentials true
else
  output has-credentials false
  list="$(printf '%s, ' "${missing[@]}")"
  why="${what} skipped: ${list%, } not available to this run (a repository whose \`${PROTECTED_ENVIRONMENT:-preview}\` environment is not set up yet: docs/pr-review.md \"Setting it up\"). The offline job still runs the tests and the impact review."
  printf '%s\n' "$why" > "$RLTRAIN_CI_OUT/preview.unavailable"
  notice "${what^} skipped" "$why"
fi
