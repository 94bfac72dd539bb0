"""Kubelet CPU Manager and Topology Manager policies of the GPU node group, from the pods that run there.

The reference manifest advises the Topology Manager policy `single-numa-node` for GPU training. Its
admission behaviour (Kubernetes documentation, "Control Topology Management Policies on a node",
kubernetes.io/docs/tasks/administer-cluster/topology-manager/, section "Topology manager policies"):

- `none` (the kubelet default): no alignment, every pod admitted.
- `best-effort`: the kubelet asks every hint provider (CPU manager, device manager) for the NUMA
  affinity it prefers and stores it; when the preferred affinity is not possible the pod is
  *admitted anyway*.
- `restricted`: as best-effort, but when the preferred affinity is not possible the pod is
  *rejected* (phase Failed, reason TopologyAffinityError); a controller that owns it (a Deployment,
  a Job) creates a new pod, which the scheduler - blind to NUMA - may send to the same node again.
- `single-numa-node`: the pod is admitted only when *one* NUMA node can hold all of its aligned
  resources; otherwise it is rejected the same way.

Device hints (GPUs from the NVIDIA device plugin) apply to pods of every QoS class; CPU hints only to
Guaranteed pods with integer CPU requests under the CPU manager's `static` policy (Kubernetes
documentation, "Control CPU Management Policies on the Node", section "Static policy"). On a p4de or
p5 node the 8 GPUs sit 4 per CPU socket, one socket per NUMA node: a pod that takes all 8 GPUs
spans both NUMA nodes, so `single-numa-node` rejects every whole-node training pod
(TopologyAffinityError) - the render refuses that combination (components/offline/numa.py).

What the program chooses (`derive`), per node group:
- only whole-node pods (training, the checks): CPU manager `none` (the training pod is Burstable -
  no CPU limit - so `static` would give it no exclusive CPUs anyway), Topology Manager `best-effort`
  (a whole-node pod has nothing to align and is never rejected);
- with fractional serving pods (Guaranteed, integer CPUs: serving.py): CPU manager `static`, so
  the server's CPUs are exclusive and its threads are not moved between sockets, and Topology
  Manager `best-effort`: GPUs and CPUs from the replica's NUMA node when they fit, admitted anyway
  when they do not (a rejected replica would be re-created in a loop by its ReplicaSet).
`gpuNodes.topology` overrides either; the render rule refuses an override a pod cannot satisfy.
The policies reach the kubelet through the node group's nodeadm NodeConfig (`spec.kubelet.config`,
merged over the configuration nodeadm generates; components/aws/gpu_nodes.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from components.stack import catalog
from components.stack.config import StackConfig

# NUMA nodes (CPU sockets) per instance type: p4d/p4de two Intel Xeon 8275CL sockets, p5/p5e/p5en
# two sockets, the 4-GPU g5/g6 sizes one (EC2 instance type pages: processor and socket counts).
# Unverified on a node here: `lscpu | grep NUMA` on a real node is the check. GPUs split evenly.
NUMA_NODES = {"p4d.24xlarge": 2, "p4de.24xlarge": 2, "p5.48xlarge": 2, "p5e.48xlarge": 2, "p5en.48xlarge": 2,
              "g6.12xlarge": 1, "g5.12xlarge": 1, "g5.xlarge": 1}
DOCS = "kubernetes.io/docs/tasks/administer-cluster/topology-manager/#topology-manager-policies"


def numa_nodes(it: catalog.InstanceType) -> int:
    return NUMA_NODES.get(it.name, 1)


def gpus_per_numa_node(it: catalog.InstanceType) -> int:
    return max(1, it.gpu_count // numa_nodes(it))


@dataclass(frozen=True)
class KubeletPolicies:
    cpu_manager: str
    topology_manager: str
    why: str


def derive(cfg: StackConfig) -> KubeletPolicies:
    it = cfg.gpu_nodes.instance
    fractional = cfg.workloads.serving.enabled and cfg.workloads.serving.gpus_per_replica < it.gpu_count
    if fractional:
        auto = KubeletPolicies("static", "best-effort",
                               "fractional serving pods (Guaranteed, integer CPUs) get exclusive CPUs, aligned with "
                               "their GPUs when possible; best-effort never rejects a replica")
    else:
        auto = KubeletPolicies("none", "best-effort",
                               "whole-node pods only: nothing to align; best-effort never rejects them "
                               "(single-numa-node would: 8 GPUs span both NUMA nodes)")
    o = cfg.gpu_nodes.topology
    if o.cpu_manager_policy is None and o.topology_manager_policy is None:
        return auto
    return KubeletPolicies(o.cpu_manager_policy or auto.cpu_manager, o.topology_manager_policy or auto.topology_manager,
                           "set by rltrain:gpuNodes.topology")
