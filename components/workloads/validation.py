"""ClusterValidation: one pod per GPU node checks what a training pod will get.

An Indexed Job with completions = parallelism = the GPU node count and a required pod
anti-affinity on the hostname, so each node gets exactly one pod. Each pod requests the node's full
GPUs and EFA devices (a node whose EFA plugin advertises too few devices leaves its pod Pending,
which is itself the finding) and mounts /fsx, /dev/shm and /scripts like training does; it runs
`validate_node.py` (GPUs via nvidia-smi, EFA devices, /dev/shm size, /fsx read-write, and on a
multi-node stack with EFA the image's libfabric EFA provider: `fi_info -p efa`).

CPU and memory are small, but the memory limit exceeds the /dev/shm size: a memory-backed emptyDir
is capped by the pod's memory limit, and the check must see the size training gets. CPU has a limit
(= request): unlike training, nothing here suffers from CFS throttling.
backoffLimit 0: a failed check is the answer, not something to retry. Secrets are not mounted.

Fail fast (workloads.trainingAfterChecks, `pulumi up` waits for it): pulumi-kubernetes's Job await
ends at once on a Failed condition with reason BackoffLimitExceeded or DeadlineExceeded only
(provider/pkg/await/checker/job/check.go); a pod failure policy's FailJob (reason PodFailurePolicy)
would hold `up` for the whole timeout. So the validation Job has no FailJob rule (with backoffLimit 0
the first failed pod already fails it with BackoffLimitExceeded; disruptions stay free retries), and
its container's termination message falls back to the log tail, which ends with validate_node.py's
summary line: the await's error carries it (checker/pod/check.go reports a terminated container's
message). The deadline counts from admission: Kueue resumes the suspended Job and Kubernetes resets
its activeDeadlineSeconds timer then; Pulumi's timeout adds the time queued (build.gate_seconds).

Hardening beyond the training pod: the script writes only to /fsx (the check) and needs no network,
so the root filesystem is read-only (a small /tmp emptyDir for tools in the image) and a
NetworkPolicy denies all ingress and egress of the validation pods. The Lustre client mounts /fsx
from the node's kernel (host network namespace), which NetworkPolicy does not govern. The pod runs
as root like the training pod it stands in for: the /fsx read-write check must use the same user.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import kueue
from components.stack import catalog
from components.stack.config import StackConfig
from components.stack.labels import CHECKS_SERVICE_ACCOUNT, VALIDATION_COMPONENT
from components.k8s import security
from components.workloads import placement, pod, runs, sizing, volumes
from components.k8s.options import child_opts
NAME = "rltrain-validation"
COMPONENT = VALIDATION_COMPONENT
COMMAND = ("python3", "/scripts/validate_node.py")
VALIDATION_CPU = 2
# Above the /dev/shm size (see the module docstring).
VALIDATION_MEMORY_MARGIN_GIB = 8
# Checks take seconds; the rest is the cold image pull margin.
RUN_SECONDS = 10 * 60
DEADLINE_SECONDS = RUN_SECONDS + runs.IMAGE_PULL_MARGIN_SECONDS
# Why the validation pod fails the checkov checks it fails (security.annotate derives which).
SKIP_REASONS = security.Reasons(
    root="stands in for the training pod: the /fsx read-write check runs as the training image's user (root)",
    pull_policy="the training image under its pinned tag, pulled once per node and reused by training",
    tag="the training image as configured (latest and untagged are refused)",
)


class ClusterValidationArgs(runs.WorkloadArgs):
    pass


def validation_sizing(cfg: StackConfig) -> sizing.PodSizing:
    shm = sizing.shm_gib(cfg)
    return sizing.PodSizing(cpu=VALIDATION_CPU, memory_mib=(shm + VALIDATION_MEMORY_MARGIN_GIB) * catalog.GIB_IN_MIB,
                         shm_gib=shm, gpus=cfg.gpu_nodes.instance.gpu_count,
                         efa=cfg.gpu_nodes.efa_devices_per_node, cpu_limit=True)


def validation_env(cfg: StackConfig) -> dict[str, str]:
    s = validation_sizing(cfg)
    return {"EXPECTED_GPUS": str(s.gpus), "EXPECTED_EFA": str(s.efa), "SHM_MIN_GIB": str(s.shm_gib),
            "FSX_PATH": volumes.FSX_PATH}


def command(cfg: StackConfig) -> tuple[str, ...]:
    """validate_node.py, with the EFA provider check on a multi-node stack with EFA (naming the image
    in its message: the stack's name for it, `<repository>:<tag>` when the stack builds it)."""
    if efa_provider_checked(cfg):
        return (*COMMAND, "--efa-provider", str(cfg.workloads.image))
    return COMMAND


def efa_provider_checked(cfg: StackConfig) -> bool:
    """A multi-node stack with EFA: its runs talk between nodes through NCCL's EFA plugin, so the
    image's libfabric must have the EFA provider (validate_node.py `provider`). A single-node run
    uses NVLink only and needs none (trainers.TrainerConfig.single_node_efa)."""
    return cfg.workloads.multi_node.enabled and validation_sizing(cfg).efa > 0


def job_args(a: ClusterValidationArgs, namespace: pulumi.Input[str]) -> k8s.batch.v1.JobInitArgs:
    cfg = a.cfg
    n = cfg.gpu_nodes.count
    obj_labels = runs.labels(COMPONENT, NAME)
    template = pod.training_pod_template(
        cfg,
        claim_name=a.claim_name,
        secret_name=None,
        include_secrets=False,
        pod_labels=obj_labels,
        command=command(cfg),
        num_nodes=n,
        extra_env=validation_env(cfg),  # NODE_NAME comes from spec.nodeName (env.env_vars)
        affinity=placement.run_affinity(NAME, co_located=False),
        sizing=validation_sizing(cfg),
        scripts=[a.scripts["validate_node.py"]],
        checkpoints=False,
        read_only_root=True,
        # Its own account: validation borrows nothing from training (no AWS role, no Secret).
        service_account=CHECKS_SERVICE_ACCOUNT,
        # Ahead of the NCCL test and training in the queue (workloads.validation.priority).
        priority_class_name=runs.check_priority_class(cfg, COMPONENT),
    )
    # The failure's reason in the pod's status (module docstring): validate_node.py's last lines.
    for c in template.spec.containers:
        c.termination_message_policy = "FallbackToLogsOnError"
    # With workloads.trainingAfterChecks `pulumi up` waits for the check to pass (the training runs
    # depend on it); otherwise only for the Job to exist.
    awaits = runs.await_success(a.await_seconds) if a.await_seconds else runs.AWAIT_CREATED
    # checkov reads skips from the Job's own metadata: the skips derived from the pod go there
    # only (on the template, a reason's wording would restart the run).
    return k8s.batch.v1.JobInitArgs(
        metadata=runs.object_metadata(NAME, namespace, {**obj_labels, **kueue.queue_labels(cfg)},
                                      {**awaits, **security.annotate(template, SKIP_REASONS, kind="Job")}),
        spec=k8s.batch.v1.JobSpecArgs(
            completion_mode="Indexed",
            completions=n,
            parallelism=n,
            backoff_limit=0,
            pod_failure_policy=pod_failure_policy(),
            active_deadline_seconds=DEADLINE_SECONDS,
            template=template,
        ),
    )


def pod_failure_policy() -> k8s.batch.v1.PodFailurePolicyArgs:
    """A pod killed by a drain or preemption is retried for free; any other failure counts against
    backoffLimit 0 and fails the Job with BackoffLimitExceeded, which `pulumi up` reports at once (no
    FailJob rule: module docstring)."""
    return k8s.batch.v1.PodFailurePolicyArgs(rules=[k8s.batch.v1.PodFailurePolicyRuleArgs(
        action="Ignore",
        on_pod_conditions=[k8s.batch.v1.PodFailurePolicyOnPodConditionsPatternArgs(
            type="DisruptionTarget", status="True")])])


def network_policy_args(namespace: pulumi.Input[str]) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """Deny all: no ingress, no egress for the validation pods (see the module docstring)."""
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME)),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(NAME)),
            policy_types=["Ingress", "Egress"],
        ),
    )


class ClusterValidation(pulumi.ComponentResource):
    """Indexed Job: one validate_node.py pod per GPU node, and its deny-all NetworkPolicy."""

    job_name: str

    def __init__(self, name: str, args: ClusterValidationArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:ClusterValidation", name, None, opts)
        netpol = k8s.networking.v1.NetworkPolicy(f"{name}-netpol", network_policy_args(namespace),
                                                 child_opts(self, opts))
        self.job = k8s.batch.v1.Job(f"{name}-job", job_args(args, namespace),
                                    child_opts(self, opts, netpol, delete_before_replace=True,
                                                    replace_on_changes=runs.REPLACE_JOB_ON))
        self.job_name = NAME
        self.register_outputs({"job": NAME})
