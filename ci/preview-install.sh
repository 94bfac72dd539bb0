#!/usr/bin/env bash
# Before a stack's real preview: the program's environment and the policy pack's (`pulumi install`:
# .venv from requirements.txt, as Pulumi.yaml says; policy/venv for the CrossGuard pack), then the
# secrets the stack needs and its file does not hold yet. A preview would refuse without them, so
# the stack is skipped with a notice naming each key and the command that sets it (ready=false), and
# ci/pr-comment.sh says so on the pull request.
#
#   ci/preview-install.sh STACK       # needs the Pulumi CLI on PATH
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# shellcheck source=/dev/null
. "$ROOT/ci/lib-github.sh"
cd "$ROOT"

stack="${1:?usage: ci/preview-install.sh STACK}"
if [ "${RLTRAIN_SKIP_PULUMI_INSTALL:-0}" != 1 ]; then
  pulumi install
  if [ -f policy/PulumiPolicy.yaml ]; then
    (cd policy && pulumi install)
  fi
fi

mkdir -p "$RLTRAIN_CI_OUT"
skipped="$RLTRAIN_CI_OUT/preview-${stack}.skipped"
rm -f "$skipped"
python="${RLTRAIN_PREVIEW_PYTHON:-.venv/bin/python}"
rc=0
"$python" -m components.offline.unset_secrets "$stack" > "$skipped.tmp" || rc=$?
if [ "$rc" -ne 0 ]; then
  # An invalid stack config: the preview refuses it too, with every problem; let it say so.
  rm -f "$skipped.tmp"
  output ready true
  exit 0
fi
if [ -s "$skipped.tmp" ]; then
  ref="$(stack_ref "$stack")"
  sed "s|$| --stack ${ref}|" "$skipped.tmp" > "$skipped"
  rm -f "$skipped.tmp"
  while IFS=$'\t' read -r key cmd; do
    notice "pulumi preview of ${stack} skipped" "${key} is not set in Pulumi.${stack}.yaml: ${cmd}, then commit Pulumi.${stack}.yaml."
  done < "$skipped"
  output ready false
else
  rm -f "$skipped.tmp"
  output ready true
fi
