"""What the simulated-cluster deploy tests share: the deployment driver (python -m cluster.deploy in a
process of its own per operation), a watcher of Kueue's Workloads and the pods, and the checks."""

from __future__ import annotations

import contextlib
import importlib
import json
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import yaml

from conftest import POLL_SECONDS, log as _log

from cluster import deploy, sim
from cluster.binaries import toolset
from cluster import key_sweep
from components.offline import impact, render, unset_secrets

ROOT = render.ROOT
NAMESPACE = "rltrain"
STACK = "sim"
# Bounds: a whole `pulumi up` on a loaded 2-core machine, the runs to finish, a destroy.
UP_TIMEOUT = 900
RUNS_TIMEOUT = 300
DESTROY_TIMEOUT = 600
GPU = "nvidia.com/gpu"


def children_cpu() -> float:
    """CPU seconds of this process's children that have ended (getrusage RUSAGE_CHILDREN)."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def slowest(res: dict[str, Any]) -> str:
    """The operation's three slowest steps (cluster/deploy.py Recorder), for the log line."""
    steps = [f"{x['resource']} {x['seconds']}s" for x in (res.get("slowest") or [])[:3]]
    return f"; slowest steps: {', '.join(steps)}" if steps else ""


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
        wall, cpu = time.monotonic(), children_cpu()
        r = subprocess.run([sys.executable, "-m", "cluster.deploy", operation, "--stack", STACK,
                            "--workdir", str(self.workdir), "--kubeconfig", str(self.kubeconfig),
                            "--json", str(out), "--no-sync", *flags],
                           cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        wall, cpu = time.monotonic() - wall, children_cpu() - cpu
        res = json.loads(out.read_text()) if out.exists() else {"ok": False, "error": r.stderr[-6000:]}
        res["stdout"] = r.stdout
        # The engine's own time, then the whole process's (the program's import, the CLI, the
        # provider): wall and CPU of the process and everything it started (RUSAGE_CHILDREN).
        _log(self.request, f"{operation}{' ' + ' '.join(flags) if flags else ''}: {'ok' if res['ok'] else 'FAILED'} "
                           f"in {res.get('seconds')}s (process {wall:.1f}s wall, {cpu:.1f}s CPU) {res.get('summary')}"
                           + slowest(res))
        if check and not res["ok"]:
            raise AssertionError(f"{operation} failed:\n{r.stdout[-6000:]}\n{r.stderr[-4000:]}")
        return res


def project(tmp: Path, overrides: dict[str, Any], name: str = "deploy") -> Path:
    """A deployment work directory with a copy of the program (the repository is never written)."""
    workdir = tmp / name
    deploy.prepare(workdir, STACK, Path(toolset().require("pulumi-resource-kubernetes")).parent,
                   overrides=overrides)
    return workdir


@contextlib.contextmanager
def program_of(project: Path) -> Iterator[Any]:
    """The program copy's own `components` imported in this process for the block (its
    components.offline.render module is handed over); the repository's modules back after it.

    The offline side of a comparison must render what the copy holds (the day-two tests edit its
    modules and scripts). A fresh interpreter per render costs some 3 s of CPU importing the SDKs,
    which stay loaded here: only the program's own modules are imported again, from the copy (as
    cluster/deploy.py's inline program does), and no module imported meanwhile keeps a reference to
    them. Not cached (tests/render_cache.py keys the repository's program)."""
    saved = {n: m for n, m in sys.modules.items() if n == "components" or n.startswith("components.")}
    for name in saved:
        del sys.modules[name]
    sys.path.insert(0, str(project))
    try:
        render_mod = importlib.import_module("components.offline.render")
        assert Path(render_mod.__file__).is_relative_to(project), render_mod.__file__
        yield render_mod
    finally:
        sys.path.remove(str(project))
        for name in [n for n in sys.modules if n == "components" or n.startswith("components.")]:
            del sys.modules[name]
        sys.modules.update(saved)


RUNS = ("rltrain-validation", "rltrain-training", "rltrain-multinode")
# What an offline impact kind means for the engine's plan of that resource.
OFFLINE_OP = key_sweep.ENGINE_OP


def real_op(ops: list[str]) -> str:
    """One word per resource from the engine's step events (a replacement is reported as
    create-replacement / replace / delete-replaced; refresh and read steps are not changes)."""
    ops = [o for o in ops if o not in ("refresh", "read")]
    for word, found in (("replace", {"replace", "create-replacement", "delete-replaced"}), ("create", {"create"}),
                        ("delete", {"delete"}), ("update", {"update"})):
        if found & set(ops):
            return word
    return "same"


class Live:
    """The deployment under test: its program copy, the real CLI, the last offline record."""

    def __init__(self, cluster, workdir: Path, request):
        self.cluster = cluster
        self.workdir = workdir
        self.project = workdir / "project"
        self.request = request
        self.pulumi = Pulumi(workdir, cluster.kubeconfig, request)
        self.rows = self.offline()
        self.step = 0

    def offline(self) -> list[dict[str, Any]]:
        """The render of the program copy as it is now: its own program (an edited script or module
        included), imported in this process for the render (program_of), its stack file."""
        self.step = getattr(self, "step", 0) + 1
        t0, cpu = time.monotonic(), time.process_time()
        with program_of(self.project) as copy:
            rendered = copy.render_stack(STACK, self.project)
            rows = json.loads(copy.resources_json(rendered.result))
        _log(self.request, f"offline render {self.step}: {time.monotonic() - t0:.1f}s wall, "
                           f"{time.process_time() - cpu:.1f}s CPU (in this process)")
        return rows

    def uids(self) -> dict[str, str]:
        out = {}
        for name in RUNS:
            job = self.cluster.get("batch/v1", "Job", name, NAMESPACE)
            out[name] = job["metadata"]["uid"] if job else ""
        mpi = self.cluster.get("kubeflow.org/v2beta1", "MPIJob", "rltrain-nccl-test", NAMESPACE)
        out["rltrain-nccl-test"] = mpi["metadata"]["uid"] if mpi else ""
        return out

    def runs_done(self) -> None:
        wait("every run finished", lambda: all(job_complete(self.cluster, j) for j in RUNS)
             and mpijob_succeeded(self.cluster, "rltrain-nccl-test"), RUNS_TIMEOUT,
             lambda: str({j: (self.cluster.get("batch/v1", "Job", j, NAMESPACE) or {}).get("status") for j in RUNS}))

    def edit_stack(self, edit: Callable[[dict[str, Any]], None]) -> None:
        path = self.project / f"Pulumi.{STACK}.yaml"
        doc = yaml.safe_load(path.read_text())
        edit(doc["config"])
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def edit_program(self, rel: str, old: str, new: str) -> None:
        path = self.project / rel
        text = path.read_text()
        assert text.count(old) == 1, (rel, old)
        path.write_text(text.replace(old, new))

    def deployed(self, kind: str) -> str:
        """The metadata.name of the one object of `kind` in the last offline record."""
        [name] = [r["inputs"]["metadata"]["name"] for r in self.rows
                  if r["type"].startswith("kubernetes:") and r["inputs"].get("kind") == kind]
        return name

    def compare(self, what: str, preview: dict[str, Any]) -> dict[str, str]:
        """The offline impact of the change against the real preview, per Kubernetes resource.
        Returns the agreed operation per resource name ("refused" where the impact guard refuses
        what the engine would try); fails on any disagreement."""
        after = self.offline()
        cfg = unset_secrets.load_stack(STACK, self.project)[2]
        compared = ("kubernetes:", "pulumi:providers:")  # not the components, not the stack
        impacts = [i for i in impact.classify(self.rows, after, cfg) if i.type.startswith(compared)]
        self.kinds = {i.name: i.kind for i in reversed(impacts)}  # the worst kind per name (worst first)
        predicted = {i.name: OFFLINE_OP.get(i.kind, i.kind) for i in impacts}
        real = {urn.split("::")[-1]: real_op(e["ops"]) for urn, e in preview["ops"].items()
                if e["type"].startswith(compared)}
        names = sorted(set(real) | set(predicted))
        width = max(len(n) for n in names)
        lines = [f"{what}: {'resource':<{width}}  offline  real preview"]
        bad = []
        for n in names:
            off, got = predicted.get(n, "same"), real.get(n, "same")
            if off == got == "same":
                continue
            agree = off == got or (off == "refused" and got != "same")
            mark = "   (up must fail)" if off == "refused" and agree else "" if agree else "   <-- DISAGREE"
            lines.append(f"  {n:<{width}}  {off:<8} {got}{mark}")
            if not agree:
                bad.append(n)
        if len(lines) == 1:
            lines.append("  (no change, offline and in the real preview)")
        _log(self.request, "\n".join(lines))
        assert not bad, "\n".join(lines)
        self.rows = after
        return {n: "refused" if predicted.get(n) == "refused" else real.get(n, "same") for n in names}



class Watcher(threading.Thread):
    """Polls the namespace's Kueue Workloads and pods every POLL_SECONDS while the stack runs."""

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
        running = {Watcher.owner(w) for w in wls if owners[Watcher.owner(w)] and not finished(w)}
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
            self.stop_event.wait(POLL_SECONDS)

    def describe(self) -> str:
        return f"workloads: {[(Watcher.owner(w), (w.get('status') or {}).get('conditions')) for w in self.last_workloads]}"

    def checked_order(self, request) -> list[str]:
        """The runs in the order Kueue admitted them, after checking the watcher saw no error and
        no pod scheduled before its workload was admitted."""
        assert not self.errors, self.errors
        assert not self.violations, self.violations
        admitted = sorted(self.admitted_at, key=self.admitted_at.get)
        _log(request, f"admission order: {admitted}; queued whole behind: {self.waited}")
        return admitted

    def finish(self) -> None:
        self.stop_event.set()
        self.join(10)


def finished(workload: dict) -> bool:
    return any(c["type"] == "Finished" and c["status"] == "True"
               for c in (workload.get("status") or {}).get("conditions", []))


def rendered_objects(project: Path) -> list[tuple[str, str, Optional[str], str]]:
    r = render.render_stack(STACK, project)
    return sorted({(m["apiVersion"], m["kind"], m["metadata"].get("namespace"), m["metadata"]["name"])
                   for m in r.manifests})


# The one warning expected: the provider the Go module proxy serves is 4.25.0, the SDK pin 4.34.2
# (cluster/versions.env); the engine says so on every run.
PROVIDER_VERSION_WARNING = "resource plugin kubernetes is expected to have version >="


def engine_warnings(res: dict[str, Any]) -> list[str]:
    """The engine's warnings and errors (diagnostic events: the provider's, the API server's
    warnings it passes on, the program's), but the provider-version one and the ephemeral status
    lines: pulumi-kubernetes's Deployment await logs each not-yet-true condition it waits on as a
    warning status (provider/v4 pkg/await/deployment.go, LogStatus(diag.Warning, "[MinimumReplicasUnavailable]
    ...")), shown in the progress display only; a rollout that does not finish fails `up` itself."""
    return [f"{d['severity']}: {d['urn']}: {d['message']}" for d in res.get("diagnostics", [])
            if not d["message"].startswith(PROVIDER_VERSION_WARNING) and not d.get("ephemeral")]


def wait(what: str, check, timeout: float, describe=lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(POLL_SECONDS)
    raise AssertionError(f"{what}: not within {timeout:.0f}s. {describe()}")


def job_complete(cluster: sim.Cluster, name: str, namespace: str = NAMESPACE) -> bool:
    job = cluster.get("batch/v1", "Job", name, namespace)
    return bool(job) and any(c["type"] == "Complete" and c["status"] == "True"
                             for c in (job.get("status") or {}).get("conditions", []))


def mpijob_succeeded(cluster: sim.Cluster, name: str, namespace: str = NAMESPACE) -> bool:
    job = cluster.get("kubeflow.org/v2beta1", "MPIJob", name, namespace)
    return bool(job) and any(c["type"] == "Succeeded" and c["status"] == "True"
                             for c in (job.get("status") or {}).get("conditions", []))


# Warnings that are not about what the stack deployed:
# - Kueue's "Pending" on a Workload: a run waiting for quota is the queue working (kueue v0.19.2
#   pkg/scheduler records it as a Warning);
# - the API server's ClusterIP repair loop on a Service: it lists Services and IPAddresses apart, so
#   a Service created between the two reads is reported "not allocated; repairing" and its
#   IPAddress written again (kubernetes pkg/registry/core/service/ipallocator/controller/repairip.go;
#   the race: kubernetes/kubernetes#37488). Seen in a cold .ci/run, 2026-12-05, on rltrain-serving.
IGNORED_WARNINGS = {("Workload", "Pending"), ("Service", "ClusterIPNotAllocated")}


def namespace_warnings(cluster: sim.Cluster) -> list[str]:
    """Warning events of the namespace, but IGNORED_WARNINGS."""
    events = cluster.api(f"/api/v1/namespaces/{NAMESPACE}/events")["items"]
    return [f"{e['involvedObject']['kind']}/{e['involvedObject']['name']}: {e['reason']}: {e.get('message', '')}"
            for e in events if e.get("type") == "Warning"
            and (e["involvedObject"]["kind"], e["reason"]) not in IGNORED_WARNINGS]


def deploy_and_check(cluster: sim.Cluster, request, tmp: Path, overrides: dict[str, Any]) -> dict[str, Any]:
    """Preview and up, check the objects; returns the watcher and the deployment. On a failure the
    stack is destroyed before the error is raised."""
    workdir = project(tmp, overrides)
    expected = rendered_objects(workdir / "project")
    cluster.reset_storage()
    pulumi = Pulumi(workdir, cluster.kubeconfig, request)
    preview = pulumi("preview")
    _log(request, f"Pulumi CLI {preview['versions']['pulumi']}, Kubernetes provider {preview['versions']['provider']}, "
                  f"Kubernetes /version {cluster.api('/version')['gitVersion']}")
    assert not engine_warnings(preview), engine_warnings(preview)
    watcher = Watcher(cluster)
    watcher.start()
    result: dict[str, Any] = {"watcher": watcher, "pulumi": pulumi, "expected": expected}
    try:
        up = pulumi("up")
        assert not engine_warnings(up), engine_warnings(up)
        missing = [o for o in expected if cluster.get(o[0], o[1], o[3], o[2]) is None]
        assert not missing, f"rendered but not in the API server: {missing}"
        result["up"] = up
    except BaseException:
        watcher.finish()
        destroy(cluster, pulumi, expected, request)
        raise
    return result


def destroy(cluster: sim.Cluster, pulumi: Pulumi, expected, request) -> None:
    out = pulumi("destroy", timeout=DESTROY_TIMEOUT)
    assert not engine_warnings(out), engine_warnings(out)

    def gone() -> list:
        return [o for o in expected if cluster.get(o[0], o[1], o[3], o[2]) is not None]
    wait("every object of the stack deleted (no stuck finalizer)", lambda: not gone(), 60,
          lambda: "left: " + ", ".join(f"{o[1]}/{o[3]} finalizers {(cluster.get(o[0], o[1], o[3], o[2]) or {}).get('metadata', {}).get('finalizers')}"
                                       for o in gone()))
    assert cluster.get("v1", "Namespace", NAMESPACE) is None


