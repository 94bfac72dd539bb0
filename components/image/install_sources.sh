#!/usr/bin/env bash
# RLinf's source and the reference run script in the image, run by the overlay Dockerfile as root.
#
# /workspace/RLinf: RLinf at the pinned revision (build.sh checked it out and verified the
# commit). Both trainer profiles need it there (components/stack/trainers.py RLINF_REPO): the
# sample's run script does `cd /workspace/RLinf`, the reasoning profile runs
# /workspace/RLinf/examples/reasoning/main_grpo.py. RLinf's own Dockerfile copies only
# pyproject.toml and requirements/ (docker/Dockerfile "Project requirements"), so the source is
# installed here, editable and without dependencies, into every virtual environment its image made
# (/opt/venv/<name>; uv made them, so uv installs into them: such a venv has no pip of its own).
#
# /workspace/eks/scripts: the sample's examples/scripts at SAMPLE_COMMIT (build.sh fetched them),
# where the `rlinf` profile's command runs run_training_eks.sh from. Its patches/ to RLinf are applied
# as the sample's image applies them (its examples/Dockerfile: a gloo group for dcp.save's final
# broadcast on torch 2.6); a patch that does not apply fails the build.
set -euo pipefail

src=${1:?usage: install_sources.sh CONTEXT_DIR}
test -f "$src/RLinf/pyproject.toml"
test -f "$src/eks-scripts/run_training_eks.sh"
mkdir -p /workspace/eks
cp -a "$src/RLinf" /workspace/RLinf
cp -a "$src/eks-scripts" /workspace/eks/scripts
for patch in /workspace/eks/scripts/patches/*.patch; do
    [ -e "$patch" ] || continue
    echo "applying $patch"
    git -C /workspace/RLinf apply --verbose "$patch"
done
installed=0
for python in /opt/venv/*/bin/python; do
    [ -x "$python" ] || continue
    uv pip install --python "$python" --no-deps -e /workspace/RLinf
    installed=$((installed + 1))
done
if [ "$installed" -eq 0 ]; then
    echo "error: no virtual environment under /opt/venv: is the base RLinf's image?" >&2
    exit 1
fi
rm -rf /root/.cache /opt/venv/.cache
