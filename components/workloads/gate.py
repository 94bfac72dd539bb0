"""CheckGate: a small batch Job that ends like a custom-resource check run, so `pulumi up` fails fast.

With workloads.trainingAfterChecks the training runs wait for the checks to pass. pulumi-kubernetes
awaits a batch Job with its own logic, which fails at once on BackoffLimitExceeded/DeadlineExceeded
and reports the pod's termination message; it awaits a custom resource (the NCCL test's MPIJob) only
through a `pulumi.com/waitFor` condition, which never reports failure: a failed MPIJob held `up` for
the whole timeout (FACTS "Kueue operations and the reference trainer"; pulumi-kubernetes
provider/pkg/await/condition/custom.go, checker/job/check.go).

The gate Job runs `components/scripts/check_gate.py` in the pinned Python image: it polls the run
through the API, exits 0 on Succeeded and 1 with the reason (the run's Failed condition and the
launcher's NCCL CHECK lines) on Failed. The training runs depend on the gate Job.

- Not queued (no queue label; Kueue leaves unlabelled Jobs alone: manageJobsWithoutQueueName false):
  it starts at once on a system node and its activeDeadlineSeconds is the whole bound, time in the
  queue included (build.gate_seconds).
- Its pod template carries the run's fingerprint: a replaced run replaces its gate (a fixed name:
  deleted first; the deletion is awaited).
- Least privilege: its own service account with a Role reading only that run and the launcher's pods
  and logs; the API token is mounted in this pod only. Egress only to the API server port (TCP 443);
  the namespace's default deny refuses the rest.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field

from components.stack import versions
from components.stack.labels import CHECK_GATE_COMPONENT, JOB_IMMUTABLE
from components.k8s import security
from components.workloads import runs, volumes
from components.workloads.script_files import Script
from components.k8s.options import child_opts

SCRIPT = "check_gate.py"
COMPONENT = CHECK_GATE_COMPONENT
SERVICE_ACCOUNT = "rltrain-check-gate"
FINGERPRINT_ANNOTATION = "rltrain/gated-run"
# The pod reaches the API server on 443 (kubernetes.default ClusterIP, DNAT'd to the control plane's
# endpoints, 443 on EKS).
API_PORT = 443
# Beyond the gate Job's own deadline: its pod starting (a small image) before Pulumi gives up.
AWAIT_MARGIN_SECONDS = 5 * 60
RESOURCES = {"cpu": "100m", "memory": "64Mi"}
NOBODY = 65534
# The pod passes checkov's pod checks but one: CKV_K8S_38 (a service-account token mounted). Reading
# the run's status is its job; the token's Role allows exactly that (checked with checkov 3 on the
# rendered gate: 99 passed, this one failed).
SKIP_REASONS = security.Reasons()
TOKEN_SKIP = ("CKV_K8S_38", "automountServiceAccountToken true: the gate reads the run's status and the "
              "launcher's log through the API, with a Role allowing only that")


class CheckGateArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str  # the gate Job's name
    run_name: str  # the run it waits for
    api_group: str  # e.g. kubeflow.org
    api_version: str  # e.g. v2beta1
    plural: str  # e.g. mpijobs
    launcher_selector: str  # label selector of the pod whose log holds the verdict
    # A hash of what the run runs: a new run means a new gate Job.
    fingerprint: str = Field(min_length=1)
    deadline_seconds: int = Field(ge=60)
    script: Script


def role_args(a: CheckGateArgs, namespace: pulumi.Input[str]) -> k8s.rbac.v1.RoleInitArgs:
    return k8s.rbac.v1.RoleInitArgs(
        metadata=runs.object_metadata(a.name, namespace, runs.labels(COMPONENT, a.name)),
        rules=[
            k8s.rbac.v1.PolicyRuleArgs(api_groups=[a.api_group], resources=[a.plural], resource_names=[a.run_name],
                                       verbs=["get"]),
            k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["list"]),
            k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["pods/log"], verbs=["get"]),
        ])


def role_binding_args(a: CheckGateArgs, namespace: pulumi.Input[str]) -> k8s.rbac.v1.RoleBindingInitArgs:
    return k8s.rbac.v1.RoleBindingInitArgs(
        metadata=runs.object_metadata(a.name, namespace, runs.labels(COMPONENT, a.name)),
        role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=a.name),
        subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=SERVICE_ACCOUNT, namespace=namespace)])


def service_account_args(a: CheckGateArgs, namespace: pulumi.Input[str]) -> k8s.core.v1.ServiceAccountInitArgs:
    # No token by default; the gate pod asks for it (automountServiceAccountToken on the pod).
    return k8s.core.v1.ServiceAccountInitArgs(
        metadata=runs.object_metadata(SERVICE_ACCOUNT, namespace, runs.labels(COMPONENT, SERVICE_ACCOUNT)),
        automount_service_account_token=False)


def network_policy_args(a: CheckGateArgs, namespace: pulumi.Input[str]) -> k8s.networking.v1.NetworkPolicyInitArgs:
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=runs.object_metadata(a.name, namespace, runs.labels(COMPONENT, a.name)),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(a.name)),
            policy_types=["Ingress", "Egress"],
            egress=[k8s.networking.v1.NetworkPolicyEgressRuleArgs(
                ports=[k8s.networking.v1.NetworkPolicyPortArgs(port=API_PORT, protocol="TCP")])]))


def gate_env(a: CheckGateArgs) -> list[k8s.core.v1.EnvVarArgs]:
    plain = {"GATE_NAME": a.run_name, "GATE_GROUP_VERSION": f"{a.api_group}/{a.api_version}",
             "GATE_PLURAL": a.plural, "GATE_LAUNCHER_SELECTOR": a.launcher_selector, "GATE_POLL_SECONDS": "10"}
    return [k8s.core.v1.EnvVarArgs(name="GATE_NAMESPACE", value_from=k8s.core.v1.EnvVarSourceArgs(
        field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path="metadata.namespace")))] + [
        k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in sorted(plain.items())]


def pod_template(a: CheckGateArgs) -> k8s.core.v1.PodTemplateSpecArgs:
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(
            labels=runs.labels(COMPONENT, a.name),
            annotations={FINGERPRINT_ANNOTATION: a.fingerprint, **volumes.scripts_annotation([a.script])}),
        spec=k8s.core.v1.PodSpecArgs(
            restart_policy="Never",
            service_account_name=SERVICE_ACCOUNT,
            automount_service_account_token=True,
            security_context=security.pod_security_context(run_as=NOBODY),
            containers=[k8s.core.v1.ContainerArgs(
                name="gate",
                # The Docker official Python image pinned by digest (versions.py): the script is
                # standard library only.
                image=versions.EFA_EXPORTER_IMAGE,
                image_pull_policy="IfNotPresent",
                command=["python3", f"{volumes.SCRIPTS_PATH}/{SCRIPT}"],
                env=gate_env(a),
                resources=k8s.core.v1.ResourceRequirementsArgs(requests=dict(RESOURCES), limits=dict(RESOURCES)),
                # The script writes the reason to /dev/termination-log; a crash leaves its log tail.
                termination_message_policy="FallbackToLogsOnError",
                volume_mounts=[volumes.scripts_mount()],
                security_context=security.container_security_context(read_only_root=True),
            )],
            volumes=[volumes.scripts_volume([a.script])],
        ))


def job_args(a: CheckGateArgs, namespace: pulumi.Input[str]) -> k8s.batch.v1.JobInitArgs:
    template = pod_template(a)
    return k8s.batch.v1.JobInitArgs(
        metadata=runs.object_metadata(
            a.name, namespace, runs.labels(COMPONENT, a.name),
            # The provider's own Job await: done when Complete, an error at once when it fails.
            {**runs.await_success(a.deadline_seconds + AWAIT_MARGIN_SECONDS),
             **security.annotations([*security.skips(template.spec, SKIP_REASONS, kind="Job"), TOKEN_SKIP])}),
        spec=k8s.batch.v1.JobSpecArgs(
            backoff_limit=0,
            active_deadline_seconds=a.deadline_seconds,
            template=template,
        ))


class CheckGate(pulumi.ComponentResource):
    """The gate Job and what it needs (service account, Role, RoleBinding, NetworkPolicy)."""

    def __init__(self, name: str, args: CheckGateArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None, *, after: tuple[pulumi.Resource, ...] = ()):
        super().__init__("rltrain:workloads:CheckGate", name, None, opts)
        sa = k8s.core.v1.ServiceAccount(f"{name}-sa", service_account_args(args, namespace),
                                        child_opts(self, opts))
        role = k8s.rbac.v1.Role(f"{name}-role", role_args(args, namespace), child_opts(self, opts))
        binding = k8s.rbac.v1.RoleBinding(f"{name}-binding", role_binding_args(args, namespace),
                                          child_opts(self, opts, sa, role))
        netpol = k8s.networking.v1.NetworkPolicy(f"{name}-netpol", network_policy_args(args, namespace),
                                                 child_opts(self, opts))
        self.job = k8s.batch.v1.Job(f"{name}-job", job_args(args, namespace),
                                    child_opts(self, opts, binding, netpol, *after, delete_before_replace=True,
                                                    replace_on_changes=JOB_IMMUTABLE))
        self.register_outputs({"job": args.name})
