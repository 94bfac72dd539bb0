#!/usr/bin/env bash
# The AWS preflight of a stack, where the preview's credentials exist: `python -m components.preflight
# --stack STACK` (quotas, the account's prerequisites: components/preflight.py) in the program's
# environment that `pulumi install` built (.venv, as Pulumi.yaml says). Its output goes to the log and
# to $RLTRAIN_CI_OUT/preflight-STACK.txt, its exit code to preflight-STACK.rc (ci/pr_comment.py shows
# a failure in the comment); the exit code is the script's, so the preview does not run after it fails.
#
#   ci/preflight.sh STACK
set -uo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT" || exit 1

stack="${1:?usage: ci/preflight.sh STACK}"
python="${RLTRAIN_PREVIEW_PYTHON:-.venv/bin/python}"
mkdir -p "$RLTRAIN_CI_OUT"
log="$RLTRAIN_CI_OUT/preflight-${stack}.txt"
"$python" -m components.preflight --stack "$stack" 2>&1 | tee "$log"
rc="${PIPESTATUS[0]}"
echo "$rc" > "$RLTRAIN_CI_OUT/preflight-${stack}.rc"
exit "$rc"
