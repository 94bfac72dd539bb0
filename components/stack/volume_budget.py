"""The volume budget: what the runs of a stack put on the shared volume must fit its capacity.

Per stack: the staged models and assets of the trainer config, the export of the served step,
and for every training run (each has its own checkpoint directory, components/workloads/env.py)
`keep + 1` checkpoints: the `keep` complete ones the retention pass keeps
(components/scripts/retention.py) and the one being written; one more for the run whose step is
served (retention never deletes it, and it may be older than the newest `keep`), and one more per step
another run's warm start names (kept likewise). One checkpoint's size is derived
from the config's model (trainers.SaveFacts.checkpoint_gib: the DCP training state - parameters,
and Adam's two moments per trainable parameter - plus full_weights.pt, at the actor's precision;
RLinf rlinf/hybrid_engines/fsdp/strategy/base.py save_checkpoint), or `workloads.checkpointSizeGiB`
when set. The total must fit the FSx capacity less `checkpoints.volumeMarginPercent`; otherwise the
stack is refused with the numbers and the fixes.

A run removed from the stack (or whose directory moved: a new override) leaves its directory behind:
its Job is deleted, its checkpoints are not (nothing of the program deletes data), and no retention
pass prunes them any more. The stack config alone cannot know them; the render can, from the base
record its change is judged against (components/offline/runs_summary.py left_behind): `left` counts
each such directory at what the budget counted for it, `keep + 1` checkpoints, so that removing runs
never fills the volume unseen.

Pure (no Pulumi). The refusal, with the numbers and the fixes, is components/stack/validate.py's (the
config's runs only: what a base record left behind is the render's warning); the summary's lines are
`lines`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from components.stack.config import StackConfig

# FSx for Lustre PERSISTENT_2 capacities: 1200, 2400, then multiples of 2400 GiB (config.FsxConfig).
FSX_STEP_GIB = 2400


@dataclass(frozen=True)
class Budget:
    runs: tuple[tuple[str, float], ...]  # (run, GiB its keep + 1 checkpoints take)
    checkpoint_gib: float
    keep: int
    staged_gib: float
    export_gib: float
    capacity_gib: int
    usable_gib: float
    # (directory, GiB) of the checkpoints runs removed since the base record left on the volume.
    left: tuple[tuple[str, float], ...] = ()

    @property
    def left_gib(self) -> float:
        return sum(g for _, g in self.left)

    @property
    def total_gib(self) -> float:
        return self.staged_gib + self.export_gib + sum(g for _, g in self.runs) + self.left_gib

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.usable_gib


def run_names(cfg: StackConfig) -> list[str]:
    """Every run whose checkpoints the volume keeps: the enabled runs, and a named run with
    `enabled: false` (its Job is gone, its checkpoints stay and are pruned like the others)."""
    return [r.name for r in cfg.training_runs]


def checkpoint_gib(cfg: StackConfig) -> Optional[float]:
    """One checkpoint of a run: workloads.checkpointSizeGiB, else derived from the profile's model."""
    w = cfg.workloads
    if w.checkpoint_size_gib is not None:
        return float(w.checkpoint_size_gib)
    tc = w.trainer_config
    if tc is None or tc.model is None or tc.saves is None:
        return None
    return tc.saves.checkpoint_gib(tc.model)


def save_breakdown(cfg: StackConfig) -> str:
    """`DCP 19.9 GiB + full_weights.pt 6.6 GiB every 50 steps`, or '' without model facts."""
    tc = cfg.workloads.trainer_config
    if cfg.workloads.checkpoint_size_gib is not None or tc is None or tc.model is None or tc.saves is None:
        return ""
    m, sv = tc.model, tc.saves
    dcp = m.params * sv.param_bytes * (1 + 2 * sv.trainable_fraction) / 2**30
    full = m.params * sv.param_bytes / 2**30
    return (f"DCP {dcp:,.1f} GiB (parameters + Adam moments of {sv.trainable_fraction:.1%} trainable) + "
            f"full_weights.pt {full:,.1f} GiB, every {sv.save_interval} steps")


def staged_gib(cfg: StackConfig) -> float:
    w = cfg.workloads
    profile, tc = w.profile, w.trainer_config
    if profile is None or tc is None:
        return 0.0
    total = 0.0
    for name in tc.stages:
        st = profile.stages[name]
        if st.size_gib is not None:
            total += st.size_gib
        elif tc.model is not None and st.dest == tc.model_path:
            total += tc.model.weights_gib()
    return total


def export_gib(cfg: StackConfig) -> float:
    """The served step's Hugging Face export (weights at the hub's dtype), when exported."""
    sv = cfg.workloads.serving
    tc = cfg.workloads.trainer_config
    if not (sv.enabled and sv.model.run and tc is not None and tc.model is not None):
        return 0.0
    if sv.export.enabled is False:
        return 0.0
    return tc.model.weights_gib()


def budget(cfg: StackConfig, left_dirs: Sequence[str] = ()) -> Optional[Budget]:
    """The stack's budget, or None when there is nothing to budget (no FSx the stack creates, no
    checkpoint size, or retention off: then nothing bounds the count). `left_dirs`: directories of
    runs gone since the base record, each counted at `keep + 1` checkpoints (what the retention pass
    left there, at most)."""
    fsx = cfg.storage.fsx
    size = checkpoint_gib(cfg)
    if fsx is None or cfg.byo_cluster or size is None or not retention_on(cfg):
        return None
    keep = cfg.workloads.checkpoints.keep
    runs = tuple((name, (keep + 1 + served_extra(cfg, name) + len(warm_start_steps(cfg, name))) * size)
                 for name in run_names(cfg))
    cap = fsx.storage_capacity_gib
    usable = cap * (100 - cfg.workloads.checkpoints.volume_margin_percent) / 100
    left = tuple((d, (keep + 1) * size) for d in left_dirs)
    return Budget(runs, size, keep, staged_gib(cfg), export_gib(cfg), cap, usable, left)


def served_extra(cfg: StackConfig, run: str) -> int:
    """1 for the run whose step is served: retention keeps that step besides the newest `keep`
    (it may be older than all of them)."""
    sv = cfg.workloads.serving
    return 1 if sv.enabled and sv.model.run == run else 0


def warm_start_steps(cfg: StackConfig, run: str) -> set[int]:
    """Steps of `run` that another run's warm start (`resumeFrom`) names, besides its served step:
    retention keeps each of them (components/workloads/retention.py `protected`), older than the
    newest `keep` or not."""
    sv = cfg.workloads.serving
    served = sv.model.step if served_extra(cfg, run) else None
    return {r.resume_from.step for r in cfg.training_runs
            if r.resume_from and r.resume_from.run == run and r.resume_from.step != served}


def kept_steps(cfg: StackConfig, run: str) -> set[int]:
    """The steps of `run` the retention pass keeps besides its newest `keep`
    (components/workloads/retention.py `--protect`): the served step, and every step a warm start
    names, for as long as the stack file names it. With the default keep of 3, a source run saving
    every 50 steps would otherwise lose step N once it saved N + 150, and a warm start queued behind
    it would find nothing to start from."""
    step = cfg.workloads.serving.model.step
    return warm_start_steps(cfg, run) | ({step} if served_extra(cfg, run) and step is not None else set())


def retention_on(cfg: StackConfig) -> bool:
    w = cfg.workloads
    return (w.resume_terms is not None) if w.checkpoints.enabled is None else w.checkpoints.enabled


def capacity_for(total_gib: float, margin_percent: int) -> int:
    """The smallest FSx PERSISTENT_2 capacity whose usable share holds `total_gib`."""
    need = total_gib * 100 / (100 - margin_percent)
    if need <= 1200:
        return 1200
    return max(2400, math.ceil(need / FSX_STEP_GIB) * FSX_STEP_GIB)


def max_keep(b: Budget) -> int:
    """The largest keep that fits (0 = none does): each run holds keep + 1 (+ 1 served) checkpoints."""
    room = b.usable_gib - b.staged_gib - b.export_gib - b.left_gib
    n = len(b.runs) or 1
    extra = sum(round(g / b.checkpoint_gib) - (b.keep + 1) for _, g in b.runs)  # served, warm-start steps
    return max(0, math.floor((room / b.checkpoint_gib - extra) / n) - 1)


def _warm_start_term(cfg: StackConfig, run: str) -> str:
    steps = sorted(warm_start_steps(cfg, run))
    return f" + {len(steps)} kept for a warm start (step {', '.join(map(str, steps))})" if steps else ""


def lines(cfg: StackConfig, left_dirs: Sequence[str] = ()) -> list[str]:
    """The summary's volume budget: one line per run, one per directory a removed run left behind,
    then the total against the capacity."""
    b = budget(cfg, left_dirs)
    if b is None:
        if retention_on(cfg) or cfg.workloads.resume_terms is None:
            return []
        return ["volume budget: none (workloads.checkpoints.enabled false: nothing prunes checkpoints)"]
    off = {r.name for r in cfg.training_runs if not r.enabled}
    out = [f"checkpoint budget {run}: ({b.keep} kept + 1 being written"
           + (" + 1 served" if served_extra(cfg, run) else "") + _warm_start_term(cfg, run)
           + f") x {b.checkpoint_gib:,.1f} GiB = {g:,.1f} GiB"
           + (" (disabled: its Job is gone, its checkpoints stay)" if run in off else "")
           for run, g in b.runs]
    out += [f"checkpoint budget left in {d}: (at most {b.keep} kept + 1 being written) x {b.checkpoint_gib:,.1f} GiB = "
            f"{g:,.1f} GiB (no run of the stack writes there since the base record: nothing prunes them now)" for d, g in b.left]
    breakdown = save_breakdown(cfg)
    if breakdown:
        out.append(f"  one checkpoint: {breakdown}")
    out.append(f"volume budget: models+assets {b.staged_gib:,.1f} + export {b.export_gib:,.1f} + checkpoints "
               f"{sum(g for _, g in b.runs):,.1f}"
               + (f" + left behind {b.left_gib:,.1f}" if b.left else "")
               + f" = {b.total_gib:,.1f} GiB of {b.usable_gib:,.0f} GiB usable "
               f"(FSx {b.capacity_gib} GiB less {cfg.workloads.checkpoints.volume_margin_percent} % margin): "
               + ("fits" if b.fits else "DOES NOT FIT" + (
                   "; delete what removed runs left (rm -r DIR from a pod mounting /fsx), or keep their entries "
                   "with enabled: false and lower checkpoints.keep" if b.left else "")))
    return out
