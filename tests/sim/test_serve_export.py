"""Train, export, serve on the simulated cluster (issue 29): one `up` creates the reasoning run, the
export Job of its step and the vLLM Deployment that serves the export; the serving pods wait for
the export's marker (init container `wait-for-export`, components/workloads/serving.py) and become
Ready once it exists. The real Pulumi CLI and provider, API server, scheduler, Deployment and Job
controllers and Kueue.

What stands in for what kwok cannot do (no container runs on a kwok node):
- The init container's program. The test runs the live pod's own `wait-for-export` command (its
  `python3 -c` program and env, read back from the API server) as a local process, with `/fsx`
  mapped to a directory of the test: the simulated volume is an FSx CSI volume no node mounts.
- The kubelet's report of it. A kwok Stage of this module (weight 100, so it wins over kwok's
  `pod-ready`, weight 0: kwok v0.8.0 pkg/utils/lifecycle/lifecycle.go Match) keeps a serving pod
  Pending with `wait-for-export` running and the server `PodInitializing` for as long as the pod
  lacks the annotation `rltrain.sim/init-exited`; the test sets it when the local program exits 0,
  and kwok's `pod-ready` stage then makes the pod Running and Ready, as the kubelet would once the
  init container succeeded and the startup probe passed.
- The export Job's program. Its pod runs on kwok; when the test decides the export is done it
  writes the marker into a temporary directory and renames it onto the Job's `--out` (with
  export_hf.py's own `publish`, as the script does last), then marks the pod Succeeded (exit 0).

What this proves: `up` creates training, export and serving together and succeeds without waiting
for the serving rollout (the Deployment's await is "created"); the pods hold their GPUs without a
restart and the Deployment reports no failure while they wait; the marker the pods wait for is
exactly what the export Job's arguments write (live objects); the init program keeps waiting
without the marker and exits 0 once it is there; the Deployment becomes available after. What it
cannot: the kubelet's real handling of the init container (restarts, its resource accounting),
the FSx mount, the real export (tests/scripts/test_export_hf.py runs it as a program), vLLM
loading the export and its startup probe; a wait longer than the test's hold (the progress
deadline is checked as a value).

It runs on a cluster of its own (tests/sim/conftest.py KINDS "serving": Job pods do not complete on
their own, the waiting Stage). The init program runs with its polls
POLL_SCALE times faster than in a pod (the hold and the exit are measured in its polls).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ENABLE, POLL_SECONDS, RELEASED, log as _log, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from faults import exit_container  # noqa: E402
from simdeploy import NAMESPACE, RUNS_TIMEOUT, engine_warnings, namespace_warnings, deploy_and_check, destroy, wait  # noqa: E402

from components.scripts import export_hf  # noqa: E402
from components.workloads import runs, serving  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

TRAINING = "rltrain-training"
STEP = 200
EXPORT_JOB = f"rltrain-export-step-{STEP}"
# The CronJobs are created, but fire no Job during the test (a Job pod here runs for an hour).
NEVER = "0 0 1 1 *"
# The reasoning loop of Pulumi.dev-reasoning.yaml on the sim stack's two p5 nodes: the single-node
# run on one, a 2-GPU replica on the other. No staging Job: `up` waits for it, and here Job pods
# never complete on their own; no checks (they span every GPU node).
REASONING = {
    "rltrain:workloads.trainer": "rlinf-reasoning",
    "rltrain:workloads.image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf/reason:v0.3",
    "rltrain:workloads.staging.enabled": False,
    "rltrain:workloads.multiNode.enabled": False, "rltrain:workloads.ncclTest.enabled": False,
    "rltrain:workloads.validation.enabled": False, "rltrain:workloads.trainingAfterChecks": False,
    "rltrain:workloads.serving": {"enabled": True, "gpusPerReplica": 2,
                                  "model": {"run": "single-node", "step": STEP},
                                  "evaluation": {"enabled": True, "schedule": NEVER}},
    "rltrain:workloads.checkpoints.schedule": NEVER,
}
# The init program polls every serving.WAIT_POLL_SECONDS (30 s, sized for a real export of minutes);
# here it runs with its sleeps divided by this (its own text unchanged: time.sleep wrapped before it).
POLL_SCALE = 10
POLL = serving.WAIT_POLL_SECONDS / POLL_SCALE
SCALED_SLEEP = f"import time as _t\n_sleep = _t.sleep\n_t.sleep = lambda s: _sleep(s / {POLL_SCALE})\n"
# Longer than two polls of the init program: it looked, and kept waiting.
HOLD_SECONDS = 2 * POLL + 5
# Its own cluster (tests/sim/conftest.py KINDS "serving"): Job pods keep running for an hour; the
# serving pods wait in their init container (WAITING_STAGE) until released.
CLUSTER_KIND = "serving"


def pods(cluster, selector: str) -> list[dict]:
    items = cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={selector}")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def serving_pods(cluster) -> list[dict]:
    return pods(cluster, f"{runs.RUN_LABEL}%3D{serving.NAME}")


def condition(obj: dict, kind: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions", []) if c["type"] == kind), {})


def restarts(pod: dict) -> int:
    st = pod.get("status") or {}
    return sum(c.get("restartCount", 0) for c in st.get("initContainerStatuses", []) + st.get("containerStatuses", []))


def waiting_in_init(pod: dict) -> bool:
    st = pod.get("status") or {}
    init = {c["name"]: c for c in st.get("initContainerStatuses", [])}
    return (st.get("phase") == "Pending" and "running" in (init.get(serving.WAIT_CONTAINER) or {}).get("state", {})
            and condition(pod, "Ready").get("status") != "True")


def arg(container: dict, flag: str) -> str:
    [value] = [a.split("=", 1)[1] for a in container.get("args", []) if a.startswith(f"--{flag}=")]
    return value


def local(fsx: Path, path: str) -> Path:
    """A path on the volume (/fsx/...) in the directory standing in for it."""
    assert path.startswith("/fsx/"), path
    return fsx / path[len("/fsx/"):]


def test_serving_waits_for_the_export_then_becomes_ready(cluster, request, tmp_path):
    fsx = tmp_path / "fsx"
    t0 = time.monotonic()

    def at() -> str:
        return f"+{time.monotonic() - t0:.0f}s"

    r = deploy_and_check(cluster, request, tmp_path, REASONING)
    watcher, pulumi = r["watcher"], r["pulumi"]
    waiters: list[subprocess.Popen] = []
    try:
        t_up = time.monotonic() - t0
        dep = cluster.get("apps/v1", "Deployment", serving.NAME, NAMESPACE)
        assert dep is not None
        # `up` did not wait for the rollout: nothing served yet when it returned.
        assert not (dep.get("status") or {}).get("availableReplicas"), dep.get("status")
        _log(request, f"serve: up ok at +{t_up:.0f}s ({r['up'].get('summary')}); Deployment {serving.NAME} "
                      f"created, available {(dep.get('status') or {}).get('availableReplicas', 0)}/"
                      f"{dep['spec']['replicas']}")

        # The wiring, on the live objects: served model = the export's --out, marker = --out/MARKER.
        job = cluster.get("batch/v1", "Job", EXPORT_JOB, NAMESPACE)
        assert job is not None, EXPORT_JOB
        out = arg(job["spec"]["template"]["spec"]["containers"][0], "out")
        [server] = [c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == serving.CONTAINER]
        assert arg(server, "model") == out
        [init] = dep["spec"]["template"]["spec"]["initContainers"]
        env = {e["name"]: e["value"] for e in init["env"]}
        assert env["EXPORT_MARKER"] == f"{out}/{export_hf.MARKER}" and env["EXPORT_JOB"] == EXPORT_JOB
        assert not job["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"].get("nvidia.com/gpu")
        # The Deployment does not report a failed rollout before the pods' own wait ends.
        assert dep["spec"]["progressDeadlineSeconds"] >= int(env["EXPORT_WAIT_SECONDS"])

        wait("the training run admitted and Running, the export Job's pod Running",
             lambda: any(p["status"].get("phase") == "Running" for p in pods(cluster, f"batch.kubernetes.io/job-name%3D{TRAINING}"))
             and any(p["status"].get("phase") == "Running" for p in pods(cluster, f"batch.kubernetes.io/job-name%3D{EXPORT_JOB}")),
             RUNS_TIMEOUT, lambda: f"{watcher.describe()}; pods: "
             f"{[(p['metadata']['name'], p['status'].get('phase'), p['spec'].get('nodeName')) for p in watcher.last_pods]}"
             f"; unscheduled: {[(p['metadata']['name'], p['spec'].get('nodeSelector')) for p in watcher.last_pods if not p['spec'].get('nodeName')]}"
             f"; {namespace_warnings(cluster)}")
        # Whether the training run lost the race for its node to the serving pod (conftest.py KINDS
        # "serving") and was evicted and admitted again.
        wls = cluster.api(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads")["items"]
        # The Evicted condition is reset (reason QuotaReserved) on re-admission; the eviction counts of
        # status.schedulingStats stay (kueue v0.19.2 pkg/workload/evict/evict.go workloadEvictionStateInc).
        evictions = {w["metadata"]["name"]: {e["reason"]: e["count"] for e in
                                             ((w.get("status") or {}).get("schedulingStats") or {}).get("evictions", [])}
                     for w in wls}
        _log(request, f"serve: training and export Running; Kueue evictions on the way: {evictions}")
        # The race's trace: the training pod's FailedScheduling on the node TAS named, until the
        # PodsReady timeout evicted the run. Tolerated only with that eviction on record.
        lost_race = any(w.startswith(f"job-{TRAINING}-") and ev.get("PodsReadyTimeout") for w, ev in evictions.items())
        wait("the serving pods scheduled and waiting in wait-for-export",
             lambda: (ps := serving_pods(cluster)) and all(waiting_in_init(p) for p in ps), 120,
             lambda: str([(p["metadata"]["name"], p.get("status")) for p in serving_pods(cluster)]))
        waiting = serving_pods(cluster)
        for p in waiting:
            [c] = p["spec"]["initContainers"]
            e = {x["name"]: x["value"] for x in c["env"]}
            assert c["command"][:2] == ["python3", "-c"], c["command"]
            e["EXPORT_MARKER"] = str(local(fsx, e["EXPORT_MARKER"]))
            logf = tmp_path / f"{p['metadata']['name']}.wait.log"
            # The pod's own program, as the kubelet would run it (python3 = this interpreter), its
            # polls POLL_SCALE times faster.
            waiters.append(subprocess.Popen([sys.executable, "-c", SCALED_SLEEP + c["command"][2]],
                                            env={**os.environ, **e}, stdout=logf.open("w"), stderr=subprocess.STDOUT,
                                            text=True))
        names = [p["metadata"]["name"] for p in waiting]
        gpus = {p["metadata"]["name"]: (p["spec"]["nodeName"], p["spec"]["containers"][0]["resources"]["requests"]
                                        .get("nvidia.com/gpu")) for p in waiting}
        _log(request, f"serve: {at()} {len(waiting)} pod(s) waiting in {serving.WAIT_CONTAINER} (Pending, Init): {gpus}")

        # Hold: the pods keep waiting, no restart, the Deployment reports no failure, the program keeps going.
        t_hold = time.monotonic()
        while time.monotonic() - t_hold < HOLD_SECONDS:
            ps = {p["metadata"]["name"]: p for p in serving_pods(cluster)}
            assert set(ps) == set(names), (names, list(ps))  # not replaced
            assert all(waiting_in_init(p) and restarts(p) == 0 for p in ps.values()), [p["status"] for p in ps.values()]
            d = cluster.get("apps/v1", "Deployment", serving.NAME, NAMESPACE)
            assert condition(d, "Progressing").get("reason") != "ProgressDeadlineExceeded", d["status"]
            assert all(w.poll() is None for w in waiters), "wait-for-export exited before the marker existed"
            time.sleep(POLL_SECONDS)
        d = cluster.get("apps/v1", "Deployment", serving.NAME, NAMESPACE)
        _log(request, f"serve: {at()} still waiting after {HOLD_SECONDS:.0f}s hold ({POLL:g}s polls): restarts 0, phase Pending, "
                      f"Progressing {condition(d, 'Progressing').get('status')}/{condition(d, 'Progressing').get('reason')}, "
                      f"Available {condition(d, 'Available').get('status')}; wait program: "
                      f"{(tmp_path / (names[0] + '.wait.log')).read_text().strip().splitlines()[-1]}")

        # The export finishes: the marker in a temporary directory renamed onto --out, then exit 0.
        target = local(fsx, out)
        tmp = target.parent / f".tmp-{target.name}-sim"
        tmp.mkdir(parents=True)
        (tmp / "config.json").write_text("{}")
        (tmp / export_hf.MARKER).write_text(f'{{"step": {STEP}, "family": "reasoning"}}')
        export_hf.publish(str(tmp), str(target))
        [epod] = pods(cluster, f"batch.kubernetes.io/job-name%3D{EXPORT_JOB}")
        exit_container(cluster, epod, 0, container=epod["spec"]["containers"][0]["name"])
        t_marker = time.monotonic()
        _log(request, f"serve: {at()} export marker written ({out}/{export_hf.MARKER}), export pod Succeeded")
        wait(f"Job {EXPORT_JOB} Complete", lambda: condition(cluster.get("batch/v1", "Job", EXPORT_JOB, NAMESPACE) or {},
                                                              "Complete").get("status") == "True", 60)

        # The pods' program sees it at its next poll and exits 0: the kubelet's report, then kwok's pod-ready.
        deadline = time.monotonic() + POLL + 30
        for w, name in zip(waiters, names):
            code = w.wait(timeout=max(1.0, deadline - time.monotonic()))
            assert code == 0, (name, code, (tmp_path / f"{name}.wait.log").read_text())
            cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}", "PATCH",
                        {"metadata": {"annotations": {RELEASED: "0"}}}, content_type="application/merge-patch+json")
        t_exit = time.monotonic() - t_marker
        wait("the Deployment available", lambda: ((cluster.get("apps/v1", "Deployment", serving.NAME, NAMESPACE) or {})
                                                  .get("status") or {}).get("availableReplicas") == len(names), 120,
             lambda: str([p.get("status") for p in serving_pods(cluster)]))
        t_ready = time.monotonic() - t_marker
        ready = {p["metadata"]["name"]: (condition(p, "Ready").get("status"), restarts(p)) for p in serving_pods(cluster)}
        assert set(ready) == set(names) and all(v == ("True", 0) for v in ready.values()), ready
        _log(request, f"serve: {at()} wait-for-export exited 0 {t_exit:.0f}s after the marker "
                      f"({(tmp_path / (names[0] + '.wait.log')).read_text().strip().splitlines()[-1]}); "
                      f"Ready {t_ready:.0f}s after it (Ready, restarts): {ready}")
        warnings = [w for w in namespace_warnings(cluster)
                    if not (lost_race and w.startswith(f"Pod/{TRAINING}-") and ": FailedScheduling: " in w)]
        assert not warnings, (warnings, evictions)
        assert not engine_warnings(r["up"])
    finally:
        for w in waiters:
            if w.poll() is None:
                w.kill()
        watcher.finish()
        destroy(cluster, pulumi, r["expected"], request)
