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
"""

from __future__ import annotations

import copy
import json
import time
from typing import Callable, Iterable

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


def fail_node(cluster, name: str) -> dict:
    """The agent's condition and repair's NoExecute taint on a node; returns the node as it was."""
    cluster.api(f"/api/v1/nodes/{name}/status", "PATCH", {"status": {"conditions": [{
        "type": "AcceleratedHardwareReady", "status": "False", "reason": "NvidiaXID79Error",
        "message": "simulated: GPU has fallen off the bus", "lastHeartbeatTime": None,
        "lastTransitionTime": None}]}}, content_type="application/strategic-merge-patch+json")
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
    """The namespace's pods bound to `node`, terminating ones included."""
    return [p["metadata"]["name"] for p in cluster.api(f"/api/v1/namespaces/{NAMESPACE}/pods")["items"]
            if p["spec"].get("nodeName") == node]


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
    wait(f"the evicted pods gone from {failed} (before repair deletes it)", lambda: not pods_on(cluster, failed), 120,
         lambda: f"{pods_on(cluster, failed)}; {describe()}")
    disrupted = disruption_targets(pod_states_since(cluster, rv), {})
    name = replacement_name(failed, (n["metadata"]["name"] for n in cluster.api("/api/v1/nodes")["items"]))
    replace_node(cluster, node, name)
    return {"replacement": name, "node": node, "t0": t0, "evicted_after": evicted_after, "disrupted": disrupted}


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
