"""Curves: TensorBoard over every training run's event files, and their headline scalars for Grafana.

One Deployment `rltrain-curves` in the training namespace (it mounts the shared volume's claim,
read-only), two containers:

- `tensorboard`: TensorBoard (versions.TENSORBOARD_IMAGE) with `--logdir_spec NAME:DIR,...`, one
  TensorBoard run per training run, named after it (TensorBoard's logdir_spec: `name:path` pairs, the
  name shown as the run), so runs are compared side by side in one page. Reached like Grafana:
  `kubectl -n <namespace> port-forward deploy/rltrain-curves 6006`, then http://localhost:6006;
  no Service, nothing exposed.
- `metrics`: components/scripts/curves_metrics.py (the pinned Python image) serving each run's
  reward, loss and seconds per step (the trainer profile's headline tags) at the newest step as
  `rltrain_run_scalar`; the monitoring's PodMonitor scrapes it for the Runs panel beside the GPU
  panels (components/k8s/dashboards.py).

Where each run writes its event files is the trainer profile's (trainers.TrainerProfile
tensorboard_under, cited there: RLinf's MetricLogger writes `<runner.logger.log_path>/tensorboard`).
A disabled run (enabled: false) keeps its curves here: its files stay on the volume.

Placement: CPU only, no GPU affinity, so on the system nodes like the retention and evaluation
CronJobs: the FSx security group must admit them (the cluster security group's Lustre rules,
KNOWN-FAILURES F19).
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import security
from components.stack import versions
from components.stack.config import StackConfig
from components.stack.labels import CHECKS_SERVICE_ACCOUNT
from components.stack.runs import Run
from components.workloads import env, evaluation, runs, volumes
from components.k8s.options import child_opts

NAME = "rltrain-curves"
COMPONENT = "curves"
SCRIPT = "curves_metrics.py"
TENSORBOARD_PORT = 6006
METRICS_PORT = 9401
METRICS_PORT_NAME = "metrics"
SKIP_REASONS = security.Reasons(
    root="the TensorFlow and Python images run as root; both only read the runs' event files",
    writable_root="TensorBoard writes its temporary files under /tmp and $HOME",
    pull_policy="pinned tags, pulled once per node",
    tag="TensorFlow's image pinned by its release tag (versions.TENSORBOARD_IMAGE: no digest known here)",
)


def event_dir(cfg: StackConfig, run: Run) -> Optional[str]:
    """Where the run's trainer writes its TensorBoard event files, or None when its profile does not say."""
    view = cfg.for_run(run)
    profile, tc = view.workloads.profile, view.workloads.trainer_config
    if profile is None or not profile.tensorboard_under:
        return None
    under = profile.tensorboard_under.format(experiment=view.workloads.experiment_name,
                                             config_experiment=tc.experiment_name if tc else "")
    return f"{env.run_dir(cfg, run)}/{under}"


def event_dirs(cfg: StackConfig) -> dict[str, str]:
    """Run name -> its event directory, every run of the stack (a disabled one's files stay)."""
    return {r.name: d for r in cfg.training_runs if (d := event_dir(cfg, r))}


def enabled(cfg: StackConfig) -> bool:
    return cfg.curves_enabled and bool(event_dirs(cfg))


def run_curves(cfg: StackConfig, run: Run) -> Optional[str]:
    """Where a run's curves are served, for the render's summary."""
    d = event_dir(cfg, run)
    if d is None or not enabled(cfg):
        return None
    return (f"TensorBoard run {run.name} ({d}): kubectl -n {cfg.training.namespace} port-forward deploy/{NAME} "
            f"{TENSORBOARD_PORT}, http://localhost:{TENSORBOARD_PORT}"
            + ("; Grafana: rltrain / GPUs, row Training runs (reward, loss, seconds per step)" if cfg.monitoring_enabled else ""))


def headline_tags(cfg: StackConfig) -> dict[str, str]:
    """Metric -> tag, over the profiles of the stack's runs (the tags are the same per profile family)."""
    out: dict[str, str] = {}
    for r in cfg.training_runs:
        p = cfg.for_run(r).workloads.profile
        for metric, tag in (p.headline_tags.items() if p else ()):
            out.setdefault(metric if metric not in out or out[metric] == tag else f"{metric} ({p.name})", tag)
    return out


def logdir_spec(cfg: StackConfig) -> str:
    """TensorBoard's `--logdir_spec`: `name:dir,...`, sorted by run name."""
    return ",".join(f"{name}:{d}" for name, d in sorted(event_dirs(cfg).items()))


def metrics_args(cfg: StackConfig) -> list[str]:
    return ([f"--run={name}={d}" for name, d in sorted(event_dirs(cfg).items())]
            + [f"--tag={m}={t}" for m, t in sorted(headline_tags(cfg).items())] + [f"--port={METRICS_PORT}"])


def deployment_args(cfg: StackConfig, claim_name: str, namespace: pulumi.Input[str],
                    scripts: list) -> k8s.apps.v1.DeploymentInitArgs:
    fsx = k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=volumes.FSX_PATH, read_only=True)
    tmp = k8s.core.v1.VolumeMountArgs(name="tmp", mount_path=volumes.TMP_PATH)
    tb_res = {"cpu": "500m", "memory": "2Gi"}
    m_res = {"cpu": "50m", "memory": "128Mi"}
    tb_probe = k8s.core.v1.ProbeArgs(tcp_socket=k8s.core.v1.TCPSocketActionArgs(port="tensorboard"),
                                     period_seconds=30, timeout_seconds=5, failure_threshold=3)
    m_probe = k8s.core.v1.ProbeArgs(http_get=k8s.core.v1.HTTPGetActionArgs(path="/healthz", port=METRICS_PORT_NAME),
                                    period_seconds=30, timeout_seconds=5, failure_threshold=3)
    containers = [
        k8s.core.v1.ContainerArgs(
            name="tensorboard", image=cfg.workloads.curves.image or versions.TENSORBOARD_IMAGE,
            image_pull_policy="IfNotPresent",
            # --bind_all: the pod's address (port-forward connects to it); TensorBoard's default is localhost.
            command=["tensorboard", f"--logdir_spec={logdir_spec(cfg)}", f"--port={TENSORBOARD_PORT}", "--bind_all",
                     "--reload_interval=60"],
            env=[k8s.core.v1.EnvVarArgs(name="HOME", value=volumes.TMP_PATH)],
            ports=[k8s.core.v1.ContainerPortArgs(name="tensorboard", container_port=TENSORBOARD_PORT, protocol="TCP")],
            resources=k8s.core.v1.ResourceRequirementsArgs(requests=tb_res, limits=tb_res),
            readiness_probe=tb_probe, liveness_probe=tb_probe,
            volume_mounts=[fsx, tmp],
            security_context=security.container_security_context(read_only_root=True)),
        k8s.core.v1.ContainerArgs(
            name="metrics", image=versions.EVALUATION_IMAGE, image_pull_policy="IfNotPresent",
            command=["python3", f"{volumes.SCRIPTS_PATH}/{SCRIPT}"], args=metrics_args(cfg),
            ports=[k8s.core.v1.ContainerPortArgs(name=METRICS_PORT_NAME, container_port=METRICS_PORT, protocol="TCP")],
            resources=k8s.core.v1.ResourceRequirementsArgs(requests=m_res, limits=m_res),
            readiness_probe=m_probe, liveness_probe=m_probe,
            volume_mounts=[fsx, volumes.scripts_mount()],
            security_context=security.container_security_context(read_only_root=True)),
    ]
    template = k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=runs.labels(COMPONENT, NAME),
                                            annotations=volumes.scripts_annotation(scripts)),
        spec=k8s.core.v1.PodSpecArgs(
            service_account_name=CHECKS_SERVICE_ACCOUNT,
            automount_service_account_token=False,
            security_context=security.pod_security_context(),
            termination_grace_period_seconds=10,
            containers=containers,
            volumes=[k8s.core.v1.VolumeArgs(name="fsx", persistent_volume_claim=(
                         k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(claim_name=claim_name, read_only=True))),
                     volumes.scripts_volume(scripts),
                     k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit="1Gi"))],
        ),
    )
    return k8s.apps.v1.DeploymentInitArgs(
        # `pulumi up` does not wait for it to be ready: the curves are a view, never what a deploy
        # waits on (an image pull or a mount that takes long would otherwise fail the whole `up`).
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME),
                                      {**runs.SKIP_AWAIT, **security.annotate(template, SKIP_REASONS, kind="Deployment")}),
        spec=k8s.apps.v1.DeploymentSpecArgs(
            replicas=1,
            # One pod: TensorBoard holds no state worth two, and a new run list replaces it.
            strategy=k8s.apps.v1.DeploymentStrategyArgs(type="Recreate"),
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(NAME)),
            template=template),
    )


def network_policy_args(cfg: StackConfig, namespace: pulumi.Input[str]) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """In: Prometheus on the metrics port (a port-forward reaches the pod through its kubelet, not
    the pod network); out: nothing (evaluation.prometheus_only_policy)."""
    return evaluation.prometheus_only_policy(cfg, NAME, COMPONENT, METRICS_PORT, namespace)


class Curves(pulumi.ComponentResource):
    """The curves Deployment (TensorBoard and the metrics exporter) and its NetworkPolicy."""

    def __init__(self, name: str, args: runs.WorkloadArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:Curves", name, None, opts)
        cfg = args.cfg
        netpol = k8s.networking.v1.NetworkPolicy(f"{name}-netpol", network_policy_args(cfg, namespace),
                                                 child_opts(self, opts))
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment", deployment_args(cfg, args.claim_name, namespace, [args.scripts[SCRIPT]]),
            child_opts(self, opts, netpol))
        self.register_outputs({"deployment": NAME})
