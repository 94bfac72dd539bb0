"""StagingJob: put the trainer's models and task assets on /fsx before any training run starts.

The reference leaves this to a hand-run download Job (aws-samples/sample-rlinf-on-eks
examples/maniskill-openvlaoft-ppo/manifests/model-download.yaml): until it has run, the training
script exits at `$MODEL_PATH/config.json` missing and every retry fails the same way. Here the
trainer profile (components/stack/trainers.py) names what `workloads.configName` needs; this Job
fetches each item (components/scripts/stage_assets.py) from the model hub, or from
`workloads.staging.s3Prefix`, skips what an earlier run completed and marks each completed item.

Ordering: the training runs depend on this Job and `pulumi up` waits for it to complete
(pulumi-kubernetes' Job await: ready at `Complete`, an error at `Failed`; `pulumi.com/timeoutSeconds`
= the Job's own deadline), so no run is created before its model is on the volume.

The pod: the training image (its venv has huggingface_hub, an RLinf dependency: RLinf/RLinf@050543189957
pyproject.toml), 2 CPUs and 8 GiB, no GPU and no EFA, the training Secret's env (a model hub token,
training.secretEnv), egress 443 and FSx only. It is not queued by Kueue (no GPU: nothing to admit).
Where it runs (placement.cpu_helper_placement): on a fixed stack a GPU node, which also pulls the
large image there before training needs it; on an elastic stack the CPU NodePool
(components/k8s/cpu_nodes.py), so `up` never waits for a GPU launch to download files.
"""

from __future__ import annotations

import json
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.stack import elastic, image_build, trainers
from components.stack.config import StackConfig
from components.k8s import security
from components.workloads import env, multinode, placement, runs, volumes
from components.k8s.options import child_opts

NAME = "rltrain-staging"
COMPONENT = "staging"
SCRIPT = "stage_assets.py"
CPU = "2"
MEMORY = "8Gi"
SKIP_REASONS = security.TRAINING


class StagingJobArgs(runs.WorkloadArgs):
    pass


def items(cfg: StackConfig) -> list[trainers.Stage]:
    """What configName needs, with sources from staging.s3Prefix when it is set."""
    w = cfg.workloads
    profile, tc = w.profile, w.trainer_config
    if profile is None or tc is None:
        return []
    out = [profile.stages[name] for name in tc.stages]
    prefix = w.staging.s3_prefix
    if prefix:
        base = prefix.rstrip("/")
        out = [trainers.Stage(s.name, f"{base}/{s.dest.rstrip('/').rsplit('/', 1)[-1]}/", s.dest) for s in out]
    return out


def deadline_seconds(cfg: StackConfig) -> int:
    return cfg.workloads.staging.deadline_minutes * 60 + runs.IMAGE_PULL_MARGIN_SECONDS


def staging_env(cfg: StackConfig) -> dict[str, str]:
    w = cfg.workloads
    out = {"STAGE_ITEMS": json.dumps([{"name": s.name, "source": s.source, "dest": s.dest} for s in items(cfg)]),
           # huggingface_hub reads HF_ENDPOINT (huggingface_hub/constants.py); the RLinf image's own
           # is a mirror unless built with NO_MIRROR=1 (RLinf/RLinf v0.3 docker/Dockerfile).
           "HF_ENDPOINT": w.staging.hf_endpoint}
    if w.profile is not None and w.venv_name:
        out["PATH"] = w.profile.path(w.venv_name)
        out["VIRTUAL_ENV"] = f"{w.profile.venv_root}/{w.venv_name}"
    return out


def pod_template(a: StagingJobArgs, secret_name: Optional[pulumi.Input[str]]) -> k8s.core.v1.PodTemplateSpecArgs:
    cfg = a.cfg
    w = cfg.workloads
    script = a.scripts[SCRIPT]
    plain = [k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in sorted(staging_env(cfg).items())]
    resources = {"cpu": CPU, "memory": MEMORY}
    # The GPU nodes on a fixed stack, the CPU NodePool on an elastic one (placement.py): never a
    # GPU launch for a download. Affinity, not nodeSelector: Kueue's (placement.py).
    tolerations, affinity = placement.cpu_helper_placement(cfg)
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=runs.labels(COMPONENT, NAME),
                                            # elastic: Karpenter leaves its node alone while it runs
                                            annotations={**volumes.scripts_annotation([script]),
                                                         **elastic.pod_annotations(cfg.gpu_nodes.elastic)}),
        spec=k8s.core.v1.PodSpecArgs(
            restart_policy="Never",
            service_account_name=cfg.training.service_account,  # S3 reads through the training role
            automount_service_account_token=False,
            priority_class_name=runs.priority_class(cfg),
            tolerations=tolerations,
            affinity=affinity,
            security_context=security.pod_security_context(),
            containers=[k8s.core.v1.ContainerArgs(
                name=runs.CONTAINER,
                image=image_build.pod_image(w.image),
                image_pull_policy="IfNotPresent",
                command=["python3", f"{volumes.SCRIPTS_PATH}/{SCRIPT}"],
                env=sorted(plain + env.secret_env(cfg, secret_name), key=lambda e: e.name),
                resources=k8s.core.v1.ResourceRequirementsArgs(requests=resources, limits=resources),
                volume_mounts=[k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=volumes.FSX_PATH),
                               volumes.scripts_mount()],
                security_context=security.container_security_context(),
            )],
            volumes=[k8s.core.v1.VolumeArgs(name="fsx", persistent_volume_claim=k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(
                claim_name=a.claim_name)), volumes.scripts_volume([script])],
        ),
    )


def job_args(a: StagingJobArgs, namespace: pulumi.Input[str],
             secret_name: Optional[pulumi.Input[str]]) -> k8s.batch.v1.JobInitArgs:
    cfg = a.cfg
    template = pod_template(a, secret_name)
    seconds = deadline_seconds(cfg)
    return k8s.batch.v1.JobInitArgs(
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME),
                                      {**runs.await_success(seconds),
                                       **security.annotate(template, SKIP_REASONS, kind="Job")}),
        spec=k8s.batch.v1.JobSpecArgs(
            completions=1,
            parallelism=1,
            # A failed item is retried once (a network blip); the script skips what is complete.
            backoff_limit=1,
            active_deadline_seconds=seconds,
            template=template,
        ),
    )


class StagingJob(pulumi.ComponentResource):
    """The staging Job and its NetworkPolicy (out: DNS, HTTPS, Pod Identity, FSx; in: nothing)."""

    job_name: str

    def __init__(self, name: str, args: StagingJobArgs, namespace: pulumi.Input[str],
                 secret_name: Optional[pulumi.Input[str]] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:StagingJob", name, None, opts)
        obj_labels = runs.labels(COMPONENT, NAME)
        netpol = k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol", multinode.network_policy_args(NAME, namespace, obj_labels),
            child_opts(self, opts))
        self.job = k8s.batch.v1.Job(
            f"{name}-job", job_args(args, namespace, secret_name),
            child_opts(self, opts, netpol, delete_before_replace=True, replace_on_changes=runs.REPLACE_JOB_ON))
        self.job_name = NAME
        self.register_outputs({"job": NAME})
