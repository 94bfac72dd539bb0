"""What every run object shares: labels, deadlines, the pod failure policy, metadata and resource options.
"""

from __future__ import annotations

import hashlib
from typing import Mapping, Optional

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field

from components.stack.config import StackConfig
from components.stack.labels import MANAGED_BY


CONTAINER = "trainer"


PRIORITY_CLASS = "rltrain-training"


RUN_LABEL = "rltrain/run"


IMAGE_PULL_MARGIN_SECONDS = 10 * 60


def deadline_seconds(cfg: StackConfig) -> int:
    """Training time plus the cold image pull margin (D6)."""
    return cfg.workloads.max_run_minutes * 60 + IMAGE_PULL_MARGIN_SECONDS


def pod_failure_policy(cfg: StackConfig) -> k8s.batch.v1.PodFailurePolicyArgs:
    """Disruptions are free retries; configuration errors fail the Job at once (D5).

    Ignore comes first: rules match in order, and a pod killed by a drain or preemption is never a
    configuration error whatever its exit code during shutdown.
    """
    rules = [k8s.batch.v1.PodFailurePolicyRuleArgs(
        action="Ignore",
        on_pod_conditions=[k8s.batch.v1.PodFailurePolicyOnPodConditionsPatternArgs(
            type="DisruptionTarget", status="True")],
    )]
    codes = sorted({c for c in cfg.workloads.fail_fast_exit_codes if c != 0})
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


def short_hash(*parts: str, length: int = 8) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:length]


def _as_list(deps) -> list:
    if deps is None:
        return []
    return list(deps) if isinstance(deps, (list, tuple)) else [deps]


def child_opts(parent: pulumi.Resource, opts: Optional[pulumi.ResourceOptions], *extra_deps: pulumi.Resource,
               **kwargs) -> pulumi.ResourceOptions:
    """Options of a component's child: parent, the caller's Kubernetes provider and dependencies.

    depends_on is not inherited from a component by its children, so it is passed on explicitly
    (the namespace and its service account must exist before any pod is created).
    """
    return pulumi.ResourceOptions(
        parent=parent,
        provider=opts.provider if opts else None,
        depends_on=[*_as_list(opts.depends_on if opts else None), *extra_deps],
        **kwargs,
    )


# pulumi-kubernetes otherwise waits for a Job to complete / a StatefulSet to be ready: `pulumi up`
# would block for the whole training run (FACTS.md "Pulumi facts that bite").
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}


class WorkloadArgs(BaseModel):
    """What every workload component takes besides its namespace and Secret name (Pulumi Inputs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cfg: StackConfig
    claim_name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    # sha256 of the scripts ConfigMap; pods that run a script carry it (a changed script = new run).
    scripts_digest: str = ""


def object_metadata(name: str, namespace: pulumi.Input[str], obj_labels: Mapping[str, str],
                    annotations: Optional[Mapping[str, str]] = None) -> k8s.meta.v1.ObjectMetaArgs:
    return k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=dict(obj_labels),
                                      annotations=dict(annotations) if annotations else None)
