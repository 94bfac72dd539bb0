"""The resource view every rule reads, and the one registry the rules register with.

A row of `rendered/<stack>/resources.json` (`type`, `name`, `inputs`, `options`), the pod templates
found in its workload objects, the node context they are checked against (instance type, labels,
taints, EFA), Kubernetes quantities, and `rule`/`RULES`. Below the rules: `policy.py` (the pod and
AWS rules), `deploy_model.py` (order, reachability, privilege) and `schedule.py` (whole runs over
time) all read this module and register here; `policy.evaluate` runs every registered rule.
Moved out of policy.py unchanged so that the rule families no longer import each other in a circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

from components.stack import catalog
from components.stack.labels import GPU_INSTANCE_ANNOTATION, GPU_TAINT_KEY, ROLE_LABEL

Resource = dict[str, Any]
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
HUGEPAGES = "hugepages-2Mi"
GPU_TAINT = GPU_TAINT_KEY
# What a bring-your-own cluster's GPU nodes are documented to carry (docs/running-for-real.md, Pulumi.byo.yaml).
BYO_NODE_LABELS = dict(ROLE_LABEL)


@dataclass(frozen=True)
class Violation:
    rule: str
    resource: str
    message: str
    fix: str
    pulumi_name: str = ""  # the registered resource, for CrossGuard's URN

    def __str__(self) -> str:
        return f"[{self.rule}] {self.resource}: {self.message}. Fix: {self.fix}"


@dataclass(frozen=True)
class Pod:
    """A pod template found inside a workload object."""

    owner: str  # "Job/rltrain-training", "MPIJob/rltrain-nccl-test/Worker"
    kind: str
    replicas: int
    spec: dict[str, Any]
    labels: dict[str, str]
    pulumi_name: str = ""

    @property
    def containers(self) -> list[dict[str, Any]]:
        return list(self.spec.get("containers") or [])

    def requests_gpu(self) -> bool:
        return any(GPU in _resources(c).get("limits", {}) or GPU in _resources(c).get("requests", {})
                   for c in self.containers)


@dataclass(frozen=True)
class Context:
    instance: Optional[catalog.InstanceType]
    node_labels: dict[str, str]
    node_taints: tuple[str, ...]
    # The GPU nodes run the EFA driver (any pod requests EFA devices): its pre-allocated huge
    # pages come out of allocatable memory.
    efa: bool = False
    # False when the stack has node groups and none carries the GPU taint: the GPU node group is
    # not there to read, and the scheduling rule says so instead of passing.
    gpu_nodes_found: bool = True

    def allocatable(self) -> Optional[catalog.Allocatable]:
        return self.instance.allocatable(efa=self.efa) if self.instance else None


def _resources(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return container.get("resources") or {}


def k8s_objects(resources: Iterable[Resource]) -> Iterator[tuple[Resource, dict[str, Any]]]:
    for r in resources:
        if r["type"].startswith("kubernetes:") and "kind" in r.get("inputs", {}):
            yield r, r["inputs"]


def _ref(obj: dict[str, Any], suffix: str = "") -> str:
    return f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name', '?')}{suffix}"


def pods(resources: Iterable[Resource]) -> list[Pod]:
    found = []
    for r, obj in k8s_objects(resources):
        kind, spec = obj.get("kind"), obj.get("spec") or {}
        if kind in ("Job", "StatefulSet", "Deployment"):
            tmpl = spec.get("template") or {}
            replicas = spec.get("parallelism", spec.get("replicas", 1)) or 1
            found.append(Pod(_ref(obj), kind, int(replicas), tmpl.get("spec") or {},
                             (tmpl.get("metadata") or {}).get("labels") or {}, r["name"]))
        elif kind == "MPIJob":
            for role, rs in (spec.get("mpiReplicaSpecs") or {}).items():
                tmpl = rs.get("template") or {}
                found.append(Pod(_ref(obj, f"/{role}"), kind, int(rs.get("replicas", 1)), tmpl.get("spec") or {},
                                 (tmpl.get("metadata") or {}).get("labels") or {}, r["name"]))
        elif kind == "RayJob":
            cluster = spec.get("rayClusterSpec") or {}
            groups = [("head", 1, (cluster.get("headGroupSpec") or {}).get("template") or {})]
            groups += [(g.get("groupName", "workers"), int(g.get("replicas", 1)), g.get("template") or {})
                       for g in cluster.get("workerGroupSpecs") or []]
            for role, replicas, tmpl in groups:
                found.append(Pod(_ref(obj, f"/{role}"), kind, replicas, tmpl.get("spec") or {},
                                 (tmpl.get("metadata") or {}).get("labels") or {}, r["name"]))
    return found


NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"


def gpu_node_groups(resources: Iterable[Resource]) -> list[Resource]:
    """The stack's GPU node groups: those carrying the GPU taint, by name.

    Never "the last node group seen": a real preview also holds pulumi-eks's own node groups (the
    system ManagedNodeGroup's NodeGroup, labels `role: system`, no taint), and the engine hands the
    resources to a policy in no particular order (FACTS "PR review as GitHub runs it"). `labels`
    and `taints` are both inputs and outputs of aws.eks.NodeGroup, so the render and a preview agree.
    """
    return sorted((r for r in resources if r["type"] == NODE_GROUP
                   and any(isinstance(t, dict) and t.get("key") == GPU_TAINT for t in r["inputs"].get("taints") or [])),
                  key=lambda r: r["name"])


def context(resources: list[Resource]) -> Context:
    instance_type = None
    labels: dict[str, str] = {}
    taints: tuple[str, ...] = ()
    node_groups = [r for r in resources if r["type"] == NODE_GROUP]
    gpu_groups = gpu_node_groups(node_groups)
    if gpu_groups:
        labels = dict(gpu_groups[0]["inputs"].get("labels") or {})
        taints = tuple(t.get("key", "") for t in gpu_groups[0]["inputs"].get("taints") or [])
    for _, obj in k8s_objects(resources):
        # The training namespace records the GPU shape its workloads are sized for; other
        # namespaces (monitoring, …) carry no such annotation and must not reset it.
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if obj.get("kind") == "Namespace" and annotations.get(GPU_INSTANCE_ANNOTATION):
            instance_type = annotations[GPU_INSTANCE_ANNOTATION]
    if not node_groups:  # bring-your-own cluster: the documented labels and taint of its GPU nodes
        labels, taints = dict(BYO_NODE_LABELS), (GPU_TAINT,)
    instance = catalog.CATALOG.get(instance_type or "")
    efa = any(pod_requests(p).get(EFA, 0) > 0 for p in pods(resources))
    # Node groups but none with the GPU taint: nothing to check the GPU pods against (an error, not a pass).
    return Context(instance, labels, taints, efa, gpu_nodes_found=bool(gpu_groups) or not node_groups)


# --- quantities ---------------------------------------------------------------------------------

_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}


def quantity(value: Any) -> float:
    """Kubernetes quantity -> number (bytes for memory, cores for CPU)."""
    s = str(value)
    if s.endswith("m"):
        return float(s[:-1]) / 1000
    for suffix, mult in _SUFFIX.items():
        if s.endswith(suffix):
            return float(s[: -len(suffix)]) * mult
    return float(s)


def pod_requests(p: Pod) -> dict[str, float]:
    """Effective requests (a limit stands in for a missing request, as the API server defaults)."""
    total: dict[str, float] = {}
    for c in p.containers:
        res = _resources(c)
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in merged.items():
            total[k] = total.get(k, 0.0) + quantity(v)
    return total


# --- rules --------------------------------------------------------------------------------------

Rule = Callable[[list[Resource], Context], Iterator[Violation]]
RULES: dict[str, tuple[Rule, str]] = {}


def rule(name: str, description: str):
    def register(fn: Rule) -> Rule:
        RULES[name] = (fn, description)
        return fn
    return register
