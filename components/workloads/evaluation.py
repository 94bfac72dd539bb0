"""EvaluationCronJob: components/scripts/evaluate.py against the serving endpoint, on a schedule (off by default).

`workloads.serving.evaluation`: a batch/v1 CronJob `rltrain-evaluation` whose Job runs the mounted
script (a file of the scripts ConfigMaps, like the other programs) in a small pinned Python image.
It asks the serving Service for each prompt of `promptsPath` and writes
`eval-<label>-<time>.json` into `<the run's checkpoint directory>/eval` (a fixed model path: its
parent's `eval`), so the results sit beside the checkpoints they judge; the label names the served
step. concurrencyPolicy Forbid (a slow evaluation is never doubled), history limits, a start
deadline (a missed slot is skipped, not caught up in a burst) and an activeDeadlineSeconds per Job.
No GPU: Kueue and the schedule leave it alone. Its pod may reach the serving port and DNS only.

Beside it, the Deployment `rltrain-eval-metrics` serves those result files to Prometheus
(components/scripts/eval_metrics.py: `rltrain_eval_accuracy{step=...}`, the newest result per step),
scraped by the PodMonitor of the same name and drawn on the Serving dashboard as accuracy over steps.
"""

from __future__ import annotations

import posixpath
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.stack import versions
from components.stack.config import StackConfig
from components.stack.labels import CHECKS_SERVICE_ACCOUNT
from components.k8s import security
from components.workloads import env, runs, serving, volumes
from components.k8s.options import child_opts

NAME = "rltrain-evaluation"
COMPONENT = "evaluation"
CONTAINER = "evaluate"
SCRIPT = "evaluate.py"
HISTORY = 3
# A run missed by more than this (the controller was down, the previous one still running under
# Forbid) is skipped rather than started late.
STARTING_DEADLINE_SECONDS = 600

SKIP_REASONS = security.Reasons(
    root="the Python image runs as root, which writes result files into the run's root-owned checkpoint directory",
)


def out_dir(cfg: StackConfig) -> str:
    m = cfg.workloads.serving.model
    if m.run:
        return f"{env.dir_of(cfg, m.run)}/eval"
    return posixpath.join(posixpath.dirname(m.path.rstrip("/")), "eval")


def label(cfg: StackConfig) -> str:
    m = cfg.workloads.serving.model
    return f"step-{m.step}" if m.run else "path"


DEFAULT_PROMPTS = "/fsx/eval/prompts.jsonl"
REASONING_MAX_TOKENS = 4096
DEFAULT_MAX_TOKENS = 256


def reasoning(cfg: StackConfig) -> bool:
    p = cfg.workloads.profile
    return p is not None and p.family == "reasoning" and bool(cfg.workloads.serving.model.run)


def script_args(cfg: StackConfig) -> dict[str, str]:
    """The evaluation's flags besides the endpoint: the family decides the set and the scoring."""
    ev, m = cfg.workloads.serving.evaluation, cfg.workloads.serving.model
    math = reasoning(cfg)
    out = {"model": serving.served_model_name(cfg),
           "prompts": ev.prompts_path or ("builtin:math" if math else DEFAULT_PROMPTS),
           "out-dir": out_dir(cfg), "label": label(cfg),
           "max-tokens": str(ev.max_tokens or (REASONING_MAX_TOKENS if math else DEFAULT_MAX_TOKENS))}
    if math:
        out["scoring"] = "math"
    if m.run:
        out["step"] = str(m.step)
    return out


def endpoint(namespace: pulumi.Input[str]) -> pulumi.Output[str]:
    return pulumi.Output.concat("http://", serving.NAME, ".", namespace, f".svc:{serving.PORT}")


def pod_template(cfg: StackConfig, claim_name: str, namespace: pulumi.Input[str],
                 scripts: list) -> k8s.core.v1.PodTemplateSpecArgs:
    ev = cfg.workloads.serving.evaluation
    args = {"endpoint": endpoint(namespace), **script_args(cfg)}
    command = ["python3", f"{volumes.SCRIPTS_PATH}/{SCRIPT}"]
    container = k8s.core.v1.ContainerArgs(
        name=CONTAINER,
        image=ev.image or versions.EVALUATION_IMAGE,
        image_pull_policy="IfNotPresent",
        command=command,
        args=[pulumi.Output.concat(f"--{k}=", v) for k, v in args.items()] + (["--chat"] if reasoning(cfg) else []),
        resources=k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": "500m", "memory": "512Mi"},
                                                       limits={"cpu": "500m", "memory": "512Mi"}),
        volume_mounts=[k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=volumes.FSX_PATH),
                       volumes.scripts_mount(),
                       k8s.core.v1.VolumeMountArgs(name="tmp", mount_path=volumes.TMP_PATH)],
        security_context=security.container_security_context(read_only_root=True),
    )
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=runs.labels(COMPONENT, NAME),
                                            annotations=volumes.scripts_annotation(scripts)),
        spec=k8s.core.v1.PodSpecArgs(
            restart_policy="Never",
            service_account_name=CHECKS_SERVICE_ACCOUNT,
            automount_service_account_token=False,
            security_context=security.pod_security_context(),
            containers=[container],
            volumes=[k8s.core.v1.VolumeArgs(name="fsx", persistent_volume_claim=(
                         k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(claim_name=claim_name))),
                     volumes.scripts_volume(scripts),
                     k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
                         size_limit=volumes.TMP_SIZE))],
        ),
    )


def cronjob_args(cfg: StackConfig, claim_name: str, namespace: pulumi.Input[str],
                 scripts: list) -> k8s.batch.v1.CronJobInitArgs:
    ev = cfg.workloads.serving.evaluation
    template = pod_template(cfg, claim_name, namespace, scripts)
    return k8s.batch.v1.CronJobInitArgs(
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME),
                                      security.annotate(template, SKIP_REASONS, kind="CronJob")),
        spec=k8s.batch.v1.CronJobSpecArgs(
            schedule=ev.schedule,
            concurrency_policy="Forbid",
            starting_deadline_seconds=STARTING_DEADLINE_SECONDS,
            successful_jobs_history_limit=HISTORY,
            failed_jobs_history_limit=HISTORY,
            job_template=k8s.batch.v1.JobTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels=runs.labels(COMPONENT, NAME)),
                spec=k8s.batch.v1.JobSpecArgs(
                    backoff_limit=1,
                    active_deadline_seconds=ev.deadline_minutes * 60,
                    template=template,
                ),
            ),
        ),
    )


def network_policy_args(cfg: StackConfig, namespace: pulumi.Input[str]) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """Out: the serving pods' port and DNS; in: nothing."""
    dns = runs.dns_peer()
    server = k8s.networking.v1.NetworkPolicyPeerArgs(
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(serving.NAME)))
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME)),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(NAME)),
            policy_types=["Ingress", "Egress"],
            egress=[k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[server], ports=[
                        k8s.networking.v1.NetworkPolicyPortArgs(port=serving.PORT, protocol="TCP")]),
                    k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[dns], ports=[
                        k8s.networking.v1.NetworkPolicyPortArgs(port=53, protocol="UDP"),
                        k8s.networking.v1.NetworkPolicyPortArgs(port=53, protocol="TCP")])],
        ),
    )


# --- accuracy over steps, for Prometheus ------------------------------------------------------------
# A small Deployment serves the result files as metrics (components/scripts/eval_metrics.py): the
# CronJob's pods are gone before a scrape, and the stack has no Pushgateway. CPU only, on any node.

METRICS_NAME = "rltrain-eval-metrics"
METRICS_COMPONENT = "eval-metrics"
METRICS_SCRIPT = "eval_metrics.py"
METRICS_PORT = 9400
METRICS_PORT_NAME = "metrics"
METRICS_SKIP_REASONS = security.Reasons(
    root="the Python image runs as root; it only reads the run's result files",
)


def metrics_deployment_args(cfg: StackConfig, claim_name: str, namespace: pulumi.Input[str],
                            scripts: list, eval_dir: Optional[str] = None) -> k8s.apps.v1.DeploymentInitArgs:
    """`eval_dir`: the result files served; default the served model's (out_dir), the embodied
    evaluation passes its run's (embodied_eval.py)."""
    res = {"cpu": "50m", "memory": "64Mi"}
    probe = k8s.core.v1.ProbeArgs(http_get=k8s.core.v1.HTTPGetActionArgs(path="/healthz", port=METRICS_PORT_NAME),
                                  period_seconds=30, timeout_seconds=5, failure_threshold=3)
    template = k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=runs.labels(METRICS_COMPONENT, METRICS_NAME),
                                            annotations=volumes.scripts_annotation(scripts)),
        spec=k8s.core.v1.PodSpecArgs(
            service_account_name=CHECKS_SERVICE_ACCOUNT,
            automount_service_account_token=False,
            security_context=security.pod_security_context(),
            termination_grace_period_seconds=10,
            containers=[k8s.core.v1.ContainerArgs(
                name="eval-metrics", image=versions.EVALUATION_IMAGE, image_pull_policy="IfNotPresent",
                command=["python3", f"{volumes.SCRIPTS_PATH}/{METRICS_SCRIPT}"],
                args=[f"--eval-dir={eval_dir or out_dir(cfg)}", f"--model={serving.served_model_name(cfg)}",
                      f"--port={METRICS_PORT}"],
                ports=[k8s.core.v1.ContainerPortArgs(name=METRICS_PORT_NAME, container_port=METRICS_PORT,
                                                     protocol="TCP")],
                resources=k8s.core.v1.ResourceRequirementsArgs(requests=res, limits=res),
                readiness_probe=probe, liveness_probe=probe,
                volume_mounts=[k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=volumes.FSX_PATH, read_only=True),
                               volumes.scripts_mount()],
                security_context=security.container_security_context(read_only_root=True))],
            volumes=[k8s.core.v1.VolumeArgs(name="fsx", persistent_volume_claim=(
                         k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(claim_name=claim_name, read_only=True))),
                     volumes.scripts_volume(scripts)],
        ),
    )
    return k8s.apps.v1.DeploymentInitArgs(
        metadata=runs.object_metadata(METRICS_NAME, namespace, runs.labels(METRICS_COMPONENT, METRICS_NAME),
                                      security.annotate(template, METRICS_SKIP_REASONS, kind="Deployment")),
        spec=k8s.apps.v1.DeploymentSpecArgs(
            replicas=1,
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(METRICS_NAME)),
            template=template),
    )


def metrics_network_policy_args(cfg: StackConfig, namespace: pulumi.Input[str]) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """In: Prometheus of the monitoring namespace on the metrics port; out: nothing."""
    return prometheus_only_policy(cfg, METRICS_NAME, METRICS_COMPONENT, METRICS_PORT, namespace)


def prometheus_only_policy(cfg: StackConfig, name: str, component: str, port: int,
                           namespace: pulumi.Input[str]) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """The pods of `name`: in, Prometheus of the monitoring namespace on `port`; out, nothing (an
    exporter reading files on the volume, mounted by the node's kernel)."""
    prometheus = k8s.networking.v1.NetworkPolicyPeerArgs(
        namespace_selector=k8s.meta.v1.LabelSelectorArgs(
            match_labels={"kubernetes.io/metadata.name": cfg.monitoring.namespace}),
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(serving.PROMETHEUS_LABELS)))
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=runs.object_metadata(name, namespace, runs.labels(component, name)),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(name)),
            policy_types=["Ingress", "Egress"],
            ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(from_=[prometheus], ports=[
                k8s.networking.v1.NetworkPolicyPortArgs(port=port, protocol="TCP")])]),
    )


def eval_metrics(parent: pulumi.ComponentResource, name: str, cfg: StackConfig, claim_name: str,
                 namespace: pulumi.Input[str], scripts: list, opts: Optional[pulumi.ResourceOptions],
                 eval_dir: Optional[str] = None) -> k8s.apps.v1.Deployment:
    """The eval-metrics Deployment and its NetworkPolicy, children of `parent`."""
    netpol = k8s.networking.v1.NetworkPolicy(f"{name}-metrics-netpol", metrics_network_policy_args(cfg, namespace),
                                             child_opts(parent, opts))
    return k8s.apps.v1.Deployment(f"{name}-metrics",
                                  metrics_deployment_args(cfg, claim_name, namespace, scripts, eval_dir),
                                  child_opts(parent, opts, netpol))


class EvaluationCronJob(pulumi.ComponentResource):
    """The evaluation CronJob and its NetworkPolicy."""

    def __init__(self, name: str, args: runs.WorkloadArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:EvaluationCronJob", name, None, opts)
        cfg = args.cfg
        netpol = k8s.networking.v1.NetworkPolicy(f"{name}-netpol", network_policy_args(cfg, namespace),
                                                 child_opts(self, opts))
        self.cronjob = k8s.batch.v1.CronJob(
            f"{name}-cronjob", cronjob_args(cfg, args.claim_name, namespace, [args.scripts[SCRIPT]]),
            child_opts(self, opts, netpol))
        self.metrics = eval_metrics(self, name, cfg, args.claim_name, namespace, [args.scripts[METRICS_SCRIPT]], opts)
        self.register_outputs({"cronjob": NAME, "metrics": METRICS_NAME})
