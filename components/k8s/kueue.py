"""Kueue: every GPU workload of the stack waits in a queue until *all* its pods fit, then starts whole.

A namespace ResourceQuota admits pods one at a time: a multi-node run whose head is admitted
without its workers times out, an MPIJob's launcher never starts. Kueue admits whole workloads
(FACTS.md "Kueue", v0.19.2):

- **Install** (`rltrain:kueue.install`, the cluster-wide rule `StackConfig.installs`: on a created
  cluster, opt-in on a bring-your-own one): the `kueue` Helm chart from its OCI registry, pinned in
  versions.py, in `kueue-system`. Its Configuration (strictly decoded by Kueue: unknown fields fail
  the controller) keeps the chart's defaults and sets `waitForPodsReady` and the integrations.
- **Queues**, derived from the catalog and the node group, named after the training namespace so
  two stacks on one cluster never own the same cluster-scoped object:
  a `ResourceFlavor` `<ns>-gpu` (the GPU node group's labels, the GPU taint's toleration, and
  `topologyName` where the instance type gets the EKS network topology labels), a `Topology`
  `<ns>-network` (network-node-layer-1..3, then hostname), a `ClusterQueue` `<ns>` admitting only
  the training namespace, covering every resource a queued pod requests (cpu, memory,
  nvidia.com/gpu and, with EFA, vpc.amazonaws.com/efa and hugepages-2Mi: Kueue never admits a pod
  asking for a resource the queue does not cover) with nominal quota = what the nodes offer
  (allocatable after the DaemonSets, x node count), and a `LocalQueue` `training` in the namespace.
  With `rltrain:kueue.clusterQueue` (bring your own cluster) only the LocalQueue is created,
  pointing at that existing ClusterQueue.
- **Workloads** carry `kueue.x-k8s.io/queue-name` (queue_labels); Kueue's webhook suspends them at
  creation and un-suspends them on admission. The program never sets `spec.suspend` (it would
  fight Kueue on every `up`). Multi-node pod sets *prefer* the nearest network layer
  (podset_topology): a required level can block a run forever, since having the labels does not put
  the nodes under one switch.

Order in the queue: StrictFIFO by priority (the PriorityClasses of build.py: validation, then the
NCCL test, then training), then creation time; no preemption inside the queue.

Changing a flavor or a topology (docs/queue-operations.md): their fields are immutable (CRD
validation rules at v0.19.2: a Topology's levels; a ResourceFlavor's nodeLabels, tolerations and
topologyName once it has a topology), and Kueue keeps its `kueue.x-k8s.io/resource-in-use` finalizer
on a ResourceFlavor while a ClusterQueue names it and on a Topology while a flavor names it
(pkg/controller/core/resourceflavor_controller.go, pkg/controller/tas/topology_controller.go). A
delete-before-replace under a fixed name would wait on that finalizer forever (the ClusterQueue,
linked by a name and dependsOn only, is not replaced with it: pulumi pkg/resource/deploy/
step_generator.go calculateDependentReplacements). So both are *content-named*: the name ends in a
hash of the spec (`<ns>-gpu-<hash>`, `<ns>-network-<hash>`). A change creates a new object under a new
name, the ClusterQueue is updated in place to name it, and the old one is deleted last, once nothing
names it (Kueue then drops the finalizer). The ClusterQueue keeps its fixed name and is only ever
updated in place (quota, coverage, flavor: none of its fields is immutable). A LocalQueue's
clusterQueue is immutable: changing it replaces the LocalQueue (fixed name: deleted first; Kueue puts
no finalizer on LocalQueues).

The controller (chart values, `release_values`): two replicas (leader election: one active, the other
serves the webhooks and takes over) spread over the system nodes, a PodDisruptionBudget keeping one,
and `managedJobsNamespaceSelector` limited to the namespaces labelled `rltrain/kueue-managed: "true"`
(each stack that queues labels its training namespace): the chart copies it into the
namespaceSelector of every job webhook (charts/kueue/templates/webhook/manifests.yaml), which fail
closed. Without it the webhooks see every namespace but kube-system and kueue-system (other teams'
Jobs, the monitoring chart's hook Jobs) and a Kueue outage blocks them all. A label, not a list of
names: Kueue reconciles only Jobs in namespaces the selector matches, queue label or not (v0.19.2
pkg/controller/jobframework/reconciler.go), so a list of this stack's namespaces left a second
stack's runs on the same cluster unqueued (tests/sim/test_day_two.py scenario 8 deploys a second
stack beside the first).
"""

from __future__ import annotations

import json
from typing import Mapping, Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pydantic import BaseModel, ConfigDict, Field

from components.stack import catalog, node_efa, versions
from components.stack.config import StackConfig
from components.stack.labels import GPU_TAINT_KEY, KUEUE_MANAGED_LABEL, MANAGED_BY, ROLE_LABEL, short_hash
from components.k8s.options import child_opts
from components.stack.config import IMAGE_PULL_MARGIN_SECONDS
from components.stack.labels import EFA, GPU, HUGEPAGES, QUEUE_LABEL

API_VERSION = versions.KUEUE_API_VERSION
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
RELEASE = "kueue"
LOCAL_QUEUE = "training"
HOSTNAME_LABEL = "kubernetes.io/hostname"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
# The controller Deployment's selector labels (charts/kueue/templates/_helpers.tpl
# kueue.selectorLabels at v0.19.2, release name RELEASE).
CONTROLLER_SELECTOR = {"app.kubernetes.io/name": "kueue", "app.kubernetes.io/instance": "kueue",
                       "control-plane": "controller-manager"}
CONTROLLER_REPLICAS = 2
# The controller's metrics Service (templates/manager/auth_proxy_service.yaml: port `https` 8443,
# labels kueue.metricsService.labels incl. app.kubernetes.io/component: metrics-service).
METRICS_SERVICE_LABELS = {"app.kubernetes.io/name": "kueue", "app.kubernetes.io/instance": "kueue",
                          "app.kubernetes.io/component": "metrics-service"}
METRICS_PORT_NAME = "https"
# EKS network topology labels, layer 1 farthest from the instance, layer 3 the switch closest to it
# (FACTS "Deploy semantics"; placement.TOPOLOGY_WEIGHTS prefers the same layers).
NETWORK_LAYERS = tuple(f"topology.k8s.aws/network-node-layer-{i}" for i in (1, 2, 3))
NEAREST_LAYER = NETWORK_LAYERS[-1]
# The AWS cloud controller manager sets those labels on p, trn and hpc instance types
# (kubernetes/cloud-provider-aws, first in v1.32).
TOPOLOGY_FAMILIES = ("p", "trn", "hpc")
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# Frameworks Kueue manages (the API default is batch/job only). No pod-based integration (pod,
# deployment, statefulset): their webhooks act on every pod of a managed namespace, and the stack
# queues no bare pods (its StatefulSet form is refused while queueing is on, config.py).
INTEGRATIONS = ("batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/raycluster")
# waitForPodsReady: an admitted workload whose pods are not all Ready within the timeout is evicted
# and requeued. Before the last pod of a run is Ready, images are pulled at most twice in sequence
# (an MPIJob's launcher is created only once its workers are ready), each bounded by the cold-pull
# margin the Job deadlines add (IMAGE_PULL_MARGIN_SECONDS). Kueue's default, 30 min, evicts slow
# p5 pulls (FACTS); the timeout is three times those two pulls.
PODS_READY_TIMEOUT_SECONDS = 3 * 2 * IMAGE_PULL_MARGIN_SECONDS
# The first requeue delay after such an eviction (Kueue's own default is also 60 s:
# kueue v0.19.2 apis/config/v1beta2/defaults.go DefaultRequeuingBackoffBaseSeconds).
REQUEUE_BACKOFF_BASE_SECONDS = 60
# The chart's own Configuration (charts/kueue/values.yaml at v0.19.2, managerConfig), kept as is.
CHART_CONFIG = {
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {"groupKindConcurrency": {
        "Job.batch": 5, "Pod": 5, "Workload.kueue.x-k8s.io": 10, "LocalQueue.kueue.x-k8s.io": 5,
        "ClusterQueue.kueue.x-k8s.io": 5, "ResourceFlavor.kueue.x-k8s.io": 1}},
    "clientConnection": {"qps": 300, "burst": 500},
}


def has_network_topology(it: catalog.InstanceType) -> bool:
    family = it.family
    return any(family.startswith(f) and family[len(f):][:1].isdigit() for f in TOPOLOGY_FAMILIES)


def cluster_queue_name(cfg: StackConfig) -> str:
    return cfg.kueue.cluster_queue or cfg.training.namespace


def content_name(prefix: str, spec: dict) -> str:
    """`<prefix>-<hash of the spec>`: a changed spec is a new object under a new name (module docstring)."""
    return f"{prefix}-{short_hash(json.dumps(spec, sort_keys=True, separators=(',', ':')))}"


def topology_levels() -> list[dict[str, str]]:
    return [{"nodeLabel": label} for label in (*NETWORK_LAYERS, HOSTNAME_LABEL)]


def flavor_node_labels(cfg: StackConfig) -> dict[str, str]:
    return {**ROLE_LABEL, INSTANCE_TYPE_LABEL: cfg.gpu_nodes.instance_type}


def topology_name(cfg: StackConfig) -> Optional[str]:
    """The stack's Topology, where it creates its own queue on a type with the topology labels.

    None in elastic mode: topology-aware scheduling places a workload on nodes Kueue already knows
    (kueue v0.19.2 pkg/cache/scheduler/tas_nodes_cache.go, tas_flavor_snapshot.go: its domains are
    the nodes present), so with zero nodes a TAS flavor admits nothing and Karpenter is never asked.
    There the cluster placement group of the EC2NodeClass keeps a run's nodes close instead
    (docs/elastic-capacity.md)."""
    if cfg.gpu_nodes.elastic.enabled:
        return None
    if cfg.kueue.cluster_queue is None and has_network_topology(cfg.gpu_nodes.instance):
        return content_name(f"{cfg.training.namespace}-network", {"levels": topology_levels()})
    return None


def flavor_name(cfg: StackConfig) -> str:
    return content_name(f"{cfg.training.namespace}-gpu",
                        flavor_spec(flavor_node_labels(cfg), topology_name(cfg)))


def queue_labels(cfg: StackConfig) -> dict[str, str]:
    """On every GPU workload object (Job, MPIJob; not their pods) while queueing is on."""
    return {QUEUE_LABEL: LOCAL_QUEUE} if cfg.kueue_enabled else {}


def podset_topology(cfg: StackConfig) -> dict[str, str]:
    """On the pod template of a multi-node pod set: prefer one nearest switch, never require it."""
    return {PREFERRED_TOPOLOGY: NEAREST_LAYER} if cfg.kueue_enabled and topology_name(cfg) else {}


def pods_ready_timeout_seconds(cfg: StackConfig) -> int:
    minutes = cfg.kueue.pods_ready_timeout_minutes
    return minutes * 60 if minutes else PODS_READY_TIMEOUT_SECONDS


def _duration(seconds: int) -> str:
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def node_offer(cfg: StackConfig) -> dict[str, int]:
    """What one GPU node offers the queue's pods, in base units (millicores, MiB, devices): the
    kubelet's allocatable of the memory model (conservative, net of the EFA huge pages) minus the
    DaemonSets (catalog figures). Keys in the order the ClusterQueue lists them."""
    g = cfg.gpu_nodes
    it = g.instance
    # Net of the EFA huge pages whenever the node carries EFA interfaces, even when the pods use none
    # (one node): the driver allocates them on every EFA-enabled instance (stack/node_efa.py).
    alloc = it.allocatable(efa=node_efa.interfaces(g))
    offer = {"cpu": alloc.cpu_milli - catalog.DAEMONSET_CPU_MILLI,
             "memory": alloc.memory_mib_conservative - catalog.DAEMONSET_MEMORY_MIB,
             GPU: it.gpu_count}
    if g.efa_devices_per_node:
        offer[EFA] = g.efa_devices_per_node
        offer[HUGEPAGES] = alloc.hugepages_2mi_mib
    return offer


def nominal_quota(cfg: StackConfig, held: Optional[Mapping[str, int]] = None) -> dict[str, str]:
    """The node group's offer x node count, as Kubernetes quantities, less `held`: what the serving
    Deployment holds (its replicas and a surge: workloads/serving.py reserved, handed in by the
    caller, since k8s/ does not read workloads/). Serving is not queued (Kueue manages no
    Deployments here), so the queue must not admit training onto its GPUs.

    In elastic mode the count is the maximum (`gpuNodes.elastic.maxNodes`), not the nodes present
    (none between runs): Kueue admits a run when the maximum has room for all of it, and its pods
    are what makes Karpenter launch the nodes."""
    n = cfg.gpu_nodes.node_limit
    units = {"cpu": "m", "memory": "Mi", HUGEPAGES: "Mi"}
    held = held or {}
    return {r: f"{max(0, v * n - held.get(r, 0))}{units.get(r, '')}" for r, v in node_offer(cfg).items()}


class KueueArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    install: bool
    # The stack's own ResourceFlavor and ClusterQueue (and Topology); False: clusterQueue names one.
    own_queue: bool
    enabled: bool
    cluster_queue: str
    flavor: str
    topology: Optional[str] = None
    node_labels: dict[str, str]
    # Resource name -> nominal quota, in the order of coveredResources.
    quota: dict[str, str]
    pods_ready_timeout_seconds: int = Field(ge=60)
    # Requeues after a PodsReady timeout (admission or recovery) before the workload is deactivated:
    # the run's bound on infrastructure restarts (workloads.infrastructureRestarts).
    requeue_limit: int = Field(ge=0)
    # Kueue's first requeue delay after a PodsReady eviction; later ones double it (with jitter) up to
    # backoffMaxSeconds (kueue v0.19.2 apis/config/v1beta2/configuration_types.go RequeuingStrategy).
    # Only the simulated cluster shortens it (cluster/sim.py kueue_timing), so a test can see a run
    # reach its requeue limit in minutes; rendered stacks keep REQUEUE_BACKOFF_BASE_SECONDS.
    requeue_backoff_base_seconds: int = Field(REQUEUE_BACKOFF_BASE_SECONDS, ge=1)


def kueue_args(cfg: StackConfig, held: Optional[Mapping[str, int]] = None) -> KueueArgs:
    return KueueArgs(
        namespace=cfg.training.namespace, install=cfg.kueue_install, enabled=cfg.kueue_enabled,
        own_queue=cfg.kueue_enabled and cfg.kueue.cluster_queue is None,
        cluster_queue=cluster_queue_name(cfg), flavor=flavor_name(cfg), topology=topology_name(cfg),
        node_labels=flavor_node_labels(cfg),
        quota=nominal_quota(cfg, held), pods_ready_timeout_seconds=pods_ready_timeout_seconds(cfg),
        requeue_limit=cfg.workloads.infrastructure_restarts)


# --- the controller ------------------------------------------------------------------------------


def manager_config(a: KueueArgs) -> dict:
    """config.kueue.x-k8s.io/v1beta2 Configuration: the chart's, plus waitForPodsReady (which has
    no `enable` field: it is on by default since v0.19.0) and the integrations."""
    timeout = _duration(a.pods_ready_timeout_seconds)
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        **CHART_CONFIG,
        # Per-ClusterQueue resource metrics (kueue_cluster_queue_resource_reservation, _nominal_quota):
        # off unless enableClusterQueueResources (apis/config/v1beta2/configuration_types.go
        # ControllerMetrics; cmd/kueue/main.go). The "queue stuck while its GPUs sit idle" alert reads them.
        "metrics": {**CHART_CONFIG["metrics"], "enableClusterQueueResources": True},
        # Jobs without the queue label (other teams' on a shared cluster) are left alone.
        "manageJobsWithoutQueueName": False,
        # Only the queueing stacks' namespaces reach Kueue's job webhooks (module docstring): the chart renders
        # this selector into every job webhook's namespaceSelector. In Kueue itself it scopes the
        # pod-based integrations and manageJobsWithoutQueueName (configuration_types.go).
        "managedJobsNamespaceSelector": managed_jobs_selector(a),
        "waitForPodsReady": {
            "timeout": timeout,
            # Admission is not blocked while a workload's pods start: the quota is what the nodes
            # offer, so whatever is admitted fits beside what runs.
            "blockAdmission": False,
            # A replaced pod of a running run (node failure) gets the same time to be Ready again.
            "recoveryTimeout": timeout,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": a.requeue_limit,
                                  "backoffBaseSeconds": a.requeue_backoff_base_seconds,
                                  "backoffMaxSeconds": 3600},
        },
        "integrations": {"frameworks": list(INTEGRATIONS)},
    }


def managed_jobs_selector(a: KueueArgs) -> dict:
    """The namespaces whose Jobs reach Kueue: those labelled KUEUE_MANAGED_LABEL (module docstring)."""
    return {"matchLabels": dict(KUEUE_MANAGED_LABEL)}


def release_values(a: KueueArgs) -> dict:
    """Chart values (charts/kueue/values.yaml at v0.19.2)."""
    return {
        "controllerManager": {
            # The webhooks fail closed: with one replica (the chart's default) a node drain or a crash
            # refuses every queued run until it is back. Two replicas (leader election picks the
            # active controller; both serve webhooks), on different system nodes where possible.
            "replicas": CONTROLLER_REPLICAS,
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": HOSTNAME_LABEL, "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": dict(CONTROLLER_SELECTOR)}}],
            # templates/manager/manager-pdb.yaml: minAvailable over the controller's selector labels.
            "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
        },
        # The metrics endpoint is always served (metrics.bindAddress :8443, HTTPS with authn/authz,
        # cmd/kueue/main.go). enablePrometheus adds only a ServiceMonitor and a RoleBinding for the
        # kube-prometheus service account names (templates/prometheus/), which needs the Prometheus
        # CRDs before Kueue is installed; the monitoring part scrapes Kueue with its own
        # ServiceMonitor instead (monitoring.kueue_servicemonitor_spec).
        "enablePrometheus": False,
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(a), sort_keys=False)},
    }


def chart_ref() -> str:
    return versions.KUEUE_CHART_REF


# --- the queue objects ---------------------------------------------------------------------------


def flavor_spec(node_labels: dict[str, str], topology: Optional[str]) -> dict:
    spec = {"nodeLabels": dict(node_labels), "tolerations": [dict(GPU_TOLERATION)]}
    if topology:
        spec["topologyName"] = topology
    return spec


def resource_flavor_spec(a: KueueArgs) -> dict:
    return flavor_spec(a.node_labels, a.topology)


def topology_spec(a: KueueArgs) -> dict:
    return {"levels": topology_levels()}


def cluster_queue_spec(a: KueueArgs) -> dict:
    return {
        # Only the training namespace (null would admit none, {} every namespace).
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": a.namespace}},
        # By priority, then creation: validation, the NCCL test, then training, each whole.
        "queueingStrategy": "StrictFIFO",
        # A queued check never evicts a running run.
        "preemption": {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never"},
        "resourceGroups": [{
            "coveredResources": list(a.quota),
            "flavors": [{"name": a.flavor,
                         "resources": [{"name": r, "nominalQuota": q} for r, q in a.quota.items()]}],
        }],
    }


def local_queue_spec(a: KueueArgs) -> dict:
    return {"clusterQueue": a.cluster_queue}


def _meta(name: str, namespace: Optional[pulumi.Input[str]] = None) -> k8s.meta.v1.ObjectMetaArgs:
    return k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace,
                                      labels={**MANAGED_BY, "app.kubernetes.io/component": "queue"})


class Kueue(pulumi.ComponentResource):
    """The Kueue controller (when installed) and the stack's queue objects."""

    local_queue: str

    def __init__(self, name: str, args: KueueArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:index:Kueue", name, None, opts)
        after: list[pulumi.Resource] = []
        self.release = None
        if args.install:
            # Waits for the controller and its webhooks: a queued Job created before them would be
            # refused (the webhooks fail closed).
            self.release = k8s.helm.v3.Release(
                f"{name}-controller", name=RELEASE, chart=chart_ref(), version=versions.KUEUE.version,
                namespace=versions.KUEUE_NAMESPACE, create_namespace=True, values=release_values(args),
                skip_await=False, timeout=600, opts=child_opts(self, opts))
            after.append(self.release)
        self.local_queue = LOCAL_QUEUE
        if not args.enabled:
            self.register_outputs({})
            return

        def cr(res: str, kind: str, meta: k8s.meta.v1.ObjectMetaArgs, spec: dict, deps: list[pulumi.Resource],
               replace: list[str]) -> k8s.apiextensions.CustomResource:
            return k8s.apiextensions.CustomResource(
                f"{name}-{res}", api_version=API_VERSION, kind=kind, metadata=meta, spec=spec,
                opts=child_opts(self, opts, *deps, replace_on_changes=replace or None,
                                     delete_before_replace=bool(replace)))

        queue_deps = list(after)
        if args.own_queue:
            # Content-named (module docstring): a changed spec is a new name, created before the
            # ClusterQueue is updated to it; the old object is deleted last. Never replaceOnChanges.
            flavor_deps = list(after)
            if args.topology:
                flavor_deps.append(cr("topology", "Topology", _meta(args.topology), topology_spec(args), after, []))
            flavor = cr("flavor", "ResourceFlavor", _meta(args.flavor), resource_flavor_spec(args), flavor_deps, [])
            queue_deps = [cr("cluster-queue", "ClusterQueue", _meta(args.cluster_queue), cluster_queue_spec(args),
                             [*after, flavor], [])]
        self.queue = cr("local-queue", "LocalQueue", _meta(LOCAL_QUEUE, namespace), local_queue_spec(args),
                        queue_deps, ["spec.clusterQueue"])
        self.register_outputs({"localQueue": LOCAL_QUEUE, "clusterQueue": args.cluster_queue})


def build_kueue(cfg: StackConfig, *, namespace: pulumi.Input[str],
                opts: Optional[pulumi.ResourceOptions] = None, name: str = "kueue",
                held: Optional[Mapping[str, int]] = None) -> Optional[Kueue]:
    """The Kueue component when the stack installs Kueue or queues its workloads; `opts` carries the
    Kubernetes provider and what must exist first (the training namespace, the node groups)."""
    if not (cfg.kueue_install or cfg.kueue_enabled):
        return None
    return Kueue(name, kueue_args(cfg, held), namespace, opts)
