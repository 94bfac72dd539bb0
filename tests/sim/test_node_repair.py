"""A failed GPU node on the simulated cluster (issue 31): what the EKS node monitoring agent and node
repair would do to a node, done by hand (tests/sim/faults.py), and the run coming back whole.

1. The Indexed Job form: a 2-node run admitted and running on the two kwok p5 nodes; on the
   worker's node, as the agent and repair would: the condition `AcceleratedHardwareReady=False`, a
   NoExecute taint (the taint-eviction controller evicts the run's pod with DisruptionTarget), the
   node deleted, a replacement node joining under another name. Checked: no pod of the run is left
   on the old node, the run is whole again on the new node set, its failure budget is untouched
   (`status.failed` 0, no Failed condition), its pods carry the same checkpoint directory and
   resume setting, and no pod was Running while a peer was Pending for longer than Kueue's
   PodsReady timeout. Either path Kueue v0.19.2 takes is accepted: the lost pod replaced in place
   once a node is free (TASFailedNodeReplacement), or, when none is free at that moment, the
   workload evicted whole and admitted again on the new node set
   (TASFailedNodeReplacementFailFast); the log line says which. Then genuine crashes, every node
   healthy (issue 45), at `workloads.retries` 2: the worker's trainer exits 1 (counted, the pod
   recreated), the head's (counted, failed 2, the run goes on), the worker's again: the Job fails
   BackoffLimitExceeded (measured: failed 4, the head the Job had recreated meanwhile ended and
   counted too).
2. GPU faults as they happen (issue 45), the Indexed Job form, one deployment:
   - a new Job on a checkpoint directory whose start ledger holds another Job's starts (over the
     bound): the running pod's RESUME_LEDGER_SCOPE is a downward-API field of its
     `batch.kubernetes.io/controller-uid` label, which is the Job's uid, and the resume wrapper run
     as a program with the pod's settings starts (exit 0, "start 1 in a row of Job <uid>"); with the
     old Job's scope the same ledger refuses (10);
   - a hard reboot (no graceful shutdown: the pod ContainerStatusUnknown, exit 137, no
     DisruptionTarget, once the node is back): the documented residual, it counts once (failed 1);
   - a reboot in place with graceful node shutdown (faults.reboot_node: the node Ready=Unknown,
     node lifecycle's unreachable NoExecute taint, the pod Failed with DisruptionTarget
     TerminationByKubelet and exit 143, the node Ready again under its name): no retry spent. Kueue
     v0.19.2 evicts the workload whole (NodeFailures, "no replacement for unhealthy node(s)": the
     topology has no free node) and admits it again on the same node names once the node is back;
   - an XID crash then a replacement: the head's trainer exits 9, the worker's 6 (both ignored, the
     pods recreated on the same nodes), 10 simulated minutes later the agent's condition and the
     NoExecute taint, the node deleted, a new one joining: whole on the new node, no retry spent.
   The Job controller's pod-creation backoff (10 s doubling, at most 10 min) counts every failed
   pod, ignored ones too (Kubernetes v1.35.4 pkg/controller/job/job_controller.go
   newBackoffRecord(newFailedPods), not nonIgnoredFailedPodsCount): the recreation after each fault
   takes longer than the one before (the `[sim] repair:` lines' times).
3. The RayJob form, the same failure as 1 and the same checks on the RayJob's status.
4. A node that keeps failing: the head's node fails three times in a row before any new
   checkpoint; the resume wrapper (run here with the new head pod's own settings at each start)
   refuses the start after the third, and its exit fails the run with a clear reason.

kwok's pods run no process: the trainer on the head does not notice the lost peer here (the
launcher's behaviour then is tested as a program, tests/scripts/test_ray_launcher.py), and the
kubelet's reports (an exit, a graceful shutdown, a container lost in a hard reboot, a deleted pod's
end) are written by tests/sim/faults.py. The module runs on the "held" cluster, whose
Job pods do not complete on their own (tests/sim/conftest.py KINDS; the shared one completes them after
RUN_SECONDS), reset to its nodes between modules (Cluster.reset_baseline: a replaced node is gone).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ENABLE, log as _log, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from faults import (GangTimer, env_of, exit_container, fail_and_replace, pods_of_run, reboot_node,  # noqa: E402
                    resolved_env, running_on)
from simdeploy import NAMESPACE, ROOT, Watcher, deploy_and_check, destroy, finished, wait  # noqa: E402

from components.k8s import kueue  # noqa: E402
from components.scripts import ray_launcher, resume_wrapper  # noqa: E402
from cluster.stacks import stack_config  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

RUN = "rltrain-multinode"
# Only the multi-node run: nothing else holds a GPU node when the worker's node fails (no staging Job
# either: `up` waits for it, and here Job pods never complete on their own).
ONLY_MULTINODE = {"rltrain:workloads.singleNode.enabled": False, "rltrain:workloads.ncclTest.enabled": False,
                  "rltrain:workloads.staging.enabled": False,
                  "rltrain:workloads.validation.enabled": False, "rltrain:workloads.trainingAfterChecks": False}
RAYJOB = {**ONLY_MULTINODE, "rltrain:workloads.multiNode.form": "rayjob",
          "rltrain:workloads.multiNode.rayVersion": "2.60.0"}
REPAIR_TIMEOUT = 420
# workloads.retries of the first scenario: its three genuine crashes fail the run.
RETRIES = 2


# The held cluster (tests/sim/conftest.py KINDS): Job pods keep running for an hour, so the run is
# still up when its node fails.
CLUSTER_KIND = "held"


def run_pods(cluster) -> list[dict]:
    return pods_of_run(cluster, RUN)


def index_of(pod: dict) -> str:
    """The pod's rank: the Job's completion index, or 0 for a Ray head and 1 for a worker."""
    ix = pod["metadata"]["annotations"].get("batch.kubernetes.io/job-completion-index")
    if ix is not None:
        return ix
    return "0" if pod["metadata"]["labels"].get("ray.io/node-type") == "head" else "1"


def workload_of(cluster) -> dict:
    wls = cluster.api(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads")["items"]
    return next(w for w in wls if Watcher.owner(w) == RUN)


def whole_again(cluster, failed: str, replacement: str, gang: GangTimer):
    def check() -> bool:
        pods = run_pods(cluster)
        gang.sample(pods)
        on = running_on(pods)
        return len(on) == 2 and failed not in on.values() and replacement in on.values()
    return check


def lose_the_workers_node(cluster, watcher, before: dict[str, dict]):
    """Fail the node of the run's worker (rank 1), replace it, wait until the run is whole again on
    the new node set: (the worker pod, its node, the fault, the gang timer, seconds to whole)."""
    worker = next(p for p in before.values() if index_of(p) == "1")
    failed = worker["spec"]["nodeName"]
    fault = fail_and_replace(cluster, lambda: run_pods(cluster), failed, watcher.describe)
    gang = GangTimer()
    wait("the run whole again on the replacement node", whole_again(cluster, failed, fault["replacement"], gang),
         REPAIR_TIMEOUT, watcher.describe)
    return worker, failed, fault, gang, time.monotonic() - fault["t0"]


def assert_same_resume(before, after) -> None:
    """Every pod of the restarted run has the checkpoint directory and resume setting its rank had."""
    envs_before = {index_of(p): env_of(p) for p in before}
    for p in after:
        e, ix = env_of(p), index_of(p)
        assert (e.get("CKPT_DIR"), e.get("RESUME")) == (envs_before[ix].get("CKPT_DIR"),
                                                        envs_before[ix].get("RESUME")), ix


def workload_line(wl: dict) -> str:
    requeues = ((wl.get("status") or {}).get("requeueState") or {}).get("count", 0)
    conds = {c["type"]: f"{c['status']}/{c.get('reason')}" for c in (wl.get("status") or {}).get("conditions", [])}
    return (f"workload={wl['metadata']['name']} restarts={requeues} (Kueue requeues; Evicted "
            f"{conds.get('Evicted', '-')}, Requeued {conds.get('Requeued', '-')})")


def failed_condition(job: dict) -> dict | None:
    return next((c for c in job["status"].get("conditions", []) if c["type"] == "Failed" and c["status"] == "True"),
                None)


def running_rank(cluster, rank: str) -> dict:
    return next(p for p in run_pods(cluster) if index_of(p) == rank and p["status"].get("phase") == "Running")


def test_a_failed_gpu_node_is_replaced_and_the_run_comes_back_whole(cluster, request, tmp_path):
    timeout = kueue.pods_ready_timeout_seconds(stack_config("sim")[0])
    r = deploy_and_check(cluster, request, tmp_path, {**ONLY_MULTINODE, "rltrain:workloads.retries": RETRIES})
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        wait("the multi-node run Running on both GPU nodes", lambda: len(running_on(run_pods(cluster))) == 2, 300,
             watcher.describe)
        job = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        before = {p["metadata"]["name"]: p for p in run_pods(cluster)}
        nodes_before = set(running_on(before.values()).values())
        assert len(nodes_before) == 2, nodes_before
        worker, failed, fault, gang, t_whole = lose_the_workers_node(cluster, watcher, before)
        name, disrupted = fault["replacement"], fault["disrupted"]

        after_job = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        wl = workload_of(cluster)
        after = run_pods(cluster)
        _log(request, f"repair: run uid={after_job['metadata']['uid']} {workload_line(wl)} "
                      f"pods replaced={len({p['metadata']['name'] for p in after} - set(before))} "
                      f"failed={after_job['status'].get('failed', 0)} of retries {after_job['spec']['backoffLimit']} "
                      f"evicted after {fault['evicted_after']:.0f}s, whole again after {t_whole:.0f}s, "
                      f"longest Running-while-peer-Pending {gang.longest:.0f}s; DisruptionTarget {disrupted}")
        # The same run, not a new one.
        assert after_job["metadata"]["uid"] == job["metadata"]["uid"]
        # Whole on the new node set, nothing left on the failed node.
        assert set(running_on(after).values()) == (nodes_before - {failed}) | {name}
        assert all(p["spec"].get("nodeName") != failed for p in after)
        # The failure budget untouched: the lost pod was a disruption.
        assert after_job["status"].get("failed", 0) == 0
        assert not any(c["type"] == "Failed" and c["status"] == "True"
                       for c in after_job["status"].get("conditions", []))
        assert worker["metadata"]["name"] in disrupted
        # The same checkpoint directory and resume setting in every pod of the restarted run.
        assert_same_resume(before.values(), after)
        assert all(env_of(p).get("RESUME") == "auto" for p in after)
        # No partial gang kept its GPUs past Kueue's timeout.
        assert gang.longest < timeout
        # Admitted whole: no pod of the run scheduled while its workload was not admitted. The pods
        # of the admission before the failure are left out: when Kueue evicts the workload whole
        # (no free node in the topology at the moment of the failure: TASFailedNodeReplacementFailFast),
        # they are still terminating while it waits to be admitted again.
        new_pods = {p["metadata"]["name"] for p in after} - set(before)
        assert not [v for v in watcher.violations if v.split()[1] in new_pods], watcher.violations

        # A trainer crash still counts: the worker's trainer exits 1 (its pod Failed, no
        # DisruptionTarget), the Job counts one failure of its budget and recreates the pod.
        crashed = next(p for p in after if index_of(p) == "1")
        exit_container(cluster, crashed, 1)
        wait("the trainer crash counted and the pod recreated",
             lambda: (cluster.get("batch/v1", "Job", RUN, NAMESPACE)["status"].get("failed", 0) == 1
                      and len(running_on(run_pods(cluster))) == 2), 180, watcher.describe)
        crash_job = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        _log(request, f"repair: trainer crash (exit 1) counted: failed={crash_job['status'].get('failed')} of retries "
                      f"{crash_job['spec']['backoffLimit']}; run uid={crash_job['metadata']['uid']} still active")
        assert not failed_condition(crash_job)

        # Genuine crashes, every node healthy: the second (the head's trainer) is counted and the
        # run goes on (failed 2 of retries 2); the third (the worker's) fails it, BackoffLimitExceeded.
        t_crash = time.monotonic()
        exit_container(cluster, running_rank(cluster, "0"), 1)
        wait("the second crash counted", lambda: cluster.get("batch/v1", "Job", RUN, NAMESPACE)["status"].get(
            "failed", 0) == 2, 60, watcher.describe)
        second = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        assert not failed_condition(second), second["status"]
        exit_container(cluster, running_rank(cluster, "1"), 1)
        wait("the run failed after its third crash",
             lambda: failed_condition(cluster.get("batch/v1", "Job", RUN, NAMESPACE)) is not None, 60, watcher.describe)
        t_failed = time.monotonic() - t_crash
        wait("Kueue's workload finished (its quota released)", lambda: finished(workload_of(cluster)), 60,
             watcher.describe)
        end = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        cond = failed_condition(end)
        _log(request, f"repair: genuine crashes (exit 1, every node healthy): run uid={end['metadata']['uid']} "
                      f"failed={end['status'].get('failed')} of retries {end['spec']['backoffLimit']} after 3 crashes; "
                      f"Failed {cond.get('reason')} {t_failed:.0f}s after the second crash: {cond.get('message')}")
        assert end["metadata"]["uid"] == job["metadata"]["uid"]
        assert end["spec"]["backoffLimit"] == RETRIES
        assert cond["reason"] == "BackoffLimitExceeded", cond
        assert end["status"].get("failed", 0) >= RETRIES + 1
    finally:
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)


# Simulated time: a real minute is SIM_MINUTE seconds here (the waits EKS's repair takes, scaled).
SIM_MINUTE = 0.6
# Node repair acts 10 minutes after the agent's condition (EKS user guide, node-repair).
REPAIR_AFTER = 10 * SIM_MINUTE
# A reboot: the node down this long (a p5's reboot takes minutes; longer than every reaction of the
# controllers here, which come within seconds).
REBOOT_DOWN = 15 * SIM_MINUTE
LEDGER_SCOPE_PATH = "metadata.labels['batch.kubernetes.io/controller-uid']"


def job_now(cluster) -> dict:
    return cluster.get("batch/v1", "Job", RUN, NAMESPACE)


def whole_on(cluster, nodes: set[str], gang: GangTimer, not_before: set[str] = frozenset()):
    """The run Running on exactly `nodes`, with pods other than `not_before`."""
    def check() -> bool:
        pods = run_pods(cluster)
        gang.sample(pods)
        on = running_on(pods)
        return set(on.values()) == nodes and len(on) == 2 and not set(on) & not_before
    return check


def old_ledger_starts_normally(cluster, request, job: dict, fsx: Path) -> None:
    """A new Job on a checkpoint directory whose ledger is full of another Job's starts: the pod's
    RESUME_LEDGER_SCOPE is the Job's UID (the downward API: the controller-uid label the Job
    controller sets on its pods), and the resume wrapper, run with the pod's settings, starts."""
    uid = job["metadata"]["uid"]
    head = running_rank(cluster, "0")
    [scope] = [e for e in head["spec"]["containers"][0]["env"] if e["name"] == "RESUME_LEDGER_SCOPE"]
    assert scope["valueFrom"]["fieldRef"]["fieldPath"] == LEDGER_SCOPE_PATH, scope
    assert all(p["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == uid for p in run_pods(cluster))
    env = resolved_env(head)
    assert env["RESUME_LEDGER_SCOPE"] == uid
    limit = int(env["RESUME_MAX_STALLED_RESTARTS"])
    ledger = Path(env["RESUME_LEDGER"].replace("/fsx", str(fsx), 1))
    ledger.parent.mkdir(parents=True, exist_ok=True)
    # The old Job ended BackoffLimitExceeded: limit + 1 fresh starts in a row, the last one refused.
    old_uid = "00000000-0000-4000-8000-0000000000aa"
    ledger.write_text("".join(json.dumps({"time": "2026-12-01T00:00:0%dZ" % i, "step": None, "hostname": f"old-{i}",
                                          "node": "p5-gone", "job": old_uid}) + "\n" for i in range(limit + 1)))
    t0 = time.monotonic()
    again_old = subprocess.run([sys.executable, str(ROOT / "components/scripts/resume_wrapper.py"), "--", "true"],
                               env={"PATH": os.environ["PATH"], **{k: v.replace("/fsx", str(fsx), 1) for k, v in env.items()
                                                                   if k.startswith(("RESUME", "CKPT"))},
                                    "RESUME_LEDGER_SCOPE": old_uid}, capture_output=True, text=True, timeout=30)
    started = start_trainer_here(head, fsx)
    _log(request, f"repair: new Job on an old ledger: run uid={uid} failed={job['status'].get('failed', 0)}; ledger "
                  f"with {limit + 1} starts of Job {old_uid}: the old Job's scope exits {again_old.returncode}, this "
                  f"pod's scope (RESUME_LEDGER_SCOPE from {LEDGER_SCOPE_PATH}) exits {started.returncode} "
                  f"({time.monotonic() - t0:.1f}s): {started.stderr.strip().splitlines()[-1:]}")
    assert again_old.returncode == EXIT_NO_PROGRESS, again_old.stderr
    assert started.returncode == 0, started.stderr
    assert f"start 1 in a row of Job {uid}" in started.stderr
    assert [json.loads(line)["job"] for line in ledger.read_text().splitlines()] == [old_uid] * (limit + 1) + [uid]


def test_gpu_faults_as_they_happen_cost_the_run_no_retry(cluster, request, tmp_path):
    """Issue 45 on the Indexed Job form, one deployment: a new Job on an old ledger starts; a
    reboot repair with graceful node shutdown (the node back under its name) and an XID crash
    before a replacement cost no retry; a hard reboot (no graceful shutdown) costs one."""
    r = deploy_and_check(cluster, request, tmp_path, ONLY_MULTINODE)
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        wait("the multi-node run Running on both GPU nodes", lambda: len(running_on(run_pods(cluster))) == 2, 300,
             watcher.describe)
        job = job_now(cluster)
        uid = job["metadata"]["uid"]

        # 4. A new Job on a directory with an old ledger.
        old_ledger_starts_normally(cluster, request, job, tmp_path / "fsx")

        nodes = set(running_on(run_pods(cluster)).values())

        # 1b (first, while the Job's pod-creation backoff is short: it grows with every failed pod,
        # ignored or not). A hard reboot (the kubelet never ran its graceful shutdown): the pod comes back
        # ContainerStatusUnknown, exit 137, without DisruptionTarget. The documented residual
        # (docs/gpu-failure-runbook.md): it counts once.
        worker = running_rank(cluster, "1")
        before = {p["metadata"]["name"] for p in run_pods(cluster)}
        hard = reboot_node(cluster, worker, graceful=False, down_seconds=REBOOT_DOWN, describe=watcher.describe)
        gang = GangTimer()
        wait("the run whole again on the same nodes after the hard reboot",
             whole_on(cluster, nodes, gang, {worker["metadata"]["name"]}),
             REPAIR_TIMEOUT, watcher.describe)
        t_whole = time.monotonic() - hard["t0"]
        after = job_now(cluster)
        _log(request, f"repair: hard reboot (no graceful shutdown; the documented residual: counts once): run "
                      f"uid={after['metadata']['uid']} {workload_line(workload_of(cluster))} node {hard['node']} "
                      f"down {hard['down_for']:.0f}s, pod ContainerStatusUnknown exit 137 when it came back; whole again "
                      f"after {t_whole:.0f}s; failed={after['status'].get('failed', 0)} of retries "
                      f"{after['spec']['backoffLimit']}; DisruptionTarget {hard['disrupted']}")
        assert after["metadata"]["uid"] == uid
        assert after["status"].get("failed", 0) == 1
        assert not failed_condition(after)

        # 1. Reboot in place, graceful node shutdown: the worker's node down, its pod Failed with
        # DisruptionTarget (TerminationByKubelet, exit 143), the node Ready again under its name.
        nodes = set(running_on(run_pods(cluster)).values())
        worker = running_rank(cluster, "1")
        reboot = reboot_node(cluster, worker, graceful=True, down_seconds=REBOOT_DOWN, describe=watcher.describe)
        gang = GangTimer()
        wait("the run whole again on the same nodes after the reboot",
             whole_on(cluster, nodes, gang, {worker["metadata"]["name"]}),
             REPAIR_TIMEOUT, watcher.describe)
        t_whole = time.monotonic() - reboot["t0"]
        after = job_now(cluster)
        _log(request, f"repair: reboot in place (graceful shutdown): run uid={after['metadata']['uid']} "
                      f"{workload_line(workload_of(cluster))} node {reboot['node']} tainted unreachable after "
                      f"{reboot['tainted_after']:.0f}s, down {reboot['down_for']:.0f}s, Ready after "
                      f"{reboot['ready_after']:.0f}s, whole again after {t_whole:.0f}s on {sorted(nodes)}; "
                      f"failed={after['status'].get('failed', 0)} of retries {after['spec']['backoffLimit']}; "
                      f"longest Running-while-peer-Pending {gang.longest:.0f}s; DisruptionTarget {reboot['disrupted']}")
        assert after["metadata"]["uid"] == uid
        assert reboot["node"] in set(running_on(run_pods(cluster)).values())
        assert "TerminationByKubelet" in reboot["disrupted"].get(worker["metadata"]["name"], [])
        assert after["status"].get("failed", 0) == 1  # the hard reboot's, no more
        assert not failed_condition(after)

        # 2. XID crash, then repair: the head's trainer exits 9 (the launcher: a node of the run
        # unhealthy), the worker 6 (its head lost); REPAIR_AFTER later the agent's condition and
        # repair's NoExecute taint, the node deleted, a new one joining.
        head, worker = running_rank(cluster, "0"), running_rank(cluster, "1")
        before = {p["metadata"]["name"] for p in run_pods(cluster)}
        t0 = time.monotonic()
        exit_container(cluster, head, ray_launcher.EXIT_PEER_LOST)
        exit_container(cluster, worker, ray_launcher.EXIT_HEAD_LOST)
        wait("the run's pods recreated after the exits 9 and 6", whole_on(cluster, nodes, GangTimer(), before),
             REPAIR_TIMEOUT, watcher.describe)
        t_recreated = time.monotonic() - t0
        exited = job_now(cluster)
        assert exited["status"].get("failed", 0) == 1, exited["status"]
        time.sleep(max(0.0, REPAIR_AFTER - (time.monotonic() - t0)))
        worker = running_rank(cluster, "1")
        failed_node = worker["spec"]["nodeName"]
        fault = fail_and_replace(cluster, lambda: run_pods(cluster), failed_node, watcher.describe)
        gang = GangTimer()
        nodes = (nodes - {failed_node}) | {fault["replacement"]}
        wait("the run whole again on the replacement node", whole_on(cluster, nodes, gang), REPAIR_TIMEOUT,
             watcher.describe)
        t_whole = time.monotonic() - t0
        after = job_now(cluster)
        _log(request, f"repair: XID crash then repair: run uid={after['metadata']['uid']} "
                      f"{workload_line(workload_of(cluster))} exits 9 (head) and 6 (worker): pods recreated after "
                      f"{t_recreated:.0f}s, failed={exited['status'].get('failed', 0)}; agent condition + NoExecute "
                      f"{REPAIR_AFTER:.0f}s (10 simulated min) after the exits, {failed_node} evicted after "
                      f"{fault['evicted_after']:.0f}s, replaced by {fault['replacement']}; whole again "
                      f"{t_whole:.0f}s after the exits; failed={after['status'].get('failed', 0)} of retries "
                      f"{after['spec']['backoffLimit']}; longest Running-while-peer-Pending {gang.longest:.0f}s; "
                      f"DisruptionTarget {fault['disrupted']}; ended by the harness as a kubelet would "
                      f"{fault['finished_by_harness']}")
        assert after["metadata"]["uid"] == uid
        assert fault["replacement"] in set(running_on(run_pods(cluster)).values())
        assert after["status"].get("failed", 0) == 1
        assert not failed_condition(after)
        new_pods = {p["metadata"]["name"] for p in run_pods(cluster)} - before
        assert not [v for v in watcher.violations if v.split()[1] in new_pods], watcher.violations

    finally:
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)


def test_rayjob_form_a_failed_worker_node_and_the_run_comes_back_whole(cluster, request, tmp_path):
    """The RayJob form: the worker's node fails the same way. KubeRay (v1.6.2) deletes and creates a
    lost Ray pod again (restartPolicy Never, raycluster_controller.go), or Kueue evicts the RayJob
    whole when the topology has no free node (its Ray cluster deleted, a new one at re-admission);
    either way the same RayJob is whole on the new node set, with no failed attempt counted."""
    timeout = kueue.pods_ready_timeout_seconds(stack_config("sim")[0])
    r = deploy_and_check(cluster, request, tmp_path, RAYJOB)
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        wait("the RayJob's head and worker Running on both GPU nodes",
             lambda: len(running_on(run_pods(cluster))) == 2, 300, watcher.describe)
        rayjob = cluster.get("ray.io/v1", "RayJob", RUN, NAMESPACE)
        before = {p["metadata"]["name"]: p for p in run_pods(cluster)}
        nodes_before = set(running_on(before.values()).values())
        worker, failed, fault, gang, t_whole = lose_the_workers_node(cluster, watcher, before)
        name = fault["replacement"]
        cluster_before = worker["metadata"]["labels"].get("ray.io/cluster")

        after_job = cluster.get("ray.io/v1", "RayJob", RUN, NAMESPACE)
        after = run_pods(cluster)
        status = after_job.get("status") or {}
        cluster_after = {p["metadata"]["labels"].get("ray.io/cluster") for p in after}
        _log(request, f"repair: rayjob run uid={after_job['metadata']['uid']} {workload_line(workload_of(cluster))} "
                      f"ray cluster {cluster_before} -> {sorted(cluster_after)} "
                      f"pods replaced={len({p['metadata']['name'] for p in after} - set(before))} "
                      f"failed={status.get('failed', 0)} of retries {after_job['spec'].get('backoffLimit')} "
                      f"deployment status {status.get('jobDeploymentStatus')} "
                      f"evicted after {fault['evicted_after']:.0f}s, whole again after {t_whole:.0f}s, "
                      f"longest Running-while-peer-Pending {gang.longest:.0f}s; DisruptionTarget {fault['disrupted']}")
        assert after_job["metadata"]["uid"] == rayjob["metadata"]["uid"]
        assert set(running_on(after).values()) == (nodes_before - {failed}) | {name}
        # No attempt of the RayJob's budget spent, and not failed.
        assert status.get("failed", 0) == 0
        assert status.get("jobDeploymentStatus") != "Failed", status
        assert worker["metadata"]["name"] in fault["disrupted"]
        assert_same_resume(before.values(), after)
        assert gang.longest < timeout
        new_pods = {p["metadata"]["name"] for p in after} - set(before)
        assert not [v for v in watcher.violations if v.split()[1] in new_pods], watcher.violations
    finally:
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)


RESTART_LIMIT = 2
# The resume wrapper's bound: the start after `workloads.infrastructureRestarts` restarts from the
# same checkpoint exits with this code, which the Job's pod failure policy turns into a failed run.
EXIT_NO_PROGRESS = resume_wrapper.EXIT_NO_PROGRESS


def start_trainer_here(pod: dict, fsx: Path) -> subprocess.CompletedProcess:
    """What the pod's trainer container does first, run here: the resume wrapper with the pod's own
    resume settings, /fsx moved under the test's directory, before a no-op training command."""
    env = {k: v.replace("/fsx", str(fsx), 1) if v.startswith("/fsx") else v
           for k, v in resolved_env(pod).items() if k.startswith(("RESUME", "CKPT"))}
    return subprocess.run([sys.executable, str(ROOT / "components/scripts/resume_wrapper.py"), "--", "true"],
                          env={"PATH": os.environ["PATH"], **env}, capture_output=True, text=True, timeout=30)


def test_a_node_that_keeps_failing_ends_the_run_with_a_clear_reason(cluster, request, tmp_path):
    """The head's node fails, its replacement fails, and so on, before any new checkpoint: the
    first two restarts go on (from the same checkpoint), the start after the third failure is
    refused by the resume wrapper (workloads.infrastructureRestarts = 2) and the run fails with
    the pod failure policy's reason, its GPUs freed, instead of being requeued without bound.

    Kueue's own count (requeuingStrategy.backoffLimitCount) grows only on PodsReady-timeout
    evictions (kueue v0.19.2 pkg/controller/core/workload_controller.go), not on the node-failure
    evictions of topology-aware scheduling (pkg/scheduler/scheduler.go
    evictWorkloadAfterFailedTASReplacement), and a pod lost with its node is ignored by the Job:
    without the wrapper's bound this loop would go on until the run's deadline."""
    r = deploy_and_check(cluster, request, tmp_path,
                         {**ONLY_MULTINODE, "rltrain:workloads.infrastructureRestarts": RESTART_LIMIT})
    watcher, pulumi = r["watcher"], r["pulumi"]
    fsx = tmp_path / "fsx"
    try:
        job = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        heads_seen: list[str] = []
        starts: list[tuple[str, int, float]] = []
        failures = 0
        t0 = time.monotonic()
        while True:
            def whole_with_a_new_head() -> bool:
                pods = run_pods(cluster)
                heads = [p for p in pods if index_of(p) == "0" and p["metadata"]["uid"] not in heads_seen]
                return len(running_on(pods)) == 2 and bool(heads)
            wait(f"the run whole on two nodes with a new head (after {failures} node failures)",
                 whole_with_a_new_head, REPAIR_TIMEOUT, watcher.describe)
            head = next(p for p in run_pods(cluster) if index_of(p) == "0")
            heads_seen.append(head["metadata"]["uid"])
            started = start_trainer_here(head, fsx)
            starts.append((head["spec"]["nodeName"], started.returncode, time.monotonic() - t0))
            if started.returncode != 0:
                break
            assert failures < RESTART_LIMIT + 1, (starts, started.stderr)
            fail_and_replace(cluster, lambda: run_pods(cluster), head["spec"]["nodeName"], watcher.describe)
            failures += 1
        assert started.returncode == EXIT_NO_PROGRESS, (started.returncode, started.stderr)
        # The pod's trainer exits the way the wrapper just did here.
        exit_container(cluster, head, started.returncode)

        def failed_whole() -> bool:
            j = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
            return (any(c["type"] == "Failed" and c["status"] == "True" for c in j["status"].get("conditions", []))
                    and not [p for p in run_pods(cluster) if p["status"].get("phase") in ("Pending", "Running")])
        wait("the run failed, no pod of it Pending or Running", failed_whole, 180, watcher.describe)
        end = cluster.get("batch/v1", "Job", RUN, NAMESPACE)
        failed_cond = next(c for c in end["status"]["conditions"] if c["type"] == "Failed")
        message = started.stderr.strip().splitlines()[-1] if started.stderr.strip() else ""
        _log(request, f"repair: node keeps failing: run uid={end['metadata']['uid']} {workload_line(workload_of(cluster))} "
                      f"node failures={failures} starts {[(n, rc, round(t)) for n, rc, t in starts]}; failed "
                      f"{failed_cond.get('reason')}: {failed_cond.get('message')}; wrapper: {message}")
        assert end["metadata"]["uid"] == job["metadata"]["uid"]
        assert failures == RESTART_LIMIT + 1
        assert [rc for _, rc, _ in starts] == [0] * (RESTART_LIMIT + 1) + [EXIT_NO_PROGRESS]
        assert failed_cond["reason"] == "PodFailurePolicy"
        assert f"exit code {EXIT_NO_PROGRESS}" in failed_cond["message"]
        # The failure budget was not what ended it: no pod failure counted before the refused start
        # (the node losses were disruptions); once the Job failed, its controller also ended the
        # worker, which it counts as failed too.
        assert end["status"].get("failed", 0) <= 2
        assert not any(c["type"] == "Failed" and c.get("reason") == "BackoffLimitExceeded"
                       for c in end["status"]["conditions"])
        assert "RESUME_MAX_STALLED_RESTARTS=2" in started.stderr and "refusing to start" in started.stderr
        assert "workloads.infrastructureRestarts" in started.stderr
        wait("Kueue's workload finished (its quota released)", lambda: finished(workload_of(cluster)), 60,
             watcher.describe)
    finally:
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)
