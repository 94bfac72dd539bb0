"""The resource view every policy rule reads, and what a policy rule is.

A row of `rendered/<stack>/resources.json` (`type`, `name`, `inputs`, `options`), the pod templates
found in its workload objects, the node context they are checked against (instance type, labels,
taints, EFA), Kubernetes quantities, and `PolicyRule` (`@policy_rule`: a check, its description and
what it reads). Below the rule modules: `policy.py` (the pod and AWS rules), `deploy_model.py`
(order, reachability, privilege), `schedule.py` (whole runs over time) and `numa.py` all read this
module; `policy.RULES` collects the rules of the modules it lists, and `policy.evaluate` runs them.
Nothing registers on import: a rule module policy.py does not list runs no rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional

from components.stack import catalog
from components.stack.labels import EFA, GPU, GPU_INSTANCE_ANNOTATION, GPU_NODES_ANNOTATION, GPU_TAINT_KEY, ROLE_LABEL

Resource = dict[str, Any]
GPU_TAINT = GPU_TAINT_KEY
# What a bring-your-own cluster's GPU nodes are documented to carry (docs/running-for-real.md, Pulumi.byo.yaml).
BYO_NODE_LABELS = dict(ROLE_LABEL)


def node_requirements(spec: dict[str, Any]) -> dict[str, str]:
    """The node labels a pod spec requires, as one selector: its nodeSelector and, from a required
    node affinity with a single term (several terms are alternatives), each `In` expression of one
    value (the form components/workloads/placement.py writes; Kueue owns nodeSelector on a queued
    run). Where the two name one key with different values the nodeSelector's is kept: no node
    carries both, and that is the value a reader set by hand."""
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    out: dict[str, str] = {}
    if len(terms) == 1:
        for e in terms[0].get("matchExpressions") or []:
            if e.get("operator") == "In" and len(e.get("values") or []) == 1:
                out[e["key"]] = e["values"][0]
    out.update(spec.get("nodeSelector") or {})
    return out


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

    @property
    def node_selector(self) -> dict[str, str]:
        """Its nodeSelector and required node affinity together (node_requirements)."""
        return node_requirements(self.spec)

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
    # Namespaces that record different instance types ((namespace, value), sorted): the shape the
    # workloads are sized for is ambiguous, `instance` is None and the rules that read it say so.
    instance_conflict: tuple[tuple[str, str], ...] = ()

    @property
    def gpu_nodes_found(self) -> bool:
        """False when the stack has node groups and none carries the GPU taint: the GPU node group
        is not there to read, and the scheduling rule says so instead of passing."""
        return bool(self.gpu_groups)

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


def namespace_annotations(resources: Iterable[Resource], key: str) -> list[tuple[str, str]]:
    """(namespace, value) of every Namespace annotated `key`, sorted: read from all of them, never
    from the first or last one in the list."""
    return sorted({((obj.get("metadata") or {}).get("name", "?"), str(ann[key]))
                   for _, obj in k8s_objects(resources) if obj.get("kind") == "Namespace"
                   for ann in [(obj.get("metadata") or {}).get("annotations") or {}] if ann.get(key)})


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
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"


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
    recorded = namespace_annotations(resources, GPU_INSTANCE_ANNOTATION)
    values = {v for _, v in recorded}
    instance = catalog.CATALOG.get(next(iter(values))) if len(values) == 1 else None
    efa = any(pod_requests(p).get(EFA, 0) > 0 for p in pods(resources))
    # Node groups but none with the GPU taint: nothing to check the GPU pods against (an error, not a pass).
    return Context(instance, groups, efa, instance_conflict=tuple(recorded) if len(values) > 1 else ())


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


# --- what each rule reads -----------------------------------------------------------------------
#
# A rule that finds nothing to read passes silently: a real preview hands the pack each resource's
# OUTPUTS (issue 18), and a component's outputs, or an object cut down to what the program applied,
# may lack what the rule reads. Each rule therefore declares what it reads, of which resources (by
# type, which the engine always sends), and `unread` turns "applies to the stack, read nothing" into
# a violation of that rule, in the render, the tests and the pack alike.

WORKLOAD_KINDS = ("Job", "StatefulSet", "Deployment", "MPIJob", "RayJob")


@dataclass(frozen=True)
class Reads:
    """What a rule reads of the resources `scope` selects.

    `has(resource)`: True when the resource carries it, False when it does not, None when the value
    is not known until deploy (a first preview: not an error, the pack reports it as unseen).
    `every`: each resource in scope must carry it (else: at least one, e.g. the one Namespace that
    records the instance type). `applies`: whether the rule applies to the stack at all (default:
    something is in scope). `problem`: what makes the read ambiguous (two values that disagree).
    """

    what: str
    scope: Callable[[Resource], bool]
    has: Callable[[Resource], Optional[bool]]
    every: bool = True
    applies: Optional[Callable[[list[Resource]], bool]] = None
    problem: Optional[Callable[[list[Resource]], str]] = None


@dataclass(frozen=True)
class Coverage:
    """What one `Reads` found: resources in scope, read, missing it, unknown (labels `Kind name`)."""

    what: str
    scope: tuple[str, ...]
    read: tuple[str, ...]
    missing: tuple[str, ...]
    unknown: tuple[str, ...]
    every: bool
    applies: bool
    problem: str = ""

    @property
    def failed(self) -> bool:
        if self.problem:
            return True
        if not self.applies:
            return False
        return bool(self.missing) if self.every else not (self.read or self.unknown)


def _label(r: Resource) -> str:
    return f"{r['type'].rsplit(':', 1)[-1]} {r['name']}"


def k8s_kinds(*kinds: str) -> Callable[[Resource], bool]:
    """Kubernetes resources of these kinds, by the type the engine sends (`kubernetes:batch/v1:Job`)."""
    return lambda r: r["type"].startswith("kubernetes:") and r["type"].rsplit(":", 1)[-1] in kinds


def of_types(*types: str) -> Callable[[Resource], bool]:
    return lambda r: r["type"] in types


def unknown(value: Any) -> bool:
    from components.offline.mock_engine import UNKNOWN
    return isinstance(value, str) and value == UNKNOWN


def _dict_at(r: Resource, *path: str) -> Optional[bool]:
    """A non-empty mapping at `path` of the inputs (None: unknown until deploy)."""
    value: Any = r.get("inputs")
    for key in path:
        if unknown(value):
            return None
        value = value.get(key) if isinstance(value, dict) else None
    if unknown(value):
        return None
    return isinstance(value, dict) and bool(value)


def pod_specs(obj: dict[str, Any]) -> Optional[list[Any]]:
    """The pod specs of a workload object's templates (None: its spec is unknown until deploy)."""
    kind, spec = obj.get("kind"), obj.get("spec")
    if unknown(spec):
        return None
    if not isinstance(spec, dict):
        return []
    if kind in ("Job", "StatefulSet", "Deployment"):
        templates = [spec.get("template")]
    elif kind == "MPIJob":
        templates = [rs.get("template") if isinstance(rs, dict) else None
                     for rs in (spec.get("mpiReplicaSpecs") or {}).values()]
    elif kind == "RayJob":
        cluster = spec.get("rayClusterSpec") or {}
        templates = [(cluster.get("headGroupSpec") or {}).get("template")]
        templates += [g.get("template") if isinstance(g, dict) else None for g in cluster.get("workerGroupSpecs") or []]
    else:
        return []
    return [t.get("spec") if isinstance(t, dict) else t for t in templates]


def _has_pod_templates(r: Resource) -> Optional[bool]:
    obj = r.get("inputs") or {}
    if "kind" not in obj:
        return False
    specs = pod_specs(obj)
    if specs is None or any(unknown(s) for s in specs):
        return None
    return bool(specs) and all(isinstance(s, dict) and isinstance(s.get("containers"), list) and bool(s["containers"])
                               for s in specs)


def _annotation(key: str) -> Callable[[Resource], Optional[bool]]:
    def has(r: Resource) -> Optional[bool]:
        value = (((r.get("inputs") or {}).get("metadata") or {}).get("annotations") or {}).get(key)
        return None if unknown(value) else bool(value)
    return has


WORKLOADS = k8s_kinds(*WORKLOAD_KINDS)


def _has_workloads(resources: list[Resource]) -> bool:
    return any(WORKLOADS(r) for r in resources)


def _annotation_conflict(resources: list[Resource], key: str, what: str, use: str) -> str:
    found = namespace_annotations(resources, key)
    return (f"the Namespaces record different {what} (" + ", ".join(f"{ns}: {v}" for ns, v in found)
            + f"): which one the workloads are {use} is ambiguous") if len({v for _, v in found}) > 1 else ""


def _instance_conflict(resources: list[Resource]) -> str:
    return _annotation_conflict(resources, GPU_INSTANCE_ANNOTATION, "instance types", "sized for")


def _node_count_conflict(resources: list[Resource]) -> str:
    return _annotation_conflict(resources, GPU_NODES_ANNOTATION, "GPU node counts", "placed on")


POD_TEMPLATES = Reads("the pod templates (spec.template.spec.containers; an MPIJob's mpiReplicaSpecs, a RayJob's "
                      "rayClusterSpec groups)", WORKLOADS, _has_pod_templates)
INSTANCE_TYPE = Reads(f"the GPU instance type (annotation {GPU_INSTANCE_ANNOTATION} of the training Namespace)",
                      k8s_kinds("Namespace"), _annotation(GPU_INSTANCE_ANNOTATION), every=False,
                      applies=_has_workloads, problem=_instance_conflict)
GPU_NODE_COUNT = Reads(f"the GPU node count (annotation {GPU_NODES_ANNOTATION} of the training Namespace)",
                       k8s_kinds("Namespace"), _annotation(GPU_NODES_ANNOTATION), every=False, applies=_has_workloads,
                       problem=_node_count_conflict)


def spec_of(*kinds: str, what: str = "spec") -> Reads:
    """Each object of `kinds` carries a non-empty `spec` (or the top-level field `what`)."""
    path = tuple(what.split("."))
    return Reads(f"{what} of every {', '.join(kinds)}", k8s_kinds(*kinds), lambda r: _dict_at(r, *path))


def inputs_of(*types: str, what: str) -> Reads:
    """Each resource of `types` sends properties at all (a component or object with none is unread)."""
    return Reads(what, of_types(*types), lambda r: _dict_at(r))


# --- rules --------------------------------------------------------------------------------------

Check = Callable[[list[Resource], Context], Iterator[Violation]]


@dataclass(frozen=True)
class PolicyRule:
    """A policy rule: its name, what it requires (the CrossGuard policy's description), the check
    and what the check reads (`coverage`). Called like its check."""
    name: str
    description: str
    check: Check
    reads: tuple[Reads, ...] = ()

    def __call__(self, resources: list[Resource], ctx: Context) -> Iterator[Violation]:
        return self.check(resources, ctx)


def policy_rule(name: str, description: str, reads: Iterable[Reads] = ()) -> Callable[[Check], PolicyRule]:
    """Make the check below a PolicyRule of its module (policy.RULES lists the modules)."""
    def make(fn: Check) -> PolicyRule:
        return PolicyRule(name, description, fn, tuple(reads))
    return make


def coverage(resources: list[Resource], rule: PolicyRule) -> list[Coverage]:
    """What `rule` reads of `resources`, per declared read."""
    out = []
    for need in rule.reads:
        scope = sorted((r for r in resources if need.scope(r)), key=lambda r: (r["name"], r["type"]))
        found: dict[Optional[bool], list[str]] = {True: [], False: [], None: []}
        for r in scope:
            found[need.has(r)].append(_label(r))
        applies = need.applies(resources) if need.applies else bool(scope)
        out.append(Coverage(need.what, tuple(map(_label, scope)), tuple(found[True]), tuple(found[False]),
                            tuple(found[None]), need.every, applies, need.problem(resources) if need.problem else ""))
    return out


def unread(resources: list[Resource], rule: PolicyRule) -> list[Violation]:
    """A violation of `rule` for each thing it reads that applies to the stack and is not there."""
    name = rule.name
    out = []
    for c in coverage(resources, rule):
        if not c.failed:
            continue
        if c.problem:
            message = f"rule {name} cannot read {c.what}: {c.problem}"
        elif c.every:
            sent = ""
            if len(c.missing) == 1:
                r = next(r for r in resources if _label(r) == c.missing[0])
                sent = f" (it was sent: {', '.join(sorted(r.get('inputs') or {})) or 'no properties'})"
            message = (f"rule {name} read nothing of {', '.join(c.missing)}{sent}: expected {c.what}"
                       + (f" ({len(c.read)} of {len(c.scope)} read)" if c.read else ""))
        else:
            message = (f"rule {name} read nothing: expected {c.what}, found in none of "
                       + (", ".join(c.scope) if c.scope else "the resources (none of that kind)"))
        # The one resource it is about, when there is one (its URN in the pack); else the rule.
        missing = c.missing if c.every else c.scope
        subject = missing[0] if len(missing) == 1 and not c.problem else f"policy rule {name}"
        pulumi_name = next((r["name"] for r in resources if _label(r) == subject), "")
        out.append(Violation(name, subject, message + ". A rule that reads nothing checks nothing",
                             "the pack reads each resource's outputs (policy/pack.py): read the field where the "
                             "engine sends it, or send it (tests/test_policy_outputs.py)", pulumi_name))
    return out
