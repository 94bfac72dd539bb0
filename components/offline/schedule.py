"""Scheduling in the render: which GPU workload runs now, which waits behind which, which never fits.

Every enabled GPU workload of the record (Job, StatefulSet, MPIJob, RayJob) is placed *whole* onto
the GPU node group, in the queue's order, and the outcome printed per workload:

- **runs now**: every pod of it fits beside what was admitted before it;
- **queued behind X**: it starts once X (the run admitted before it that frees its room) is done;
- **never fits**: even on an empty node group (a multi-node run wider than the node group, one
  pod per node; a pod asking for more than a node offers, or for a resource no node offers; a queue
  that does not cover a resource or whose quota is too small). The rule `schedule-fits` refuses
  the render (exit 1) naming the workload and the resource.

The node group: the instance type and node count the training Namespace records (also on a bring
your own cluster), allocatable from the memory model (catalog: nodeadm formula, 7.5 % VM overhead,
net of the EFA huge pages), minus the DaemonSets (the catalog's figure for the plugins and agents
installed by Helm, plus every DaemonSet of the record that runs on the GPU nodes). Multi-node pod
sets (required anti-affinity on the hostname) take one node per pod. Pods are placed first fit
(components/stack/fit.py, the placement serving's rollout choice and the replicas check use too);
what is this module's own is the order over time. Runs are assumed to finish in the order they
started (their length is not known here).

The queue's order (components/k8s/kueue.py): StrictFIFO by PriorityClass value, then creation
(ties are shown by name: creation order is not known before `up`). A queued workload's pods are
all placed on the GPU node group when its ClusterQueue is the stack's own (Kueue adds the flavor's node labels and
tolerations to every pod set, the MPI launcher's too).

Without Kueue a namespace quota admits pods one at a time: the order is not enforced and a
workload can start with part of its pods. A stack whose GPU workloads are not queued and cannot all
run at once is flagged **partial admission possible**.

The rule `kueue-queue` checks what Kueue needs of a queued workload: a LocalQueue of the stack, a
ClusterQueue covering every resource its pods request (Kueue never admits a pod asking for an
uncovered resource), no `suspend` set by the program (Kueue owns it), and an ordering edge to the
queue and the Kueue installation (its webhooks must answer before the run is created).

Pure functions over the resource view (a row of rendered/<stack>/resources.json): no Pulumi, no
pulumi-kubernetes, so the CrossGuard pack runs it too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from components.offline import deploy_model
from components.offline.resources import (GPU_NODE_COUNT, GPU_TAINT, INSTANCE_TYPE, POD_TEMPLATES, WORKLOAD_KINDS,
                                          Context, Pod, Violation, context, k8s_objects, namespace_annotations,
                                          node_requirements, pod_requests, policy_rule, spec_of)
from components.stack import catalog, fit
from components.stack.labels import EFA, GPU, GPU_NODES_ANNOTATION, HUGEPAGES, QUEUE_LABEL
from components.stack.versions import KUEUE_CHART_REF as KUEUE_CHART

Resource = dict[str, Any]
# Long-running workloads (the serving Deployment, components/workloads/serving.py): never finish,
# not queued by Kueue (the ClusterQueue's quota leaves their GPUs out), placed before every run.
PERMANENT_KINDS = ("Deployment",)
# The pod sets Kueue makes of a RayJob (kueue v0.19.2 pkg/controller/jobs/rayjob/rayjob_controller.go
# PodSets:133-154): "head", one per worker group, and in K8sJobMode (the default) a "submitter" pod set
# of the submitter Job's pod, KubeRay's default submitter container unless submitterPodTemplate is
# given (getSubmitterTemplate:266-286, its resources defaultSubmitterResources:252-263); in SidecarMode
# that container joins the head pod (addSidecarSubmitterToHeadPodSet:319-330). HTTPMode adds none.
RAY_SUBMITTER_CONTAINER = {"name": "ray-job-submitter", "resources": {
    "requests": {"cpu": "500m", "memory": "200Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# How a resource reads in a message: its name and a unit.
_MIB = 2**20
_GIB = 2**30


def _amount(resource: str, value: float) -> str:
    if resource == "cpu":
        return f"{value:.2f} CPU"
    if resource == "memory":
        return f"{value / _GIB:.1f} GiB memory"
    if resource.startswith("hugepages-"):
        return f"{value / _MIB:g} MiB {resource}"
    return f"{value:g} {resource}"


def _quantity(value: Any) -> float:
    """A Kubernetes quantity, or 0 for what is not known before deploy."""
    from components.offline.resources import quantity
    try:
        return quantity(value)
    except (TypeError, ValueError):
        return 0.0


# --- what the record holds ------------------------------------------------------------------------


@dataclass(frozen=True)
class PodSet:
    name: str  # "" for a Job/StatefulSet, the replica type of an MPIJob ("Worker"), a RayJob group
    count: int
    requests: dict[str, float]  # per pod (cores, bytes, devices)
    one_per_node: bool
    # Placed on the GPU node group (it requests GPUs, selects the GPU nodes, or Kueue puts it there).
    gpu_nodes: bool
    suspend_path: Optional[str] = None


@dataclass(frozen=True)
class Workload:
    kind: str
    name: str
    pod_sets: tuple[PodSet, ...]
    priority: int
    priority_class: Optional[str]
    queue: Optional[str]  # the LocalQueue it names (kueue.x-k8s.io/queue-name)
    index: int  # its position in the record; never an ordering (the engine sends rows in no set order)
    pulumi_name: str
    row: str  # deploy_model.ref of its resource
    sets_suspend: Optional[str] = None  # the path of a suspend field the program sets
    # A Deployment's rolling update: extra pods it creates during a rollout (maxSurge, resolved).
    max_surge: int = 0
    namespace: Optional[str] = None  # a LocalQueue is namespaced: the queue it names is the one in here

    @property
    def permanent(self) -> bool:
        return self.kind in PERMANENT_KINDS

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.name}"

    @property
    def pods(self) -> int:
        return sum(p.count for p in self.pod_sets)

    def requests_gpu(self) -> bool:
        return any(p.requests.get(GPU, 0) > 0 for p in self.pod_sets)


@dataclass(frozen=True)
class Queue:
    local: str
    cluster_queue: str
    own: bool  # the ClusterQueue is in the record (the stack's)
    strategy: str = "BestEffortFIFO"
    covered: tuple[str, ...] = ()
    quota: dict[str, float] = field(default_factory=dict)
    flavor_labels: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeGroup:
    instance: catalog.InstanceType
    count: int
    labels: dict[str, str]
    capacity: dict[str, float]  # per node, after the DaemonSets
    daemonsets: tuple[str, ...]


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    return obj.get("metadata") or {}


def _templates(obj: dict[str, Any]) -> list[tuple[str, int, dict[str, Any], Optional[str]]]:
    """(pod set name, pod count, pod template, suspend field path) of a workload object."""
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind == "Job":
        n = int(_quantity(spec.get("parallelism", 1)) or 1)
        if spec.get("completions") is not None:
            n = min(n, int(_quantity(spec["completions"])) or n)
        return [("", n, spec.get("template") or {}, "spec.suspend")]
    if kind in ("StatefulSet", "Deployment"):
        return [("", int(_quantity(spec.get("replicas", 1))), spec.get("template") or {}, None)]
    if kind == "MPIJob":
        return [(role, int(_quantity(rs.get("replicas", 1))), rs.get("template") or {}, "spec.runPolicy.suspend")
                for role, rs in sorted((spec.get("mpiReplicaSpecs") or {}).items())]
    if kind == "RayJob":
        cluster = spec.get("rayClusterSpec") or {}
        mode = spec.get("submissionMode") or "K8sJobMode"  # the CRD's default
        head = (cluster.get("headGroupSpec") or {}).get("template") or {}
        if mode == "SidecarMode":  # KubeRay adds its submitter container to the head pod
            head = {**head, "spec": {**(head.get("spec") or {}), "containers": [
                *((head.get("spec") or {}).get("containers") or []), RAY_SUBMITTER_CONTAINER]}}
        out = [("head", 1, head, "spec.suspend")]
        for g in cluster.get("workerGroupSpecs") or []:
            out.append((g.get("groupName", "workers"), int(_quantity(g.get("replicas", 1))), g.get("template") or {},
                        "spec.suspend"))
        if mode == "K8sJobMode":  # the submitter Job's pod is a pod set of its own
            out.append(("submitter", 1, spec.get("submitterPodTemplate") or {"spec": {"containers": [
                RAY_SUBMITTER_CONTAINER]}}, "spec.suspend"))
        return out
    return []


def _max_surge(obj: dict[str, Any]) -> int:
    """A Deployment's maxSurge in pods: the API default is 25 %, rounded up (apps/v1 DeploymentStrategy)."""
    if obj.get("kind") != "Deployment":
        return 0
    strategy = (obj.get("spec") or {}).get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return 0
    value = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    replicas = int(_quantity((obj.get("spec") or {}).get("replicas", 1)))
    if isinstance(value, str) and value.endswith("%"):
        return -(-replicas * int(value[:-1]) // 100)
    return int(_quantity(value))


def _one_per_node(spec: dict[str, Any]) -> bool:
    terms = (((spec.get("affinity") or {}).get("podAntiAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    return any(t.get("topologyKey") == "kubernetes.io/hostname" for t in terms)


def _suspend_set(obj: dict[str, Any]) -> Optional[str]:
    spec = obj.get("spec") or {}
    if "suspend" in spec:
        return "spec.suspend"
    if "suspend" in (spec.get("runPolicy") or {}):
        return "spec.runPolicy.suspend"
    return None


QueueKey = tuple[Optional[str], Optional[str]]  # (namespace, name) of a LocalQueue


def queues(resources: list[Resource]) -> dict[QueueKey, Queue]:
    """The LocalQueues of the record by namespace and name (a name two namespaces share is two
    queues, whichever comes first), each with its ClusterQueue when the record has it."""
    cqs = {_meta(o).get("name"): o for _, o in k8s_objects(resources)
           if o.get("kind") == "ClusterQueue" and str(o.get("apiVersion", "")).startswith("kueue.x-k8s.io/")}
    flavors = {_meta(o).get("name"): o for _, o in k8s_objects(resources) if o.get("kind") == "ResourceFlavor"}
    out = {}
    for _, o in k8s_objects(resources):
        if o.get("kind") != "LocalQueue":
            continue
        name, cq_name = _meta(o).get("name"), (o.get("spec") or {}).get("clusterQueue")
        key = (_meta(o).get("namespace"), name)
        cq = cqs.get(cq_name)
        if cq is None:
            out[key] = Queue(name, cq_name, own=False)
            continue
        spec = cq.get("spec") or {}
        covered: list[str] = []
        quota: dict[str, float] = {}
        labels: dict[str, str] = {}
        for group in spec.get("resourceGroups") or []:
            covered += list(group.get("coveredResources") or [])
            for f in group.get("flavors") or []:
                labels.update(((flavors.get(f.get("name")) or {}).get("spec") or {}).get("nodeLabels") or {})
                for r in f.get("resources") or []:
                    quota[r["name"]] = quota.get(r["name"], 0.0) + _quantity(r.get("nominalQuota"))
        out[key] = Queue(name, cq_name, True, spec.get("queueingStrategy", "BestEffortFIFO"), tuple(covered),
                          quota, labels)
    return out


def _tolerates_gpu_taint(spec: dict[str, Any]) -> bool:
    return any(t.get("key") == GPU_TAINT or (t.get("operator") == "Exists" and not t.get("key"))
               for t in spec.get("tolerations") or [])


def node_group(resources: list[Resource], ctx: Optional[Context] = None) -> Optional[NodeGroup]:
    ctx = ctx or context(resources)
    if ctx.instance is None:
        return None
    count = max((int(_quantity(v)) for _, v in namespace_annotations(resources, GPU_NODES_ANNOTATION)), default=0)
    if count <= 0:
        return None
    it = ctx.instance
    it_label = {INSTANCE_TYPE_LABEL: it.name}
    alloc = it.allocatable(efa=ctx.efa)
    cap = {"cpu": alloc.cpu - catalog.DAEMONSET_CPU_MILLI / 1000,
           "memory": (alloc.memory_mib_conservative - catalog.DAEMONSET_MEMORY_MIB) * _MIB,
           GPU: float(it.gpu_count), EFA: float(it.efa_devices if ctx.efa else 0),
           HUGEPAGES: float(alloc.hugepages_2mi_mib * _MIB)}
    daemonsets = []
    for _, obj in k8s_objects(resources):
        if obj.get("kind") != "DaemonSet":
            continue
        spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        selector = node_requirements(spec)
        # On the GPU nodes when it runs on any GPU node group (its pods then take room there).
        if not _tolerates_gpu_taint(spec) or not (not selector or ctx.on_gpu_nodes(selector, it_label)):
            continue
        daemonsets.append(_meta(obj).get("name", "?"))
        for r, v in pod_requests(Pod("", "DaemonSet", 1, spec, {})).items():
            cap[r] = cap.get(r, 0.0) - v
    # The labels every GPU node group shares (a selector on them lands on any GPU node).
    shared = [g.labels for g in ctx.gpu_groups]
    labels = {k: v for k, v in (shared[0] if shared else {}).items() if all(x.get(k) == v for x in shared)}
    return NodeGroup(it, count, {**labels, **it_label}, cap, tuple(sorted(daemonsets)))


def workloads(resources: list[Resource], ctx: Optional[Context] = None) -> list[Workload]:
    """The GPU workloads of the record (a pod set requests nvidia.com/gpu)."""
    ctx = ctx or context(resources)
    classes = {_meta(o).get("name"): int(_quantity(o.get("value", 0))) for _, o in k8s_objects(resources)
               if o.get("kind") == "PriorityClass"}
    qs = queues(resources)
    it_label = {INSTANCE_TYPE_LABEL: ctx.instance.name} if ctx.instance else {}
    out = []
    for index, (r, obj) in enumerate(k8s_objects(resources)):
        if obj.get("kind") not in WORKLOAD_KINDS:
            continue
        queue = (_meta(obj).get("labels") or {}).get(QUEUE_LABEL)
        q = qs.get((_meta(obj).get("namespace"), queue)) if queue else None
        # Kueue adds the flavor's node labels to every pod set of an admitted workload.
        flavor_on_gpu = bool(q and q.flavor_labels) and ctx.on_gpu_nodes(q.flavor_labels, it_label)
        sets, pclass = [], None
        for name, count, tmpl, suspend in _templates(obj):
            spec = tmpl.get("spec") or {}
            req = pod_requests(Pod("", obj.get("kind", ""), count, spec, {}))
            selector = node_requirements(spec)
            on_gpu = req.get(GPU, 0) > 0 or flavor_on_gpu or ctx.on_gpu_nodes(selector, it_label)
            sets.append(PodSet(name, count, req, _one_per_node(spec), on_gpu, suspend))
            pclass = pclass or spec.get("priorityClassName")
        w = Workload(obj["kind"], _meta(obj).get("name", "?"), tuple(sets), classes.get(pclass, 0), pclass, queue,
                     index, r["name"], deploy_model.ref(r), _suspend_set(obj), _max_surge(obj),
                     _meta(obj).get("namespace"))
        if w.requests_gpu():
            out.append(w)
    return out


# --- placement -----------------------------------------------------------------------------------


@dataclass
class State:
    free: list[dict[str, float]]
    quota: Optional[dict[str, float]]  # what the ClusterQueue has left (None: no quota known here)


def place(w: Workload, state: State) -> Optional[list[tuple[int, dict[str, float]]]]:
    """Where every pod of `w` goes (node index, requests), or None; first fit, node by node
    (components/stack/fit.py), each pod set in turn."""
    free = [dict(n) for n in state.free]
    placed: list[tuple[int, dict[str, float]]] = []
    for ps in w.pod_sets:
        if not ps.gpu_nodes:
            continue  # on the system nodes, not modelled
        nodes = fit.first_fit(ps.requests, ps.count, free, one_per_node=ps.one_per_node)
        if len(nodes) < ps.count:
            return None
        placed += [(node, ps.requests) for node in nodes]
    if state.quota is not None:
        total = _total(w)
        if not fit.fits(total, state.quota):
            return None
    return placed


def _total(w: Workload) -> dict[str, float]:
    total: dict[str, float] = {}
    for ps in w.pod_sets:
        for r, v in ps.requests.items():
            total[r] = total.get(r, 0.0) + v * ps.count
    return total


def _apply(w: Workload, placed: list[tuple[int, dict[str, float]]], state: State, sign: int) -> None:
    for node, req in placed:
        for r, v in req.items():
            state.free[node][r] = state.free[node].get(r, 0.0) - sign * v
    if state.quota is not None:
        for r, v in _total(w).items():
            state.quota[r] = state.quota.get(r, 0.0) - sign * v


def never_fits(w: Workload, ng: NodeGroup, q: Optional[Queue]) -> Optional[tuple[str, str]]:
    """(resource, reason) when `w` cannot run even alone on the empty node group, else None.

    In the order a reader fixes them: a resource the queue does not cover, then the node group (a
    resource no node offers, more than one node offers, more pods than nodes, the pods together),
    then the queue's quota."""
    if q is not None and q.own:
        for ps in w.pod_sets:
            for r, v in ps.requests.items():
                if v > 0 and r not in q.covered:
                    return r, (f"{_label(ps)}requests {r}, which ClusterQueue {q.cluster_queue} does not cover: "
                               "Kueue never admits it")
    for ps in w.pod_sets:
        if not ps.gpu_nodes:
            continue
        for r, v in ps.requests.items():
            if v > 0 and ng.capacity.get(r, 0.0) <= 0:
                return r, f"{_label(ps)}requests {_amount(r, v)}, and no node of the group offers {r}"
            if v > ng.capacity.get(r, 0.0) + fit.EPS:
                return r, (f"{_label(ps)}requests {_amount(r, v)} per pod, a {ng.instance.name} node offers "
                           f"{_amount(r, ng.capacity[r])} after the DaemonSets")
        if ps.one_per_node and ps.count > ng.count:
            return "nodes", (f"{_label(ps)}runs {ps.count} pods, one per node, and the GPU node group has "
                             f"{ng.count} node(s)")
    if place(w, State([dict(ng.capacity) for _ in range(ng.count)], None)) is None:
        need = _total(w)
        short = [r for r, v in need.items() if v > ng.capacity.get(r, 0.0) * ng.count + fit.EPS]
        if short:
            r = short[0]
            return r, (f"needs {_amount(r, need[r])} in total, the {ng.count} node(s) offer "
                       f"{_amount(r, ng.capacity.get(r, 0.0) * ng.count)}")
        return "nodes", f"its {w.pods} pods do not fit the {ng.count} node(s) together"
    if q is not None and q.own:
        for r, v in _total(w).items():
            if v > q.quota.get(r, 0.0) + fit.EPS:
                return r, (f"needs {_amount(r, v)} in total, ClusterQueue {q.cluster_queue} has a nominal quota "
                           f"of {_amount(r, q.quota.get(r, 0.0))}")
    return None


def _label(ps: PodSet) -> str:
    return f"pod set {ps.name}: " if ps.name else ""


# --- the schedule --------------------------------------------------------------------------------

RUNS_NOW = "runs now"
SERVES = "serves"
QUEUED = "queued behind"
NEVER = "never fits"


@dataclass(frozen=True)
class Outcome:
    workload: Workload
    status: str
    behind: Optional[Workload] = None
    resource: Optional[str] = None
    reason: Optional[str] = None

    def text(self, queued: bool = True) -> str:
        if self.status == QUEUED and self.behind is not None:
            # Not queued: its pods wait one by one, some may start before the others.
            return f"{QUEUED} {self.behind.ref}" if queued else f"waits for {self.behind.ref}, pod by pod"
        if self.status == NEVER:
            return f"{NEVER}: {self.reason}"
        if self.status == SERVES:
            return "serves: never finishes; its pods hold their GPUs while every run below is placed"
        return self.status


@dataclass(frozen=True)
class Schedule:
    node_group: NodeGroup
    outcomes: tuple[Outcome, ...]
    queue: Optional[Queue]  # the queue every GPU workload names (None: not queued, or mixed)
    queued: bool  # every GPU workload is queued
    # A serving Deployment's rollout: ref -> (maxSurge, whether that many more pods fit beside the
    # serving pods and the runs that start first).
    surge: dict[str, tuple[int, bool]] = field(default_factory=dict)
    # Runs one `up` creates together (see created_together): ref of the higher-priority run -> the
    # lower-priority runs that may be admitted before it.
    races: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def partial_admission(self) -> bool:
        """Not queued, and the GPU workloads cannot all run at once."""
        return not self.queued and any(o.status not in (RUNS_NOW, SERVES) for o in self.outcomes)

    def outcome(self, name: str) -> Outcome:
        return next(o for o in self.outcomes if o.workload.name == name)


def simulate(resources: list[Resource]) -> Optional[Schedule]:
    ctx = context(resources)
    ng = node_group(resources, ctx)
    if ng is None:
        return None
    everything = workloads(resources, ctx)
    serving = [w for w in everything if w.permanent]
    found = [w for w in everything if not w.permanent]
    qs = queues(resources)
    names = {(w.namespace, w.queue) for w in found}
    queued = bool(found) and all(w.queue for w in found)
    queue = qs.get(next(iter(names))) if queued and len(names) == 1 else None
    # Equal priorities: Kueue's StrictFIFO takes the older one, and runs created by one `up` have no
    # order known in advance; the name makes the report deterministic (the engine's registration
    # order is not: registrations run concurrently).
    order = sorted(found, key=lambda w: (-w.priority, w.ref, w.row))
    strict = queue is not None and queue.strategy == "StrictFIFO"
    outcomes: dict[str, Outcome] = {}
    pending = []
    for w in order:
        bad = never_fits(w, ng, qs.get((w.namespace, w.queue)) if w.queue else None)
        if bad and serving and "nominal quota" in bad[1]:
            bad = (bad[0], bad[1] + f" (it leaves out what the serving pods of {', '.join(sorted(x.ref for x in serving))} "
                   "hold: training does not fit beside serving)")
        if bad:
            outcomes[w.ref] = Outcome(w, NEVER, resource=bad[0], reason=bad[1])
        else:
            pending.append(w)
    state = State([dict(ng.capacity) for _ in range(ng.count)],
                  dict(queue.quota) if queue is not None and queue.own else None)
    running: list[tuple[Workload, list[tuple[int, dict[str, float]]]]] = []
    # Serving first: it never finishes, so every run is placed beside it (not charged to the
    # queue's quota, which already leaves it out).
    held: dict[str, list[tuple[int, dict[str, float]]]] = {}
    for w in sorted(serving, key=lambda w: (w.ref, w.row)):
        bad = never_fits(w, ng, None)
        placed = None if bad else place(w, State(state.free, None))
        if placed is None:
            bad = bad or ("nodes", "its replicas do not fit beside the serving pods placed before it")
            outcomes[w.ref] = Outcome(w, NEVER, resource=bad[0], reason=bad[1])
            continue
        _apply(w, placed, State(state.free, None), +1)
        held[w.ref] = placed
        outcomes[w.ref] = Outcome(w, SERVES)

    def admit(behind: Optional[Workload]) -> None:
        for w in list(pending):
            placed = place(w, state)
            if placed is None:
                if strict:
                    return
                continue
            _apply(w, placed, state, +1)
            running.append((w, placed))
            pending.remove(w)
            outcomes[w.ref] = Outcome(w, RUNS_NOW if behind is None else QUEUED, behind)

    admit(None)
    surge = {ref: (w.max_surge, _surge_fits(w, held[ref], state)) for ref, w in
             ((w.ref, w) for w in serving) if ref in held and w.max_surge}
    while pending and running:
        done, placed = running.pop(0)
        _apply(done, placed, state, -1)
        admit(done)
    for w in pending:  # nothing left to wait for: only what never finishes (serving) is in its way
        if held:
            gpus = sum(r.get(GPU, 0.0) for placed in held.values() for _, r in placed)
            reason = (f"does not fit beside the serving pods ({', '.join(sorted(held))} holds {gpus:g} GPUs for good): "
                      "training never starts while serving runs")
        else:
            reason = "does not fit beside nothing"
        outcomes[w.ref] = Outcome(w, NEVER, resource="nodes", reason=reason)
    first = [outcomes[w.ref] for w in sorted(serving, key=lambda w: (w.ref, w.row))]
    races = created_together(resources, order, outcomes) if queued else {}
    return Schedule(ng, tuple(first + [outcomes[w.ref] for w in order]), queue, queued, surge, races)


def _awaited_until_done(obj: dict[str, Any]) -> bool:
    """A Job the provider waits for until it is Complete: no pulumi.com/waitFor or skipAwait
    (components/workloads/runs.py: runs are awaited only until created)."""
    ann = _meta(obj).get("annotations") or {}
    return obj.get("kind") == "Job" and "pulumi.com/waitFor" not in ann and ann.get("pulumi.com/skipAwait") != "true"


def created_together(resources: list[Resource], order: list[Workload],
                     outcomes: dict[str, "Outcome"]) -> dict[str, tuple[str, ...]]:
    """Kueue orders by priority only the workloads pending *together*: a run whose Workload appears
    while quota is free is admitted in that scheduling cycle, before a higher-priority run created a
    moment later. Seen on the simulated cluster: the NCCL MPIJob (priority 1000100), created by the
    same `up` as validation (1000200), was admitted in the second both were created, and validation
    waited behind it. A lower-priority run B may go before A unless B is created after A (it
    depends on A) or after a Job the provider awaits until done (A's Workload exists by then);
    runs that all start at once do not race."""
    graph = deploy_model.Graph(resources)
    done_jobs = {deploy_model.ref(r) for r, o in k8s_objects(resources) if _awaited_until_done(o)}
    out: dict[str, tuple[str, ...]] = {}
    for i, a in enumerate(order):
        if outcomes[a.ref].status == NEVER:
            continue
        early = []
        for b in order[i + 1:]:
            if b.priority >= a.priority or outcomes[b.ref].status == NEVER:
                continue
            if outcomes[a.ref].status == RUNS_NOW and outcomes[b.ref].status == RUNS_NOW:
                continue
            if graph.reaches(b.row, {a.row} | (done_jobs - {b.row})):
                continue
            early.append(b.ref)
        if early:
            out[a.ref] = tuple(early)
    return out


def _surge_fits(w: Workload, placed: list[tuple[int, dict[str, float]]], state: State) -> bool:
    """`w.max_surge` more pods of the Deployment fit the free nodes (not beside its own pods where
    it wants one per node), with the serving pods and the runs that start first in place."""
    ps = w.pod_sets[0]
    free = [dict(n) for n in state.free]
    surge = fit.first_fit(ps.requests, w.max_surge, free, one_per_node=ps.one_per_node,
                          taken={node for node, _ in placed})
    return len(surge) == w.max_surge


def report(resources: list[Resource]) -> list[str]:
    """The schedule as the render prints it."""
    s = simulate(resources)
    if s is None or not s.outcomes:
        return []
    ng = s.node_group
    cap = ", ".join(_amount(r, v) for r, v in ng.capacity.items() if v > 0)
    ds = "the catalog's plugins and agents" + "".join(f", {d}" for d in ng.daemonsets)
    lines = [f"schedule: whole workloads on {ng.count} x {ng.instance.name} (per node after the DaemonSets "
             f"({ds}): {cap})"]
    if s.queue is not None:
        q = s.queue
        if q.own:
            quota = ", ".join(_amount(r, v) for r, v in q.quota.items())
            lines.append(f"  queued: LocalQueue {q.local} -> ClusterQueue {q.cluster_queue} ({q.strategy} by priority; "
                         f"nominal quota {quota})")
        else:
            lines.append(f"  queued: LocalQueue {q.local} -> ClusterQueue {q.cluster_queue} (not this stack's: its "
                         "quota and order are not known here; placed as if it were the node group's)")
    elif s.queued:
        lines.append("  queued: the GPU workloads name different queues; placed by priority")
    elif all(o.workload.permanent for o in s.outcomes):
        lines.append("  no run: only serving, which is not queued")
    else:
        lines.append("  not queued (no Kueue): the namespace quota and the scheduler admit pods one at a time, "
                     "the order below is not enforced")
        if s.partial_admission:
            waiting = [o.workload.ref for o in s.outcomes if o.status not in (RUNS_NOW, SERVES)]
            lines.append(f"  PARTIAL ADMISSION POSSIBLE: the GPU workloads cannot all run at once ({', '.join(waiting)} "
                         "would wait): a workload of several pods can start with part of them and fail its deadline; "
                         "queue them (rltrain:kueue) or enable fewer")
    width = max(len(o.workload.ref) for o in s.outcomes)
    for i, o in enumerate(s.outcomes, 1):
        w = o.workload
        lines.append(f"  {i}. {w.ref:<{width}}  priority {w.priority:>10}  {w.pods} pod{'s' if w.pods != 1 else ''}: "
                     f"{o.text(s.queued)}")
    for ref, early in s.races.items():
        lines.append(f"  created together with {ref} by one `up`: {', '.join(early)} may be admitted first "
                     "(Kueue orders by priority only the runs that wait together); workloads.trainingAfterChecks "
                     "makes training wait for the checks")
    for ref, (n, fits) in sorted(s.surge.items()):
        lines.append(f"  rollout of {ref}: maxSurge {n}: "
                     + ("fits beside what runs" if fits else "NO ROOM for a surge pod (it would stay Pending)"))
    return lines


# --- rules ---------------------------------------------------------------------------------------


@policy_rule("schedule-fits", "every GPU workload fits the GPU node group whole (one pod per node for multi-node "
                       "runs, allocatable after the DaemonSets, the queue's coverage and quota)",
      reads=(POD_TEMPLATES, INSTANCE_TYPE, GPU_NODE_COUNT))
def _schedule_fits(resources, ctx):
    s = simulate(resources)
    if s is None:
        return
    for o in s.outcomes:
        if o.status == NEVER:
            yield Violation("schedule-fits", o.workload.ref, f"never fits ({o.resource}): {o.reason}",
                            "size the run to what the GPU nodes can give it: its node count (workloads.runs[].nodes, "
                            "workloads.multiNode.nodes) at most gpuNodes.count less what serving holds "
                            "(workloads.serving: replicas x gpusPerReplica), requests from the catalog; or request "
                            "only resources the GPU nodes offer", o.workload.pulumi_name)


@policy_rule("rollout-fits", "a Deployment on the GPU nodes surges only when its surge pods fit beside the serving pods "
                      "and the runs that start with them", reads=(POD_TEMPLATES, INSTANCE_TYPE, GPU_NODE_COUNT))
def _rollout_fits(resources, ctx):
    s = simulate(resources)
    if s is None:
        return
    for ref, (n, fits) in s.surge.items():
        if not fits:
            w = next(o.workload for o in s.outcomes if o.workload.ref == ref)
            yield Violation("rollout-fits", ref, f"maxSurge {n}: no node has room for a surge pod beside the serving "
                            "pods and the runs; the new pod stays Pending and the rollout never finishes",
                            "maxSurge 0 / maxUnavailable 1 (rltrain:workloads.serving.rollout: auto or replace)",
                            w.pulumi_name)


def _reaches(graph: "deploy_model.Graph", start: str, targets: Iterable[str]) -> bool:
    targets = set(targets)
    return not targets or graph.reaches(start, targets)


@policy_rule("kueue-queue", "queued workloads name a LocalQueue of the stack whose ClusterQueue covers every resource "
                     "their pods request, leave suspend to Kueue, and come after the queue and Kueue",
      reads=(POD_TEMPLATES, spec_of("LocalQueue"), spec_of("ClusterQueue")))
def _kueue_queue(resources, ctx):
    found = [w for w in workloads(resources, ctx) if w.queue]
    if not found:
        return
    qs = queues(resources)
    graph = deploy_model.Graph(resources)
    local_rows = {(_meta(o).get("namespace"), _meta(o).get("name")): deploy_model.ref(r)
                  for r, o in k8s_objects(resources) if o.get("kind") == "LocalQueue"}
    release = deploy_model.releases(resources, KUEUE_CHART)
    for w in found:
        q = qs.get((w.namespace, w.queue))
        if q is None:
            yield Violation("kueue-queue", w.ref, f"names LocalQueue {w.queue!r}, which the stack does not create: "
                            "Kueue leaves it suspended forever", "create the LocalQueue (components/k8s/kueue.py)",
                            w.pulumi_name)
            continue
        if q.own:
            uncovered = sorted({r for ps in w.pod_sets for r, v in ps.requests.items() if v > 0} - set(q.covered))
            if uncovered:
                yield Violation("kueue-queue", w.ref, f"requests {', '.join(uncovered)}, which ClusterQueue "
                                f"{q.cluster_queue} does not cover: Kueue never admits it",
                                "list every requested resource in the ClusterQueue's coveredResources", w.pulumi_name)
        if w.sets_suspend:
            yield Violation("kueue-queue", w.ref, f"sets {w.sets_suspend}: Kueue suspends and resumes a queued "
                            "workload, a program that owns the field fights it on every `pulumi up`",
                            "leave suspend unset", w.pulumi_name)
        key = (w.namespace, w.queue)
        for what, targets in ((f"LocalQueue {w.queue}", [local_rows[key]] if key in local_rows else []),
                              ("the Kueue installation", release)):
            if not _reaches(graph, w.row, targets):
                yield Violation("kueue-queue", w.ref, f"is not ordered after {what}: created first, Kueue's webhook "
                                "refuses it or it is never admitted", f"add depends_on on {what}", w.pulumi_name)


@policy_rule("gpu-runs-queued", "with a LocalQueue in the stack (Kueue on), every GPU run names it: an unqueued run "
                         "is not admitted whole and takes GPUs past the queue",
      reads=(POD_TEMPLATES, spec_of("LocalQueue", what="metadata")))
def _gpu_runs_queued(resources, ctx):
    local = sorted({_meta(o).get("name") for _, o in k8s_objects(resources) if o.get("kind") == "LocalQueue"})
    if not local:
        return
    for w in workloads(resources, ctx):
        if w.permanent or w.queue or not w.requests_gpu():
            continue
        yield Violation("gpu-runs-queued", w.ref, f"requests GPUs without the label kueue.x-k8s.io/queue-name while "
                        f"the stack queues on LocalQueue {', '.join(local)}: Kueue never sees it, so it starts pod "
                        "by pod beside the queued runs and can take their GPUs",
                        f"label it kueue.x-k8s.io/queue-name: {local[0]} (components/k8s/kueue.py queue_labels)",
                        w.pulumi_name)
