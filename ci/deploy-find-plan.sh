#!/usr/bin/env bash
# Which pull-request run reviewed this commit of main, with a preview someone other than the author
# approved? The deploy applies that run's update plan (ci/plan-store.sh get, in ci/deploy.sh), nothing else.
#
#   ci/deploy-find-plan.sh       # env: GH_TOKEN, GITHUB_REPOSITORY, GITHUB_SHA (the pushed commit)
#
# ci/reviewed_run.py does the reading (the merged pull request of this repository, its head branch's runs
# of pr.yml from this repository, the newest one whose `preview` was approved by someone else): never the
# newest run of the head SHA, which any fork can make by opening a pull request of the same commit.
# Step outputs pr-number, run-id and approved-by; a refusal (exit 1) names what is missing.
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=/dev/null
. "$ROOT/ci/lib-github.sh"

rc=0
found="$(python3 "$ROOT/ci/reviewed_run.py" 2> "${RUNNER_TEMP:-/tmp}/reviewed-run.err")" || rc=$?
if [ "$rc" -ne 0 ]; then
  why="$(cat "${RUNNER_TEMP:-/tmp}/reviewed-run.err")"
  printf '::error title=Deploy refused::%s\n' "${why//$'\n'/ }"
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    printf '### Deploy refused\n\n%s\n\n' "$why" >> "$GITHUB_STEP_SUMMARY"
  fi
  exit 1
fi
while IFS='=' read -r key value; do
  output "$key" "$value"
done <<< "$found"
