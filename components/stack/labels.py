"""Names shared by the AWS side, the Kubernetes side and the offline checks.

Kept with the stack so that neither deployed side imports the other for a label, and the policy
rules read the same names the components write.
"""

from __future__ import annotations

import hashlib

# Extended resource names a GPU pod requests and the queue covers (NVIDIA and EFA device plugins;
# the kubelet's 2 MiB huge pages): one spelling for the pod builders, the queue and the checks.
GPU = "nvidia.com/gpu"
EFA = "vpc.amazonaws.com/efa"
HUGEPAGES = "hugepages-2Mi"

# Every object the stack creates in Kubernetes.
MANAGED_BY = {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "rltrain"}

# GPU node group: the taint every GPU pod tolerates and the label it selects on. A bring-your-own
# cluster's GPU nodes are documented to carry the same (docs/running-for-real.md, Pulumi.byo.yaml).
GPU_TAINT_KEY = "nvidia.com/gpu"
ROLE_LABEL = {"role": "gpu-training"}


def gpu_node_labels(instance_type: str) -> dict[str, str]:
    """The labels of every GPU node, from the managed group or Karpenter's NodePool alike."""
    return {**ROLE_LABEL, "rltrain/instance-type": instance_type, "nvidia.com/gpu.present": "true"}

# Recorded on the training Namespace: the GPU node shape its workloads are sized for, so the
# policy rules can check them, also on a bring-your-own cluster.
GPU_INSTANCE_ANNOTATION = "rltrain/gpu-instance-type"
# The service account of the cluster checks (validation, NCCL test): no AWS role, no API token.
CHECKS_SERVICE_ACCOUNT = "rltrain-checks"
# The training namespace's default-deny NetworkPolicy: what no other policy allows is refused.
DEFAULT_DENY_POLICY = "default-deny"
GPU_NODES_ANNOTATION = "rltrain/gpu-node-count"
# On a namespace whose queued Jobs Kueue manages: the Kueue a stack installs selects namespaces by
# this label (managedJobsNamespaceSelector), so a second stack's namespace on the same cluster is
# managed too. Kueue v0.19.2 reconciles a Job only if its namespace matches that selector, whatever
# its queue label (ManagedJobsNamespaceSelectorAlwaysRespected, GA and locked on:
# pkg/features/kube_features.go; pkg/controller/jobframework/reconciler.go "Namespace not opted in").
KUEUE_MANAGED_LABEL = {"rltrain/kueue-managed": "true"}


def short_hash(*parts: str, length: int = 8) -> str:
    """A stable short digest of `parts`: content names (scripts' ConfigMaps, Kueue flavors), run identities."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:length]
