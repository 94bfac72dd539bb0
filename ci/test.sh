#!/usr/bin/env bash
# The test suite in the environment ci/install.sh built, every tier: exactly the README's CI test
# command (the default tier and the slow one: real Ray clusters, checkov, the CI walk-through).
# Under CI (GitHub sets CI=true; .ci/run sets CI=1) a missing scanner or Debian tool fails its test.
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"

# The README's CI test command, verbatim.
python -m pytest -q -m "slow or not slow"
