"""Pure builders of Karpenter's GPU NodePool and the NodeOverlay that gives it huge pages.

Elastic mode (`rltrain:gpuNodes.elastic`, components/stack/elastic.py): no GPU node is held;
Karpenter launches nodes of this NodePool for the pods Kueue admits and removes empty ones. The
same builders feed the created cluster (components/aws/karpenter.py, with the EC2NodeClass) and the
simulated cluster (cluster/sim.py, with a KWOKNodeClass): only `node_class_ref` differs, so the
NodePool the real Karpenter schedules on the simulated cluster is the one the stack renders.

Every field is read at sigs.k8s.io/karpenter v1.14.0 (pkg/apis/v1/nodepool.go, nodeclaim.go,
labels.go; pkg/apis/v1alpha1/nodeoverlay.go; CRDs in pkg/apis/crds/). Dicts, no Pulumi: the
caller creates them (a CustomResource, or the simulated cluster's API).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Optional

from pydantic import BaseModel, Field

from components.stack.labels import GPU_TAINT_KEY, gpu_node_labels

if TYPE_CHECKING:  # pragma: no cover
    from components.stack.config import StackConfig

API_VERSION = "karpenter.sh/v1"
OVERLAY_API_VERSION = "karpenter.sh/v1alpha1"
# The label Karpenter puts on every node of a NodePool (pkg/apis/v1/labels.go NodePoolLabelKey).
NODEPOOL_LABEL = "karpenter.sh/nodepool"
CAPACITY_TYPE_LABEL = "karpenter.sh/capacity-type"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"
# labels.go CapacityTypeOnDemand / CapacityTypeReserved: a Capacity Block or an ODCR is "reserved"
# (the ReservedCapacity feature gate, on by default in v1.14.0 pkg/operator/options/options.go).
CAPACITY_TYPES = {"on-demand": "on-demand", "capacity-block": "reserved", "odcr": "reserved"}
HUGEPAGES = "hugepages-2Mi"


class NodePoolArgs(BaseModel):
    name: str
    node_class_ref: dict[str, str]
    """{group, kind, name} of the node class: EC2NodeClass (karpenter.k8s.aws) on AWS, KWOKNodeClass (karpenter.kwok.sh) on the simulated cluster"""
    instance_type: str
    zone: str
    capacity_type: Literal["on-demand", "capacity-block", "odcr"] = "on-demand"
    max_nodes: int = Field(ge=1)
    gpus_per_node: int = Field(ge=0)
    idle_minutes: int = Field(ge=1)
    labels: dict[str, str] = {}
    taints: list[dict[str, str]] = []


def node_pool(a: NodePoolArgs) -> dict[str, Any]:
    """The GPU NodePool: one instance type in the GPU subnet's AZ, the taint and labels the runs
    select, at most `max_nodes` nodes, and only empty nodes removed, after `idle_minutes`."""
    requirements = [
        {"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [a.instance_type]},
        {"key": ZONE_LABEL, "operator": "In", "values": [a.zone]},
        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": [CAPACITY_TYPES[a.capacity_type]]},
    ]
    limits: dict[str, Any] = {"nodes": str(a.max_nodes)}
    if a.gpus_per_node:
        # The limit that holds within one provisioning pass. `nodes` alone does not: scheduler.go
        # (v1.14.0) subtracts each new NodeClaim's instance capacity from the remaining limits
        # (subtractMax), and an instance type's capacity has no "nodes" entry, so one pass over
        # two pending pods with `nodes: 1` launched two nodes on the simulated cluster
        # (tests/sim/test_elastic.py scenario 4). The GPUs are in that capacity: max x GPUs per
        # node stops the pass at the maximum.
        limits["nvidia.com/gpu"] = str(a.max_nodes * a.gpus_per_node)
    return {
        "apiVersion": API_VERSION, "kind": "NodePool",
        "metadata": {"name": a.name},
        "spec": {
            "template": {
                "metadata": {"labels": dict(a.labels)},
                "spec": {
                    "nodeClassRef": dict(a.node_class_ref),
                    "requirements": requirements,
                    "taints": [dict(t) for t in a.taints],
                    # A training node is not replaced on a timer (nodeclaim.go ExpireAfter, default
                    # 720h): a month-long run would otherwise lose a node mid-run.
                    "expireAfter": "Never",
                },
            },
            "disruption": {
                # Only empty nodes are removed (nodepool.go ConsolidationPolicyWhenEmpty): an
                # underutilised node still holds a run's pod. Consolidation waits consolidateAfter
                # after the last pod left, the stack's idle time.
                "consolidationPolicy": "WhenEmpty",
                "consolidateAfter": f"{a.idle_minutes}m",
                # Drift (a changed NodePool / node class) replaces at most one node at a time; pods
                # annotated karpenter.sh/do-not-disrupt (every GPU pod of an elastic stack) block
                # voluntary disruption of their node altogether (disruption/helpers.go).
                "budgets": [{"nodes": "1"}],
            },
            "limits": limits,
        },
    }


def node_overlay(name: str, instance_type: str, hugepages_mib: int,
                 node_pool_name: Optional[str] = None) -> dict[str, Any]:
    """Adds `hugepages-2Mi` to the instance type in Karpenter's scheduling simulation.

    Karpenter's AWS provider computes an instance type's capacity from EC2's description (CPU,
    memory, pods, GPUs, EFA: karpenter-provider-aws v1.14.0 pkg/providers/instancetype/types.go
    computeCapacity) with no huge pages; the runs request the huge pages the nodeadm user data
    reserves, so without the overlay Karpenter finds no instance type for them and launches nothing.
    A NodeOverlay's `capacity` adds extended resources to matching instance types (v1alpha1
    nodeoverlay.go; feature gate NodeOverlay, off by default, turned on by the stack's Karpenter).
    """
    requirements = [{"key": INSTANCE_TYPE_LABEL, "operator": "In", "values": [instance_type]}]
    if node_pool_name:
        requirements.append({"key": NODEPOOL_LABEL, "operator": "In", "values": [node_pool_name]})
    return {
        "apiVersion": OVERLAY_API_VERSION, "kind": "NodeOverlay",
        "metadata": {"name": name},
        "spec": {"requirements": requirements, "capacity": {HUGEPAGES: f"{hugepages_mib}Mi"}},
    }


# --- from a stack's config ---------------------------------------------------------------------

NODE_POOL = "rltrain-gpu"


def gpu_node_pool(cfg: "StackConfig", node_class_ref: dict[str, str], name: str = NODE_POOL) -> dict[str, Any]:
    """The stack's GPU NodePool: labelled and tainted as the managed GPU node group is
    (components/aws/gpu_nodes.py: the role label the runs' node affinity requires, the GPU taint
    they tolerate), sized by `gpuNodes.elastic`."""
    g = cfg.gpu_nodes
    return node_pool(NodePoolArgs(
        name=name, node_class_ref=node_class_ref, instance_type=g.instance_type, zone=cfg.network.gpu_az,
        capacity_type=g.capacity.type, max_nodes=g.node_limit, gpus_per_node=g.instance.gpu_count,
        idle_minutes=g.elastic.idle_minutes, labels=gpu_node_labels(g.instance_type),
        taints=[{"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]))


def gpu_node_overlay(cfg: "StackConfig", name: str = NODE_POOL) -> Optional[dict[str, Any]]:
    """The huge pages of one GPU node (what nodeadm reserves for the EFA driver: the catalog's
    allocatable), for the NodePool's instance type; none without EFA (no huge pages requested)."""
    g = cfg.gpu_nodes
    if not g.efa_devices_per_node:
        return None
    mib = g.instance.allocatable(efa=g.efa_enabled).hugepages_2mi_mib
    return node_overlay(f"{name}-hugepages", g.instance_type, mib, node_pool_name=name)
