"""What every run object shares: labels, deadlines, the pod failure policy, metadata and resource options.
"""

from __future__ import annotations

from typing import Mapping, Optional

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field

from components.scripts import ray_launcher, resume_wrapper
from components.stack import node_repair
from components.stack.config import StackConfig
from components.stack.runs import Run
from components.stack.labels import JOB_IMMUTABLE
from components.stack.labels import MANAGED_BY
from components.workloads import trainer
from components.workloads.script_files import Script

CONTAINER = "trainer"


RUN_LABEL = "rltrain/run"

# Cold pull of a 15-20 GB image, added to every deadline (stack/config.py; k8s/kueue.py reads it too).
from components.stack.config import IMAGE_PULL_MARGIN_SECONDS  # noqa: E402,F401


def priority_class(cfg: StackConfig) -> str:
    """The stack's PriorityClass, cluster-scoped: named after the training namespace so that two
    stacks sharing a cluster (which must use different namespaces) never own the same object, and
    after its value, which the API server never lets an update change (Kubernetes v1.35.4
    pkg/apis/scheduling/validation/validation.go ValidatePriorityClassUpdate): a new value is a new
    class, created before the old one is deleted. A class replaced under its own name instead
    (delete first) fails every preview: the provider's dry run of the create meets the existing
    object and is refused as an update (seen on the simulated cluster, issue 34)."""
    return f"{cfg.training.namespace}-training-{cfg.workloads.priority}"


def check_priority(cfg: StackConfig, check: str) -> int:
    """The priority of a check run: `validation` or `nccl-test` (their COMPONENT)."""
    w = cfg.workloads
    return {"validation": w.validation.priority, "nccl-test": w.nccl_test.priority,
            EMBODIED_EVALUATION: w.priority - EVALUATION_PRIORITY_BELOW}[check]


# The embodied evaluation (embodied_eval.py) queues below training: at equal priority Kueue admits
# in creation order, and an evaluation queued while a run waits must not take its GPUs first.
EMBODIED_EVALUATION = "embodied-evaluation"
EVALUATION_PRIORITY_BELOW = 100


def check_priority_class(cfg: StackConfig, check: str) -> str:
    """The PriorityClass of a check run (`validation`, `nccl-test`) or of the embodied evaluation,
    named like priority_class."""
    return f"{cfg.training.namespace}-{check}-{check_priority(cfg, check)}"


def deadline_seconds(cfg: StackConfig) -> int:
    """Training time plus the cold image pull margin (D6), plus room for the infrastructure restarts
    the run's bounds allow (workloads.infrastructureRestarts): each one a node repair and a cold
    pull (components/stack/node_repair.py), during which activeDeadlineSeconds keeps counting."""
    w = cfg.workloads
    return (w.max_run_minutes * 60 + IMAGE_PULL_MARGIN_SECONDS
            + node_repair.restart_room_seconds(w.infrastructure_restarts))


# The launcher's exit codes that report another pod's loss (ray_launcher.py's docstring): a worker
# that lost its head, a head whose trainer failed while a node of the run was lost or unhealthy.
RAY_DISRUPTION_EXIT_CODES = frozenset({ray_launcher.EXIT_HEAD_LOST, ray_launcher.EXIT_PEER_LOST})
# And the launcher's waits that ran out (a head whose nodes did not all come healthy within
# RAY_NODE_WAIT_SECONDS, a worker whose head did not answer within RAY_JOIN_DEADLINE_SECONDS): both
# derived from a node repair (multinode.py), so they mean a peer that is gone, not a failure of the
# run. Ignored only where the start ledger bounds them (a resume mapping): the head records its
# failed wait there (resume_wrapper.py --record-stall) and the attempt over the bound fails the Job
# (EXIT_NO_PROGRESS); a worker's wait ends with its head's, which the head's bound and Kueue's
# (waitForPodsReady: a head pod not Ready, requeue limit) end.
RAY_WAIT_EXIT_CODES = frozenset({ray_launcher.EXIT_NODES_TIMEOUT, ray_launcher.EXIT_HEAD_UNREACHABLE})


def ray_ignored_exit_codes(cfg: StackConfig) -> frozenset[int]:
    """The launcher's exit codes a Ray run's pod failure policy ignores (not counted in
    workloads.retries): a lost head or peer always, a wait that ran out where the ledger bounds it."""
    return RAY_DISRUPTION_EXIT_CODES | (RAY_WAIT_EXIT_CODES if trainer.resume_mapped(cfg) else frozenset())


def pod_failure_policy(cfg: StackConfig, *, ray: bool = False) -> k8s.batch.v1.PodFailurePolicyArgs:
    """Disruptions are free retries; configuration errors fail the Job at once (D5).

    Ignore comes first: rules match in order, and a pod killed by a drain, a preemption or a node's
    graceful shutdown (a reboot repair: components/aws/gpu_nodes.py) is never a configuration error
    whatever its exit code during shutdown (Kubernetes v1.35.4 pkg/controller/job/pod_failure_policy.go:
    the first matching rule decides; a failure no rule matches counts against backoffLimit). In a
    Ray run (`ray`), a worker whose head went away exits with the launcher's EXIT_HEAD_LOST, and a
    head whose trainer failed while a node of the run was lost or unhealthy (the node monitoring
    agent's condition, a NotReady or tainted node: the head reads them) exits EXIT_PEER_LOST: each
    is a node's disruption, not a failure of the run, so they are ignored too (the Job recreates the
    pod, which rejoins the new cluster) and the retry budget is kept for real failures; with a
    resume mapping, so are the launcher's waits that ran out (ray_ignored_exit_codes), each bounded
    by the start ledger. The resume wrapper's EXIT_NO_PROGRESS (too many restarts from the same
    checkpoint, `workloads.infrastructureRestarts`) always fails the Job: a retry would be refused
    the same way.
    """
    rules = [k8s.batch.v1.PodFailurePolicyRuleArgs(
        action="Ignore",
        on_pod_conditions=[k8s.batch.v1.PodFailurePolicyOnPodConditionsPatternArgs(
            type="DisruptionTarget", status="True")],
    )]
    ignored = ray_ignored_exit_codes(cfg) if ray else frozenset()
    if ignored:
        rules.append(k8s.batch.v1.PodFailurePolicyRuleArgs(
            action="Ignore",
            on_exit_codes=k8s.batch.v1.PodFailurePolicyOnExitCodesRequirementArgs(
                container_name=CONTAINER, operator="In", values=sorted(ignored)),
        ))
    codes = sorted(({c for c in cfg.workloads.fail_fast_exit_codes if c != 0} | {resume_wrapper.EXIT_NO_PROGRESS})
                   - ignored)
    if codes:
        rules.append(k8s.batch.v1.PodFailurePolicyRuleArgs(
            action="FailJob",
            on_exit_codes=k8s.batch.v1.PodFailurePolicyOnExitCodesRequirementArgs(
                container_name=CONTAINER, operator="In", values=codes),
        ))
    return k8s.batch.v1.PodFailurePolicyArgs(rules=rules)


def labels(component: str, run: str) -> dict[str, str]:
    return {**MANAGED_BY, "app.kubernetes.io/name": "rltrain", "app.kubernetes.io/component": component,
            RUN_LABEL: run}


def selector_labels(run: str) -> dict[str, str]:
    return {RUN_LABEL: run}


# pulumi-kubernetes waits for a Job to complete / a StatefulSet to be ready: `pulumi up` would
# block for the whole training run. `pulumi.com/waitFor` replaces that wait with a condition that
# holds as soon as the API server has the object (a JSONPath without a value matches when the path
# exists), and - unlike `pulumi.com/skipAwait`, which for Job and StatefulSet also skips the wait
# for *deletion* - keeps the deletion wait: a replaced run's old Job is gone (its pods through their
# grace period) before the new one with the same name is created, instead of the create failing
# with AlreadyExists after the old run was killed. pulumi-kubernetes
# provider/pkg/metadata/overrides.go (ReadyCondition, DeletedCondition, allowsSkipAwaitWithDelete)
# and provider/pkg/await/await.go ("built-in await logic only if the user hasn't specified any
# await overrides").
AWAIT_CREATED = {"pulumi.com/waitFor": "jsonpath={.metadata.uid}"}
# For custom resources (MPIJob, RayJob) skipAwait skips only the create wait: deletion is still
# awaited for every kind outside allowsSkipAwaitWithDelete (same file).
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}
# A run's labels include Kueue's queue label, which Kueue's webhook refuses to change on a run that
# is not suspended (running or finished; kueue pkg/controller/jobframework/validation.go,
# validateUpdateForQueueName): a label change replaces the run instead of patching it.
REPLACE_ON_LABELS = ["metadata.labels"]
# What a batch/v1 Job of the program is replaced on: its labels and the fields the API server never
# lets an update change (labels.JOB_IMMUTABLE).
REPLACE_JOB_ON = [*REPLACE_ON_LABELS, *JOB_IMMUTABLE]


def await_success(seconds: int, *, custom_resource: bool = False) -> dict[str, str]:
    """`pulumi up` waits up to `seconds` for the run to succeed (workloads.trainingAfterChecks).

    A Job without waitFor/skipAwait gets the provider's built-in Job await: ready once `Complete`,
    an error at once when `Failed` (provider/pkg/await/job.go); a custom resource (MPIJob) waits for
    its `Succeeded` condition (`condition=` of pulumi.com/waitFor, provider/pkg/await/condition). The
    provider's default is 10 minutes; `pulumi.com/timeoutSeconds` sets it (metadata/overrides.go).
    """
    out = {"pulumi.com/timeoutSeconds": str(seconds)}
    if custom_resource:
        out["pulumi.com/waitFor"] = "condition=Succeeded"
    return out


class WorkloadArgs(BaseModel):
    """What every workload component takes besides its namespace and Secret name (Pulumi Inputs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cfg: StackConfig
    claim_name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    # Every script of components/scripts by file name; each run mounts the ones it runs.
    scripts: dict[str, Script] = Field(default_factory=dict)
    # A check run the training runs wait for (workloads.trainingAfterChecks): `pulumi up` waits up to
    # this long for it to succeed. None: `pulumi up` waits only for the object to exist.
    await_seconds: Optional[int] = Field(None, ge=60)
    # The training run a run builder builds (components/stack/runs.py); None = the implicit run of
    # the builder's form. `cfg` is then the stack as that run sees it (StackConfig.for_run).
    run: Optional[Run] = None


def dns_peer() -> k8s.networking.v1.NetworkPolicyPeerArgs:
    """The cluster DNS pods (kube-system, k8s-app=kube-dns): every run's egress policy allows them."""
    return k8s.networking.v1.NetworkPolicyPeerArgs(
        namespace_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={"kubernetes.io/metadata.name": "kube-system"}),
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={"k8s-app": "kube-dns"}))


def object_metadata(name: str, namespace: pulumi.Input[str], obj_labels: Mapping[str, str],
                    annotations: Optional[Mapping[str, str]] = None) -> k8s.meta.v1.ObjectMetaArgs:
    return k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=dict(obj_labels),
                                      annotations=dict(annotations) if annotations else None)


def isolated_network_policy(name: str, component: str, namespace: pulumi.Input[str]) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """Nothing in, nothing out, for a run that works on /fsx only (the FSx client is the node's
    kernel, not the pod's network): the export, the checkpoint retention, the embodied evaluation
    (RLinf's Ray stays inside its pod)."""
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=object_metadata(name, namespace, labels(component, name)),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector_labels(name)),
            policy_types=["Ingress", "Egress"]),
    )
