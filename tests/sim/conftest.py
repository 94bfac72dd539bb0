"""The simulated-cluster tests (docs/simulated-cluster.md): markers, and whether they run.

They are slow (the default `pytest -q` leaves them out) and run when asked: `.ci/run` (CI=1, after
ci/install.sh built or reused the binaries) or RLTRAIN_SIM=1. Then a missing binary is a failure,
not a skip; anyone else (e.g. `-m slow` without them) skips them with one line saying how.
"""

from __future__ import annotations

import os

from cluster.binaries import BINARIES, toolset

ENABLE = ("simulated-cluster tests are off: build the binaries with cluster/build.sh, then "
          "RLTRAIN_SIM=1 python -m pytest -m sim tests/sim (docs/simulated-cluster.md)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes (a real cluster, real tools)")
    config.addinivalue_line("markers", "sim: needs the simulated cluster's binaries (cluster/build.sh)")


def sim_requested() -> bool:
    # CI=1 is what .ci/run sets (GitHub's CI=true is not: its runners have no build of them).
    return os.environ.get("RLTRAIN_SIM") == "1" or os.environ.get("CI") == "1"


def missing_binaries() -> list[str]:
    return toolset().missing(BINARIES)
