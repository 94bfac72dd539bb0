"""build_workloads: every enabled training workload of the stack, under one `Workloads` component.

    build_workloads(cfg, namespace=training.namespace, claim_name=..., secret_name=training.secret_name,
                    opts=pulumi.ResourceOptions(provider=provider, depends_on=[...]))

Creates the PriorityClass `rltrain-training` (SEED-DEFECTS D13), the scripts ConfigMap
`rltrain-scripts`, and - per `rltrain:workloads.*.enabled` - the single-node TrainingJob, the
MultiNodeTraining run (RayJobTraining with `multiNode.form: rayjob`), the NcclTest MPIJob and the
ClusterValidation Job. `opts` carries the
Kubernetes provider and the dependencies (namespace, service account, Secret, FSx claim); every
child gets both.
"""

from __future__ import annotations

from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.stack.config import StackConfig
from components.stack.labels import MANAGED_BY
from components.workloads.job import TrainingJob, TrainingJobArgs
from components.workloads.multinode import MultiNodeTraining, MultiNodeTrainingArgs
from components.workloads import nccl, validation
from components.workloads.nccl import NcclTest, NcclTestArgs
from components.workloads.rayjob import RayJobTraining, RayJobTrainingArgs
from components.workloads.script_files import read_scripts
from components.workloads.scripts_configmap import ScriptConfigMaps
from components.workloads.staging import StagingJob, StagingJobArgs
from components.workloads.validation import ClusterValidation, ClusterValidationArgs
from components.workloads import runs, staging, trainer
from components.workloads.evaluation import EvaluationCronJob
from components.workloads.retention import CheckpointRetention
from components.workloads import export, retention
from components.workloads.export import ExportJob
from components.workloads import embodied_eval
from components.workloads.embodied_eval import EmbodiedEvaluationJob
from components.workloads.serving import Serving, ServingArgs
from components.workloads import curves
from components.workloads.curves import Curves
from components.k8s.options import child_opts


# A PriorityClass's value and preemptionPolicy may not be changed in an update: the value is in the
# class's name (runs.priority_class), so a new value is a new class and every run that names it is
# replaced with it (a pod's priority, and a Kueue Workload's, are set when they are created:
# kueue v0.19.2 pkg/controller/jobframework/reconciler.go constructWorkload); the impact table
# says so (components/offline/impact.py _priority_class refuses a change under the same name).
def priority_class_args(cfg: StackConfig) -> k8s.scheduling.v1.PriorityClassInitArgs:
    """The training class of `cfg.workloads.priority` (a run's view carries the run's priority)."""
    return k8s.scheduling.v1.PriorityClassInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=runs.priority_class(cfg), labels=MANAGED_BY),
        value=cfg.workloads.priority,
        preemption_policy="PreemptLowerPriority",
        global_default=False,
        description="rltrain GPU training workloads",
    )


def check_priority_class_args(cfg: StackConfig, check: str, value: int) -> k8s.scheduling.v1.PriorityClassInitArgs:
    """A check's class orders it in the queue (Kueue: by priority, then creation) and never preempts:
    a validation or NCCL test queued while training runs waits for it, it does not evict it."""
    return k8s.scheduling.v1.PriorityClassInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=runs.check_priority_class(cfg, check), labels=MANAGED_BY),
        value=value,
        preemption_policy="Never",
        global_default=False,
        description=f"rltrain {check} run: queue order only, never preempts",
    )


def checks(cfg: StackConfig) -> dict[str, tuple[int, int]]:
    """The enabled check runs: name -> (priority, deadline in seconds)."""
    w = cfg.workloads
    out = {}
    if w.validation.enabled:
        out[validation.COMPONENT] = (w.validation.priority, validation.DEADLINE_SECONDS)
    if w.nccl_test.enabled:
        out[nccl.COMPONENT] = (w.nccl_test.priority, nccl.DEADLINE_SECONDS)
    return out


def queue_allowance_seconds(cfg: StackConfig) -> int:
    """How long a gated check may wait in the queue besides the checks ahead of it (the nodes'
    DaemonSets starting, a finishing run): the bound after which a queued run is stuck for the alerts
    too (monitoring.queuedAlertMinutes, RltrainWorkloadPendingTooLong)."""
    return cfg.monitoring.queued_alert_minutes * 60


def gate_seconds(cfg: StackConfig) -> dict[str, int]:
    """workloads.trainingAfterChecks: how long `pulumi up` waits for each check to succeed. A run's
    deadline counts from its admission (a suspended Job's activeDeadlineSeconds timer is reset when
    Kueue resumes it: Kubernetes docs, Jobs, "Suspending a Job"), but Pulumi's timer runs from the
    create, time queued included: its own deadline, plus those of the checks queued at or ahead of it
    (same or higher priority) which it may wait behind, plus the queue allowance. A failed check ends
    the wait at once (validation.py, gate.py). Empty without the gate."""
    if not cfg.workloads.training_after_checks:
        return {}
    found = checks(cfg)
    queued = queue_allowance_seconds(cfg)
    return {name: queued + sum(d for p, d in found.values() if p >= prio) for name, (prio, _) in found.items()}


def scripts_used(cfg: StackConfig) -> list[str]:
    """The programs the enabled workloads run (one ConfigMap each)."""
    w = cfg.workloads
    training = bool(cfg.enabled_runs)
    return sorted({f for on, f in ((w.validation.enabled, "validate_node.py"),
                                   (cfg.multi_node_runs and w.multi_node.form != "rayjob", "ray_launcher.py"),
                                   (w.nccl_test.enabled, "nccl_check.py"),
                                   (w.serving.enabled and w.serving.evaluation.enabled, "evaluate.py"),
                                   (w.serving.enabled and w.serving.evaluation.enabled, "eval_metrics.py"),
                                   (embodied_eval.enabled(cfg), embodied_eval.SCRIPT),
                                   (embodied_eval.enabled(cfg), "eval_metrics.py"),
                                   (w.nccl_test.enabled and w.training_after_checks, "check_gate.py"),
                                   (training and trainer.resume_mapped(cfg), trainer.WRAPPER),
                                   (any(trainer.warm(cfg, r) for r in cfg.enabled_runs), trainer.WARM),
                                   (training and trainer.resume_mapped(cfg) or retention.enabled(cfg)
                                    or export.enabled(cfg) or embodied_eval.enabled(cfg), trainer.COMPLETENESS),
                                   (training and w.staging_enabled, staging.SCRIPT),
                                   (retention.enabled(cfg), retention.SCRIPT),
                                   (curves.enabled(cfg), curves.SCRIPT),
                                   (export.enabled(cfg), export.SCRIPT)) if on})


class Workloads(pulumi.ComponentResource):
    """Parent of the workload objects; see build_workloads."""

    def __init__(self, name: str, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:Workloads", name, None, opts)


def build_workloads(cfg: StackConfig, *, namespace: pulumi.Input[str], claim_name: str,
                    secret_name: Optional[pulumi.Input[str]], opts: pulumi.ResourceOptions,
                    name: str = "workloads") -> dict[str, Any]:
    w = cfg.workloads
    parent = Workloads(name, opts)
    out: dict[str, Any] = {"workloads": parent}
    priority = k8s.scheduling.v1.PriorityClass(f"{name}-priority", priority_class_args(cfg),
                                               child_opts(parent, opts))
    available = read_scripts()
    used = {f: available[f] for f in scripts_used(cfg)}
    scripts = ScriptConfigMaps(f"{name}-scripts", used, namespace, child_opts(parent, opts))
    out.update(priority_class=priority, scripts=scripts)
    classes: list[pulumi.Resource] = [priority]
    # A named run with a priority of its own gets its class (named after the value, as the stack's).
    for value in sorted({r.priority for r in cfg.enabled_runs} - {w.priority}):
        view = cfg.model_copy(update={"workloads": w.model_copy(update={"priority": value})})
        classes.append(k8s.scheduling.v1.PriorityClass(f"{name}-priority-training-{value}", priority_class_args(view),
                                                       child_opts(parent, opts)))
    for check, (value, _) in checks(cfg).items():
        classes.append(k8s.scheduling.v1.PriorityClass(
            f"{name}-priority-{check}", check_priority_class_args(cfg, check, value),
            child_opts(parent, opts)))
    if embodied_eval.enabled(cfg):
        classes.append(k8s.scheduling.v1.PriorityClass(
            f"{name}-priority-{runs.EMBODIED_EVALUATION}",
            check_priority_class_args(cfg, runs.EMBODIED_EVALUATION, runs.check_priority(cfg, runs.EMBODIED_EVALUATION)),
            child_opts(parent, opts)))
    # Pods reference both by name: create them first.
    wl_opts = child_opts(parent, opts, *classes, scripts)
    base = dict(cfg=cfg, claim_name=claim_name, scripts=used)
    gate = gate_seconds(cfg)
    passed: list[pulumi.Resource] = []  # the check runs training waits for (trainingAfterChecks)
    if w.validation.enabled:
        out["validation"] = ClusterValidation(
            f"{name}-validation", ClusterValidationArgs(**base, await_seconds=gate.get(validation.COMPONENT)),
            namespace, opts=wl_opts)
        if gate:
            passed.append(out["validation"].job)
    if w.nccl_test.enabled:
        # Gated, the checks run one after the other: the NCCL test is created once validation has
        # passed. Created together, Kueue admits whichever Workload it sees first, not the higher
        # priority (seen on the simulated cluster: offline/schedule.py created_together).
        nccl_opts = child_opts(parent, opts, *classes, scripts, *passed) if gate else wl_opts
        out["nccl_test"] = NcclTest(f"{name}-nccl-test",
                                    NcclTestArgs(**base, await_seconds=gate.get(nccl.COMPONENT)), namespace,
                                    opts=nccl_opts)
        if gate:
            passed.append(out["nccl_test"].passed)
    if w.staging_enabled and cfg.enabled_runs:
        # Models and assets on /fsx first: `pulumi up` waits for the Job, the runs depend on it.
        out["staging"] = StagingJob(f"{name}-staging", StagingJobArgs(**base), namespace, secret_name,
                                    opts=wl_opts)
        passed.append(out["staging"].job)
    train_opts = child_opts(parent, opts, *classes, scripts, *passed)
    # The runs list -> each run's view of the stack and identity -> its builder (issue 43): the
    # implicit runs keep their resource names (workloads-single-node, workloads-multi-node).
    operator = True  # the KubeRay operator is installed once, with the first RayJob run
    for run in cfg.enabled_runs:
        view = cfg.for_run(run)
        key = run.name.replace("-", "_") if run.implicit else f"run:{run.name}"
        args = dict(base, cfg=view, run=None if run.implicit else run)
        if not run.multi_node:
            out[key] = TrainingJob(f"{name}-{run.pulumi_name}", TrainingJobArgs(**args), namespace,
                                   secret_name, opts=train_opts)
        elif w.multi_node.form == "rayjob":
            # KubeRay runs the Ray cluster; the launcher script is not mounted.
            out[key] = RayJobTraining(f"{name}-{run.pulumi_name}", RayJobTrainingArgs(**args, install_operator=operator),
                                      namespace, secret_name, opts=train_opts)
            operator = False
        else:
            out[key] = MultiNodeTraining(f"{name}-{run.pulumi_name}", MultiNodeTrainingArgs(**args), namespace,
                                         secret_name, opts=train_opts)
    if curves.enabled(cfg):
        # Beside the runs: it reads what they write (curves.py).
        out["curves"] = Curves(f"{name}-curves", runs.WorkloadArgs(**base), namespace, opts=wl_opts)
    if retention.enabled(cfg):
        # Beside the runs, not after them: it prunes while they train (retention.py).
        out["checkpoint_retention"] = CheckpointRetention(f"{name}-checkpoint-retention", runs.WorkloadArgs(**base),
                                                          namespace, opts=wl_opts)
    if w.serving.enabled:
        # Long-running, beside training: not gated on the checks (it trains nothing).
        if export.enabled(cfg):
            # Created with serving; it waits for the step itself (export.py).
            out["export"] = ExportJob(f"{name}-export", runs.WorkloadArgs(**base), namespace, opts=wl_opts)
        out["serving"] = Serving(f"{name}-serving", ServingArgs(**base), namespace, opts=wl_opts)
        if w.serving.evaluation.enabled:
            out["evaluation"] = EvaluationCronJob(f"{name}-evaluation", ServingArgs(**base), namespace,
                                                  opts=child_opts(parent, opts, *classes, scripts,
                                                                       out["serving"]))
    if embodied_eval.enabled(cfg):
        # Queued by Kueue like the runs (it holds GPUs only once admitted), below them (its class).
        out["embodied_evaluation"] = EmbodiedEvaluationJob(f"{name}-embodied-evaluation", runs.WorkloadArgs(**base),
                                                           namespace, opts=wl_opts)
    parent.register_outputs({k: v.urn for k, v in out.items() if k != "workloads"})
    return out
