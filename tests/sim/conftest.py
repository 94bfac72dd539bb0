"""The simulated-cluster tests (docs/simulated-cluster.md): markers, and whether they run.

They run with RLTRAIN_SIM=1 or under CI (env CI set); a newcomer's `pytest -q` skips them with
one line. Under CI a missing binary is a failure, not a skip (as with checkov).
"""

from __future__ import annotations

import os

from cluster.binaries import BINARIES, toolset

ENABLE = ("simulated-cluster tests are off: build the binaries with cluster/build.sh, then "
          "RLTRAIN_SIM=1 python -m pytest -p no:xdist tests/sim (docs/simulated-cluster.md)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes minutes (a real cluster, real tools)")
    config.addinivalue_line("markers", "sim: needs the simulated cluster's binaries (cluster/build.sh)")


def sim_requested() -> bool:
    return bool(os.environ.get("RLTRAIN_SIM") or os.environ.get("CI"))


def missing_binaries() -> list[str]:
    return toolset().missing(BINARIES)
