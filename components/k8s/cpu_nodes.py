"""The CPU NodePool of an elastic stack: where its CPU-only pods that need the training image run.

Elastic mode (`rltrain:gpuNodes.elastic`) holds no GPU node, and Karpenter's GPU NodePool offers one
instance type, the stack's GPU type. The staging Job (2 CPU, the training image, /fsx) used to
require the GPU nodes, so the first `up` of an elastic stack made Karpenter launch a p5.48xlarge
(~$55/h) to download files, outside Kueue's accounting and inside the GPU limit, and `up` waited up
to the Job's deadline for it; with no On-Demand p5 in the AZ, `up` failed instead of the runs
staying queued (issue 44 item 2).

The choice, of the two places a CPU pod could go:
- **the system nodes** reach FSx (platform.fsx_client_groups), and the small helpers run there
  (retention, evaluation, eval-metrics: a small Python image). Not the staging Job: it runs the
  training image (10-20 GB, KNOWN-FAILURES F12; unpacked, two to three times that) for its
  huggingface_hub, and the system nodes' root volume is 50 GiB for small operator images
  (aws/cluster.py SYSTEM_ROOT_GIB): the pull would put the nodes that run Kueue and Karpenter under
  disk pressure, and the kubelet would evict them;
- **a small CPU NodePool in the GPU subnet** (this module): Karpenter launches a general-purpose
  instance for the staging pod (an m-class xlarge, ~$0.2/h, EC2 On-Demand pricing), with a root
  volume sized for the image, in the file system's AZ, and removes it a minute after the pod is
  gone. Its nodes carry the cluster's security group, which FSx admits. Tainted: nothing else
  lands there, so a node launched for staging is empty, and removed, once staging is done.

So `up` waits for a CPU launch (a minute or two), never for a GPU launch that is not a queued
run's. On a bring-your-own cluster (Karpenter already there, `existingKarpenter`) the stack makes
no NodePool: staging runs on the cluster's own untainted nodes (its owners' reach to its volume).
Pure builders, dicts; fields read at sigs.k8s.io/karpenter v1.14.0 (pkg/apis/v1/nodepool.go) and
karpenter-provider-aws v1.14.0 (pkg/apis/v1/labels.go).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from components.k8s.karpenter_nodes import API_VERSION, CAPACITY_TYPE_LABEL, ZONE_LABEL

if TYPE_CHECKING:  # pragma: no cover
    from components.stack.config import StackConfig

NODE_POOL = "rltrain-cpu"
# The label the helpers require and the taint they tolerate (the GPU nodes' are `role` and
# nvidia.com/gpu: components/stack/labels.py).
LABELS = {"role": "rltrain-cpu"}
TAINT = {"key": "rltrain/cpu-only", "value": "true", "effect": "NoSchedule"}
# karpenter-provider-aws v1.14.0 pkg/apis/v1/labels.go: LabelInstanceCategory, ...Generation, ...CPU.
CATEGORY_LABEL = "karpenter.k8s.aws/instance-category"
GENERATION_LABEL = "karpenter.k8s.aws/instance-generation"
CPU_LABEL = "karpenter.k8s.aws/instance-cpu"
ARCH_LABEL = "kubernetes.io/arch"
# General purpose, compute and memory families of the current generations (6 and up: Nitro, ENA),
# x86_64 like the training image; Karpenter picks the cheapest that fits the pod, and another when
# one has no capacity (a list, not one type).
CATEGORIES = ("c", "m", "r")
MIN_GENERATION = 6
MAX_CPUS = 16
# The most CPU the pool may hold at once: two of its largest nodes. The staging Job asks for 2.
CPU_LIMIT = 2 * MAX_CPUS
# Empty for a minute: removed (the staging pod is gone; nothing else lands here).
IDLE = "1m"
# The root volume holds the training image (no instance store on c/m/r without `d`): 200 GiB gp3,
# at gp3's free baseline (3000 IOPS, 125 MiB/s); ~$16 a month while a node exists (EBS pricing).
ROOT_GIB = 200


def used(cfg: "StackConfig") -> bool:
    """An elastic stack on a cluster it creates has the CPU NodePool (and its EC2NodeClass)."""
    return cfg.gpu_nodes.elastic.enabled and not cfg.byo_cluster


def node_pool(cfg: "StackConfig", node_class_ref: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION, "kind": "NodePool",
        "metadata": {"name": NODE_POOL},
        "spec": {
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "nodeClassRef": dict(node_class_ref),
                    "requirements": [
                        {"key": CATEGORY_LABEL, "operator": "In", "values": list(CATEGORIES)},
                        {"key": GENERATION_LABEL, "operator": "Gt", "values": [str(MIN_GENERATION - 1)]},
                        {"key": CPU_LABEL, "operator": "Lt", "values": [str(MAX_CPUS + 1)]},
                        {"key": ARCH_LABEL, "operator": "In", "values": ["amd64"]},
                        # The file system's AZ (the GPU subnet's); On-Demand whatever the GPU
                        # capacity: a GPU reservation holds no CPU instance.
                        {"key": ZONE_LABEL, "operator": "In", "values": [cfg.network.gpu_az]},
                        {"key": CAPACITY_TYPE_LABEL, "operator": "In", "values": ["on-demand"]},
                    ],
                    "taints": [dict(TAINT)],
                },
            },
            "disruption": {"consolidationPolicy": "WhenEmpty", "consolidateAfter": IDLE},
            "limits": {"cpu": str(CPU_LIMIT)},
        },
    }


def tolerations() -> list[dict[str, str]]:
    return [{"key": TAINT["key"], "operator": "Exists", "effect": TAINT["effect"]}]


def node_affinity_terms() -> list[dict[str, Any]]:
    """The required node affinity's one term: a node of the CPU NodePool."""
    return [{"matchExpressions": [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(LABELS.items())]}]


