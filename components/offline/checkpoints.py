"""Checkpoint write time: can the trainer save a checkpoint in the grace period after SIGTERM?

A drain, a preemption or a run restart gives the trainer `terminationGracePeriodSeconds` between
SIGTERM and SIGKILL. If one checkpoint takes longer to write to FSx, the run loses everything since
the previous one. The estimate is size / the file system's throughput: FSx for Lustre PERSISTENT_2
serves `perUnitStorageThroughput` MB/s per TiB of storage (FACTS "FSx for Lustre"), and one
writer node seldom exceeds it, so it is an optimistic bound.
"""

from __future__ import annotations

from typing import Optional

from components.stack import volume_budget
from components.stack.config import StackConfig


def throughput_mb_s(cfg: StackConfig) -> Optional[float]:
    fsx = cfg.storage.fsx
    if fsx is None or cfg.byo_cluster:
        return None
    return fsx.per_unit_storage_throughput * fsx.storage_capacity_gib / 1024


def estimate(cfg: StackConfig) -> Optional[tuple[float, int, str]]:
    """(seconds to write one checkpoint, grace period, the line for the summary), or None."""
    # workloads.checkpointSizeGiB, else derived from the trainer profile's model (volume_budget.py).
    size = volume_budget.checkpoint_gib(cfg)
    if size is None:
        return None
    grace = cfg.workloads.termination_grace_period_seconds
    mb_s = throughput_mb_s(cfg)
    if mb_s is None:
        return None
    seconds = size * 1024 / mb_s
    verdict = "fits" if seconds <= grace else "EXCEEDS"
    line = (f"checkpoint: {size:,.1f} GiB at {mb_s:,.0f} MB/s (FSx {cfg.storage.fsx.storage_capacity_gib} GiB x "
            f"{cfg.storage.fsx.per_unit_storage_throughput} MB/s/TiB) ~ {seconds:,.0f} s; {verdict} the "
            f"{grace} s grace period after SIGTERM")
    return seconds, grace, line
