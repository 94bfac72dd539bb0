"""The first real deploy: the `sim` stack onto the simulated p5 cluster, with the real Pulumi CLI
and Kubernetes provider, the real API server and admission, Kueue, KubeRay and the MPI operator.

Per test: a copy of the program in a temporary directory (the repository's Pulumi.sim.yaml is never
written), a local file backend and passphrase, no network (plugin acquisition off,
--skip-plugin-pre-install; the provider is the cache's on PATH), its secrets set with
`pulumi config set --secret`. Checked: preview and up succeed without a warning; every object of
the render exists; Kueue admits the validation run first, then the others, each whole (no pod of a
workload scheduled before it is admitted, then all of them); Job pods complete; a run wider than
the free GPUs stays queued with no pod; `pulumi destroy` leaves nothing and no finalizer behind.
"""

from __future__ import annotations

import time

import pytest
from conftest import ENABLE, POLL_SECONDS, RUN_SECONDS, log as _log, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from simdeploy import (NAMESPACE, RUNS_TIMEOUT, deploy_and_check, destroy, job_complete,  # noqa: E402
                       mpijob_succeeded, namespace_warnings, wait)

pytestmark = [pytest.mark.slow, pytest.mark.sim]


def test_deploy_indexed_job_form(cluster, request, tmp_path):
    r = deploy_and_check(cluster, request, tmp_path, {})
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        try:
            t0 = time.monotonic()
            wait("every run finished (Jobs Complete, MPIJob Succeeded)",
                  lambda: all(job_complete(cluster, j) for j in ("rltrain-validation", "rltrain-training",
                                                                  "rltrain-multinode"))
                  and mpijob_succeeded(cluster, "rltrain-nccl-test"), RUNS_TIMEOUT,
                  watcher.describe)
            _log(request, f"runs finished {time.monotonic() - t0:.0f}s after up")
            time.sleep(4 * POLL_SECONDS)  # the watcher's last polls see every run finished
        finally:
            watcher.finish()
        # Whole: no pod of a run was scheduled before its workload was admitted.
        admitted = watcher.checked_order(request)
        assert set(admitted) == {"rltrain-validation", "rltrain-nccl-test", "rltrain-multinode", "rltrain-training"}
        # trainingAfterChecks (Pulumi.sim.yaml): validation, then the NCCL test, then training.
        assert admitted[:2] == ["rltrain-validation", "rltrain-nccl-test"]
        # Every pod of each run scheduled (both validation pods, workers and launcher of the MPIJob,
        # both multi-node pods).
        assert {k: len(v) for k, v in watcher.pods_of.items()} == {
            "rltrain-validation": 2, "rltrain-nccl-test": 3, "rltrain-multinode": 2, "rltrain-training": 1}
        # 8 + 16 GPUs do not fit 16: whichever training run Kueue took second (one `up` creates both,
        # equal priority) waited whole while the other ran (RUN_SECONDS, seen by the watcher's
        # POLL_SECONDS polls).
        first, second = admitted[2:]
        assert first in watcher.waited.get(second, set()), (second, watcher.waited)
        assert watcher.max_gpus <= 16
        assert not namespace_warnings(cluster), namespace_warnings(cluster)
    finally:
        destroy(cluster, pulumi, r["expected"], request)


def test_deploy_rayjob_form_and_a_run_wider_than_the_free_gpus_stays_queued(cluster, request, tmp_path):
    r = deploy_and_check(cluster, request, tmp_path, {
        "rltrain:workloads.multiNode.form": "rayjob", "rltrain:workloads.multiNode.rayVersion": "2.60.0"})
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        try:
            # A RayJob never finishes on fake pods (its status comes from the Ray dashboard): once
            # admitted it keeps the GPU nodes, and the single-node run cannot fit beside it.
            wait("validation, NCCL test done and the RayJob admitted with its pods",
                  lambda: job_complete(cluster, "rltrain-validation") and mpijob_succeeded(cluster, "rltrain-nccl-test")
                  and "rltrain-multinode" in watcher.admitted_at and len(watcher.pods_of.get("rltrain-multinode", ())) >= 2,
                  RUNS_TIMEOUT,
                  watcher.describe)
            # Long enough for the single-node run to be admitted if it could be: the checks
            # before it ran RUN_SECONDS each, and Kueue admits as soon as quota frees.
            time.sleep(3 * RUN_SECONDS)
        finally:
            watcher.finish()
        admitted = watcher.checked_order(request)
        assert admitted[:2] == ["rltrain-validation", "rltrain-nccl-test"]
        training = cluster.get("batch/v1", "Job", "rltrain-training", NAMESPACE)
        if "rltrain-training" in watcher.admitted_at and watcher.admitted_at["rltrain-training"] < watcher.admitted_at["rltrain-multinode"]:
            # Kueue took the single-node run first (created together, equal priority): the RayJob
            # waited whole until it finished.
            assert job_complete(cluster, "rltrain-training")
            assert "rltrain-training" in watcher.waited.get("rltrain-multinode", set())
        else:
            # The RayJob holds the nodes: the single-node run stays queued, suspended, without a pod.
            assert "rltrain-training" not in watcher.admitted_at
            assert not watcher.pods_of.get("rltrain-training")
            assert training["spec"]["suspend"] is True
            assert "rltrain-multinode" in watcher.waited.get("rltrain-training", set())
        assert watcher.max_gpus <= 16
        assert not namespace_warnings(cluster), namespace_warnings(cluster)
    finally:
        destroy(cluster, pulumi, r["expected"], request)
