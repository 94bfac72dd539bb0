#!/usr/bin/env bash
# Comment the offline review (the `review` artifact: summary.md, review.json) on its pull request:
# one comment, edited by later runs (ci/upsert_comment.py: only a comment this workflow's identity wrote,
# never with an older run's result, never for a commit that is no longer the head).
#
#   ci/review-comment.sh DIR    # DIR: the downloaded artifact (a directory under $RUNNER_TEMP, data only)
#   env: GH_TOKEN, GITHUB_REPOSITORY, HEAD_SHA (the commit GitHub ran: pull_request.head.sha or
#        workflow_run.head_sha), RUN_ID and RUN_ATTEMPT (of the run that reviewed), RUN_URL, FORK=true|false;
#        same repository: PR_NUMBER (github.event.pull_request.number);
#        fork: HEAD_REPO and HEAD_BRANCH (workflow_run.head_repository.full_name and .head_branch), and
#        COMMENT_AUTHOR, the login of the GitHub App whose token GH_TOKEN is (`APP-SLUG[bot]`)
#
# Used by the same-repository path (.github/workflows/pr.yml, job `comment`) and the fork path
# (.github/workflows/pr-comment.yml, `workflow_run`, which checks out the default branch, never the
# fork's code: these scripts are the base repository's). On the fork path everything in DIR was
# written by the fork's own workflow: nothing in it is run or trusted, the pull request is resolved from
# what GitHub says about the run (ci/upsert_comment.py --resolve-pr), never from review.json's
# pr_number, the comment quotes the fork's text under this repository's own words (ci/review_comment.py),
# has a marker of its own (`review-fork`) and is written with the review App's token only: every
# workflow's own token posts as github-actions[bot], so only an identity no other workflow holds makes
# the author check mean something. Without that App (COMMENT_AUTHOR unset, or github-actions[bot]) the
# comment goes to the job summary only. Then, same repository only, the impact as labels on the pull
# request (ci/review_labels.py): a fork's review is its author's claim, and no label comes from it.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="${1:?usage: ci/review-comment.sh DIR}"

kind=review
if [ "${FORK:-false}" = true ]; then
  kind=review-fork
  case "${COMMENT_AUTHOR:-}" in
    "" | "[bot]" | "github-actions[bot]")
      why="the review App is not set up (the \`review-bot\` environment's REVIEW_APP_CLIENT_ID and REVIEW_APP_PRIVATE_KEY: docs/pr-review.md \"Setting it up\"), and a fork's review is never posted as github-actions[bot], which every workflow of this repository posts as. The review is in the pr run's job summary and artifact."
      printf '::warning title=Fork review not commented::%s\n' "$why"
      if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
        printf '### Fork review not commented\n\n%s\n\n' "$why" >> "$GITHUB_STEP_SUMMARY"
      fi
      exit 0
      ;;
  esac
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
if [ "$kind" = review ]; then
  # The impact as labels (replaces, data-loss, node-roll, run-restart, no-change): ci/review_labels.py.
  python3 "$here/review_labels.py" "$dir"
else
  echo "labels: none from a fork's review (the author's claim)"
fi
