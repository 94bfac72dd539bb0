"""Named runs on the simulated p5 cluster (issue 43): two runs of the `sim` stack queued whole by
Kueue in priority order; one run's overrides changed (the real preview agrees with the offline
impact: only that run is replaced); a run removed while the other keeps running.

One cluster for the module (the `cluster` fixture), one deployment changed step by step (the order of
the tests is the order of the changes). The implicit runs and the checks are off: only the named runs
hold GPUs, so what Kueue does with them is all there is to see. Job pods succeed after the shared
cluster's RUN_SECONDS (tests/sim/conftest.py), so "the other run is left" is checked by its Job:
neither deleted nor replaced (its uid unchanged), which is what keeps a running run running. The
module runs on the shared cluster (its kind "shared"), reset to its baseline after the module before.
"""

from __future__ import annotations

import pytest
from conftest import ENABLE, log, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from simdeploy import NAMESPACE, Live, Watcher, engine_warnings, job_complete, project, wait  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

# p5 x 2: `first` takes one node at the higher priority, `wide` both nodes: it can start only once
# `first` is done, and must be admitted whole after it (never one pod of it on the free node).
RUNS = [{"name": "first", "nodes": 1, "priority": 1000050, "overrides": {"algorithm.gamma": 0.99}},
        {"name": "wide", "nodes": 2, "overrides": {"algorithm.gamma": 0.95}}]
OVERRIDES = {
    "rltrain:workloads.singleNode.enabled": False,
    "rltrain:workloads.multiNode.enabled": False,
    "rltrain:workloads.ncclTest.enabled": False,
    "rltrain:workloads.validation.enabled": False,
    "rltrain:workloads.trainingAfterChecks": False,
    "rltrain:workloads.allowRunRestart": True,
    "rltrain:workloads.runs": RUNS,
}
JOBS = ("rltrain-run-first", "rltrain-run-wide")


def _uid(lv: Live, name: str) -> str:
    job = lv.cluster.get("batch/v1", "Job", name, NAMESPACE)
    return job["metadata"]["uid"] if job else ""


@pytest.fixture(scope="module")
def live(cluster, tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("named-runs")
    workdir = project(tmp, OVERRIDES)
    cluster.reset_storage()
    lv = Live(cluster, workdir, request)
    yield lv
    lv.pulumi("destroy", check=False)


def test_1_two_named_runs_are_queued_whole_in_priority_order(live, request):
    watcher = Watcher(live.cluster)
    watcher.start()
    try:
        up = live.pulumi("up")
        assert not engine_warnings(up), engine_warnings(up)
        wait("both named runs finished", lambda: all(job_complete(live.cluster, j) for j in JOBS), 300,
             watcher.describe)
    finally:
        watcher.finish()
    order = [o for o in watcher.checked_order(request) if o in JOBS]
    assert order == list(JOBS)
    # `wide` waited whole behind `first`: no pod of it ran while `first` held a node.
    assert "rltrain-run-first" in watcher.waited.get("rltrain-run-wide", set())
    assert len(watcher.pods_of["rltrain-run-wide"]) == 2
    live.rows = live.offline()


def test_2_changing_one_runs_overrides_replaces_only_that_run(live):
    before = {j: _uid(live, j) for j in JOBS}
    live.edit_stack(lambda c: c["rltrain:workloads"]["runs"][0]["overrides"].update({"algorithm.gamma": 0.9}))
    preview = live.pulumi("preview")
    ops = live.compare("run first: algorithm.gamma 0.99 -> 0.9", preview)
    assert ops["workloads-run-first-job"] == "replace"
    assert ops.get("workloads-run-wide-job", "same") == "same"
    live.pulumi("up")
    wait("first finished again", lambda: job_complete(live.cluster, "rltrain-run-first"), 300)
    after = {j: _uid(live, j) for j in JOBS}
    assert after["rltrain-run-first"] != before["rltrain-run-first"]
    assert after["rltrain-run-wide"] == before["rltrain-run-wide"]


def test_3_removing_a_run_leaves_the_other(live, request):
    wide = _uid(live, "rltrain-run-wide")
    live.edit_stack(lambda c: c["rltrain:workloads"].update(runs=[c["rltrain:workloads"]["runs"][1]]))
    preview = live.pulumi("preview")
    ops = live.compare("run first removed", preview)
    assert ops["workloads-run-first-job"] == "delete"
    assert ops.get("workloads-run-wide-job", "same") == "same"
    live.pulumi("up")
    assert live.cluster.get("batch/v1", "Job", "rltrain-run-first", NAMESPACE) is None
    assert _uid(live, "rltrain-run-wide") == wide
    log(request, "run first removed; run wide kept its Job (uid unchanged)")
