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
    # The row it was found in (`type::name`): names repeat across types, the row does not.
    row: str = ""

    @property
    def containers(self) -> list[dict[str, Any]]:
        return list(self.spec.get("containers") or [])

    def requests_gpu(self) -> bool:
        return any(GPU in _resources(c).get("limits", {}) or GPU in _resources(c).get("requests", {})
                   for c in self.containers)


@dataclass(frozen=True)
class GpuNodes:
    """A GPU node group a pod can be placed on: its labels and the keys of its taints."""

    name: str
    labels: dict[str, str]
    taints: tuple[str, ...]

    def selects(self, selector: dict[str, Any], extra: Optional[dict[str, str]] = None) -> bool:
        """Every label of `selector` is on these nodes (with `extra`, e.g. the instance-type label)."""
        labels = {**self.labels, **(extra or {})}
        return all(labels.get(k) == v for k, v in selector.items())


@dataclass(frozen=True)
class Context:
    instance: Optional[catalog.InstanceType]
    # Every GPU node group of the stack (the tainted ones, by name; on a bring-your-own cluster the
    # documented labels and taint of its GPU nodes). Never "the" node group: a pod is checked
    # against each, and fits when one of them takes it.
    gpu_groups: tuple[GpuNodes, ...] = ()
    # The GPU nodes run the EFA driver (any pod requests EFA devices): its pre-allocated huge
    # pages come out of allocatable memory.
    efa: bool = False
    # False when the stack has node groups and none carries the GPU taint: the GPU node group is
    # not there to read, and the scheduling rule says so instead of passing.
    gpu_nodes_found: bool = True
    # Namespaces that record different instance types ((namespace, value), sorted): the shape the
    # workloads are sized for is ambiguous, `instance` is None and the rules that read it say so.
    instance_conflict: tuple[tuple[str, str], ...] = ()

    def allocatable(self) -> Optional[catalog.Allocatable]:
        return self.instance.allocatable(efa=self.efa) if self.instance else None

    def on_gpu_nodes(self, selector: dict[str, Any], extra: Optional[dict[str, str]] = None) -> bool:
        """A non-empty `selector` that some GPU node group satisfies."""
        return bool(selector) and any(g.selects(selector, extra) for g in self.gpu_groups)


def _resources(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return container.get("resources") or {}


def k8s_objects(resources: Iterable[Resource]) -> Iterator[tuple[Resource, dict[str, Any]]]:
    for r in resources:
        if r["type"].startswith("kubernetes:") and "kind" in r.get("inputs", {}):
            yield r, r["inputs"]


def _row(r: Resource) -> str:
    """A row's identity, `type::name` (deploy_model.ref)."""
    return f"{r['type']}::{r['name']}"


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
                             (tmpl.get("metadata") or {}).get("labels") or {}, r["name"], _row(r)))
        elif kind == "MPIJob":
            for role, rs in (spec.get("mpiReplicaSpecs") or {}).items():
                tmpl = rs.get("template") or {}
                found.append(Pod(_ref(obj, f"/{role}"), kind, int(rs.get("replicas", 1)), tmpl.get("spec") or {},
                                 (tmpl.get("metadata") or {}).get("labels") or {}, r["name"], _row(r)))
        elif kind == "RayJob":
            cluster = spec.get("rayClusterSpec") or {}
            groups = [("head", 1, (cluster.get("headGroupSpec") or {}).get("template") or {})]
            groups += [(g.get("groupName", "workers"), int(g.get("replicas", 1)), g.get("template") or {})
                       for g in cluster.get("workerGroupSpecs") or []]
            for role, replicas, tmpl in groups:
                found.append(Pod(_ref(obj, f"/{role}"), kind, replicas, tmpl.get("spec") or {},
                                 (tmpl.get("metadata") or {}).get("labels") or {}, r["name"], _row(r)))
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
    """What the pods are checked against, read from every resource of its kind, never from the
    first or last one in the list (the engine hands a policy the resources in no set order)."""
    node_groups = [r for r in resources if r["type"] == NODE_GROUP]
    groups = tuple(GpuNodes(r["name"], dict(r["inputs"].get("labels") or {}),
                            tuple(t.get("key", "") for t in r["inputs"].get("taints") or [] if isinstance(t, dict)))
                   for r in gpu_node_groups(node_groups))
    if not node_groups:  # bring-your-own cluster: the documented labels and taint of its GPU nodes
        groups = (GpuNodes("bring-your-own GPU nodes", dict(BYO_NODE_LABELS), (GPU_TAINT,)),)
    # The training namespace records the GPU shape its workloads are sized for; other namespaces
    # (monitoring, ...) record the same or nothing. Two different values: ambiguous, not "the last".
    recorded = sorted({((obj.get("metadata") or {}).get("name", "?"), str(ann[GPU_INSTANCE_ANNOTATION]))
                       for _, obj in k8s_objects(resources) if obj.get("kind") == "Namespace"
                       for ann in [(obj.get("metadata") or {}).get("annotations") or {}]
                       if ann.get(GPU_INSTANCE_ANNOTATION)})
    values = {v for _, v in recorded}
    instance = catalog.CATALOG.get(next(iter(values))) if len(values) == 1 else None
    efa = any(pod_requests(p).get(EFA, 0) > 0 for p in pods(resources))
    # Node groups but none with the GPU taint: nothing to check the GPU pods against (an error, not a pass).
    return Context(instance, groups, efa, gpu_nodes_found=bool(groups),
                   instance_conflict=tuple(recorded) if len(values) > 1 else ())


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
