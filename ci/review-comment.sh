#!/usr/bin/env bash
# Comment the offline review (the `review` artifact: summary.md, review.json) on its pull request:
# one comment, edited by later runs (ci/upsert_comment.py: only a comment this workflow's user wrote,
# never with an older run's result, never for a commit that is no longer the head).
#
#   ci/review-comment.sh DIR    # DIR: the downloaded artifact (a directory under $RUNNER_TEMP, data only)
#   env: GH_TOKEN, GITHUB_REPOSITORY, HEAD_SHA (the commit GitHub ran: pull_request.head.sha or
#        workflow_run.head_sha), RUN_ID and RUN_ATTEMPT (of the run that reviewed), RUN_URL, FORK=true|false;
#        same repository: PR_NUMBER (github.event.pull_request.number);
#        fork: HEAD_REPO and HEAD_BRANCH (workflow_run.head_repository.full_name and .head_branch)
#
# Used by the same-repository path (.github/workflows/pr.yml, job `comment`) and the fork path
# (.github/workflows/pr-comment.yml, `workflow_run`, which checks out the default branch, never the
# fork's code: these scripts are the base repository's). On the fork path everything in DIR was
# written by the fork's own workflow: nothing in it is run or trusted, and the pull request is
# resolved from what GitHub says about the run (ci/upsert_comment.py --resolve-pr), never from
# review.json's pr_number. Its comment has a marker of its own (`review-fork`).
# Then the impact as labels on the pull request (ci/review_labels.py).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:?usage: ci/review-comment.sh DIR}"

kind=review
if [ "${FORK:-false}" = true ]; then
  kind=review-fork
  PR_NUMBER="$(python3 "$here/upsert_comment.py" --resolve-pr)"
  export PR_NUMBER
fi
if [ -z "${PR_NUMBER:-}" ]; then
  echo "no pull request (not a pull request, or none open from this head): nothing to comment"
  exit 0
fi
body="$(mktemp)"
trap 'rm -f "$body"' EXIT
python3 "$here/review_comment.py" "$dir" "${RUN_URL:-}" > "$body"
python3 "$here/upsert_comment.py" "$kind" "$body"
# The impact as labels (replaces, data-loss, node-roll, run-restart, no-change): ci/review_labels.py.
python3 "$here/review_labels.py" "$dir"
