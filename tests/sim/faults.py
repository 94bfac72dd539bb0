"""A failed GPU node on the simulated cluster, done by hand the way the EKS node monitoring agent and
node repair would do it, and what the node-repair scenarios read back (tests/sim/test_node_repair.py).

The agent sets the condition on the node's status (`AcceleratedHardwareReady=False` with the XID as
its reason); repair taints the node NoExecute (the runs tolerate only the GPU taint, so the taint
manager evicts their pods with `DisruptionTarget`), deletes it, and a new instance of the group
joins under another name with the same shape and labels.

Repair acts some 10 minutes after the condition (EKS user guide, node-repair: "waits 10 minutes"
before it replaces or reboots), long after the evicted pods are gone. The harness deletes the node
as soon as they are (kwok finishes a deleted pod within a second) instead of waiting that long; it
never deletes the node under a pod still terminating there. That order matters here: a pod left on a
deleted node is one kwok no longer manages, finished only by the pod garbage collector's orphan
sweep (kube-controller-manager podgc: every 20 s, after a 40 s quarantine), and a Job with a pod
failure policy creates no replacement until the old pod is terminal (podReplacementPolicy Failed,
its default then: kubernetes pkg/controller/job). Measured before this order: "whole again after
58 s" for a loss that takes seconds once the pod is gone.

A reboot repair (reboot_node) keeps the Node object and its name. The node goes down the way node
lifecycle sees a kubelet that stopped: kwok writes `Ready=Unknown` for as long as the node carries
NODE_DOWN (tests/sim/conftest.py NODE_DOWN_STAGE: kwok's own node-initialize would make it Ready
again at once), and kube-controller-manager's node lifecycle controller adds the
`node.kubernetes.io/unreachable` taints itself. The run's pod there is lost as the kubelet reports
it: with graceful node shutdown, `Failed` with `DisruptionTarget` (TerminationByKubelet) and exit
143 as the node goes down (Kubernetes v1.35.4 pkg/kubelet/nodeshutdown/nodeshutdown_manager.go
podManager.killPods); without it (a hard reboot), `ContainerStatusUnknown` with exit 137 and no
DisruptionTarget once the node is back (pkg/kubelet/kubelet_pods.go convertToAPIContainerStatuses).
Then the node comes back Ready under the same name, the agent's condition True again.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Callable, Iterable

from conftest import NODE_DOWN
from simdeploy import NAMESPACE, wait

FAULT_TAINT = {"key": "rltrain.sim/accelerated-hardware-failed", "value": "true", "effect": "NoExecute"}
RUN_LABEL = "rltrain/run"


def live(pods: Iterable[dict]) -> list[dict]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def pods_of_run(cluster, run: str) -> list[dict]:
    """The run's pods not being deleted, by the program's run label (Job, RayJob and MPIJob pods
    all carry it from their templates)."""
    return live(cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods?labelSelector={RUN_LABEL.replace('/', '%2F')}"
                            f"%3D{run}")["items"])


def running_on(pods: Iterable[dict]) -> dict[str, str]:
    """pod name -> node of the Running pods."""
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods
            if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")}


def resource_version(cluster) -> str:
    """The namespace's pods' resource version now: pod_states_since replays every change after it."""
    return cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods?limit=1")["metadata"]["resourceVersion"]


def pod_states_since(cluster, rv: str) -> list[dict]:
    """Every state of the namespace's pods since a resource version, replayed by a watch that ends
    after two seconds (the API server's watch cache keeps the recent changes). kwok finishes a
    deleted pod within milliseconds: polling can miss an evicted pod's last state."""
    raw = cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods?watch=1&resourceVersion={rv}&timeoutSeconds=2",
                      timeout=20)
    lines = [raw] if isinstance(raw, dict) else [json.loads(line) for line in str(raw).splitlines() if line.strip()]
    return [e["object"] for e in lines if e.get("type") in ("ADDED", "MODIFIED", "DELETED")]


def disruption_targets(pods: Iterable[dict], into: dict[str, list]) -> dict[str, list]:
    """pod name -> the reasons of its DisruptionTarget=True conditions, added to `into`."""
    for p in pods:
        for c in p["status"].get("conditions", []):
            if c["type"] == "DisruptionTarget" and c["status"] == "True":
                into.setdefault(p["metadata"]["name"], []).append(c.get("reason"))
    return into


def env_of(pod: dict) -> dict[str, str]:
    """The first container's literal env values."""
    return {e["name"]: e.get("value", "") for e in pod["spec"]["containers"][0].get("env", []) if "value" in e}


def field_ref(pod: dict, path: str) -> str:
    """What the kubelet puts in a downward-API variable (`fieldRef.fieldPath`) of this pod: the
    paths the program uses (a label or annotation by key, the name, namespace, uid, node)."""
    meta = pod["metadata"]
    for prefix, mapping in (("metadata.labels['", meta.get("labels") or {}),
                            ("metadata.annotations['", meta.get("annotations") or {})):
        if path.startswith(prefix) and path.endswith("']"):
            return mapping.get(path[len(prefix):-2], "")
    simple = {"metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
              "metadata.uid": meta.get("uid"), "spec.nodeName": pod["spec"].get("nodeName"),
              "spec.serviceAccountName": pod["spec"].get("serviceAccountName")}
    if path not in simple:
        raise KeyError(f"fieldPath {path} not resolved by the harness")
    return simple[path] or ""


def resolved_env(pod: dict) -> dict[str, str]:
    """The first container's env as its process sees it: literal values and downward-API fields
    (fieldRef) resolved from the pod; Secret and ConfigMap references left out."""
    out = {}
    for e in pod["spec"]["containers"][0].get("env", []):
        if "value" in e:
            out[e["name"]] = e["value"]
        elif "fieldRef" in (e.get("valueFrom") or {}):
            out[e["name"]] = field_ref(pod, e["valueFrom"]["fieldRef"]["fieldPath"])
    return out


# The agent's reasons (EKS user guide, node-health-nma "NVIDIA XID error codes"): 79 is repaired by a
# replacement, 48 (a double-bit ECC error) by a reboot.
XID_REPLACE = ("NvidiaXID79Error", "simulated: GPU has fallen off the bus")
XID_REBOOT = ("NvidiaXID48Error", "simulated: DBE (double bit error) ECC error")


def agent_condition(cluster, name: str, healthy: bool, xid: tuple[str, str] = XID_REPLACE) -> None:
    """The node monitoring agent's `AcceleratedHardwareReady` on a node: False with the XID as its
    reason, or True again (the fault cleared after a reboot)."""
    reason, message = xid if not healthy else ("AcceleratedHardwareIsReady", "simulated: no error")
    cluster.api(f"/api/v1/nodes/{name}/status", "PATCH", {"status": {"conditions": [{
        "type": "AcceleratedHardwareReady", "status": "True" if healthy else "False", "reason": reason,
        "message": message, "lastHeartbeatTime": None, "lastTransitionTime": None}]}},
        content_type="application/strategic-merge-patch+json")


def fail_node(cluster, name: str) -> dict:
    """The agent's condition and repair's NoExecute taint on a node; returns the node as it was."""
    agent_condition(cluster, name, healthy=False)
    node = cluster.api(f"/api/v1/nodes/{name}")
    cluster.api(f"/api/v1/nodes/{name}", "PATCH", {"spec": {"taints": [*node["spec"].get("taints", []), FAULT_TAINT]}},
                content_type="application/merge-patch+json")
    return node


def replace_node(cluster, node: dict, name: str) -> None:
    """Delete the failed node; a new instance of the group joins as `name`, the same shape and labels."""
    cluster.api(f"/api/v1/nodes/{node['metadata']['name']}", "DELETE")
    new = copy.deepcopy(node)
    new["metadata"] = {"name": name, "annotations": node["metadata"].get("annotations", {}),
                       "labels": {**node["metadata"]["labels"], "kubernetes.io/hostname": name}}
    new["spec"] = {"taints": [t for t in node["spec"].get("taints", []) if t["key"] != FAULT_TAINT["key"]]}
    new["status"] = {"capacity": node["status"]["capacity"], "allocatable": node["status"]["allocatable"]}
    cluster.api("/api/v1/nodes", "POST", new)


def replacement_name(node: str, taken: Iterable[str]) -> str:
    """The next free name in the node's group (`<group>-<n>`)."""
    group, taken = node.rsplit("-", 1)[0], set(taken)
    return next(f"{group}-{i}" for i in range(100) if f"{group}-{i}" not in taken)


class GangTimer:
    """The longest time some pod of a run was Running while a peer was Pending (a partial gang
    holding GPUs), sampled at every check."""

    def __init__(self) -> None:
        self.since: float | None = None
        self.longest = 0.0

    def sample(self, pods: Iterable[dict]) -> None:
        phases = {p["status"].get("phase") for p in pods}
        if {"Running", "Pending"} <= phases:
            self.since = self.since or time.monotonic()
            self.longest = max(self.longest, time.monotonic() - self.since)
        else:
            self.since = None


def pods_on(cluster, node: str) -> list[str]:
    """The namespace's pods bound to `node` and not finished, terminating ones included. A pod that
    ended before (Failed or Succeeded, not being deleted: a trainer's exit the Job keeps) needs
    nothing more from the node: repair may delete the node under it."""
    return [p["metadata"]["name"] for p in cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
            if p["spec"].get("nodeName") == node
            and (p["metadata"].get("deletionTimestamp") or p["status"].get("phase") not in ("Failed", "Succeeded"))]


def pod_states(cluster, names: Iterable[str]) -> list[str]:
    """One line per named pod: phase, deletion, the trainer's state, conditions (for a wait's message)."""
    out = []
    for p in cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]:
        if p["metadata"]["name"] in names:
            conds = [f"{c['type']}={c['status']}/{c.get('reason')}" for c in p["status"].get("conditions", [])]
            states = [list((c.get("state") or {}).items()) for c in p["status"].get("containerStatuses", [])]
            out.append(f"{p['metadata']['name']} {p['status'].get('phase')} deleting={p['metadata'].get('deletionTimestamp')} "
                       f"finalizers={p['metadata'].get('finalizers')} {conds} {states}")
    return out


def fail_and_replace(cluster, pods_now: Callable[[], list[dict]], failed: str, describe) -> dict:
    """Fail `failed`, wait until no pod of the run runs there and every evicted pod is gone, replace
    it; returns what happened: the replacement's name, the old node, seconds to the eviction, the
    DisruptionTarget reasons."""
    t0 = time.monotonic()
    rv = resource_version(cluster)
    node = fail_node(cluster, failed)
    wait(f"the run's pod evicted from {failed}", lambda: failed not in running_on(pods_now()).values(), 120,
         describe)
    evicted_after = time.monotonic() - t0
    stand_in = KubeletStandIn(cluster, failed)
    wait(f"the evicted pods gone from {failed} (before repair deletes it)", stand_in.gone, 120,
         lambda: f"{pod_states(cluster, pods_on(cluster, failed))}; {describe()}")
    disrupted = disruption_targets(pod_states_since(cluster, rv), {})
    name = replacement_name(failed, (n["metadata"]["name"] for n in cluster.api("/api/v1/nodes")["items"]))
    replace_node(cluster, node, name)
    return {"replacement": name, "node": node, "t0": t0, "evicted_after": evicted_after, "disrupted": disrupted,
            "finished_by_harness": stand_in.finished}


# How long a deleted pod may stay on its node, not terminal, before the harness ends it as its
# kubelet would (KubeletStandIn).
STUCK_SECONDS = 3.0


class KubeletStandIn:
    """The kubelet's last word on a pod deleted on its node: the container stopped (SIGTERM, exit
    143) and the pod Failed, after which its controller's finalizer goes and the pod with it.

    kwok's pod-delete stage only deletes: a pod holding the Job's `batch.kubernetes.io/job-tracking`
    finalizer then stays Running and terminating for good, because a Job with a pod failure policy
    counts (and releases) a deleted pod only once it is terminal (Kubernetes v1.35.4
    pkg/controller/job/job_controller.go isPodFailed, onlyReplaceFailedPods). Seen on the held
    cluster (2026-12-05): a worker pod scheduled and evicted by the taint in the same second, kwok's
    "Delete pod" logged twice, the pod Running with its finalizer two minutes later. A pod left so
    for STUCK_SECONDS is ended here; the names are reported."""

    def __init__(self, cluster, node: str):
        self.cluster, self.node = cluster, node
        self.seen: dict[str, float] = {}
        self.finished: list[str] = []

    def gone(self) -> bool:
        pods = [p for p in self.cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
                if p["spec"].get("nodeName") == self.node]
        left = [p for p in pods if p["metadata"].get("deletionTimestamp")
                or p["status"].get("phase") not in ("Failed", "Succeeded")]
        now = time.monotonic()
        for p in left:
            name = p["metadata"]["name"]
            if not p["metadata"].get("deletionTimestamp") or p["status"].get("phase") in ("Failed", "Succeeded"):
                continue
            if now - self.seen.setdefault(name, now) >= STUCK_SECONDS and name not in self.finished:
                kubelet_stopped(self.cluster, p)
                self.finished.append(name)
        return not left


def kubelet_stopped(cluster, pod: dict, code: int = 143) -> None:
    """The kubelet's status of a pod whose containers it stopped on deletion: Failed, each container
    terminated (SIGTERM: 143), Ready False; the pod's other conditions (DisruptionTarget) kept."""
    status, now = pod["status"], now_utc()
    statuses = [{**c, "ready": False, "started": False,
                 "state": {"terminated": {"exitCode": code, "reason": "Error", "finishedAt": now,
                                          "startedAt": (c.get("state", {}).get("running") or {}).get("startedAt")
                                          or status.get("startTime")}}}
                for c in status.get("containerStatuses", [])]
    conditions = [{**c, "status": "False", "lastTransitionTime": now} if c["type"] in ("Ready", "ContainersReady")
                  else c for c in status.get("conditions", [])]
    cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}/status", "PATCH",
                {"status": {"phase": "Failed", "containerStatuses": statuses, "conditions": conditions}},
                content_type="application/merge-patch+json")


def exit_container(cluster, pod: dict, code: int, container: str = "trainer") -> None:
    """What the kubelet reports when the pod's trainer exits with `code` (restartPolicy Never): the
    pod Failed, that container terminated with the code, the others with 0. kwok runs no process:
    the exit a program test showed is written here, to see what the controllers do with it."""
    status = pod["status"]
    ran = next(c for c in status["containerStatuses"] if c["name"] == container)
    started = (ran.get("state", {}).get("running") or {}).get("startedAt") or status.get("startTime")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    statuses = [{**c, "ready": False, "started": False,
                 "state": {"terminated": {"exitCode": code if c["name"] == container else 0,
                                          "reason": "Error" if code else "Completed",
                                          "startedAt": started, "finishedAt": now}}}
                for c in status["containerStatuses"]]
    cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}/status", "PATCH",
                {"status": {"phase": "Failed" if code else "Succeeded", "containerStatuses": statuses}},
                content_type="application/merge-patch+json")


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def lose_pod(cluster, pod: dict, *, graceful: bool, container: str = "trainer") -> None:
    """The run's pod lost with its node, as the kubelet reports it (kwok runs no kubelet: written here).

    graceful: the kubelet's graceful node shutdown: phase Failed, reason Terminated, the condition
    DisruptionTarget=True reason TerminationByKubelet, the trainer ended by SIGTERM (exit 143)
    (Kubernetes v1.35.4 nodeshutdown_manager.go podManager.killPods: the status is handed to the
    kill, which writes it before stopping the pod). Else the kubelet never saw the shutdown (a hard reboot): after it the container
    cannot be found, terminated with reason ContainerStatusUnknown and exit 137, no
    DisruptionTarget (kubelet_pods.go convertToAPIContainerStatuses)."""
    status, now = pod["status"], now_utc()

    def ended(c: dict) -> dict:
        started = (c.get("state", {}).get("running") or {}).get("startedAt") or status.get("startTime")
        if graceful:
            code, reason, message = (143, "Error", None) if c["name"] == container else (0, "Completed", None)
        else:
            code, reason = 137, "ContainerStatusUnknown"
            message = "The container could not be located when the pod was terminated"
        term = {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": now}
        if message:
            term["message"] = message
        return {**c, "ready": False, "started": False, "state": {"terminated": term}}

    conditions = [{**c, "status": "False", "lastTransitionTime": now} if c["type"] in ("Ready", "ContainersReady")
                  else c for c in status.get("conditions", []) if c["type"] != "DisruptionTarget"]
    body = {"phase": "Failed", "containerStatuses": [ended(c) for c in status["containerStatuses"]]}
    if graceful:
        conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "TerminationByKubelet",
                           "message": "Pod was terminated in response to imminent node shutdown.",
                           "lastTransitionTime": now})
        body.update(reason="Terminated", message="Pod was terminated in response to imminent node shutdown.")
    body["conditions"] = conditions
    cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods/{pod['metadata']['name']}/status", "PATCH",
                {"status": body}, content_type="application/merge-patch+json")


def node_ready(node: dict) -> str:
    return next((c["status"] for c in node["status"].get("conditions", []) if c["type"] == "Ready"), "-")


def unreachable_taints(node: dict) -> list[str]:
    return [t["effect"] for t in node["spec"].get("taints", []) if t["key"] == "node.kubernetes.io/unreachable"]


def node_down(cluster, name: str, describe, timeout: float = 60) -> float:
    """The node stops answering (its kubelet down for a reboot): kwok writes Ready=Unknown while the
    node carries NODE_DOWN; returns the seconds until node lifecycle tainted it unreachable NoExecute."""
    t0 = time.monotonic()
    cluster.api(f"/api/v1/nodes/{name}", "PATCH", {"metadata": {"annotations": {NODE_DOWN: now_utc()}}},
                content_type="application/merge-patch+json")
    wait(f"{name} Ready=Unknown and tainted unreachable NoExecute by node lifecycle",
         lambda: (lambda n: node_ready(n) == "Unknown" and "NoExecute" in unreachable_taints(n))(
             cluster.api(f"/api/v1/nodes/{name}")), timeout,
         lambda: f"{cluster.api(f'/api/v1/nodes/{name}')['spec'].get('taints')}; {describe()}")
    return time.monotonic() - t0


def node_back(cluster, name: str, describe, timeout: float = 60) -> float:
    """The rebooted node back under its name: its kubelet reports Ready again (kwok's
    node-initialize, once NODE_DOWN is gone), the agent's condition True (the fault cleared);
    returns the seconds until node lifecycle removed the unreachable taints."""
    t0 = time.monotonic()
    agent_condition(cluster, name, healthy=True)
    cluster.api(f"/api/v1/nodes/{name}", "PATCH", {"metadata": {"annotations": {NODE_DOWN: None}}},
                content_type="application/merge-patch+json")
    wait(f"{name} Ready again and untainted", lambda: (lambda n: node_ready(n) == "True" and not unreachable_taints(n))(
        cluster.api(f"/api/v1/nodes/{name}")), timeout,
         lambda: f"{cluster.api(f'/api/v1/nodes/{name}')['spec'].get('taints')}; {describe()}")
    return time.monotonic() - t0


def reboot_node(cluster, pod: dict, *, graceful: bool, down_seconds: float, describe) -> dict:
    """A reboot repair of the node of `pod`, as it looks from the API: the agent's condition (an XID
    EKS repairs by a reboot), the node down, the pod lost (graceful: as the node goes down; hard:
    reported once it is back), `down_seconds` later the node Ready again under its name. Returns
    the node, t0, the seconds to the unreachable taint and to Ready, and every DisruptionTarget
    reason seen meanwhile."""
    name = pod["spec"]["nodeName"]
    t0 = time.monotonic()
    rv = resource_version(cluster)
    agent_condition(cluster, name, healthy=False, xid=XID_REBOOT)
    tainted_after = node_down(cluster, name, describe)
    if graceful:
        lose_pod(cluster, pod, graceful=True)
    time.sleep(max(0.0, down_seconds - (time.monotonic() - t0)))
    down_for = time.monotonic() - t0
    back_after = node_back(cluster, name, describe)
    if not graceful:
        # What the kubelet finds after the reboot, if the pod is still there and not terminal.
        now = [p for p in cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
               if p["metadata"]["uid"] == pod["metadata"]["uid"]]
        if now and now[0]["status"].get("phase") not in ("Failed", "Succeeded"):
            lose_pod(cluster, now[0], graceful=False)
    return {"node": name, "t0": t0, "tainted_after": tainted_after, "down_for": down_for,
            "ready_after": down_for + back_after,
            "disrupted": disruption_targets(pod_states_since(cluster, rv), {})}
