"""The simulated-cluster tests (docs/simulated-cluster.md): markers, and whether they run.

They are slow (the default `pytest -q` leaves them out) and run when asked: `.ci/run` (CI=1, after
ci/install.sh built or reused the binaries) or RLTRAIN_SIM=1. Then a missing binary is a failure,
not a skip; anyone else (e.g. `-m slow` without them) skips them with one line saying how.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import time
from pathlib import Path

import pytest

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


def log(request, line: str) -> None:
    """A `[sim]` line: on the terminal, or from an xdist worker into the file the controller prints
    at the end (tests/conftest.py SIM_LOG); and on stderr (shown with a failing test)."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    shared = os.environ.get("RLTRAIN_SIM_LOG")
    if hasattr(request.config, "workerinput") and shared:
        with open(shared, "a") as f:
            f.write(f"[sim] {request.node.nodeid.split('::')[0]}: {line}\n")
    elif reporter is not None:
        reporter.write_line(f"[sim] {line}")
    print(f"[sim] {line}", file=sys.stderr)


# One simulated cluster at a time on a machine: the MPI operator's health port is fixed (:8080),
# and Kueue reads its metrics certificate from a fixed path. Test modules under xdist (one per
# worker) take turns through this lock.
LOCK = Path(os.environ.get("RLTRAIN_SIM_LOCK", "/tmp/rltrain-sim.lock"))


@contextlib.contextmanager
def sim_cluster(tmp_path_factory, request, *, complete_after: float, **start):
    """A simulated p5 cluster of the module's own, started under the machine's lock and stopped
    after; `complete_after` (seconds a Job pod runs before it succeeds) and the other keywords as
    cluster.sim.start takes them."""
    from cluster import sim

    missing = missing_binaries()
    if missing:
        # Requested (CI=1 or RLTRAIN_SIM=1) and not built: a failure, not a skip.
        pytest.fail(f"simulated cluster: missing {', '.join(missing)}: run cluster/build.sh", pytrace=False)
    root = tmp_path_factory.mktemp("cluster")
    with open(LOCK, "w") as lock:
        t0 = time.monotonic()
        fcntl.flock(lock, fcntl.LOCK_EX)
        waited = time.monotonic() - t0
        t0 = time.monotonic()
        c = sim.start("p5", "sim", root=root, complete_after=complete_after, timeout=180.0, **start)
        try:
            log(request, f"cluster up in {time.monotonic() - t0:.0f}s (waited {waited:.0f}s for the lock); "
                         f"Kubernetes /version: {c.api('/version')['gitVersion']}")
            yield c
        finally:
            c.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    with sim_cluster(tmp_path_factory, request, complete_after=10.0) as c:
        yield c
