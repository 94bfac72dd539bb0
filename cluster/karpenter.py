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
"""

from __future__ import annotations

import json
import urllib.request
from typing import TYPE_CHECKING, Any

from cluster.binaries import _versions_env
from components.k8s import karpenter_nodes
from components.stack.config import StackConfig
from components.workloads.sizing import EFA, GPU

if TYPE_CHECKING:  # pragma: no cover
    from cluster.sim import Cluster

NODE_CLASS = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "rltrain-gpu"}
# kwok/cloudprovider/helpers.go newInstanceType: every kwok instance type's KubeReserved.
KWOK_RESERVED_CPU_MILLI = 10 * 10
KWOK_RESERVED_MEMORY_MIB = 10
# NodeOverlay is behind a feature gate, off by default (pkg/operator/options/options.go); the
# stack's Karpenter turns it on, and so does this one.
FEATURE_GATES = "NodeOverlay=true"
NAMESPACE = "karpenter"


def version() -> str:
    """The Karpenter release built (cluster/versions.env KARPENTER_VERSION)."""
    return "v" + _versions_env().get("KARPENTER_VERSION", "?")


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


def objects(cfg: StackConfig, boot_seconds: int) -> list[dict[str, Any]]:
    """The KWOKNodeClass (its registration delay standing for the instance's boot), the stack's
    NodePool pointing at it, and the stack's NodeOverlay."""
    docs = [{"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass",
             "metadata": {"name": NODE_CLASS["name"]}, "spec": {"nodeRegistrationDelay": f"{boot_seconds}s"}},
            karpenter_nodes.gpu_node_pool(cfg, NODE_CLASS)]
    overlay = karpenter_nodes.gpu_node_overlay(cfg)
    return docs + ([overlay] if overlay else [])


def start(cluster: "Cluster", cfg: StackConfig, *, timeout: float, ports: tuple[int, int],
          boot_seconds: int = 20) -> None:
    """Karpenter's CRDs, then the controller, then the NodePool it serves (`cfg`: the deploy stack
    with `gpuNodes.elastic` on); `ports`: free ports for its health probe and metrics."""
    src = cluster.tools.module("karpenter")
    cluster._crds(src / "pkg" / "apis" / "crds")
    cluster._crds(src / "kwok" / "apis" / "crds")
    cluster.wait_for("Karpenter CRDs established", None,
                     lambda: all(cluster._established(n) for n in (
                         "nodepools.karpenter.sh", "nodeclaims.karpenter.sh", "nodeoverlays.karpenter.sh",
                         "kwoknodeclasses.karpenter.kwok.sh")), timeout)
    cluster.apply([{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}])
    types_file = cluster.root / "karpenter-instance-types.json"
    types_file.write_text(json.dumps(instance_types(cfg), indent=1))
    probe, metrics = ports
    proc = cluster.spawn("karpenter", [cluster.tools.require("karpenter")], env={
        "KUBECONFIG": str(cluster.kubeconfig), "SYSTEM_NAMESPACE": NAMESPACE,
        "DISABLE_LEADER_ELECTION": "true", "METRICS_PORT": str(metrics), "HEALTH_PROBE_PORT": str(probe),
        "INSTANCE_TYPES_FILE_PATH": str(types_file), "FEATURE_GATES": FEATURE_GATES, "LOG_LEVEL": "debug",
        # The batching window (defaults 10 s / 1 s, options.go): pods of one run arrive together.
        "BATCH_MAX_DURATION": "10s", "BATCH_IDLE_DURATION": "1s"})

    def ready() -> bool:
        with urllib.request.urlopen(f"http://127.0.0.1:{probe}/readyz", timeout=2) as r:
            return r.status == 200
    cluster.wait_for("Karpenter /readyz", proc, ready, timeout)
    cluster.apply(objects(cfg, boot_seconds))
    cluster.info["karpenter"] = {"version": version(), "nodePool": karpenter_nodes.NODE_POOL,
                                 "bootSeconds": boot_seconds}
    cluster._save()


def apply_node_pool(cluster: "Cluster", cfg: StackConfig) -> None:
    """The NodePool (and NodeOverlay) of another elastic config, e.g. a scenario's smaller maximum."""
    cluster.apply([d for d in objects(cfg, cluster.info["karpenter"]["bootSeconds"])
                   if d["kind"] != "KWOKNodeClass"])
