#!/usr/bin/env bash
# A real `pulumi preview` of the pull request's change, without any credential: on the simulated
# cluster (docs/simulated-cluster.md), the `sim` stack on a simulated p5 cluster. The base is deployed
# first (`up` of the base's own program), then the pull request's program is previewed against it
# with the policy pack, and the real engine's operations are printed beside the offline impact,
# saying where they disagree (cluster/preview_compare.py). Holds no secret and no write token, so it
# runs on a fork's code too (.github/workflows/pr.yml, job `sim-preview`); the same script runs in
# .ci/run's environment and on a laptop.
#
#   ci/sim-preview.sh [--base REV]     # default: HEAD^1, the base of the pull request's merge commit
#
# Needs the project environment (ci/install.sh) and the simulated cluster's binaries: cluster/build.sh
# builds them (Go 1.26+) or reuses ~/.cache/rltrain-sim (the workflow restores it from the Actions
# cache, keyed by cluster/versions.env and the wrapper modules cluster/go/). Writes
# $RLTRAIN_CI_OUT/sim-preview.md (appended to the review comment: ci/review_comment.py) and
# sim-preview.json (the engine's operations). Exit 0 when the comparison was written (whatever it
# says); 1 when the cluster or the base's deploy could not be brought up (sim-preview.md says so).
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

base_rev='HEAD^1'
if [ "${1:-}" = "--base" ]; then
  base_rev="${2:?usage: ci/sim-preview.sh [--base REV]}"
fi
base="$(git rev-parse --verify "${base_rev}^{commit}")"
stack=sim
hardware=p5
out="$RLTRAIN_CI_OUT"
mkdir -p "$out"
md="$out/sim-preview.md"
rm -f "$md" "$out/sim-preview.json"
tmp="$(mktemp -d)"
export RLTRAIN_SIM_STATE="$tmp/state"   # cluster.sim and cluster.deploy share it

title="Real preview of \`${stack}\` on the simulated cluster (against \`$(git rev-parse --short "$base")\`)"
fail() {
  printf '### %s\n\n**Not run**: %s\n' "$title" "$1" > "$md"
  cat "$md"
  exit 1
}
cleanup() {
  python -m cluster.sim stop --stack "$hardware" > /dev/null 2>&1 || true
  rm -rf "$tmp"
}
trap cleanup EXIT

cluster/build.sh --if-go
mkdir -p "$tmp/base"
git archive "$base" | tar -x -C "$tmp/base"
python ci/base_render.py "$tmp/base" "$tmp/base-render" "$stack" > "$tmp/base-render.log" 2>&1 ||
  fail "the base's program does not render the \`${stack}\` stack (ci/base_render.py)."
python -m cluster.sim start --stack "$hardware" --deploy-stack "$stack" ||
  fail "the simulated cluster did not start (python -m cluster.sim start --stack ${hardware})."
# The base, as its own program deploys it (its own cluster.deploy copies its own program).
(cd "$tmp/base" && python -m cluster.deploy up --stack "$stack" --cluster "$hardware" --workdir "$tmp/deploy" \
  --quiet --json "$tmp/base-up.json") || fail "the base's \`pulumi up\` failed on the simulated cluster."
# This change against it: the program copy refreshed from this tree, the policy pack run.
python -m cluster.deploy preview --stack "$stack" --cluster "$hardware" --workdir "$tmp/deploy" \
  --policy-pack policy --json "$out/sim-preview.json" || true
python -m cluster.preview_compare --stack "$stack" --base-record "$tmp/base-render/$stack/resources.json" \
  --preview "$out/sim-preview.json" --title "$title" > "$md"
cat "$md"
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  cat "$md" >> "$GITHUB_STEP_SUMMARY"
fi
