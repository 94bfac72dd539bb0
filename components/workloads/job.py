"""TrainingJob: single-node training as a run-to-completion batch/v1 Job.

One pod takes a whole GPU node (sizes from pod.py). Disruptions (drain, preemption) are retried
without counting against `workloads.retries`; configuration errors (`failFastExitCodes`, container
`trainer`) fail the Job at once (SEED-DEFECTS D5). The deadline includes a 10-minute cold image
pull margin and the finished Job is garbage-collected after `ttlSecondsAfterFinished` (D6).
`pulumi.com/skipAwait` keeps `pulumi up` from waiting hours for training to finish.

Naming: a fixed `metadata.name` (`rltrain-training`) with `delete_before_replace=True`. A Job's pod
template is immutable, so a changed image or config replaces the Job. With delete-before-replace
the old run's pod is stopped (SIGTERM, grace period for a checkpoint) *before* the new one starts:
two runs never compete for the same GPU node or write the same checkpoint directory at once, and
`kubectl logs job/rltrain-training` always names the current run. A hash-suffixed name would let
Pulumi create the new Job first (create-before-delete), i.e. two runs overlapping on /fsx.

Around the pod: a NetworkPolicy (no ingress from outside the run: a Ray head started by the training
script is not reachable from other pods, D11) and a PodDisruptionBudget with maxUnavailable 0 (D13).
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import kueue
from components.k8s import security
from components.workloads import pod, runs, sizing, trainer
from components.workloads.multinode import run_guards
from components.k8s.options import child_opts

NAME = "rltrain-training"
COMPONENT = "training"


class TrainingJobArgs(runs.WorkloadArgs):
    pass


def resource_name(a: runs.WorkloadArgs) -> str:
    """The Job's name: `rltrain-training` for the implicit run, `rltrain-run-<name>` for a named one."""
    return a.run.resource_name if a.run is not None else NAME


def single_node_efa(cfg) -> bool:
    """A single-node run uses EFA only when its trainer profile says so (RLinf on one node talks
    over NVLink; components/stack/trainers.py TrainerConfig.single_node_efa). Without a profile
    (`workloads.trainer: none`) the node's EFA devices are requested as before: unknown use."""
    tc = cfg.workloads.trainer_config
    if cfg.workloads.profile is None:
        return True
    return bool(tc and tc.single_node_efa)


def job_args(a: TrainingJobArgs, namespace: pulumi.Input[str],
             secret_name: Optional[pulumi.Input[str]]) -> k8s.batch.v1.JobInitArgs:
    cfg = a.cfg
    w = cfg.workloads
    name = resource_name(a)
    obj_labels = runs.labels(COMPONENT, name)
    template = pod.training_pod_template(
        cfg,
        claim_name=a.claim_name,
        secret_name=secret_name,
        pod_labels=obj_labels,
        command=trainer.training_command(cfg, a.run),
        num_nodes=1,
        scripts=[a.scripts[f] for f in trainer.scripts(cfg, a.run)],
        # EFA devices and huge pages only when the trainer uses EFA on one node (the profile).
        sizing=sizing.pod_sizing(cfg, efa=single_node_efa(cfg)),
        run=a.run,
    )
    return k8s.batch.v1.JobInitArgs(
        # checkov reads skips from the Job's own metadata: the skips derived from the pod go there
        # only (on the template, a reason's wording would restart the run).
        # The queue label (Kueue on): Kueue suspends the Job at creation and starts it once admitted.
        metadata=runs.object_metadata(name, namespace, {**obj_labels, **kueue.queue_labels(cfg)},
                                      {**runs.AWAIT_CREATED,
                                       **security.annotate(template, security.TRAINING, kind="Job")}),
        spec=k8s.batch.v1.JobSpecArgs(
            completions=1,
            parallelism=1,
            backoff_limit=w.retries,
            pod_failure_policy=runs.pod_failure_policy(cfg),
            active_deadline_seconds=runs.deadline_seconds(cfg),
            template=template,
        ),
    )


class TrainingJob(pulumi.ComponentResource):
    """Single-node training Job with its NetworkPolicy and PodDisruptionBudget."""

    job_name: str

    def __init__(self, name: str, args: TrainingJobArgs, namespace: pulumi.Input[str],
                 secret_name: Optional[pulumi.Input[str]] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:TrainingJob", name, None, opts)
        cfg = args.cfg
        run = resource_name(args)
        obj_labels = runs.labels(COMPONENT, run)
        netpol, pdb = run_guards(name, run, namespace, obj_labels, cfg, self, opts)
        self.job = k8s.batch.v1.Job(
            f"{name}-job", job_args(args, namespace, secret_name),
            child_opts(self, opts, netpol, pdb, delete_before_replace=True,
                            replace_on_changes=runs.REPLACE_JOB_ON))
        self.job_name = run
        self.register_outputs({"job": run})
