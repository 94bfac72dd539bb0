# shellcheck shell=bash
# Sourced by every ci/ script (and .ci/run): the repository root, the CI virtual environment on PATH,
# the checkov scanner, the export tests' torch environment, and where the scripts write what a
# reviewer reads. Sets nothing else.
#
#   RLTRAIN_CI_VENV  the project's environment (default .venv-ci, built by ci/install.sh)
#   RLTRAIN_CHECKOV  the checkov executable (default .venv-scan/bin/checkov, built by ci/install.sh)
#   RLTRAIN_TORCH_PYTHON  the torch environment's python, when ci/torch-env.sh built it
#   RLTRAIN_CI_OUT   output directory (default ci-out): summaries, the render diff, preview output
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${RLTRAIN_CI_VENV:=.venv-ci}" in /*) ;; *) RLTRAIN_CI_VENV="$ROOT/$RLTRAIN_CI_VENV" ;; esac
case "${RLTRAIN_CI_OUT:=ci-out}" in /*) ;; *) RLTRAIN_CI_OUT="$ROOT/$RLTRAIN_CI_OUT" ;; esac
export ROOT RLTRAIN_CI_VENV RLTRAIN_CI_OUT
if [ -z "${RLTRAIN_CHECKOV:-}" ] && [ -x "$ROOT/.venv-scan/bin/checkov" ]; then
  export RLTRAIN_CHECKOV="$ROOT/.venv-scan/bin/checkov"
fi
if [ -z "${RLTRAIN_TORCH_PYTHON:-}" ] && torch_python="$("$ROOT/ci/torch-env.sh" --reuse-only 2>/dev/null)"; then
  export RLTRAIN_TORCH_PYTHON="$torch_python"
fi
if [ -x "$RLTRAIN_CI_VENV/bin/python" ]; then
  export PATH="$RLTRAIN_CI_VENV/bin:$PATH"
fi
