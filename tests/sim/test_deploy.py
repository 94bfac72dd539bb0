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

import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest
from conftest import ENABLE, missing_binaries, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)
MISSING = missing_binaries()

from cluster import deploy, sim  # noqa: E402
from cluster.binaries import toolset  # noqa: E402
from components.offline import render  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

ROOT = render.ROOT
NAMESPACE = "rltrain"
STACK = "sim"
# Bounds: a whole `pulumi up` on a loaded 2-core machine, the runs to finish, a destroy.
UP_TIMEOUT = 900
RUNS_TIMEOUT = 300
DESTROY_TIMEOUT = 600
GPU = "nvidia.com/gpu"


def _log(request, line: str) -> None:
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"[sim] {line}")
    print(f"[sim] {line}", file=sys.stderr)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, request):
    if MISSING:
        # With RLTRAIN_SIM=1 a missing binary is a failure, not a skip.
        pytest.fail(f"simulated cluster: missing {', '.join(MISSING)}: run cluster/build.sh", pytrace=False)
    root = tmp_path_factory.mktemp("cluster")
    t0 = time.monotonic()
    c = sim.start("p5", STACK, root=root, complete_after=10.0, timeout=180.0)
    _log(request, f"cluster up in {time.monotonic() - t0:.0f}s; Kubernetes /version: {c.api('/version')['gitVersion']}")
    yield c
    c.stop()


class Pulumi:
    """`python -m cluster.deploy` on one work directory: the real CLI and provider, the program as
    an Automation API inline program (no language host is served: docs/simulated-cluster.md), in a
    process of its own per operation (a fresh import of the program every time, as `pulumi` does)."""

    def __init__(self, workdir: Path, kubeconfig: Path, request):
        self.workdir = workdir
        self.kubeconfig = kubeconfig
        self.request = request

    def __call__(self, operation: str, *flags: str, timeout: float = UP_TIMEOUT, check: bool = True) -> dict[str, Any]:
        out = self.workdir / f"{operation}-{time.monotonic_ns()}.json"
        r = subprocess.run([sys.executable, "-m", "cluster.deploy", operation, "--stack", STACK,
                            "--workdir", str(self.workdir), "--kubeconfig", str(self.kubeconfig),
                            "--json", str(out), *flags],
                           cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        res = json.loads(out.read_text()) if out.exists() else {"ok": False, "error": r.stderr[-6000:]}
        res["stdout"] = r.stdout
        _log(self.request, f"{operation}: {'ok' if res['ok'] else 'FAILED'} in {res.get('seconds')}s "
                           f"{res.get('summary')}")
        if check and not res["ok"]:
            raise AssertionError(f"{operation} failed:\n{r.stdout[-6000:]}\n{r.stderr[-4000:]}")
        return res


def _project(tmp: Path, overrides: dict[str, Any]) -> Path:
    """A deployment work directory with a copy of the program (the repository is never written)."""
    workdir = tmp / "deploy"
    deploy.prepare(workdir, STACK, Path(toolset().require("pulumi-resource-kubernetes")).parent,
                   overrides=overrides)
    return workdir


class Watcher(threading.Thread):
    """Polls the namespace's Kueue Workloads and pods every second while the stack runs."""

    def __init__(self, cluster: sim.Cluster):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.stop_event = threading.Event()
        self.admitted_at: dict[str, float] = {}   # workload owner name -> first seen Admitted
        self.pods_of: dict[str, set[str]] = {}    # owner name -> pods ever scheduled
        self.violations: list[str] = []
        self.max_gpus = 0
        self.errors: list[str] = []
        self.last_workloads: list[dict] = []
        self.last_pods: list[dict] = []
        # owner -> the admitted runs it was seen waiting behind (queued whole while they ran)
        self.waited: dict[str, set[str]] = {}

    @staticmethod
    def pod_owner(pod: dict, owners: dict[str, bool]) -> Optional[str]:
        """The run a pod belongs to, by the label its controller sets: the MPI operator's
        (training.kubeflow.org/job-name), the Job controller's (batch.kubernetes.io/job-name), else
        the program's own run label (KubeRay's pods carry it from the RayJob's templates)."""
        labels = pod["metadata"].get("labels") or {}
        for key in ("training.kubeflow.org/job-name", "batch.kubernetes.io/job-name", "rltrain/run"):
            if labels.get(key) in owners:
                return labels[key]
        return None

    @staticmethod
    def owner(workload: dict) -> str:
        refs = workload["metadata"].get("ownerReferences") or [{}]
        return refs[0].get("name", workload["metadata"]["name"])

    def _poll(self) -> None:
        try:
            wls = self.cluster.api(f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{NAMESPACE}/workloads")["items"]
        except sim.ApiError:
            wls = []
        pods = self.cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
        self.last_workloads, self.last_pods = wls, pods
        now = time.monotonic()
        owners = {}
        for w in wls:
            o = self.owner(w)
            owners[o] = any(c["type"] == "Admitted" and c["status"] == "True"
                            for c in (w.get("status") or {}).get("conditions", []))
            if owners[o]:
                self.admitted_at.setdefault(o, now)
        running = {Watcher.owner(w) for w in wls if owners[Watcher.owner(w)] and not _finished(w)}
        for o, admitted in owners.items():
            if not admitted and running - {o}:
                self.waited.setdefault(o, set()).update(running - {o})
        gpus = 0
        for p in pods:
            owner = self.pod_owner(p, owners)
            scheduled = bool(p["spec"].get("nodeName"))
            if owner and scheduled:
                self.pods_of.setdefault(owner, set()).add(p["metadata"]["name"])
                if not owners[owner] and (p["status"].get("phase") not in ("Succeeded", "Failed")):
                    self.violations.append(f"pod {p['metadata']['name']} scheduled while workload of {owner} "
                                           "is not admitted")
            if scheduled and p["status"].get("phase") not in ("Succeeded", "Failed"):
                for c in p["spec"]["containers"]:
                    gpus += int(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0))
        self.max_gpus = max(self.max_gpus, gpus)

    def run(self) -> None:
        while not self.stop_event.is_set():
            try:
                self._poll()
            except Exception as e:  # noqa: BLE001 - reported by the test
                self.errors.append(repr(e))
            self.stop_event.wait(1.0)

    def finish(self) -> None:
        self.stop_event.set()
        self.join(10)


def _finished(workload: dict) -> bool:
    return any(c["type"] == "Finished" and c["status"] == "True"
               for c in (workload.get("status") or {}).get("conditions", []))


def _rendered_objects(project: Path) -> list[tuple[str, str, Optional[str], str]]:
    r = render.render_stack(STACK, project)
    return sorted({(m["apiVersion"], m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"])
                   for m in r.manifests})


# The one warning expected: the provider the Go module proxy serves is 4.25.0, the SDK pin 4.34.2
# (cluster/versions.env); the engine says so on every run.
PROVIDER_VERSION_WARNING = "resource plugin kubernetes is expected to have version >="


def _warnings(res: dict[str, Any]) -> list[str]:
    """The engine's warnings and errors (diagnostic events: the provider's, the API server's
    warnings it passes on, the program's), but the provider-version one."""
    return [f"{d['severity']}: {d['urn']}: {d['message']}" for d in res.get("diagnostics", [])
            if not d["message"].startswith(PROVIDER_VERSION_WARNING)]


def _wait(what: str, check, timeout: float, describe=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(2)
    raise AssertionError(f"{what}: not within {timeout:.0f}s. {describe()}")


def _job_complete(cluster: sim.Cluster, name: str) -> bool:
    job = cluster.get("batch/v1", "Job", name, NAMESPACE)
    return bool(job) and any(c["type"] == "Complete" and c["status"] == "True"
                             for c in (job.get("status") or {}).get("conditions", []))


def _mpijob_succeeded(cluster: sim.Cluster, name: str) -> bool:
    job = cluster.get("kubeflow.org/v2beta1", "MPIJob", name, NAMESPACE)
    return bool(job) and any(c["type"] == "Succeeded" and c["status"] == "True"
                             for c in (job.get("status") or {}).get("conditions", []))


def _namespace_warnings(cluster: sim.Cluster) -> list[str]:
    """Warning events of the namespace, but Kueue's "Pending" on a Workload (a run waiting for quota
    is the queue working: kueue v0.19.2 pkg/scheduler records it as a Warning)."""
    events = cluster.api(f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
    return [f"{e['involvedObject']['kind']}/{e['involvedObject']['name']}: {e['reason']}: {e.get('message', '')}"
            for e in events if e.get("type") == "Warning"
            and not (e["involvedObject"]["kind"] == "Workload" and e["reason"] == "Pending")]


def _deploy_and_check(cluster: sim.Cluster, request, tmp: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """Preview and up, check the objects; returns the watcher and the deployment. On a failure the
    stack is destroyed before the error is raised."""
    workdir = _project(tmp, overrides)
    expected = _rendered_objects(workdir / "project")
    cluster.reset_storage()
    pulumi = Pulumi(workdir, cluster.kubeconfig, request)
    preview = pulumi("preview")
    _log(request, f"Pulumi CLI {preview['versions']['pulumi']}, Kubernetes provider {preview['versions']['provider']}, "
                  f"Kubernetes /version {cluster.api('/version')['gitVersion']}")
    assert not _warnings(preview), _warnings(preview)
    watcher = Watcher(cluster)
    watcher.start()
    result: dict[str, Any] = {"watcher": watcher, "pulumi": pulumi, "expected": expected}
    try:
        up = pulumi("up")
        assert not _warnings(up), _warnings(up)
        missing = [o for o in expected if cluster.get(o[0], o[1], o[3], o[2]) is None]
        assert not missing, f"rendered but not in the API server: {missing}"
        result["up"] = up
    except BaseException:
        watcher.finish()
        _destroy(cluster, pulumi, expected, request)
        raise
    return result


def _destroy(cluster: sim.Cluster, pulumi: Pulumi, expected, request) -> None:
    out = pulumi("destroy", timeout=DESTROY_TIMEOUT)
    assert not _warnings(out), _warnings(out)

    def gone() -> list:
        return [o for o in expected if cluster.get(o[0], o[1], o[3], o[2]) is not None]
    _wait("every object of the stack deleted (no stuck finalizer)", lambda: not gone(), 60,
          lambda: "left: " + ", ".join(f"{o[1]}/{o[3]} finalizers {(cluster.get(o[0], o[1], o[3], o[2]) or {}).get('metadata', {}).get('finalizers')}"
                                       for o in gone()))
    assert cluster.get("v1", "Namespace", NAMESPACE) is None


def test_deploy_indexed_job_form(cluster, request, tmp_path):
    r = _deploy_and_check(cluster, request, tmp_path, {})
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        try:
            t0 = time.monotonic()
            _wait("every run finished (Jobs Complete, MPIJob Succeeded)",
                  lambda: all(_job_complete(cluster, j) for j in ("rltrain-validation", "rltrain-training",
                                                                  "rltrain-multinode"))
                  and _mpijob_succeeded(cluster, "rltrain-nccl-test"), RUNS_TIMEOUT,
                  lambda: f"workloads: {[(Watcher.owner(w), (w.get('status') or {}).get('conditions')) for w in watcher.last_workloads]}")
            _log(request, f"runs finished {time.monotonic() - t0:.0f}s after up")
            time.sleep(2)
        finally:
            watcher.finish()
        assert not watcher.errors, watcher.errors
        # Whole: no pod of a run was scheduled before its workload was admitted.
        assert not watcher.violations, watcher.violations
        admitted = sorted(watcher.admitted_at, key=watcher.admitted_at.get)
        _log(request, f"admission order: {admitted}; queued whole behind: {watcher.waited}")
        assert set(admitted) == {"rltrain-validation", "rltrain-nccl-test", "rltrain-multinode", "rltrain-training"}
        # trainingAfterChecks (Pulumi.sim.yaml): validation, then the NCCL test, then training.
        assert admitted[:2] == ["rltrain-validation", "rltrain-nccl-test"]
        # Every pod of each run scheduled (both validation pods, workers and launcher of the MPIJob,
        # both multi-node pods).
        assert {k: len(v) for k, v in watcher.pods_of.items()} == {
            "rltrain-validation": 2, "rltrain-nccl-test": 3, "rltrain-multinode": 2, "rltrain-training": 1}
        # 8 + 16 GPUs do not fit 16: whichever training run Kueue took second (one `up` creates both,
        # equal priority) waited whole while the other ran.
        first, second = admitted[2:]
        assert first in watcher.waited.get(second, set()), (second, watcher.waited)
        assert watcher.max_gpus <= 16
        assert not _namespace_warnings(cluster), _namespace_warnings(cluster)
    finally:
        _destroy(cluster, pulumi, r["expected"], request)


def test_deploy_rayjob_form_and_a_run_wider_than_the_free_gpus_stays_queued(cluster, request, tmp_path):
    r = _deploy_and_check(cluster, request, tmp_path, {
        "rltrain:workloads.multiNode.form": "rayjob", "rltrain:workloads.multiNode.rayVersion": "2.60.0"})
    watcher, pulumi = r["watcher"], r["pulumi"]
    try:
        try:
            # A RayJob never finishes on fake pods (its status comes from the Ray dashboard): once
            # admitted it keeps the GPU nodes, and the single-node run cannot fit beside it.
            _wait("validation, NCCL test done and the RayJob admitted with its pods",
                  lambda: _job_complete(cluster, "rltrain-validation") and _mpijob_succeeded(cluster, "rltrain-nccl-test")
                  and "rltrain-multinode" in watcher.admitted_at and len(watcher.pods_of.get("rltrain-multinode", ())) >= 2,
                  RUNS_TIMEOUT,
                  lambda: f"workloads: {[(Watcher.owner(w), (w.get('status') or {}).get('conditions')) for w in watcher.last_workloads]}")
            time.sleep(15)
        finally:
            watcher.finish()
        assert not watcher.errors, watcher.errors
        assert not watcher.violations, watcher.violations
        admitted = sorted(watcher.admitted_at, key=watcher.admitted_at.get)
        _log(request, f"admission order: {admitted}; queued whole behind: {watcher.waited}")
        assert admitted[:2] == ["rltrain-validation", "rltrain-nccl-test"]
        training = cluster.get("batch/v1", "Job", "rltrain-training", NAMESPACE)
        if "rltrain-training" in watcher.admitted_at and watcher.admitted_at["rltrain-training"] < watcher.admitted_at["rltrain-multinode"]:
            # Kueue took the single-node run first (created together, equal priority): the RayJob
            # waited whole until it finished.
            assert _job_complete(cluster, "rltrain-training")
            assert "rltrain-training" in watcher.waited.get("rltrain-multinode", set())
        else:
            # The RayJob holds the nodes: the single-node run stays queued, suspended, without a pod.
            assert "rltrain-training" not in watcher.admitted_at
            assert not watcher.pods_of.get("rltrain-training")
            assert training["spec"]["suspend"] is True
            assert "rltrain-multinode" in watcher.waited.get("rltrain-training", set())
        assert watcher.max_gpus <= 16
        assert not _namespace_warnings(cluster), _namespace_warnings(cluster)
    finally:
        _destroy(cluster, pulumi, r["expected"], request)
