"""A failed GPU node on the simulated cluster (issue 31): what the EKS node monitoring agent and node
repair would do to a node, done by hand, and the run coming back whole.

A 2-node training run (the Indexed Job form) admitted and running on the two kwok p5 nodes; then on
the worker's node, as the agent and repair would: the condition `AcceleratedHardwareReady=False`,
a NoExecute taint (the taint-eviction controller evicts the run's pod with DisruptionTarget), the
node deleted, a replacement node joining under another name. Checked: no pod of the run is left on
the old node, the run is whole again on the new node set, its failure budget is untouched
(`status.failed` 0, no Failed condition), its pods carry the same checkpoint directory and resume
setting, and no pod was Running while a peer was Pending for longer than Kueue's PodsReady timeout.
Either path Kueue v0.19.2 takes is accepted: the lost pod replaced in place once a node is free
(TASFailedNodeReplacement), or, when none is free at that moment, the workload evicted whole and
admitted again on the new node set (TASFailedNodeReplacementFailFast); the log line says which.
Then the worker's trainer crashes (exit code 1): that failure counts.

kwok's pods run no process: the trainer on the head does not notice the lost peer here (on a real
cluster its failure counts once, docs/gpu-failure-runbook.md), and kwok's delete stage removes a
deleted pod's finalizers itself. The module starts its own cluster whose Job pods do not complete
on their own (the shared one completes them after 10 s), under the same lock.
"""

from __future__ import annotations

import copy
import fcntl
import json
import time

import pytest
from conftest import ENABLE, LOCK, log as _log, missing_binaries, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from simdeploy import NAMESPACE, Watcher, deploy_and_check, destroy, wait  # noqa: E402

from components.k8s import kueue  # noqa: E402
from cluster.stacks import stack_config  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

RUN = "rltrain-multinode"
# Only the multi-node run: nothing else holds a GPU node when the worker's node fails (no staging Job
# either: `up` waits for it, and here Job pods never complete on their own).
ONLY_MULTINODE = {"rltrain:workloads.singleNode.enabled": False, "rltrain:workloads.ncclTest.enabled": False,
                  "rltrain:workloads.staging.enabled": False,
                  "rltrain:workloads.validation.enabled": False, "rltrain:workloads.trainingAfterChecks": False}
FAULT_TAINT = {"key": "rltrain.sim/accelerated-hardware-failed", "value": "true", "effect": "NoExecute"}
REPAIR_TIMEOUT = 420


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    from cluster import sim

    missing = missing_binaries()
    if missing:
        pytest.fail(f"simulated cluster: missing {', '.join(missing)}: run cluster/build.sh", pytrace=False)
    root = tmp_path_factory.mktemp("cluster")
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # Job pods keep running for an hour: the run is still up when its node fails.
        c = sim.start("p5", "sim", root=root, complete_after=3600.0, timeout=180.0)
        try:
            yield c
        finally:
            c.stop()


def run_pods(cluster) -> list[dict]:
    pods = cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector=batch.kubernetes.io/job-name%3D{RUN}")
    return [p for p in pods["items"] if not p["metadata"].get("deletionTimestamp")]


def running_on(cluster) -> dict[str, str]:
    """pod name -> node of the run's Running pods."""
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in run_pods(cluster)
            if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")}


def pod_states_since(cluster, resource_version: str) -> list[dict]:
    """Every state of the namespace's pods since a resource version, replayed by a watch that ends
    after two seconds (the API server's watch cache keeps the recent changes)."""
    raw = cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&resourceVersion={resource_version}"
                      "&timeoutSeconds=2", timeout=20)
    lines = [raw] if isinstance(raw, dict) else [json.loads(line) for line in str(raw).splitlines() if line.strip()]
    return [e["object"] for e in lines if e.get("type") in ("ADDED", "MODIFIED", "DELETED")]


def env_of(pod: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", []) if "value" in e}


def workload_of(cluster) -> dict:
    wls = cluster.api(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads")["items"]
    return next(w for w in wls if Watcher.owner(w) == RUN)


def test_a_failed_gpu_node_is_replaced_and_the_run_comes_back_whole(cluster, request, tmp_path):
    hw = stack_config("p5")[0]
    timeout = kueue.pods_ready_timeout_seconds(stack_config("sim")[0])
    r = deploy_and_check(cluster, request, tmp_path, ONLY_MULTINODE)
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        wait("the multi-node run Running on both GPU nodes", lambda: len(running_on(cluster)) == 2, 300,
             watcher.describe)
        job = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        before = {p["metadata"]["name"]: p for p in run_pods(cluster)}
        nodes_before = set(running_on(cluster).values())
        assert len(nodes_before) == 2, nodes_before
        worker = next(p for p in before.values()
                      if p["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index") == "1")
        failed = worker["spec"]["nodeName"]
        envs_before = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: env_of(p)
                       for p in before.values()}
        t0 = time.monotonic()

        # Every change of the run's pods from here on is replayed from the API's watch (below): kwok
        # finishes a deleted pod within milliseconds, so polling can miss the evicted pod's last state.
        rv = cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1")["metadata"]["resourceVersion"]
        # What the agent does: the condition on the node's status.
        cluster.api(f"/api/v1/nodes/{failed}/status", "PATCH", {"status": {"conditions": [{
            "type": "AcceleratedHardwareReady", "status": "False", "reason": "NvidiaXID79Error",
            "message": "simulated: GPU has fallen off the bus", "lastHeartbeatTime": None,
            "lastTransitionTime": None}]}}, content_type="application/strategic-merge-patch+json")
        # What repair does: the NoExecute taint (the run's pods tolerate only the GPU taint), then
        # the node deleted.
        node = cluster.api(f"/api/v1/nodes/{failed}")
        taints = [*node["spec"].get("taints", []), FAULT_TAINT]
        cluster.api(f"/api/v1/nodes/{failed}", "PATCH", {"spec": {"taints": taints}},
                    content_type="application/merge-patch+json")
        disrupted: dict[str, list] = {}

        def evicted() -> bool:
            for p in cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]:
                for c in p["status"].get("conditions", []):
                    if c["type"] == "DisruptionTarget" and c["status"] == "True":
                        disrupted.setdefault(p["metadata"]["name"], []).append(c.get("reason"))
            return failed not in set(running_on(cluster).values())
        wait(f"the run's pod evicted from {failed}", evicted, 120, watcher.describe)
        t_evicted = time.monotonic() - t0
        for p in pod_states_since(cluster, rv):
            for c in p["status"].get("conditions", []):
                if c["type"] == "DisruptionTarget" and c["status"] == "True":
                    disrupted.setdefault(p["metadata"]["name"], []).append(c.get("reason"))
        cluster.api(f"/api/v1/nodes/{failed}", "DELETE")
        # The replacement, another name, the same shape and labels (as a new instance of the group).
        new = copy.deepcopy(node)
        name = f"{failed.rsplit('-', 1)[0]}-{hw.gpu_nodes.count}"
        new["metadata"] = {"name": name, "annotations": node["metadata"].get("annotations", {}),
                           "labels": {**node["metadata"]["labels"], "kubernetes.io/hostname": name}}
        new["spec"] = {"taints": [t for t in node["spec"].get("taints", []) if t["key"] != FAULT_TAINT["key"]]}
        new["status"] = {"capacity": node["status"]["capacity"], "allocatable": node["status"]["allocatable"]}
        cluster.api("/api/v1/nodes", "POST", new)

        peer_pending_since: list[float] = []
        longest = 0.0

        def whole_on_new_set() -> bool:
            nonlocal longest
            pods = run_pods(cluster)
            phases = [p["status"].get("phase") for p in pods]
            if "Running" in phases and "Pending" in phases:
                if not peer_pending_since:
                    peer_pending_since.append(time.monotonic())
                longest = max(longest, time.monotonic() - peer_pending_since[0])
            else:
                peer_pending_since.clear()
            on = running_on(cluster)
            return len(on) == 2 and failed not in on.values() and name in on.values()
        wait("the run whole again on the replacement node", whole_on_new_set, REPAIR_TIMEOUT, watcher.describe)
        t_whole = time.monotonic() - t0

        after_job = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        wl = workload_of(cluster)
        after = run_pods(cluster)
        requeues = ((wl.get("status") or {}).get("requeueState") or {}).get("count", 0)
        conds = {c["type"]: f"{c['status']}/{c.get('reason')}" for c in (wl.get("status") or {}).get("conditions", [])}
        _log(request, f"repair: run uid={after_job['metadata']['uid']} workload={wl['metadata']['name']} "
                      f"restarts={requeues} (Kueue requeues; Evicted {conds.get('Evicted', '-')}, Requeued "
                      f"{conds.get('Requeued', '-')}) pods replaced={len({p['metadata']['name'] for p in after} - set(before))} "
                      f"failed={after_job['status'].get('failed', 0)} of retries {after_job['spec']['backoffLimit']} "
                      f"evicted after {t_evicted:.0f}s, whole again after {t_whole:.0f}s, "
                      f"longest Running-while-peer-Pending {longest:.0f}s; DisruptionTarget {disrupted}")
        # The same run, not a new one.
        assert after_job["metadata"]["uid"] == job["metadata"]["uid"]
        # Whole on the new node set, nothing left on the failed node.
        assert set(running_on(cluster).values()) == (nodes_before - {failed}) | {name}
        assert all(p["spec"].get("nodeName") != failed for p in after)
        # The failure budget untouched: the lost pod was a disruption.
        assert after_job["status"].get("failed", 0) == 0
        assert not any(c["type"] == "Failed" and c["status"] == "True"
                       for c in after_job["status"].get("conditions", []))
        assert worker["metadata"]["name"] in disrupted
        # The same checkpoint directory and resume setting in every pod of the restarted run.
        for p in after:
            e = env_of(p)
            ix = p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            assert (e.get("CKPT_DIR"), e.get("RESUME")) == (envs_before[ix].get("CKPT_DIR"),
                                                            envs_before[ix].get("RESUME")), ix
            assert e.get("RESUME") == "auto"
        # No partial gang kept its GPUs past Kueue's timeout.
        assert longest < timeout
        # Admitted whole: no pod of the run scheduled while its workload was not admitted. The pods
        # of the admission before the failure are left out: when Kueue evicts the workload whole
        # (no free node in the topology at the moment of the failure: TASFailedNodeReplacementFailFast),
        # they are still terminating while it waits to be admitted again.
        new_pods = {p["metadata"]["name"] for p in after} - set(before)
        assert not [v for v in watcher.violations if v.split()[1] in new_pods], watcher.violations

        # A trainer crash still counts: the worker's trainer exits 1 (its pod Failed, no
        # DisruptionTarget), the Job counts one failure of its budget and recreates the pod.
        crashed = next(p for p in after
                       if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1")
        status = crashed["status"]
        trainer = next(c for c in status["containerStatuses"] if c["name"] == "trainer")
        started = (trainer.get("state", {}).get("running") or {}).get("startedAt") or status.get("startTime")
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        statuses = [{**c, "ready": False, "started": False,
                     "state": {"terminated": {"exitCode": 1 if c["name"] == "trainer" else 0, "reason": "Error",
                                              "startedAt": started, "finishedAt": now}}}
                    for c in status["containerStatuses"]]
        cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods/{crashed['metadata']['name']}/status", "PATCH",
                    {"status": {"phase": "Failed", "containerStatuses": statuses}},
                    content_type="application/merge-patch+json")
        wait("the trainer crash counted and the pod recreated",
             lambda: (cluster.get("batch/v1", "Job", RUN, NAMESPACE)["status"].get("failed", 0) == 1
                      and len(running_on(cluster)) == 2), 180, watcher.describe)
        crash_job = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        _log(request, f"repair: trainer crash (exit 1) counted: failed={crash_job['status'].get('failed')} of retries "
                      f"{crash_job['spec']['backoffLimit']}; run uid={crash_job['metadata']['uid']} still active")
        assert not any(c["type"] == "Failed" and c["status"] == "True"
                       for c in crash_job["status"].get("conditions", []))
    finally:
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)
