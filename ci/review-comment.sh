#!/usr/bin/env bash
# Comment the offline review (the `review` artifact: summary.md, review.json) on its pull request:
# one comment, edited by later runs (ci/upsert_comment.py: only a comment this workflow's user wrote,
# never with an older run's result, never for a commit that is no longer the head).
#
#   ci/review-comment.sh DIR    # DIR: the downloaded artifact
#   env: GH_TOKEN, GITHUB_REPOSITORY, HEAD_SHA (the commit GitHub ran: pull_request.head.sha or
#        workflow_run.head_sha), RUN_ID and RUN_ATTEMPT (of the run that reviewed), RUN_URL, FORK=true|false,
#        PR_NUMBER (else read from DIR/review.json: a fork's artifact, which upsert_comment.py checks
#        against HEAD_SHA before writing anything)
#
# Used by the same-repository path (.github/workflows/pr.yml, job `comment`) and the fork path
# (.github/workflows/pr-comment.yml, `workflow_run`, which checks out the default branch, never the
# fork's code: these scripts are the base repository's).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:?usage: ci/review-comment.sh DIR}"

if [ -z "${PR_NUMBER:-}" ] && [ -f "$dir/review.json" ]; then
  PR_NUMBER="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("pr_number") or "")' "$dir/review.json")"
  export PR_NUMBER
fi
if [ -z "${PR_NUMBER:-}" ]; then
  echo "no pull request number (not a pull request, or no review.json): nothing to comment"
  exit 0
fi
body="$(mktemp)"
trap 'rm -f "$body"' EXIT
python3 "$here/review_comment.py" "$dir" "${RUN_URL:-}" > "$body"
python3 "$here/upsert_comment.py" review "$body"
