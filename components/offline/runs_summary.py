"""The summary's lines about each training run: what it trains on, where it checkpoints, how a
retry resumes, and how many attempts its cost may add up to.

Derived from the stack config through the same functions the workloads use
(components/workloads/trainer.py), so the summary says what the pods are given.
"""

from __future__ import annotations

from components.stack import trainers, volume_budget
from components.stack.config import StackConfig
from components.workloads import env, job, multinode, trainer

RESTARTS = "restarts from step 0 on every retry"


def runs(cfg: StackConfig) -> list[tuple[str, int]]:
    """(run name, nodes) of every enabled training run."""
    w = cfg.workloads
    out = []
    if w.single_node.enabled:
        out.append((job.NAME, 1))
    if w.multi_node.enabled:
        out.append((multinode.RUN, cfg.multi_node_count))
    return out


def lines(cfg: StackConfig) -> list[str]:
    w = cfg.workloads
    gpus = cfg.gpu_nodes.instance.gpu_count
    attempts = w.retries + 1
    out = []
    for name, nodes in runs(cfg):
        head = f"run {name} ({nodes} x {gpus} GPUs"
        head += f", {w.config_name} in {w.profile.venv_bin(w.venv_name or '')})" if w.profile else ", own command)"
        out.append(head)
        ranks = trainer.placement(cfg, nodes)
        if ranks is not None:
            idle = trainers.idle_nodes(ranks, nodes, gpus)
            out.append(f"  placement: {trainers.summary_text(ranks)}"
                       + (f" -- node(s) {', '.join(map(str, idle))} IDLE" if idle else ""))
        terms = w.resume_terms
        if terms is None:
            out.append(f"  resume: none declared: {RESTARTS}")
        else:
            ckpt = env.checkpoint_dir(cfg, nodes)
            out.append(f"  checkpoints: {terms.checkpoint_env}={ckpt}; a retry resumes with "
                       f"{terms.resume_env} += {terms.resume_format.format(step_dir=trainer.steps_dir(cfg, ckpt) + '/' + terms.step_prefix + 'N')}"
                       f" (newest N with {', '.join(terms.complete_marks)})")
        hours = w.max_run_minutes / 60
        out.append(f"  cost bound: up to {attempts} attempt(s) (retries {w.retries}) x {hours:g} h x {nodes} node(s)"
                   + (f"; each retry {RESTARTS}" if terms is None else ""))
    return out + volume_budget.lines(cfg)
