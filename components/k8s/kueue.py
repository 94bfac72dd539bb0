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

Immutable fields (CRD validation rules): a LocalQueue's clusterQueue, a Topology's levels, and a
ResourceFlavor's nodeLabels/tolerations/topologyName once it has a topology. A change to them
replaces the object (fixed name: deleted first).
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s
import yaml
from pydantic import BaseModel, ConfigDict, Field

from components.stack import catalog, versions
from components.stack.config import StackConfig
from components.stack.labels import GPU_TAINT_KEY, MANAGED_BY, ROLE_LABEL
from components.k8s.options import child_opts
from components.stack.config import IMAGE_PULL_MARGIN_SECONDS
from components.stack.labels import EFA, GPU, HUGEPAGES

API_VERSION = "kueue.x-k8s.io/v1beta2"
CONFIG_API_VERSION = "config.kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
RELEASE = "kueue"
LOCAL_QUEUE = "training"
HOSTNAME_LABEL = "kubernetes.io/hostname"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
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


def flavor_name(cfg: StackConfig) -> str:
    return f"{cfg.training.namespace}-gpu"


def topology_name(cfg: StackConfig) -> Optional[str]:
    """The stack's Topology, where it creates its own queue on a type with the topology labels."""
    if cfg.kueue.cluster_queue is None and has_network_topology(cfg.gpu_nodes.instance):
        return f"{cfg.training.namespace}-network"
    return None


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
    alloc = it.allocatable(efa=g.efa_enabled)
    offer = {"cpu": alloc.cpu_milli - catalog.DAEMONSET_CPU_MILLI,
             "memory": alloc.memory_mib_conservative - catalog.DAEMONSET_MEMORY_MIB,
             GPU: it.gpu_count}
    if g.efa_devices_per_node:
        offer[EFA] = g.efa_devices_per_node
        offer[HUGEPAGES] = alloc.hugepages_2mi_mib
    return offer


def nominal_quota(cfg: StackConfig) -> dict[str, str]:
    """The node group's offer x node count, as Kubernetes quantities."""
    n = cfg.gpu_nodes.count
    units = {"cpu": "m", "memory": "Mi", HUGEPAGES: "Mi"}
    return {r: f"{v * n}{units.get(r, '')}" for r, v in node_offer(cfg).items()}


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
    # Requeues after a PodsReady timeout before the workload is deactivated.
    requeue_limit: int = Field(ge=0)


def kueue_args(cfg: StackConfig) -> KueueArgs:
    return KueueArgs(
        namespace=cfg.training.namespace, install=cfg.kueue_install, enabled=cfg.kueue_enabled,
        own_queue=cfg.kueue_enabled and cfg.kueue.cluster_queue is None,
        cluster_queue=cluster_queue_name(cfg), flavor=flavor_name(cfg), topology=topology_name(cfg),
        node_labels={**ROLE_LABEL, INSTANCE_TYPE_LABEL: cfg.gpu_nodes.instance_type},
        quota=nominal_quota(cfg), pods_ready_timeout_seconds=pods_ready_timeout_seconds(cfg),
        requeue_limit=cfg.workloads.retries)


# --- the controller ------------------------------------------------------------------------------


def manager_config(a: KueueArgs) -> dict:
    """config.kueue.x-k8s.io/v1beta2 Configuration: the chart's, plus waitForPodsReady (which has
    no `enable` field: it is on by default since v0.19.0) and the integrations."""
    timeout = _duration(a.pods_ready_timeout_seconds)
    return {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "Configuration",
        **CHART_CONFIG,
        # Jobs without the queue label (other teams' on a shared cluster) are left alone.
        "manageJobsWithoutQueueName": False,
        "waitForPodsReady": {
            "timeout": timeout,
            # Admission is not blocked while a workload's pods start: the quota is what the nodes
            # offer, so whatever is admitted fits beside what runs.
            "blockAdmission": False,
            # A replaced pod of a running run (node failure) gets the same time to be Ready again.
            "recoveryTimeout": timeout,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": a.requeue_limit,
                                  "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
        },
        "integrations": {"frameworks": list(INTEGRATIONS)},
    }


def release_values(a: KueueArgs) -> dict:
    return {"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(manager_config(a), sort_keys=False)}}


def chart_ref() -> str:
    return f"{versions.KUEUE.repo}/{versions.KUEUE.chart}"


# --- the queue objects ---------------------------------------------------------------------------


def resource_flavor_spec(a: KueueArgs) -> dict:
    spec = {"nodeLabels": dict(a.node_labels), "tolerations": [dict(GPU_TOLERATION)]}
    if a.topology:
        spec["topologyName"] = a.topology
    return spec


def topology_spec(a: KueueArgs) -> dict:
    return {"levels": [{"nodeLabel": label} for label in (*NETWORK_LAYERS, HOSTNAME_LABEL)]}


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
            flavor_deps = list(after)
            if args.topology:
                flavor_deps.append(cr("topology", "Topology", _meta(args.topology), topology_spec(args), after,
                                      ["spec"]))
            flavor = cr("flavor", "ResourceFlavor", _meta(args.flavor), resource_flavor_spec(args), flavor_deps,
                        ["spec"] if args.topology else [])
            queue_deps = [cr("cluster-queue", "ClusterQueue", _meta(args.cluster_queue), cluster_queue_spec(args),
                             [*after, flavor], [])]
        self.queue = cr("local-queue", "LocalQueue", _meta(LOCAL_QUEUE, namespace), local_queue_spec(args),
                        queue_deps, ["spec.clusterQueue"])
        self.register_outputs({"localQueue": LOCAL_QUEUE, "clusterQueue": args.cluster_queue})


def build_kueue(cfg: StackConfig, *, namespace: pulumi.Input[str],
                opts: Optional[pulumi.ResourceOptions] = None, name: str = "kueue") -> Optional[Kueue]:
    """The Kueue component when the stack installs Kueue or queues its workloads; `opts` carries the
    Kubernetes provider and what must exist first (the training namespace, the node groups)."""
    if not (cfg.kueue_install or cfg.kueue_enabled):
        return None
    return Kueue(name, kueue_args(cfg), namespace, opts)
