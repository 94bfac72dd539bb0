"""The summary's lines about each training run: what it trains on, where it checkpoints, fresh or
resuming, its place in the queue, how many attempts its cost may add up to (in dollars), and where its
curves are served.

Derived from the stack config through the same functions the workloads use
(components/workloads/trainer.py, env.py), so the summary says what the pods are given; the queue
place from the schedule of the render (components/offline/schedule.py).
"""

from __future__ import annotations

from typing import Any, Optional

from components.offline import impact, schedule
from components.stack import runs as runs_mod
from components.stack import data_repository, trainers, volume_budget
from components.stack.config import StackConfig
from components.stack.runs import Run
from components.workloads import curves, env, export, job, multinode, trainer
from components.workloads import runs as run_objects

RESTARTS = "restarts from step 0 on every retry"


def runs(cfg: StackConfig) -> list[tuple[str, int]]:
    """(Kubernetes name, nodes) of every enabled training run."""
    return [(r.resource_name, r.nodes) for r in cfg.enabled_runs]


def cost_bound(cfg: StackConfig, run: Run) -> str:
    """Attempts x deadline x nodes, in node-hours and in dollars at the catalog's on-demand price (the
    run's own GPU nodes; the FSx volume and the cluster are the stack's, not the run's)."""
    w = cfg.workloads
    attempts = w.retries + 1
    hours = run.max_run_minutes / 60
    it = cfg.gpu_nodes.instance
    node_hours = attempts * hours * run.nodes
    usd = (f" = {node_hours:g} node-hours x ${it.price.usd_per_hour:,.2f}/h = ${node_hours * it.price.usd_per_hour:,.2f} "
           f"(on-demand, {it.name}, prices of {it.price.date})" if it.price else f" ({it.name}: no on-demand price)")
    return (f"cost bound: up to {attempts} attempt(s) (retries {w.retries}) x {hours:g} h x {run.nodes} node(s){usd}"
            + (f"; each retry {RESTARTS}" if w.resume_terms is None else ""))


def queue_place(run: Run, resources: Optional[list[dict[str, Any]]]) -> Optional[str]:
    """`place 2 of 3 in the queue (priority 1000000): queued behind Job/...`, from the render's schedule."""
    if resources is None:
        return None
    s = schedule.simulate(resources)
    if s is None:
        return None
    order = [o for o in s.outcomes if not o.workload.permanent]
    for i, o in enumerate(order, 1):
        if o.workload.name == run.resource_name:
            # Equal priorities: Kueue orders by priority, then the queue-order timestamp (the Workload's
            # creation by default; Kueue v0.19.2 pkg/cache/queue/cluster_queue.go baseCompareFunc), so
            # an existing run goes before one this change adds; the render cannot know creation times
            # and orders by name.
            ties = sorted(x.workload.ref for x in order if x is not o and x.workload.priority == o.workload.priority)
            tie = (f"; same priority as {', '.join(ties)}: Kueue admits whichever was created first (one "
                   "that exists already before one this change adds); shown here by name") if ties else ""
            return (f"queue: place {i} of {len(order)} (priority {o.workload.priority}, {o.workload.ref}): "
                    f"{o.text(s.queued)}{tie}")
    return None


def start_line(cfg: StackConfig, run: Run, ckpt: str) -> str:
    """Fresh, or a warm start from another run's step; a retry resumes the run's own newest step."""
    terms = cfg.workloads.resume_terms
    if terms is None:
        return f"start: fresh; {RESTARTS}"
    warm = env.warm_start_dir(cfg, run)
    rf = run.resume_from
    if warm and rf is not None:
        return (f"start: resumes step {rf.step} of run {rf.run} (warm start: {warm}, checked complete when it "
                f"starts); then its own steps in {ckpt}")
    return "start: fresh in its own directory (nothing of another run resumed); a retry resumes its newest complete step there"


def s3_export(cfg: StackConfig) -> tuple[list[str], list[str]]:
    """(lines, warnings) about what reaches S3 through the FSx data repository associations
    (components/stack/data_repository.py): each association, the served step's export and, with
    checkpoints on, every run's directory, where it lands; a warning when nothing the runs write does."""
    fsx = cfg.storage.fsx
    if cfg.byo_cluster or fsx is None or fsx.s3 is None:
        return [], []
    s3 = fsx.s3
    found = data_repository.associations(s3)
    out = [f"S3 (data repository associations of the FSx file system; new, changed and deleted files exported as "
           f"they are written): {data_repository.base_url(s3)}"]
    exports = next(a for a in found if a.key == "exports")
    out.append(f"  exports: {exports.mount_path} -> {exports.data_repository_path}")
    if export.enabled(cfg):
        step = export.out_dir(cfg)
        out.append(f"    run {cfg.workloads.serving.model.run} step {cfg.workloads.serving.model.step}: {step} -> "
                   f"{data_repository.s3_path(exports, step)} (the export Job's Hugging Face directory)")
    runs = next((a for a in found if a.key == "runs"), None)
    if runs is None:
        out.append(f"  checkpoints: on the volume only ({env.CHECKPOINT_ROOT}; rltrain:storage.fsx.s3.checkpoints: "
                   "true exports every run's directory)")
    else:
        keep = cfg.workloads.checkpoints.keep
        out.append(f"  checkpoints: {runs.mount_path} -> {runs.data_repository_path} (every run's directory: its "
                   f"checkpoints as the retention pass keeps them, {keep} + 1 per run, deletions mirrored; its "
                   "TensorBoard files)")
        out += [f"    run {run.name}: {env.run_dir(cfg, run)} -> {data_repository.s3_path(runs, env.run_dir(cfg, run))}"
                for run in cfg.training_runs]
    warnings = []
    if not export.enabled(cfg) and runs is None:
        warnings.append(f"rltrain:storage.fsx.s3: nothing the runs write reaches {data_repository.base_url(s3)}: no "
                        "step is exported (workloads.serving with model.run and its export) and "
                        "rltrain:storage.fsx.s3.checkpoints is false; set it to true to export the runs' checkpoints")
    return out + [f"  WARNING: {w}" for w in warnings], warnings


# The kinds a training run's object has (components/workloads/job.py, multinode.py, rayjob.py) and their
# component labels: what a base record's runs are recognised by.
RUN_KINDS = ("Job", "StatefulSet", "RayJob")
RUN_COMPONENTS = (job.COMPONENT, multinode.COMPONENT)


def left_behind(cfg: StackConfig, base: Optional[list[dict[str, Any]]]) -> list[tuple[str, str]]:
    """(the run as the base record names it, its checkpoint directory) of every training run of the
    base record (the record the change is judged against: rendered/<stack>/resources.json, or the
    base branch's) whose directory no run of the stack writes any more: a run removed from the stack,
    or one whose identity changed (a new override: a new directory). Its Job goes; its checkpoints stay
    on the volume, pruned by nothing (the retention pass prunes the stack's runs only). Pure: read from
    the record, each run object's `CKPT_DIR` (components/workloads/env.py) and `rltrain/run` label."""
    if not base:
        return []
    now = {env.run_dir(cfg, r) for r in cfg.training_runs}
    found: dict[str, str] = {}
    for r in base:
        inputs = r.get("inputs") or {}
        meta = inputs.get("metadata") if isinstance(inputs.get("metadata"), dict) else {}
        labels = meta.get("labels") or {}
        if inputs.get("kind") not in RUN_KINDS or labels.get("app.kubernetes.io/component") not in RUN_COMPONENTS:
            continue
        for d in sorted(impact.checkpoint_dirs(r)):
            if d not in now:
                found.setdefault(d, labels.get(run_objects.RUN_LABEL) or meta.get("name") or r["name"])
    return sorted(((name, d) for d, name in found.items()), key=lambda x: (x[0], x[1]))


def _run_name(resource_name: str) -> str:
    """The run a run object stands for: `rltrain-run-<name>`, or an implicit run's fixed name."""
    implicit = {"rltrain-training": "single-node", "rltrain-multinode": "multi-node"}
    return implicit.get(resource_name) or resource_name.removeprefix(runs_mod.RESOURCE_PREFIX)


def left_lines(cfg: StackConfig, left: list[tuple[str, str]]) -> list[str]:
    """Where the checkpoints of the runs gone since the base record stay, and what to do about them."""
    names = {r.resource_name for r in cfg.training_runs}
    out = []
    for name, d in left:
        if name in names:
            out.append(f"run {_run_name(name)}: its previous directory {d} stays (its identity changed: a new directory "
                       "starts), pruned by nothing now and counted in the volume budget below: delete it (rm -r from "
                       "a pod mounting /fsx) once nothing needs it")
        else:
            out.append(f"run {_run_name(name)}: removed since the base record (its Job is deleted); its checkpoints stay "
                       f"in {d}, pruned by nothing now and counted in the volume budget below: delete them (rm -r from "
                       "a pod mounting /fsx) once nothing needs them, or keep its entry with enabled: false (its "
                       "retention goes on)")
    return out


def lines(cfg: StackConfig, resources: Optional[list[dict[str, Any]]] = None,
          base: Optional[list[dict[str, Any]]] = None) -> list[str]:
    gpus = cfg.gpu_nodes.instance.gpu_count
    out = []
    for run in cfg.training_runs:
        view = cfg.for_run(run)
        w = view.workloads
        if not run.enabled:
            out.append(f"run {run.name}: disabled (enabled: false): no Job; its checkpoints stay in {env.run_dir(cfg, run)}")
            continue
        head = f"run {run.name} ({run.resource_name}, {run.nodes} x {gpus} GPUs"
        head += f", {w.config_name} in {w.profile.venv_bin(w.venv_name or '')})" if w.profile else ", own command)"
        out.append(head)
        if run.overrides:
            out.append(f"  overrides: {' '.join(runs_mod.hydra_overrides(run.override_map))}")
        ranks = trainer.placement(view, run.nodes)
        if ranks is not None:
            idle = trainers.idle_nodes(ranks, run.nodes, gpus)
            out.append(f"  placement: {trainers.summary_text(ranks)}"
                       + (f" -- node(s) {', '.join(map(str, idle))} IDLE" if idle else ""))
        terms = w.resume_terms
        ckpt = env.run_dir(cfg, run)
        if terms is None:
            out.append(f"  resume: none declared: {RESTARTS}")
        else:
            out.append(f"  checkpoints: {terms.checkpoint_env}={ckpt}; a retry resumes with "
                       f"{terms.resume_env} += {terms.resume_format.format(step_dir=trainer.steps_dir(view, ckpt) + '/' + terms.step_prefix + 'N')}"
                       f" (newest N with {', '.join(terms.complete_marks)})")
        out.append("  " + start_line(cfg, run, ckpt))
        place = queue_place(run, resources)
        if place:
            out.append("  " + place)
        out.append("  " + cost_bound(view, run))
        where = curves.run_curves(cfg, run)
        if where:
            out.append(f"  curves: {where}")
    left = left_behind(cfg, base)
    return out + left_lines(cfg, left) + volume_budget.lines(cfg, [d for _, d in left]) + s3_export(cfg)[0]
