"""Config of a trained policy's life after training writes it: which checkpoints are kept
(`workloads.checkpoints`, fed to components/workloads/retention.py) and how a served step is
exported (`workloads.serving.export`, fed to components/workloads/export.py).

A module of its own beside the config of the components it feeds (not stack/config.py); the
budget these keys enter is components/stack/volume_budget.py.
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from components.stack.model_base import _Model


class CheckpointRetention(_Model):
    """The retention CronJob (components/scripts/retention.py): keeps the newest `keep` complete
    checkpoints of every training run and deletes older ones while the run trains."""

    enabled: Optional[bool] = None
    """none = on when the runs have a resume mapping (a trainer profile or workloads.resume): the program then knows where steps are and what marks one complete"""
    keep: int = Field(3, ge=1, le=50)
    """complete checkpoints kept per run (at least 1: the step a restart resumes from is the newest complete one); the step being written and the served step are kept besides"""
    schedule: str = Field("*/20 * * * *", pattern=r"^(\S+\s+){4}\S+$")
    """cron schedule of the retention pass (5 fields); more often than a save interval keeps at most keep + 1 on the volume"""
    max_deletions_per_pass: int = Field(4, ge=1, le=100)
    """steps deleted per run per pass at most (a backlog goes over several passes)"""
    min_age_minutes: int = Field(60, ge=5, le=10080)
    """an incomplete step older than the newest complete one is deleted only when untouched this long (never a step still being written)"""
    volume_margin_percent: int = Field(10, ge=0, le=50)
    """share of the volume's capacity the budget leaves free (the volume budget refuses a stack whose models, assets and (keep + 1) checkpoints of every run exceed the rest)"""


class ExportConfig(_Model):
    """The export Job (components/scripts/export_hf.py) of the served step: the trainer's
    checkpoint -> a Hugging Face directory on the volume, which the serving pods wait for."""

    enabled: Optional[bool] = None
    """none = on when serving a run's step (model.run) of a profiled trainer; off = serve model.checkpointLayout as it is"""
    image: Optional[str] = None
    """image of the export Job; none = the training image (its venv has torch and transformers)"""
    wait_minutes: Optional[int] = Field(None, ge=5, le=20160)
    """how long the export Job waits for the step's checkpoint to be complete, and the serving pods for the export; none = the run's deadline (maxRunMinutes + the pull margin + the room for its infrastructure restarts)"""
    cpu: int = Field(4, ge=1, le=64)
    """CPUs of the export Job (CPU only; no GPU)"""
