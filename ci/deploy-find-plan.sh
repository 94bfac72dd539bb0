#!/usr/bin/env bash
# Which pull-request run reviewed this commit of main? The deploy applies that run's update plan
# (the `plan-STACK` artifact of .github/workflows/pr.yml's preview job), nothing else.
#
#   ci/deploy-find-plan.sh       # env: GH_TOKEN, GITHUB_REPOSITORY, GITHUB_SHA (the pushed commit)
#
# 1. The pull request merged as GITHUB_SHA: `GET commits/{sha}/pulls` ("List pull requests associated
#    with a commit": the merged pull request that introduced the commit,
#    https://docs.github.com/en/rest/commits/commits#list-pull-requests-associated-with-a-commit),
#    kept only when its merge_commit_sha is this very commit. A direct push to main has none:
#    nothing was reviewed, so nothing is deployed.
# 2. The newest completed `pr` run of that pull request's head (`GET actions/workflows/pr.yml/runs`,
#    event=pull_request, head_sha=...): its artifacts hold the plans.
# Step outputs pr-number and run-id; a refusal (exit 1) names what is missing.
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=/dev/null
. "$ROOT/ci/lib-github.sh"

repo="${GITHUB_REPOSITORY:?GITHUB_REPOSITORY not set}"
sha="${GITHUB_SHA:?GITHUB_SHA not set}"
[[ "$sha" =~ ^[0-9a-f]{40}$ ]] || { echo "GITHUB_SHA ${sha} is not a commit id" >&2; exit 2; }

refuse() {
  printf '::error title=Deploy refused::%s\n' "$1"
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    printf '### Deploy refused\n\n%s\n\n' "$1" >> "$GITHUB_STEP_SUMMARY"
  fi
  exit 1
}

prs="$(gh api "repos/${repo}/commits/${sha}/pulls" \
  --jq ".[] | select(.merged_at != null and .merge_commit_sha == \"${sha}\") | \"\(.number) \(.head.sha)\"")"
if [ "$(printf '%s' "$prs" | grep -c .)" -ne 1 ]; then
  refuse "no pull request was merged as ${sha:0:12}: a direct push to main, so nothing was reviewed and nothing is deployed. Open a pull request; its reviewed plan is deployed when it merges."
fi
read -r number head <<< "$prs"
run="$(gh api "repos/${repo}/actions/workflows/pr.yml/runs?event=pull_request&head_sha=${head}&status=completed&per_page=100" \
  --jq '[.workflow_runs[].id] | max // empty')"
if [ -z "$run" ]; then
  refuse "#${number} (head ${head:0:12}) has no completed run of the pr workflow: no reviewed plan to apply."
fi
echo "#${number} merged as ${sha:0:12}; its head ${head:0:12} was reviewed by run ${run}"
output pr-number "$number"
output run-id "$run"
