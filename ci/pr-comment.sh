#!/usr/bin/env bash
# Comment a stack's preview on the pull request, whether it succeeded, failed or was skipped
# (ci/pr_comment.py writes the comment, naming the commit it describes), editing this workflow's
# earlier comment for the stack rather than adding another (ci/upsert_comment.py: only a comment this
# workflow's user wrote, never with an older run's result). The comment also goes to the job summary.
# Outside a pull request (PR_NUMBER unset) only the job summary gets it.
#
#   ci/pr-comment.sh STACK   # env: GH_TOKEN, GITHUB_REPOSITORY, PR_NUMBER, HEAD_SHA, RUN_ID, RUN_ATTEMPT, RUN_URL
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

stack="${1:?usage: ci/pr-comment.sh STACK}"
mkdir -p "$RLTRAIN_CI_OUT"
body="$RLTRAIN_CI_OUT/comment-${stack}.md"
python3 ci/pr_comment.py "$stack" "$RLTRAIN_CI_OUT" "${RUN_URL:-}" "${HEAD_SHA:-}" > "$body"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  cat "$body" >> "$GITHUB_STEP_SUMMARY"
fi
if [ -z "${PR_NUMBER:-}" ]; then
  echo "not a pull request: the comment is in the job summary only"
  exit 0
fi
python3 ci/upsert_comment.py "preview:${stack}" "$body"
