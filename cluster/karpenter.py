"""Karpenter with its kwok cloud provider on the simulated cluster (issue 30, elastic mode).

The real Karpenter core (sigs.k8s.io/karpenter v1.14.0, built by cluster/build.sh from the Go
module proxy) runs as a process of this machine. Its kwok cloud provider "launches" an instance by
creating a Node object after the KWOKNodeClass's `nodeRegistrationDelay` (the boot time), which
the kwok controller then runs as any other fake node (kwok/cloudprovider/cloudprovider.go Create,
toNode). Scheduling, limits, consolidation and NodeOverlays are Karpenter's own code.

What is derived here, nothing typed twice:
- the instance-type file (kwok/cloudprovider/helpers.go InstanceTypeOptions) from the catalog: the
  stack's one GPU type, its on-demand price, the GPU AZ, and the resources the AWS provider computes
  for it (CPU, memory, pods, GPUs, EFA: karpenter-provider-aws v1.14.0 pkg/providers/instancetype/
  types.go computeCapacity). No huge pages, as on AWS: the stack's NodeOverlay has to add them.
  Allocatable is what the fixed simulated nodes offer (cluster/nodes.py), the kwok provider's own
  kube-reserved (100m CPU, 10Mi: helpers.go newInstanceType Overhead) added back to the capacity.
- the NodePool and NodeOverlay: the program's own builders (components/k8s/karpenter_nodes.py), only
  the node class a KWOKNodeClass instead of the EC2NodeClass.

Only what to start and apply is here (pure: no cluster); cluster/sim.py starts the controller as part
of the cluster's own start (`Cluster.start(elastic=...)`), as it starts KubeRay and the MPI operator.
"""

from __future__ import annotations

from typing import Any, Optional

from cluster.binaries import versions_env
from components.k8s import karpenter_nodes
from components.stack.config import StackConfig
from components.stack.labels import EFA, GPU

NODE_CLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "rltrain-gpu"}
# kwok/cloudprovider/helpers.go newInstanceType: every kwok instance type's KubeReserved.
KWOK_RESERVED_CPU_MILLI = 10 * 10
KWOK_RESERVED_MEMORY_MIB = 10
# NodeOverlay is behind a feature gate, off by default (pkg/operator/options/options.go); the
# stack's Karpenter turns it on, and so does this one.
FEATURE_GATES = "NodeOverlay=true"
NAMESPACE = "karpenter"
# Its CRDs, from its module tree (pkg/apis/crds, kwok/apis/crds).
CRD_DIRS = ("pkg/apis/crds", "kwok/apis/crds")
CRDS = ("nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "nodeoverlays.karpenter.sh",
        "kwoknodeclasses.karpenter.kwok.sh")


def version() -> str:
    """The Karpenter release built (cluster/versions.env KARPENTER_VERSION)."""
    return "v" + versions_env().get("KARPENTER_VERSION", "?")


def instance_types(cfg: StackConfig) -> list[dict[str, Any]]:
    g = cfg.gpu_nodes
    it = g.instance
    alloc = it.allocatable(efa=g.efa_enabled)
    resources = {"cpu": f"{alloc.cpu_milli + KWOK_RESERVED_CPU_MILLI}m",
                 "memory": f"{alloc.memory_mib_conservative + KWOK_RESERVED_MEMORY_MIB}Mi",
                 "pods": str(it.max_pods), "ephemeral-storage": f"{g.root_volume.size_gib}Gi",
                 GPU: str(it.gpu_count)}
    if g.efa_devices_per_node:
        resources[EFA] = str(g.efa_devices_per_node)
    capacity_type = karpenter_nodes.CAPACITY_TYPES[g.capacity.type]
    return [{
        "name": it.name,
        "offerings": [{
            "Price": it.price.usd_per_hour if it.price else 0.0,
            "Available": True,
            "Requirements": [
                {"key": karpenter_nodes.CAPACITY_TYPE_LABEL, "operator": "In", "values": [capacity_type]},
                {"key": karpenter_nodes.ZONE_LABEL, "operator": "In", "values": [cfg.network.gpu_az]},
            ],
        }],
        "architecture": "amd64",
        "operatingSystems": ["linux"],
        "resources": resources,
    }]


def objects(cfg: StackConfig, boot_seconds: int, idle_seconds: Optional[int] = None) -> list[dict[str, Any]]:
    """The KWOKNodeClass (its registration delay standing for the instance's boot), the stack's
    NodePool pointing at it, and the stack's NodeOverlay.

    idle_seconds: a scenario's idle time instead of the stack's (`consolidateAfter`, sim-only): the
    stack's `gpuNodes.elastic.idleMinutes` is a minute at least, sized for nodes billed by the hour."""
    pool = karpenter_nodes.gpu_node_pool(cfg, NODE_CLASS)
    if idle_seconds is not None:
        pool["spec"]["disruption"]["consolidateAfter"] = f"{idle_seconds}s"
    docs = [{"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
             "metadata": {"name": NODE_CLASS["name"]}, "spec": {"nodeRegistrationDelay": f"{boot_seconds}s"}},
            pool]
    overlay = karpenter_nodes.gpu_node_overlay(cfg)
    return docs + ([overlay] if overlay else [])


def node_pool(cfg: StackConfig, boot_seconds: int, idle_seconds: Optional[int] = None) -> list[dict[str, Any]]:
    """The NodePool (and NodeOverlay) of an elastic config, e.g. a scenario's smaller maximum: what
    objects() holds but the KWOKNodeClass."""
    return [d for d in objects(cfg, boot_seconds, idle_seconds) if d["kind"] != "KWOKNodeClass"]


def controller_env(*, kubeconfig: str, types_file: str, probe_port: int, metrics_port: int) -> dict[str, str]:
    """The controller's environment (sigs.k8s.io/karpenter v1.14.0 pkg/operator/options/options.go):
    the admin kubeconfig, leader election off, its ports, the instance types, NodeOverlay on."""
    return {
        "KUBECONFIG": kubeconfig, "SYSTEM_NAMESPACE": NAMESPACE,
        "DISABLE_LEADER_ELECTION": "true", "METRICS_PORT": str(metrics_port), "HEALTH_PROBE_PORT": str(probe_port),
        "INSTANCE_TYPES_FILE_PATH": types_file, "FEATURE_GATES": FEATURE_GATES, "LOG_LEVEL": "debug",
        # The batching window (defaults 10 s / 1 s, options.go): pods of one run arrive together.
        "BATCH_MAX_DURATION": "10s", "BATCH_IDLE_DURATION": "1s"}
