#!/usr/bin/env bash
# The committed rendered/ is what the code renders: every stack rendered into a scratch directory
# (never into rendered/) and compared with it, file by file. A stale or missing render fails with
# the command that refreshes it.
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

mkdir -p "$RLTRAIN_CI_OUT"
fresh="$RLTRAIN_CI_OUT/render-current"
rm -rf "$fresh"
# Judged against no base at all (an empty --base): this step asks only whether rendered/ is what the
# code renders; the impact of the change is ci/render-review.sh's business, against the base branch.
nobase="$RLTRAIN_CI_OUT/render-current-nobase"
rm -rf "$nobase"
mkdir -p "$nobase"
if ! python -m components.offline.render --all --out "$fresh" --base "$nobase" > "$RLTRAIN_CI_OUT/render-current.log" 2>&1; then
  tail -n 40 "$RLTRAIN_CI_OUT/render-current.log"
  echo "::error title=Render failed::python -m components.offline.render --all failed (log: ci-out/render-current.log)"
  exit 1
fi

stale=()
for dir in "$fresh"/*/; do
  stack="$(basename "$dir")"
  for file in manifests.yaml resources.json; do
    if ! cmp -s "$dir/$file" "rendered/$stack/$file"; then
      stale+=("rendered/$stack/$file")
    fi
  done
done
for dir in rendered/*/; do
  [ -d "$dir" ] || continue
  stack="$(basename "$dir")"
  [ -f "Pulumi.${stack}.yaml" ] || stale+=("rendered/$stack/ (no Pulumi.${stack}.yaml)")
done
untracked="$(git ls-files --others --exclude-standard -- rendered/)"
[ -z "$untracked" ] || stale+=("not committed: ${untracked//$'\n'/, }")

if [ "${#stale[@]}" -gt 0 ]; then
  printf 'stale: %s\n' "${stale[@]}"
  for f in "${stale[@]}"; do
    case "$f" in rendered/*/*.*) diff -u "$f" "$fresh/${f#rendered/}" | head -n 40 || true ;; esac
  done
  echo "::error title=Stale render::rendered/ is not what the code renders. Run 'python -m components.offline.render --all' (--accept-impact for a change of the program itself: it accepts run restarts and node rolls, never data loss) and commit rendered/."
  exit 1
fi
echo "rendered/ is current: every stack's manifests.yaml and resources.json"
