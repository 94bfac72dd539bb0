"""A real Kubernetes control plane with fake GPU nodes and the real operators, on 127.0.0.1.

    python -m cluster.sim start --stack p5     # nodes shaped as Pulumi.p5.yaml's GPU node group
    python -m cluster.sim env --stack p5       # how to point kubectl and the `sim` stack at it
    python -m cluster.sim stop --stack p5

What runs (each a process of this machine, each on 127.0.0.1 with a free port, logs and data under
the state directory `$RLTRAIN_SIM_STATE` or /tmp/rltrain-sim-<stack>):
etcd (--unsafe-no-fsync), kube-apiserver (a PKI made at start, the default admission plugins of
the release - PodSecurity, ResourceQuota, Priority, webhooks... - plus NodeRestriction as EKS has),
kube-controller-manager, kube-scheduler, kwok (fake nodes and pod lifecycle: its own stages read
from its module tree, Job pods completing after `--complete-after` seconds), Kueue (its webhooks on
127.0.0.1 with the local CA, configured with the program's own Configuration), the KubeRay operator
and the MPI operator. Then the nodes and the storage of cluster/nodes.py, and, for as long as the
cluster runs, its storage class's provisioner (a thread of the process that started it: a volume
for every new claim of the class, a Released volume it made deleted when the class says Delete).

Every wait is bounded and, when it times out, names what did not come up with the tail of its log.
`stop` ends every process the state directory records; `start` stops a previous run first.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import yaml

from cluster import karpenter as karpenter_mod
from cluster import netns
from cluster import nodes as nodes_mod
from cluster.binaries import Toolset, toolset
from cluster.pki import API_SANS, SERVICE_CIDR, Pki, kubeconfig
from cluster.stacks import region, stack_config
from components.k8s import karpenter_nodes
from components.k8s import kueue as kueue_mod
from components.stack.config import StackConfig

DEFAULT_DEPLOY_STACK = "sim"
KUEUE_NAMESPACE = "kueue-system"
MPI_LOCK_NAMESPACE = "mpi-operator"
# Kueue reads its metrics serving certificate from this fixed path when its internal certificate
# management is off (kueue v0.19.2 cmd/kueue/main.go, metricsCertPath).
KUEUE_METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# kwok's stages (kwok v0.8.0 kustomize/stage/...): nodes become Ready and keep a lease; pods become
# Running, Job pods Succeeded, deleted pods disappear.
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")
# The node conditions kwok's node stages write (kwok v0.8.0 pkg/utils/gotpl/funcs.go nodeConditionsData, used by
# node-initialize and node-heartbeat-with-lease): any other is
# a fault a test set (tests/sim/faults.py).
KWOK_NODE_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable")
# kube-apiserver's default admission plugins (the release's defaults stay on) plus NodeRestriction,
# which EKS enables too (EKS user guide, "Cluster platform versions": enabled admission controllers).
EXTRA_ADMISSION = "NodeRestriction"
# How often the simulated storage class's provisioner reconciles (cluster/nodes.py provision). The
# real external-provisioner reacts to watch events; a second here is far below anything a test
# waits for, at three list calls a second.
PROVISION_SECONDS = 1.0


def load_yaml(text: str) -> Any:
    """The CRDs are megabytes of YAML: libyaml's loader where PyYAML has it (about 4x faster)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_yaml_all(text: str) -> list[Any]:
    return list(yaml.load_all(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))


class SimError(RuntimeError):
    pass


class ApiError(RuntimeError):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def state_dir(stack: str) -> Path:
    return Path(os.environ.get("RLTRAIN_SIM_STATE") or f"/tmp/rltrain-sim-{stack}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


@dataclass
class Process:
    name: str
    pid: int
    log: Path


# What to wait for after spawning a piece: (what, its process, the check that says it is up).
Wait = tuple[str, Optional[Process], Callable[[], bool]]


class Cluster:
    """One simulated cluster under `root`: its processes, PKI, kubeconfig and manifests."""

    def __init__(self, root: Path, tools: Optional[Toolset] = None):
        self.root = root
        self.tools = tools or toolset()
        self.logs = root / "logs"
        self.pki = Pki(root / "pki")
        self.kubeconfig = root / "kubeconfig"
        self.info_file = root / "cluster.json"
        self.info: dict[str, Any] = json.loads(self.info_file.read_text()) if self.info_file.exists() else {}
        self._spawned: dict[str, float] = {}
        self._discovery: dict[str, dict[str, dict]] = {}
        self._provisioner: Optional[threading.Thread] = None
        self._provisioner_stop = threading.Event()

    # --- processes -------------------------------------------------------------------------------

    def _save(self) -> None:
        self.info_file.write_text(json.dumps(self.info, indent=1))

    def spawn(self, name: str, argv: list[str], env: Optional[dict[str, str]] = None) -> Process:
        self.logs.mkdir(parents=True, exist_ok=True)
        log = self.logs / f"{name}.log"
        with open(log, "ab") as out:
            p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=self.root, env={**os.environ, **(env or {})}, start_new_session=True)
        self.info.setdefault("processes", []).append({"name": name, "pid": p.pid, "log": str(log)})
        self._spawned[name] = time.monotonic()
        self._save()
        return Process(name, p.pid, log)

    def processes(self) -> list[Process]:
        return [Process(p["name"], p["pid"], Path(p["log"])) for p in self.info.get("processes", [])]

    @staticmethod
    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        try:  # a zombie child of this process counts as gone
            return os.waitpid(pid, os.WNOHANG) == (0, 0)
        except ChildProcessError:
            return True

    def wait_for(self, what: str, proc: Optional[Process], check: Callable[[], bool], timeout: float,
                 interval: float = 0.5) -> None:
        deadline = time.monotonic() + timeout
        last_error = ""
        while time.monotonic() < deadline:
            if proc and not self.alive(proc.pid):
                raise SimError(f"{what}: {proc.name} exited; last lines of {proc.log}:\n{log_tail(proc.log)}")
            try:
                if check():
                    return
            except Exception as e:  # noqa: BLE001 - reported if the wait times out
                last_error = f"{type(e).__name__}: {e}"
            time.sleep(interval)
        tail = f"; last lines of {proc.log}:\n{log_tail(proc.log)}" if proc else ""
        raise SimError(f"{what}: not within {timeout:.0f}s ({last_error or 'not ready'}){tail}")

    def stop(self, grace: float = 10.0) -> list[str]:
        self.stop_provisioner()
        stopped = []
        for p in reversed(self.processes()):
            if not self.alive(p.pid):
                continue
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except OSError:
                continue
            stopped.append(p.name)
        deadline = time.monotonic() + grace
        for p in reversed(self.processes()):
            while self.alive(p.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            if self.alive(p.pid):
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
        self.info["processes"] = []
        self._save()
        return stopped

    # --- the API ---------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return self.info["server"]

    def _ssl(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki.ca.cert))
        ctx.load_cert_chain(str(self.root / "pki" / "admin.crt"), str(self.root / "pki" / "admin.key"))
        return ctx

    def api(self, path: str, method: str = "GET", body: Any = None, timeout: float = 10,
            content_type: str = "application/json") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type, "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self._ssl(), timeout=timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")
            try:
                detail = json.loads(detail).get("message", detail)
            except ValueError:
                pass
            raise ApiError(e.code, f"{method} {path}: {e.code} {detail}") from None
        try:
            return json.loads(raw)
        except ValueError:
            return raw.decode(errors="replace")

    def resource_path(self, api_version: str, kind: str, name: Optional[str] = None,
                      namespace: Optional[str] = None) -> str:
        """The REST path of a kind (from discovery), namespaced where the kind is."""
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if kind not in self._discovery.get(api_version, {}):  # new CRDs: ask again
            self._discovery[api_version] = {r["kind"]: r for r in self.api(base)["resources"] if "/" not in r["name"]}
        r = self._discovery[api_version][kind]
        path = base + (f"/namespaces/{namespace}" if r["namespaced"] and namespace else "") + f"/{r['name']}"
        return path + (f"/{name}" if name else "")

    def get(self, api_version: str, kind: str, name: str, namespace: Optional[str] = None) -> Optional[dict]:
        try:
            return self.api(self.resource_path(api_version, kind, name, namespace))
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    def create(self, docs: list[dict[str, Any]]) -> None:
        """Create, or apply what exists. A plain create of a megabyte CRD takes about a seventh of
        the time of a server-side apply (no managed-fields computation) on this machine."""
        for d in docs:
            meta = d["metadata"]
            try:
                self.api(self.resource_path(d["apiVersion"], d["kind"], None, meta.get("namespace")), "POST", d,
                         timeout=60)
            except ApiError as e:
                if e.code != 409:
                    raise
                self.apply([d])

    def apply(self, docs: list[dict[str, Any]]) -> None:
        """Server-side apply, as `kubectl apply --server-side --force-conflicts` does."""
        for d in docs:
            meta = d["metadata"]
            path = self.resource_path(d["apiVersion"], d["kind"], meta["name"], meta.get("namespace"))
            self.api(f"{path}?fieldManager=rltrain-sim&force=true", "PATCH", d, timeout=60,
                     content_type="application/apply-patch+yaml")

    # --- start -----------------------------------------------------------------------------------

    def start(self, hw: StackConfig, hw_values: dict[str, str], deploy: StackConfig, *, hw_stack: str,
              complete_after: float, timeout: float,
              kueue_timing: Optional[tuple[int, int]] = None, extra_stages: Sequence[dict[str, Any]] = (),
              elastic: Optional[StackConfig] = None, boot_seconds: int = 20,
              idle_seconds: Optional[int] = None) -> None:
        """etcd, then the API server; then every other piece started at once and waited for together
        (each needs only the API server: the operators their CRDs, created first; Kueue the operators'
        CRDs, so that its MPIJob and RayJob webhooks answer from its first second). `info["steps"]`:
        seconds from the start at which each piece was up."""
        t0 = time.monotonic()
        missing = self.tools.missing(("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler",
                                      "kwok", "kueue", "ray-operator", "mpi-operator")
                                     + (("karpenter",) if elastic is not None else ()))
        if missing:
            raise SimError(f"missing binaries: {', '.join(missing)} (looked in "
                           f"{self.tools.bin_dir or 'the build cache'}): build them with cluster/build.sh")
        self.info.update({"stack": hw_stack, "started": time.time(), "steps": {}})
        self.deploy = deploy

        def up(step: str) -> None:
            self.info["steps"][step] = round(time.monotonic() - t0, 1)

        self._pki()
        up("pki")
        self.wait_for("etcd", *self._etcd(), timeout)
        up("etcd")
        self.wait_for("kube-apiserver /readyz", *self._apiserver(), timeout)
        up("kube-apiserver")
        waits = [self._controller_manager(), self._scheduler(), self._kwok(complete_after, extra_stages)]
        # The operators' CRDs before their controllers and before Kueue: Kueue defers an integration
        # whose CRD is not served yet until it appears (kueue v0.19.2 pkg/controller/jobframework/setup.go).
        crds = (self._operator_crds() + (self._karpenter_crds() if elastic is not None else [])
                + self._kueue_crds())
        node_names = self._nodes(hw, hw_values, hw_stack, gpu=elastic is None)
        self.apply(nodes_mod.storage(deploy))
        self.start_provisioner()
        self.wait_for("the operators' and Kueue's CRDs established", None,
                      lambda: all(self.established(n) for n in crds), timeout)
        up("crds")
        waits += [self._kuberay(), self._mpi_operator(timeout)]
        if elastic is not None:
            waits.append(self._karpenter(elastic))
        self._kueue(deploy, timeout, kueue_timing)
        up("kueue")
        for what, proc, check in waits:
            self.wait_for(what, proc, check, timeout)
            up(what.split(" ")[0])
        self.wait_for(f"nodes {', '.join(node_names)} Ready (kwok)", None, lambda: self._ready(node_names), timeout)
        self.info["nodes"] = node_names
        up("nodes")
        if elastic is not None:
            self.apply(karpenter_mod.objects(elastic, boot_seconds, idle_seconds))
            self.info["karpenter"] = {"version": karpenter_mod.version(), "nodePool": karpenter_nodes.NODE_POOL,
                                      "bootSeconds": boot_seconds, "idleSeconds": idle_seconds}
        self.info["startSeconds"] = round(time.monotonic() - t0, 1)
        self._save()

    def _pki(self) -> None:
        self.pki.make_ca()
        self.pki.issue("apiserver", "/CN=kube-apiserver", server_sans=API_SANS)
        admin = self.pki.issue("admin", "/O=system:masters/CN=rltrain-sim-admin", client=True)
        self.pki.issue("apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet-client", client=True)
        self.pki.service_account_keys()
        port = free_port()
        self.info["apiPort"] = port
        self.info["server"] = f"https://127.0.0.1:{port}"
        self.kubeconfig.write_text(kubeconfig(self.info["server"], self.pki.ca, admin, "rltrain-sim-admin"))
        self.kubeconfig.chmod(0o600)
        # One kubeconfig per component, each its own identity (RBAC as in a real cluster).
        for comp, subject in (("controller-manager", "/CN=system:kube-controller-manager"),
                              ("scheduler", "/CN=system:kube-scheduler")):
            pair = self.pki.issue(comp, subject, client=True)
            (self.root / f"{comp}.kubeconfig").write_text(kubeconfig(self.server, self.pki.ca, pair, comp))
        self._save()

    # Each piece below is spawned and returns (what, process, check) or (process, check): the
    # caller waits for it.

    def _etcd(self) -> tuple[Optional[Process], Callable[[], bool]]:
        client, peer = free_port(), free_port()
        self.info["etcd"] = f"http://127.0.0.1:{client}"
        proc = self.spawn("etcd", [
            self.tools.require("etcd"), "--name", "sim", "--data-dir", str(self.root / "etcd"),
            "--listen-client-urls", self.info["etcd"], "--advertise-client-urls", self.info["etcd"],
            "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
            f"http://127.0.0.1:{peer}", "--initial-cluster", f"sim=http://127.0.0.1:{peer}",
            "--listen-metrics-urls", f"http://127.0.0.1:{free_port()}",
            "--unsafe-no-fsync", "--log-level", "warn", "--quota-backend-bytes", str(2 << 30)])

        def healthy() -> bool:
            with urllib.request.urlopen(self.info["etcd"] + "/health", timeout=2) as r:
                return json.loads(r.read()).get("health") == "true"
        return proc, healthy

    def _apiserver(self) -> tuple[Optional[Process], Callable[[], bool]]:
        p = self.root / "pki"
        proc = self.spawn("kube-apiserver", [
            self.tools.require("kube-apiserver"),
            "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={self.info['apiPort']}",
            f"--etcd-servers={self.info['etcd']}", f"--cert-dir={p}",
            f"--tls-cert-file={p / 'apiserver.crt'}", f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
            f"--service-account-key-file={p / 'sa.pub'}", f"--service-account-signing-key-file={p / 'sa.key'}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC", f"--enable-admission-plugins={EXTRA_ADMISSION}",
            "--allow-privileged=true", "--profiling=false", "--endpoint-reconciler-type=none",
            "--storage-media-type=application/vnd.kubernetes.protobuf",
        ])
        return proc, lambda: self.api("/readyz") == "ok"

    def _controller_manager(self) -> Wait:
        p = self.root / "pki"
        kc = str(self.root / "controller-manager.kubeconfig")
        port = free_port()
        proc = self.spawn("kube-controller-manager", [
            self.tools.require("kube-controller-manager"), f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}", f"--authorization-kubeconfig={kc}",
            "--bind-address=127.0.0.1", f"--secure-port={port}", "--leader-elect=false",
            "--use-service-account-credentials=true", f"--service-account-private-key-file={p / 'sa.key'}",
            f"--root-ca-file={p / 'ca.crt'}", f"--cluster-signing-cert-file={p / 'ca.crt'}",
            f"--cluster-signing-key-file={p / 'ca.key'}", "--controllers=*,bootstrapsigner,tokencleaner",
            "--profiling=false",
        ])
        # Healthy, and its controllers run: the service account controller makes `default` in every
        # namespace.
        return (f"kube-controller-manager /healthz (127.0.0.1:{port}) and ServiceAccount default/default", proc,
                lambda: self._healthz(port) and bool(self.api("/api/v1/namespaces/default/serviceaccounts/default")))

    def _scheduler(self) -> Wait:
        kc = str(self.root / "scheduler.kubeconfig")
        port = free_port()
        proc = self.spawn("kube-scheduler", [
            self.tools.require("kube-scheduler"), f"--kubeconfig={kc}", f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}", "--bind-address=127.0.0.1", f"--secure-port={port}",
            "--leader-elect=false", "--profiling=false"])
        return f"kube-scheduler /healthz (127.0.0.1:{port})", proc, lambda: self._healthz(port)

    def _process_up_for(self, proc: Process, seconds: float) -> bool:
        return time.monotonic() - self._spawned.get(proc.name, time.monotonic()) >= seconds

    @staticmethod
    def _healthz(port: int) -> bool:
        # /healthz is readable without credentials (--authorization-always-allow-paths default).
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", context=ctx, timeout=2) as r:
            return r.read() == b"ok"

    def _kwok(self, complete_after: float, extra_stages: Sequence[dict[str, Any]] = ()) -> Wait:
        stages_root = self.tools.module("kwok") / "kustomize" / "stage"
        docs: list[dict[str, Any]] = [{
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1", "kind": "KwokConfiguration",
            # As kwok's own deployment configures it (kustomize/kwok/kwok.yaml): a config file does not
            # get the parallelism defaults (0 fails: "node leases parallelism must be greater than 0").
            "options": {"manageNodesWithAnnotationSelector": "kwok.x-k8s.io/node=fake",
                        "nodeLeaseDurationSeconds": 40, "nodeLeaseParallelism": 4, "podPlayStageParallelism": 4,
                        "nodePlayStageParallelism": 4, "enablePodsOnNodeSyncStreamWatch": True,
                        "cidr": "10.244.0.0/16", "nodeIP": "127.0.0.1"}}]
        for rel in KWOK_STAGES:
            stage = load_yaml((stages_root / rel).read_text())
            if stage["metadata"]["name"] == "pod-complete" and complete_after > 0:
                # A Job pod runs this long before it succeeds: long enough to watch the queue work.
                stage["spec"]["delay"] = {"durationMilliseconds": int(complete_after * 1000)}
            docs.append(stage)
        docs.extend(extra_stages)
        cfg = self.root / "kwok.yaml"
        cfg.write_text(yaml.safe_dump_all(docs, sort_keys=False))
        self.info["completeAfter"] = complete_after
        proc = self.spawn("kwok", [self.tools.require("kwok"), f"--kubeconfig={self.kubeconfig}",
                                   f"--config={cfg}"])
        return "kwok", proc, lambda: "Watch nodes" in log_tail(proc.log, 200) or self._process_up_for(proc, 3.0)

    def _nodes(self, hw: StackConfig, hw_values: dict[str, str], hw_stack: str, gpu: bool = True) -> list[str]:
        """The nodes created (kwok makes them Ready once it runs: _ready)."""
        objs = nodes_mod.nodes(hw, stack=hw_stack, region=region(hw_values), gpu=gpu)
        for node in objs:
            self.api("/api/v1/nodes", "POST", node)
        self.node_objects = objs
        return [n["metadata"]["name"] for n in objs]

    def _ready(self, names: Sequence[str]) -> bool:
        items = self.api("/api/v1/nodes")["items"]
        ok = {n["metadata"]["name"] for n in items
              if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))}
        return set(names) <= ok

    def reset_storage(self, timeout: float = 30) -> None:
        """A fresh volume for the claim: after a destroy the Retain volume is Released, bound to the
        deleted claim's uid, and no new claim binds it (as with a real retained FSx volume)."""
        docs = nodes_mod.storage(self.deploy)
        for d in docs:
            if d["kind"] == "PersistentVolume" and self.get("v1", "PersistentVolume", d["metadata"]["name"]):
                self.api(self.resource_path("v1", "PersistentVolume", d["metadata"]["name"]), "DELETE")
                self.wait_for(f"PersistentVolume {d['metadata']['name']} deleted", None,
                              lambda: self.get("v1", "PersistentVolume", d["metadata"]["name"]) is None, timeout)
        self.apply(docs)

    # --- the storage class's provisioner --------------------------------------------------------

    def provision_once(self) -> tuple[list[str], list[str]]:
        """One pass of cluster/nodes.py provision over the cluster's claims, volumes and classes:
        the volumes it creates and deletes (their names)."""
        claims = self.api("/api/v1/persistentvolumeclaims")["items"]
        volumes = self.api("/api/v1/persistentvolumes")["items"]
        classes = self.api("/apis/storage.k8s.io/v1/storageclasses")["items"]
        create, delete = nodes_mod.provision(claims, volumes, classes)
        for v in create:
            self.api("/api/v1/persistentvolumes", "POST", v)
        for name in delete:
            self.api(f"/api/v1/persistentvolumes/{name}", "DELETE")
        return [v["metadata"]["name"] for v in create], delete

    def start_provisioner(self) -> None:
        """provision_once every PROVISION_SECONDS in a thread until stop_provisioner (or stop).
        Only the process that started the cluster runs it (`python -m cluster.sim start` keeps none
        running: a volume for a claim there is the static one of nodes.storage)."""
        if self._provisioner is not None:
            return
        self._provisioner_stop.clear()
        log = self.logs / "provisioner.log"

        def loop() -> None:
            while not self._provisioner_stop.wait(PROVISION_SECONDS):
                try:
                    made, deleted = self.provision_once()
                except Exception as e:  # noqa: BLE001 - the API server restarting or stopping: next pass
                    made, deleted = [], [f"(pass failed: {type(e).__name__}: {e})"]
                if made or deleted:
                    with open(log, "a") as f:
                        f.write(f"{time.strftime('%H:%M:%S')} created {made} deleted {deleted}\n")

        self._provisioner = threading.Thread(target=loop, name="sim-provisioner", daemon=True)
        self._provisioner.start()

    def stop_provisioner(self) -> None:
        if self._provisioner is not None:
            self._provisioner_stop.set()
            self._provisioner.join(timeout=30)
            self._provisioner = None

    # Namespaces a fresh cluster has (the API server's own, the operators').
    BASELINE_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease", KUEUE_NAMESPACE,
                           MPI_LOCK_NAMESPACE, karpenter_mod.NAMESPACE)

    def leftovers(self) -> list[str]:
        """What a deployment left on the cluster that a fresh one does not have: namespaces,
        Kueue's cluster-wide queue objects, PriorityClasses (a `destroy` removes all of them)."""
        found = [f"Namespace/{n['metadata']['name']}" for n in self.api("/api/v1/namespaces")["items"]
                 if n["metadata"]["name"] not in self.BASELINE_NAMESPACES]
        for plural in ("clusterqueues", "resourceflavors", "topologies"):
            found += [f"{plural}/{i['metadata']['name']}"
                      for i in self.api(f"/apis/kueue.x-k8s.io/v1beta2/{plural}")["items"]]
        found += [f"PriorityClass/{p['metadata']['name']}"
                  for p in self.api("/apis/scheduling.k8s.io/v1/priorityclasses")["items"]
                  if not p["metadata"]["name"].startswith("system-")]
        return found

    def reset_baseline(self, timeout: float = 60) -> list[str]:
        """Make a cluster another module used what start() left: the nodes it made (a node added
        since is deleted; one deleted, tainted or marked failed since is made again) and fresh
        storage (the class as made, a new volume). Returns what it cannot reset (leftovers()):
        then nothing is changed, and the caller starts a fresh cluster instead."""
        problems = self.leftovers()
        if problems:
            return problems
        original = {n["metadata"]["name"]: n for n in self.node_objects}
        for node in self.api("/api/v1/nodes")["items"]:
            name = node["metadata"]["name"]
            made = original.get(name)
            changed = made is not None and (
                (node["spec"].get("taints") or []) != (made["spec"].get("taints") or [])
                or any(c["type"] not in KWOK_NODE_CONDITIONS for c in node["status"].get("conditions", [])))
            if made is None or changed:
                self.api(f"/api/v1/nodes/{name}", "DELETE")
        self.wait_for("the nodes deleted by the reset gone", None,
                      lambda: not [n for n in self.api("/api/v1/nodes")["items"]
                                   if n["metadata"]["name"] not in original
                                   or n["metadata"].get("deletionTimestamp")], timeout)
        present = {n["metadata"]["name"] for n in self.api("/api/v1/nodes")["items"]}
        for name, node in original.items():
            if name not in present:
                self.api("/api/v1/nodes", "POST", node)
        self.wait_for("the cluster's nodes Ready again", None, lambda: self._ready(list(original)), timeout)
        for d in nodes_mod.storage(self.deploy):
            path = self.resource_path(d["apiVersion"], d["kind"], d["metadata"]["name"])
            if self.get(d["apiVersion"], d["kind"], d["metadata"]["name"]):
                self.api(path, "DELETE")
                self.wait_for(f"{d['kind']} {d['metadata']['name']} deleted", None,
                              lambda: self.get(d["apiVersion"], d["kind"], d["metadata"]["name"]) is None, timeout)
        self.apply(nodes_mod.storage(self.deploy))
        return []

    def _kueue_crds(self) -> list[str]:
        """Kueue's CRDs (their conversion webhooks at the port Kueue will serve on: _kueue)."""
        src = self.tools.module("kueue")
        crds = [load_yaml(f.read_text()) for f in sorted((src / "config/components/crd/bases").glob("*.yaml"))]
        self.kueue_port = port = free_port()
        url = f"https://127.0.0.1:{port}"
        ca_bundle = self.pki.ca.cert_b64()
        # The conversion webhooks the release enables (config/components/crd/kustomization.yaml patches).
        kustom = load_yaml((src / "config/components/crd/kustomization.yaml").read_text())
        converted = set()
        for patch in kustom.get("patches", []):
            doc = load_yaml((src / "config/components/crd" / patch["path"]).read_text())
            if doc.get("spec", {}).get("conversion", {}).get("strategy") == "Webhook":
                converted.add(doc["metadata"]["name"])
        for crd in crds:
            if crd["metadata"]["name"] in converted:
                crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                    "clientConfig": {"url": f"{url}/convert", "caBundle": ca_bundle},
                    "conversionReviewVersions": ["v1"]}}
        self.create(crds)
        return [c["metadata"]["name"] for c in crds]

    def _kueue(self, deploy: StackConfig, timeout: float, timing: Optional[tuple[int, int]] = None) -> None:
        """Kueue, once its CRDs (_kueue_crds) and the operators' are established: configured with the
        program's own Configuration, its webhooks served on 127.0.0.1 with a certificate of the local CA."""
        src = self.tools.module("kueue")
        port = self.kueue_port
        url = f"https://127.0.0.1:{port}"
        ca_bundle = self.pki.ca.cert_b64()
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUEUE_NAMESPACE}}])
        certs = self.root / "kueue-certs"
        self.pki.issue("kueue-webhook", "/CN=kueue-webhook-service.kueue-system.svc", server_sans=("IP:127.0.0.1",),
                       directory=certs, cert_name="tls.crt", key_name="tls.key")
        self._kueue_metrics_cert()
        config = kueue_timed(kueue_mod.manager_config(kueue_mod.kueue_args(deploy)), timing)
        config.update({
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
            "metrics": {"bindAddress": f"127.0.0.1:{free_port()}"},
            "webhook": {"host": "127.0.0.1", "port": port, "certDir": str(certs)},
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
        })
        cfg_file = self.root / "kueue-config.yaml"
        cfg_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self.info["kueueConfig"] = str(cfg_file)
        proc = self.spawn("kueue", [self.tools.require("kueue"), f"--config={cfg_file}",
                                    "--feature-gates=VisibilityOnDemand=false", "--zap-log-level=info"],
                          env={"KUBECONFIG": str(self.kubeconfig)})

        def serving() -> bool:
            ctx = ssl.create_default_context(cafile=str(self.pki.ca.cert))
            with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
                with ctx.wrap_socket(s, server_hostname="127.0.0.1"):
                    return True
        self.wait_for(f"kueue webhook server 127.0.0.1:{port}", proc, serving, timeout)
        hooks = (load_yaml_all((src / "config/components/webhook/manifests.yaml").read_text()))
        for doc in hooks:
            if not doc:
                continue
            doc["metadata"]["name"] = "kueue-" + doc["metadata"]["name"]
            for hook in doc.get("webhooks", []):
                path = hook["clientConfig"]["service"].get("path", "")
                hook["clientConfig"] = {"url": url + path, "caBundle": ca_bundle}
        self.apply([d for d in hooks if d])
        # Ready when the webhook answers through the API server: a dry-run ResourceFlavor is defaulted
        # by mresourceflavor.kb.io (a refused or unreachable webhook fails this call).
        probe = {"apiVersion": kueue_mod.API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": "sim-probe"}}
        self.wait_for("kueue webhooks through the API server", proc,
                      lambda: bool(self.api("/apis/kueue.x-k8s.io/v1beta2/resourceflavors?dryRun=All", "POST", probe)),
                      timeout)

    def _kueue_metrics_cert(self) -> None:
        """Kueue's metrics serving certificate at its fixed path: one pair for every simulated cluster
        of the machine (any self-signed pair serves), written once, under a lock, whole: a cluster
        starting meanwhile never reads a certificate without its key."""
        crt, key = KUEUE_METRICS_CERT_DIR / "tls.crt", KUEUE_METRICS_CERT_DIR / "tls.key"
        try:
            KUEUE_METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
            with open(KUEUE_METRICS_CERT_DIR / ".rltrain-sim.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if crt.exists() and key.exists():
                    return
                tmp = Path(tempfile.mkdtemp(dir=KUEUE_METRICS_CERT_DIR, prefix=".new-"))
                self.pki.issue("kueue-metrics", "/CN=kueue-metrics", server_sans=("IP:127.0.0.1",),
                               directory=tmp, cert_name="tls.crt", key_name="tls.key")
                os.replace(tmp / "tls.key", key)
                os.replace(tmp / "tls.crt", crt)
                shutil.rmtree(tmp, ignore_errors=True)
        except (OSError, RuntimeError) as e:
            raise SimError(f"Kueue reads its metrics certificate from {KUEUE_METRICS_CERT_DIR} (fixed path when "
                           f"its internal certificates are off) and it cannot be written: {e}; create "
                           f"tls.crt and tls.key there once (any self-signed pair)") from None

    def crds(self, directory: Path, pattern: str = "*.yaml", skip: Sequence[str] = ()) -> list[str]:
        """Create the CRDs of a module tree's directory (but the files `skip` names); their names
        (established(): when served)."""
        docs = [load_yaml(f.read_text()) for f in sorted(directory.glob(pattern)) if f.name not in skip]
        self.create(docs)
        return [d["metadata"]["name"] for d in docs]

    def established(self, name: str) -> bool:
        crd = self.api(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        return any(c["type"] == "Established" and c["status"] == "True" for c in (crd.get("status") or {}).get("conditions") or [])

    def _operator_crds(self) -> list[str]:
        # KubeRay's but RayCronJob's (0.7 MB): its controller runs only behind the RayCronJob feature
        # gate, off by default (kuberay v1.6.2 ray-operator/main.go, pkg/features/features.go), and
        # the API server spends CPU on every CRD it serves.
        return (self.crds(self.tools.module("kuberay") / "config" / "crd" / "bases", skip=("ray.io_raycronjobs.yaml",))
                + self.crds(self.tools.module("mpi-operator") / "manifests" / "base", "kubeflow.org_*.yaml"))

    def _kuberay(self) -> Wait:
        probe = free_port()
        proc = self.spawn("kuberay-operator", [
            self.tools.require("ray-operator"), "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{free_port()}", f"--health-probe-bind-address=127.0.0.1:{probe}"],
            env={"KUBECONFIG": str(self.kubeconfig)})

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as r:
                return r.status == 200
        return "kuberay-operator /readyz", proc, ready

    def _mpi_operator(self, timeout: float) -> Wait:
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MPI_LOCK_NAMESPACE}}])
        argv = [self.tools.require("mpi-operator"), f"--kubeConfig={self.kubeconfig}",
                f"--lock-namespace={MPI_LOCK_NAMESPACE}", "--kube-api-qps=50", "--kube-api-burst=100"]
        # Its health port is fixed (:8080 on every interface, mpi-operator v0.8.0
        # cmd/mpi-operator/app/server.go): in a network namespace of its own (cluster/netns.py) each
        # simulated cluster of the machine has its own; the API server is forwarded into it.
        if netns.available():
            forwarder = self.spawn("mpi-operator-netns", [sys.executable, "-m", "cluster.netns",
                                                          str(self.info["apiPort"])],
                                   env={"PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
            self.wait_for("the MPI operator's network namespace", forwarder,
                          lambda: netns.READY in log_tail(forwarder.log, 5), timeout)
            argv = netns.nsenter(forwarder.pid, argv)
            self.info["mpiOperatorNetns"] = f"/proc/{forwarder.pid}/ns/net"
        # It leads through a Lease in --lock-namespace.
        proc = self.spawn("mpi-operator", argv)
        return "mpi-operator leading", proc, lambda: "Leading started" in log_tail(proc.log, 200)

    def _karpenter_crds(self) -> list[str]:
        src = self.tools.module("karpenter")
        names = [n for d in karpenter_mod.CRD_DIRS for n in self.crds(src / d)]
        assert set(karpenter_mod.CRDS) <= set(names), (karpenter_mod.CRDS, names)
        return names

    def _karpenter(self, cfg: StackConfig) -> Wait:
        """Karpenter with its kwok cloud provider for the NodePool of `cfg` (the deploy stack with
        gpuNodes.elastic on): the controller (cluster/karpenter.py says what it is given); its
        NodePool, NodeOverlay and KWOKNodeClass are applied once it is ready (start)."""
        self.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": karpenter_mod.NAMESPACE}}])
        types_file = self.root / "karpenter-instance-types.json"
        types_file.write_text(json.dumps(karpenter_mod.instance_types(cfg), indent=1))
        probe = free_port()
        proc = self.spawn("karpenter", [self.tools.require("karpenter")], env=karpenter_mod.controller_env(
            kubeconfig=str(self.kubeconfig), types_file=str(types_file), probe_port=probe, metrics_port=free_port()))

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as r:
                return r.status == 200
        return "karpenter /readyz", proc, ready

    def apply_node_pool(self, cfg: StackConfig) -> None:
        """The NodePool (and NodeOverlay) of another elastic config, e.g. a scenario's smaller maximum."""
        k = self.info["karpenter"]
        self.apply(karpenter_mod.node_pool(cfg, k["bootSeconds"], k["idleSeconds"]))

    # --- people ----------------------------------------------------------------------------------

    def env_text(self, deploy_stack: str) -> str:
        return (f"# the simulated cluster of stack {self.info.get('stack')} (state {self.root})\n"
                f"export KUBECONFIG={self.kubeconfig}\n"
                f"kubectl get nodes -L role,node.kubernetes.io/instance-type\n"
                f"# deploy the bring-your-own stack {deploy_stack!r} onto it (docs/simulated-cluster.md):\n"
                f"pulumi config set --secret rltrain:kubeconfig \"$(cat {self.kubeconfig})\" -s {deploy_stack}\n")


def _stacks(args: argparse.Namespace) -> tuple[StackConfig, dict[str, str], StackConfig]:
    hw, hw_values = stack_config(args.stack)
    deploy, _ = stack_config(args.deploy_stack)
    if deploy.gpu_nodes.model_dump() != hw.gpu_nodes.model_dump() and args.stack != args.deploy_stack:
        print(f"note: Pulumi.{args.deploy_stack}.yaml sizes its pods for {deploy.gpu_nodes.count} x "
              f"{deploy.gpu_nodes.instance_type}; the nodes are {hw.gpu_nodes.count} x {hw.gpu_nodes.instance_type}",
              file=sys.stderr)
    return hw, hw_values, deploy


def elastic_config(deploy_stack: str) -> StackConfig:
    """The deploy stack's config with `gpuNodes.elastic.enabled` on (its other elastic keys as set)."""
    deploy, _ = stack_config(deploy_stack)
    g = deploy.gpu_nodes
    return deploy.model_copy(update={"gpu_nodes": g.model_copy(update={
        "elastic": g.elastic.model_copy(update={"enabled": True})})})


def kueue_timed(config: dict[str, Any], timing: Optional[tuple[int, int]]) -> dict[str, Any]:
    """Kueue's Configuration with a scenario's PodsReady timeout and first requeue backoff, in seconds.

    Sim-only: a stack's `kueue.podsReadyTimeoutMinutes` is at least 10 minutes (KueueArgs refuses
    less than 60 s) and the backoff starts at 60 s, sized for real nodes that boot in minutes; a
    simulated node boots in seconds, so a scenario that needs to see a timeout or a requeue limit
    passes seconds here, set on the Configuration the program built (waitForPodsReady.timeout and
    recoveryTimeout, requeuingStrategy.backoffBaseSeconds: kueue v0.19.2
    apis/config/v1beta2/configuration_types.go)."""
    if timing is None:
        return config
    timeout, backoff = timing
    wait = config["waitForPodsReady"]
    return {**config, "waitForPodsReady": {
        **wait, "timeout": f"{timeout}s", "recoveryTimeout": f"{timeout}s",
        "requeuingStrategy": {**wait["requeuingStrategy"], "backoffBaseSeconds": backoff}}}


def start(stack: str, deploy_stack: str = DEFAULT_DEPLOY_STACK, *, root: Optional[Path] = None,
          complete_after: float = 10.0, timeout: float = 90.0, tools: Optional[Toolset] = None,
          kueue_timing: Optional[tuple[int, int]] = None, extra_stages: Sequence[dict[str, Any]] = (),
          elastic: Optional[StackConfig] = None, boot_seconds: int = 20,
          idle_seconds: Optional[int] = None) -> Cluster:
    """Start (after stopping whatever the state directory still runs) and return the cluster.

    kueue_timing: (PodsReady timeout, first requeue backoff) in seconds for the simulated Kueue
    instead of the deploy stack's (kueue_timed).
    extra_stages: kwok Stage objects a scenario adds to kwok's own (e.g. one holding a pod in an
    init container until the test releases it).
    elastic: a deploy stack's config with `gpuNodes.elastic` on: no GPU node is made; Karpenter
    (cluster/karpenter.py) launches them for that stack's NodePool, each `boot_seconds` after its
    NodeClaim (the KWOKNodeClass registration delay), and removes an empty one after the stack's
    idle time, or `idle_seconds` (karpenter.objects)."""
    root = root or state_dir(stack)
    if root.exists():
        Cluster(root, tools).stop()
        shutil.rmtree(root)
    root.mkdir(parents=True)
    hw, hw_values = stack_config(stack)
    deploy, _ = stack_config(deploy_stack)
    cluster = Cluster(root, tools)
    try:
        cluster.start(hw, hw_values, deploy, hw_stack=stack, complete_after=complete_after, timeout=timeout,
                      kueue_timing=kueue_timing, extra_stages=extra_stages, elastic=elastic,
                      boot_seconds=boot_seconds, idle_seconds=idle_seconds)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cluster.sim", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=("start", "env", "stop", "status"))
    ap.add_argument("--stack", default="p5", help="the stack whose GPU node group the fake nodes copy (default p5)")
    ap.add_argument("--deploy-stack", default=DEFAULT_DEPLOY_STACK,
                    help="the bring-your-own stack deployed onto it: its storage class and Kueue settings (default sim)")
    ap.add_argument("--complete-after", type=float, default=10.0, help="seconds a Job pod runs before it succeeds")
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds each piece may take to come up")
    ap.add_argument("--elastic", action="store_true",
                    help="no GPU node: Karpenter (kwok provider) launches them for the deploy stack's NodePool, "
                         "gpuNodes.elastic on (maxNodes its own, else gpuNodes.count)")
    args = ap.parse_args(argv)
    root = state_dir(args.stack)
    try:
        if args.command == "start":
            t0 = time.monotonic()
            cluster = start(args.stack, args.deploy_stack, root=root, complete_after=args.complete_after,
                            timeout=args.timeout, elastic=elastic_config(args.deploy_stack) if args.elastic else None)
            print(f"simulated cluster of stack {args.stack} up in {time.monotonic() - t0:.0f}s: "
                  f"{', '.join(cluster.info['nodes'])}")
            print(cluster.env_text(args.deploy_stack))
        elif args.command == "env":
            if not (root / "kubeconfig").exists():
                raise SimError(f"no simulated cluster in {root}: python -m cluster.sim start --stack {args.stack}")
            print(Cluster(root).env_text(args.deploy_stack))
        elif args.command == "status":
            c = Cluster(root)
            for p in c.processes():
                print(f"{p.name:24} pid {p.pid:>7}  {'running' if c.alive(p.pid) else 'EXITED'}  {p.log}")
        else:
            stopped = Cluster(root).stop() if root.exists() else []
            print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    except (SimError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
