"""Fixtures for the component tests, and the test tiers.

The default run (`python -m pytest -q`) leaves out tests marked `slow` (pyproject.toml's addopts);
`python -m pytest -q -m slow` runs them, `python -m pytest -q -m "slow or not slow"` (ci/test.sh)
runs every tier. A `sim` test (the simulated cluster, tests/sim/) is always `slow` too.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from lanes import GROUP_OF, LONG_MODULES, SIM_GROUPS, lanes
from support import STACKS, rendered  # imports no SDK (support.py): the xdist controller loads this file too

if TYPE_CHECKING:
    from components.offline import render


# The simulated-cluster tests' `[sim]` lines (tests/sim/conftest.py log): an xdist worker has no
# terminal, and a passing test's captured output is never shown, so the workers append them to one
# file the controller names here and prints at the end of the run (what `.ci/run` shows: every
# module's lines, e.g. the key sweep's key by key).
SIM_LOG = "RLTRAIN_SIM_LOG"


def _sim_selected(config) -> bool:
    """Whether this run runs simulated-cluster tests: they are asked for (CI=1 or RLTRAIN_SIM=1,
    tests/sim/conftest.py sim_requested), the marker expression can select a `sim` (and so `slow`)
    test, and the paths include tests/sim."""
    from _pytest.mark.expression import Expression

    if os.environ.get("RLTRAIN_SIM") != "1" and os.environ.get("CI") != "1":
        return False
    expr = config.option.markexpr
    if expr and not Expression.compile(expr).evaluate(lambda mark: mark in ("sim", "slow")):
        return False
    paths = [str(Path(a.split("::")[0]).resolve()) for a in config.args] or [str(Path(config.rootpath, "tests"))]
    sim = str(Path(config.rootpath, "tests", "sim"))
    return any(sim.startswith(p) or p.startswith(sim) for p in paths)


def pytest_configure(config):
    # A run with the simulated-cluster tests: a worker more per lane (tests/lanes.py). Their groups
    # mostly wait on timers; the -n workers keep the cores busy with the rest meanwhile.
    if (not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", None)
            and getattr(config.option, "dist", "no") == "loadfile" and _sim_selected(config)):
        config.option.numprocesses += lanes()
        config.option.tx = ["popen"] * config.option.numprocesses
    # Renders cached by content for every process that runs tests (tests/render_cache.py): an xdist
    # worker, or a run without workers; not the xdist controller, which runs none (and imports no SDK).
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        import render_cache

        render_cache.install(_may_have_patched_the_program)
    if not hasattr(config, "workerinput") and SIM_LOG not in os.environ:
        fd, path = tempfile.mkstemp(prefix="rltrain-sim-", suffix=".log")
        os.close(fd)
        os.environ[SIM_LOG] = path  # the workers, started after this, inherit it
        config.stash[_SIM_LOG_KEY] = Path(path)


_SIM_LOG_KEY = pytest.StashKey[Path]()


def pytest_terminal_summary(terminalreporter, config):
    path = config.stash.get(_SIM_LOG_KEY, None)
    if path is None or not path.exists():
        return
    lines = path.read_text().splitlines()
    path.unlink()
    if lines:
        terminalreporter.section("simulated cluster: the [sim] lines of every module")
        for line in lines:
            terminalreporter.write_line(line)


# Per-test wall and CPU, for bench/test_time.py (its --modules table): with RLTRAIN_TEST_TIMES naming a
# file, every test process (the xdist workers included) appends one JSON line per test: its module,
# the wall time of its setup, call and teardown together (module and session fixtures count in the
# test that first needs them), and the CPU of this process plus the children it reaped meanwhile
# (getrusage RUSAGE_SELF + RUSAGE_CHILDREN: a subprocess counts once it has been waited for; the
# simulated cluster's daemons count when they are stopped). A measurement, not a test.
TIMES = "RLTRAIN_TEST_TIMES"


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


_current: list = [None]  # the test running now (render_cache's bypass reads it)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current[0] = item
    path = os.environ.get(TIMES)
    if not path:
        yield
        _current[0] = None
        return
    wall, cpu = time.monotonic(), _cpu()
    yield
    tier = "sim" if item.get_closest_marker("sim") else "slow" if item.get_closest_marker("slow") else "default"
    line = {"module": item.nodeid.split("::")[0], "test": item.nodeid, "tier": tier, "wall": round(time.monotonic() - wall, 3),
            "cpu": round(_cpu() - cpu, 3), "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    with open(path, "a") as f:
        f.write(json.dumps(line) + "\n")
    _current[0] = None


def _may_have_patched_the_program() -> bool:
    """Whether the running test has monkeypatched an attribute or a mapping other than the
    environment (which the program does not read): then its renders may differ from the cached ones
    in a way no key sees, and render_cache runs them afresh."""
    item = _current[0]
    for value in (getattr(item, "funcargs", None) or {}).values():
        if isinstance(value, pytest.MonkeyPatch) and (
                value._setattr or any(mapping is not os.environ for mapping, _, _ in value._setitem)):
            return True
    return False


@pytest.fixture(scope="session", autouse=True)
def _schema_files_read_once():
    """kubernetes-validate reads the kind's schema and the version's 1.5 MB _definitions.json from disk
    on every validate() call (kubernetes_validate/utils.py: validate -> schema_contents, version
    1.37.0), some 400 calls in the tests. The files do not change during a run: each is parsed once per
    test process. Only the reads are cached; validate() (version choice, strict schema, errors) is the
    library's. A fixture, not an import-time patch: the xdist controller runs no test."""
    import kubernetes_validate.utils as kv

    read = kv.schema_contents
    kv.schema_contents = functools.lru_cache(maxsize=None)(read)
    yield
    kv.schema_contents = read


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection reads the markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("sim") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(params=STACKS)
def any_stack(request) -> render.Rendered:
    return rendered(request.param)


@pytest.fixture
def p5() -> render.Rendered:
    return rendered("p5")


@pytest.fixture
def p4de() -> render.Rendered:
    return rendered("p4de")


@pytest.fixture
def dev() -> render.Rendered:
    return rendered("dev")


# --- Scheduling -------------------------------------------------------------------------------------


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (pyproject.toml), ordered and grouped for this suite: LaneScheduling."""
    if config.option.dist != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class LaneScheduling(LoadFileScheduling):
        """loadfile, but: a simulated-cluster group (tests/lanes.py SIM_GROUPS) is one unit, its
        modules in order on one worker; the units are handed out longest first (the groups first,
        then LONG_MODULES, then by number of tests: xdist's own order put the few-test groups last);
        at most lanes() groups at a time (their clusters); and a worker gets its next unit when one
        test of its current unit is left, not two (a group's last test can take minutes)."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            self.groups_running: dict[str, set[str]] = {}  # group -> its tests not yet done

        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return GROUP_OF.get(module, module)

        @staticmethod
        def _order(item) -> tuple:
            scope, tests = item
            if scope in SIM_GROUPS:
                return (0, -SIM_GROUPS[scope][1])
            return (1, -LONG_MODULES.get(scope, 0), -len(tests))

        def schedule(self) -> None:
            # xdist's LoadScopeScheduling.schedule (3.8.0), the work queue in _order.
            assert self.collection_is_completed
            if self.collection is not None:
                for node in self.nodes:
                    self._reschedule(node)
                return
            if not self._check_nodes_have_same_collection():
                self.log("**Different tests collected, aborting run**")
                return
            self.collection = list(next(iter(self.registered_collections.values())))
            if not self.collection:
                return
            units: dict[str, dict[str, bool]] = {}
            for nodeid in self.collection:
                units.setdefault(self._split_scope(nodeid), {})[nodeid] = False
            for scope, tests in sorted(units.items(), key=self._order):
                self.workqueue[scope] = tests
            for _ in range(max(0, len(self.nodes) - len(self.workqueue))):
                unused, _assigned = self.assigned_work.popitem()
                unused.shutdown()
            for node in self.nodes:
                self._assign_work_unit(node)
            for node in self.nodes:
                self._reschedule(node)
            if not self.workqueue:
                for node in self.nodes:
                    node.shutdown()

        def _assign_work_unit(self, node) -> None:
            # The first unit in order, unless it is a group and lanes() groups are under way: then the
            # first other unit (a group waits for a lane; none left: the group, which waits for one).
            scopes = list(self.workqueue)
            pick = scopes[0]
            if pick in SIM_GROUPS and len(self.groups_running) >= lanes():
                pick = next((s for s in scopes if s not in SIM_GROUPS), pick)
            self.workqueue.move_to_end(pick, last=False)
            if pick in SIM_GROUPS:
                self.groups_running[pick] = set(self.workqueue[pick])
            super()._assign_work_unit(node)

        def mark_test_complete(self, node, item_index: int, duration: float = 0) -> None:
            nodeid = self.registered_collections[node][item_index]
            group = self._split_scope(nodeid)
            if group in self.groups_running:
                self.groups_running[group].discard(nodeid)
                if not self.groups_running[group]:
                    del self.groups_running[group]
            super().mark_test_complete(node, item_index, duration)

        def _reschedule(self, node) -> None:
            if node.shutting_down:
                return
            if not self.workqueue:
                node.shutdown()
                return
            if self._pending_of(self.assigned_work[node]) > 1:
                return
            self._assign_work_unit(node)

    return LaneScheduling(config, log)
