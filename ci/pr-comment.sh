#!/usr/bin/env bash
# Comment a stack's preview on the pull request, whether it succeeded, failed or was skipped
# (ci/pr_comment.py writes the comment), editing this workflow's earlier comment for the stack
# rather than adding another. The comment also goes to the job summary. Outside a pull request
# (PR_NUMBER unset) only the job summary gets it.
#
#   ci/pr-comment.sh STACK      # env: GH_TOKEN, GITHUB_REPOSITORY, PR_NUMBER, RUN_URL
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

stack="${1:?usage: ci/pr-comment.sh STACK}"
mkdir -p "$RLTRAIN_CI_OUT"
payload="$RLTRAIN_CI_OUT/comment-${stack}.json"
python3 ci/pr_comment.py "$stack" "$RLTRAIN_CI_OUT" "${RUN_URL:-}" > "$payload"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["body"])' "$payload" >> "$GITHUB_STEP_SUMMARY"
fi
if [ -z "${PR_NUMBER:-}" ]; then
  echo "not a pull request: the comment is in the job summary only"
  exit 0
fi

repo="${GITHUB_REPOSITORY:?}"
marker="<!-- rltrain-preview:${stack} -->"
id="$(gh api --paginate "repos/${repo}/issues/${PR_NUMBER}/comments" \
  --jq ".[] | select(.body | startswith(\"${marker}\")) | .id" | tail -n 1)"
if [ -n "$id" ]; then
  gh api --method PATCH "repos/${repo}/issues/comments/${id}" --input "$payload" --silent
  echo "updated comment ${id} on #${PR_NUMBER}"
else
  gh api --method POST "repos/${repo}/issues/${PR_NUMBER}/comments" --input "$payload" --silent
  echo "commented on #${PR_NUMBER}"
fi
