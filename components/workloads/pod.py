"""The training pod: sizes, env, volumes, scheduling and security, as pure functions.

Every workload of the stack (single-node Job, multi-node Job/StatefulSet, validation Job) builds
its pod here, so a p5 stack cannot keep a p4de size in one of them (SEED-DEFECTS D9). Nothing in
this module needs a Pulumi runtime: the functions return typed `pulumi_kubernetes` Args, which the
tests inspect directly.

The training pod template, assembled from sizing, env, volumes, security and placement.
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.stack import elastic, image_build
from components.stack.config import StackConfig
from components.stack.runs import Run
from components.workloads.env import env_vars
from components.workloads.placement import gpu_affinity, gpu_tolerations
from components.workloads.runs import CONTAINER, priority_class
from components.workloads.script_files import Script
from components.k8s.security import container_security_context, pod_security_context
from components.workloads.sizing import PodSizing, pod_sizing
from components.workloads.volumes import scripts_annotation, volume_mounts, volumes


def training_pod_template(
    cfg: StackConfig,
    *,
    claim_name: str,
    secret_name: Optional[pulumi.Input[str]],
    pod_labels: Mapping[str, str],
    command: Optional[Sequence[str]],
    num_nodes: int,
    extra_env: Optional[Mapping[str, pulumi.Input[str]]] = None,
    affinity: Optional[k8s.core.v1.AffinityArgs] = None,
    restart_policy: str = "Never",
    subdomain: Optional[str] = None,
    annotations: Optional[Mapping[str, str]] = None,
    sizing: Optional[PodSizing] = None,
    include_secrets: bool = True,
    read_only_root: bool = False,
    scripts: Sequence[Script] = (),
    checkpoints: bool = True,
    secret_refs: Mapping[str, str] = {},
    priority_class_name: Optional[str] = None,
    service_account: Optional[str] = None,
    ports: Sequence[k8s.core.v1.ContainerPortArgs] = (),
    run: Optional[Run] = None,
    api_token: bool = False,
) -> k8s.core.v1.PodTemplateSpecArgs:
    """One whole GPU node's pod running `command` in the training image.

    `read_only_root`: a read-only root filesystem with a small /tmp emptyDir, for a command known
    to write only to its volumes. `scripts`: the programs the command runs, mounted at /scripts;
    the template carries their digest (a changed script is a new run of this workload only).
    `priority_class_name`: default the training PriorityClass; checks run in their own (queue order).
    `command` None: the image's own (a KubeRay Ray container, whose command KubeRay writes).
    `ports`: the container's named ports (Ray's metrics port, which the Ray PodMonitor scrapes by name).
    `run`: the training run the pod belongs to (its checkpoint directory and overrides); None = the
    implicit run of `num_nodes`.
    `api_token`: mount the service account's API token (the Ray launcher's node check,
    node_health_access.py); off for every other pod.
    """
    w = cfg.workloads
    sizing = sizing or pod_sizing(cfg)
    env = env_vars(cfg, num_nodes=num_nodes, secret_name=secret_name, efa=sizing.efa, extra=extra_env,
                   include_secrets=include_secrets, checkpoints=checkpoints, secret_refs=secret_refs, run=run)
    container = k8s.core.v1.ContainerArgs(
        name=CONTAINER,
        image=image_build.pod_image(w.image),
        image_pull_policy="IfNotPresent",
        command=list(command) if command is not None else None,
        ports=list(ports) or None,
        env=env,
        resources=sizing.resources(),
        volume_mounts=volume_mounts(scripts=bool(scripts), tmp=read_only_root),
        security_context=container_security_context(read_only_root=read_only_root),
    )
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=dict(pod_labels), annotations={**scripts_annotation(scripts),
                                                                                **elastic.pod_annotations(cfg.gpu_nodes.elastic),
                                                                                **(annotations or {})}),
        spec=k8s.core.v1.PodSpecArgs(
            restart_policy=restart_policy,
            service_account_name=service_account or cfg.training.service_account,
            automount_service_account_token=api_token,
            priority_class_name=priority_class_name or priority_class(cfg),
            termination_grace_period_seconds=w.termination_grace_period_seconds,
            # GPU nodes by affinity (placement.py: Kueue owns nodeSelector); callers pass
            # placement.run_affinity or gpu_affinity, which carry the requirement.
            tolerations=gpu_tolerations(),
            affinity=affinity or gpu_affinity(),
            subdomain=subdomain,
            security_context=pod_security_context(),
            containers=[container],
            volumes=volumes(claim_name, sizing.shm_gib, scripts=scripts, tmp=read_only_root),
        ),
    )
