"""CheckpointRetention: a CronJob that keeps the newest K complete checkpoints of every run.

`workloads.checkpoints` (components/stack/lifecycle.py; on whenever the runs have a resume
mapping). A batch/v1 CronJob `rltrain-checkpoint-retention` runs the mounted
/scripts/retention.py over each training run's steps directory (the same directory and completion
marks the resume wrapper reads: components/workloads/trainer.py), protecting the served step and
every warm start's source step.

Why a CronJob, not the resume wrapper or a sidecar: a run trains for days between restarts, so a
pass between attempts alone never prunes a healthy run; a sidecar would sit in the training pod
(its resources inside the whole-node sizing, its restarts counted by the Job's pod failure
policy) and exist once per run form (Job, Indexed Job, RayJob). The CronJob is one small CPU pod
beside every form, outside Kueue (no GPU), concurrencyPolicy Forbid (never two passes at once),
each pass bounded (maxDeletionsPerPass, activeDeadlineSeconds). It protects the served step and every
step a warm start names (`protected`). It is safe against the trainer
without talking to it: a step is deleted only when K newer complete steps exist, never one newer
than the newest complete (being written) nor a recent incomplete one.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.stack import versions, volume_budget
from components.stack.config import StackConfig
from components.stack.labels import CHECKS_SERVICE_ACCOUNT
from components.k8s import security
from components.workloads import env, runs, trainer, volumes
from components.k8s.options import child_opts

NAME = "rltrain-checkpoint-retention"
COMPONENT = "checkpoint-retention"
CONTAINER = "retention"
SCRIPT = "retention.py"
HISTORY = 3
DEADLINE_SECONDS = 1800
STARTING_DEADLINE_SECONDS = 600

SKIP_REASONS = security.Reasons(
    root="deletes checkpoint files the trainer (root in the RLinf image) wrote on /fsx",
)


def enabled(cfg: StackConfig) -> bool:
    return bool(cfg.training_runs) and trainer.resume_mapped(cfg) \
        and volume_budget.retention_on(cfg)


def steps_dirs(cfg: StackConfig) -> dict[str, str]:
    """Run -> its steps directory."""
    return {r.name: trainer.steps_dir(cfg.for_run(r), env.run_dir(cfg, r)) for r in cfg.training_runs}


def args(cfg: StackConfig) -> list[str]:
    terms = cfg.workloads.resume_terms
    assert terms is not None
    c = cfg.workloads.checkpoints
    out = [f"--steps-dir={d}" for d in steps_dirs(cfg).values()]
    out += [f"--prefix={terms.step_prefix}", f"--marks={','.join(terms.complete_marks)}", f"--keep={c.keep}",
            f"--max-deletions={c.max_deletions_per_pass}", f"--min-age-seconds={c.min_age_minutes * 60}"]
    return out + [f"--protect={d}={step}" for d, step in protected(cfg)]


def protected(cfg: StackConfig) -> list[tuple[str, int]]:
    """(steps directory, step) never pruned: the steps the volume budget counts beside the newest
    `keep` (volume_budget.kept_steps: the served step, every step a warm start names)."""
    return sorted((d, step) for run, d in steps_dirs(cfg).items() for step in volume_budget.kept_steps(cfg, run))


def pod_template(cfg: StackConfig, claim_name: str, scripts: list) -> k8s.core.v1.PodTemplateSpecArgs:
    container = k8s.core.v1.ContainerArgs(
        name=CONTAINER,
        image=versions.EVALUATION_IMAGE,
        image_pull_policy="IfNotPresent",
        command=["python3", f"{volumes.SCRIPTS_PATH}/{SCRIPT}"],
        args=args(cfg),
        resources=k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": "250m", "memory": "256Mi"},
                                                       limits={"cpu": "250m", "memory": "256Mi"}),
        volume_mounts=[k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=volumes.FSX_PATH),
                       volumes.scripts_mount()],
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
                     volumes.scripts_volume(scripts)],
        ),
    )


def cronjob_args(cfg: StackConfig, claim_name: str, namespace: pulumi.Input[str],
                 scripts: list) -> k8s.batch.v1.CronJobInitArgs:
    template = pod_template(cfg, claim_name, scripts)
    return k8s.batch.v1.CronJobInitArgs(
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME),
                                      security.annotate(template, SKIP_REASONS, kind="CronJob")),
        spec=k8s.batch.v1.CronJobSpecArgs(
            schedule=cfg.workloads.checkpoints.schedule,
            concurrency_policy="Forbid",
            starting_deadline_seconds=STARTING_DEADLINE_SECONDS,
            successful_jobs_history_limit=HISTORY,
            failed_jobs_history_limit=HISTORY,
            job_template=k8s.batch.v1.JobTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels=runs.labels(COMPONENT, NAME)),
                spec=k8s.batch.v1.JobSpecArgs(backoff_limit=1, active_deadline_seconds=DEADLINE_SECONDS,
                                              template=template),
            ),
        ),
    )


class CheckpointRetention(pulumi.ComponentResource):
    """The retention CronJob and its NetworkPolicy."""

    def __init__(self, name: str, args: runs.WorkloadArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:CheckpointRetention", name, None, opts)
        cfg = args.cfg
        netpol = k8s.networking.v1.NetworkPolicy(f"{name}-netpol", runs.isolated_network_policy(NAME, COMPONENT, namespace),
                                                 child_opts(self, opts))
        self.cronjob = k8s.batch.v1.CronJob(
            f"{name}-cronjob", cronjob_args(cfg, args.claim_name, namespace, [args.scripts[SCRIPT], args.scripts[trainer.COMPLETENESS]]),
            child_opts(self, opts, netpol))
        self.register_outputs({"cronjob": NAME})
