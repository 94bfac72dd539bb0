"""Names shared by the AWS side, the Kubernetes side and the offline checks: labels, annotations,
tags, env names and the field paths a resource is replaced on or ignores.

Kept with the stack so that neither deployed side imports the other for a label, and the policy
rules read the same names the components write (the policy pack imports no cloud SDK).
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
# Kueue's queue label: a workload carrying it waits, suspended, in that LocalQueue until admitted
# whole (components/k8s/kueue.py sets it; the schedule rules of components/offline/schedule.py read it).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

# The app.kubernetes.io/component of the cluster checks (components/workloads/validation.py,
# nccl.py, gate.py) and of the export of a served step (export.py). The change-impact table
# (components/offline/impact.py) reads them: replacing one re-runs a check, or rewrites an export
# from a checkpoint that stays; no training run is touched and no work is lost.
VALIDATION_COMPONENT = "validation"
NCCL_TEST_COMPONENT = "nccl-test"
CHECK_GATE_COMPONENT = "check-gate"
EXPORT_COMPONENT = "export"
# The vLLM serving Deployment (components/workloads/serving.py): the only Deployment whose rollout the
# impact table calls a serving restart (offline/impact.py).
SERVING_COMPONENT = "serving"
CHECK_COMPONENTS = (VALIDATION_COMPONENT, NCCL_TEST_COMPONENT, CHECK_GATE_COMPONENT, EXPORT_COMPONENT)

# Env the program sets in the training pods (components/workloads/env.py, the launcher and the
# validation script depend on them): `workloads.env` may not set them (components/stack/validate.py).
PROTECTED_ENV = frozenset({
    "NUM_GPUS", "NUM_NODES", "POD_NAMESPACE", "NODE_NAME", "JOB_COMPLETION_INDEX",
    "RAY_HEAD_HOST", "RAY_PORT", "RAY_NODE_WAIT_SECONDS", "RUN_DONE_MARKER",
    "EXPECTED_GPUS", "EXPECTED_EFA", "SHM_MIN_GIB", "FSX_PATH", "CKPT_DIR", "RESUME",
    "RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "RAY_START_TIMEOUT_SECONDS", "RAY_CONNECT_TIMEOUT_SECONDS",
    "RAY_JOIN_DEADLINE_SECONDS", "RAY_PEER_CHECK_SECONDS", "NODE_RANK_ENV", "RAY_DASHBOARD", "STAGE_ITEMS",
    # components/scripts/resume_wrapper.py (components/workloads/trainer.py WRAPPER_ENV)
    "RESUME_STEPS_DIR", "RESUME_STEP_PREFIX", "RESUME_COMPLETE_MARKS", "RESUME_ENV", "RESUME_FORMAT",
    "RESUME_LEDGER", "RESUME_MAX_STALLED_RESTARTS", "RESUME_LEDGER_SCOPE",
    # components/scripts/ray_launcher.py's node-health check (components/workloads/node_health_access.py)
    "RUN_POD_SELECTOR",
})

# A Job's fields the API server never lets an update change beyond the pod template, completions,
# parallelism and selector (which pulumi-kubernetes already replaces on: provider/pkg/provider/
# diff.go forceNewProperties): Kubernetes v1.35.4 pkg/apis/batch/validation/validation.go
# ValidateJobSpecUpdate. The program replaces its Jobs on them (components/workloads/runs.py); the
# change-impact table refuses a change of one the program does not replace on. Without them, a new
# `workloads.failFastExitCodes` (the podFailurePolicy) previewed as an update and the real preview
# failed "field is immutable" (the key sweep on the simulated cluster, issue 34).
JOB_IMMUTABLE = ["spec.podFailurePolicy", "spec.completionMode", "spec.backoffLimitPerIndex", "spec.managedBy",
                 "spec.successPolicy"]

# What a GPU node group ignores until the stack opts in (rltrain:gpuNodes.allowNodeRoll): a new
# launch template version or Kubernetes version rolls every node, so without the opt-in the program
# itself keeps the deployed values (pulumi ignoreChanges, components/aws/gpu_nodes.py), not only the
# offline render's refusal.
ROLL_INPUTS = ("launchTemplate.version", "version")
# The opt-in, on the node group itself (an in-place tag update): the policy pack sees the stack's
# resources only, and its rule `gpu-roll-opt-in` (components/offline/policy.py) reads this tag and
# the ignoreChanges above.
ALLOW_NODE_ROLL_TAG = "rltrain/allow-node-roll"


def short_hash(*parts: str, length: int = 8) -> str:
    """A stable short digest of `parts`: content names (scripts' ConfigMaps, Kueue flavors), run identities."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:length]
