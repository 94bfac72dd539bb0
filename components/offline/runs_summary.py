"""The summary's lines about each training run: what it trains on, where it checkpoints, fresh or
resuming, its place in the queue, how many attempts its cost may add up to (in dollars), and where its
curves are served.

Derived from the stack config through the same functions the workloads use
(components/workloads/trainer.py, env.py), so the summary says what the pods are given; the queue
place from the schedule of the render (components/offline/schedule.py).
"""

from __future__ import annotations

from typing import Any, Optional

from components.offline import schedule
from components.stack import runs as runs_mod
from components.stack import trainers, volume_budget
from components.stack.config import StackConfig
from components.stack.runs import Run
from components.workloads import curves, env, trainer

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
            return (f"queue: place {i} of {len(order)} (priority {o.workload.priority}, {o.workload.ref}): "
                    f"{o.text(s.queued)}")
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


FSX_MOUNT = "/fsx"  # the pods' mount of the file system's root (components/workloads/volumes.py FSX_PATH)


def s3_export(cfg: StackConfig) -> tuple[list[str], list[str]]:
    """(lines, warnings) about what the FSx data repository association exports to S3: per run, its
    checkpoints and exports under the association's path, or a warning naming what it misses."""
    fsx = cfg.storage.fsx
    if cfg.byo_cluster or fsx is None or fsx.s3 is None:
        return [], []
    s3 = fsx.s3
    root = FSX_MOUNT + s3.file_system_path.rstrip("/")
    url = f"s3://{s3.bucket}/{s3.prefix}"
    out = [f"S3 export (data repository association, new and changed files): {url} <- {root} (file system "
           f"{s3.file_system_path})"]
    missed = []
    for run in cfg.training_runs:
        d = env.run_dir(cfg, run)
        if d == root or d.startswith(root + "/"):
            out.append(f"  run {run.name}: {d} -> {url.rstrip('/')}/{d[len(root):].lstrip('/')}/ "
                       "(its checkpoints and exports)")
        else:
            missed.append(run.name)
    warnings = []
    if missed:
        warnings.append(f"rltrain:storage.fsx.s3.fileSystemPath {s3.file_system_path} covers none of the files of run(s) "
                        f"{', '.join(missed)} (under {env.CHECKPOINT_ROOT}): nothing they write reaches {url}; set it "
                        f"to {env.CHECKPOINT_ROOT[len(FSX_MOUNT):]} to export every run")
    return out + [f"  WARNING: {w}" for w in warnings], warnings


def lines(cfg: StackConfig, resources: Optional[list[dict[str, Any]]] = None) -> list[str]:
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
    return out + volume_budget.lines(cfg) + s3_export(cfg)[0]
