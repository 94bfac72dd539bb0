#!/usr/bin/env bash
# Install what the test suite needs, the same way everywhere (.ci/run, the pull-request workflow):
# - Debian tools the tests use when missing: shellcheck (lint test, actionlint's check of every
#   `run:` script), promtool from `prometheus` (metrics and rules checks), a headless browser for the
#   curves screenshot (chromium, unless Chrome is there); with sudo when not root;
# - checkov in its own environment .venv-scan (its pins clash with the project's: requirements-scan.txt);
# - the project in a fresh virtual environment $RLTRAIN_CI_VENV (default .venv-ci) from
#   requirements-dev.txt (every dependency pinned; transitive pins in constraints.txt).
# - the export tests' torch environment (ci/torch-env.sh: requirements-torch.txt), outside the
#   repository, reused when built;
# - the simulated cluster's binaries (cluster/build.sh), outside the repository, reused when built.
# RLTRAIN_CI_REUSE=1 keeps an existing environment and scanner (a quick local rerun; CI builds both fresh).
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

missing=()
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
# A headless browser for the curves test's screenshot (tests/scripts/test_curves.py: an artifact, not
# an assertion). GitHub's ubuntu-latest has Google Chrome; Debian's chromium package elsewhere.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
  && ! command -v google-chrome >/dev/null 2>&1 && ! command -v google-chrome-stable >/dev/null 2>&1; then
  missing+=(chromium)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

reuse="${RLTRAIN_CI_REUSE:-0}"
if [ "$reuse" = 1 ] && [ -x "${RLTRAIN_CHECKOV:-}" ]; then
  echo "checkov: reusing $RLTRAIN_CHECKOV"
else
  rm -rf .venv-scan
  python3 -m venv .venv-scan
  .venv-scan/bin/python -m pip install --quiet --upgrade pip==24.3.1
  .venv-scan/bin/python -m pip install --quiet -r requirements-scan.txt
fi

if [ "$reuse" = 1 ] && [ -x "$RLTRAIN_CI_VENV/bin/python" ]; then
  echo "project environment: reusing $RLTRAIN_CI_VENV"
else
  rm -rf "$RLTRAIN_CI_VENV"
  python3 -m venv "$RLTRAIN_CI_VENV"
  "$RLTRAIN_CI_VENV/bin/python" -m pip install --quiet --upgrade pip==24.3.1
  "$RLTRAIN_CI_VENV/bin/python" -m pip install --quiet -r requirements-dev.txt
fi

# The export tests' torch environment: about 2.9 GiB from PyPI the first time (torch's CUDA wheel and
# its nvidia-* libraries), then reused from ~/.cache/rltrain-torch (docs/testing.md).
if [ "$reuse" = 1 ]; then
  ci/torch-env.sh --reuse-only >/dev/null || true
else
  ci/torch-env.sh >/dev/null
fi

# The simulated cluster's binaries (docs/simulated-cluster.md): built from the Go module proxy into
# ~/.cache/rltrain-sim, or reused from there (each binary keyed by what it is built from). Without
# Go 1.26 the build says so and succeeds, unless CI=1: then it fails, as the deploy tests would.
# RLTRAIN_CI_REUSE=1 never starts a cold build: it reuses a complete one or builds nothing.
if [ "$reuse" = 1 ]; then
  cluster/build.sh --if-go --reuse-only
else
  cluster/build.sh --if-go
fi
