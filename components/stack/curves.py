"""`workloads.curves`: TensorBoard over every run's event files, and their headline scalars for
Grafana (components/workloads/curves.py)."""

from __future__ import annotations

from typing import Literal, Optional

from pydantic import field_validator

from components.stack.model_base import _Model


class CurvesConfig(_Model):
    """TensorBoard serving every training run's event files from the shared volume, one TensorBoard run
    per training run (`kubectl -n <namespace> port-forward deploy/rltrain-curves 6006`), and an exporter
    of each run's reward, loss and seconds per step for the Grafana panel ([experiments](experiments.md))."""

    enabled: Optional[bool] = None
    """none = on when a run's trainer profile says where it writes TensorBoard files (the RLinf profiles)"""
    image: Optional[str] = None
    """TensorBoard image (a specific tag or digest); none = the pin in versions.py (TENSORBOARD_IMAGE)"""
    # RLinf's MetricLogger.supported_logger and runner.logger.logger_backends (rlinf/utils/metric_logger.py
    # at 0505431); the image carries wandb and swanlab (RLinf pyproject.toml dependencies).
    logger_backends: Optional[tuple[Literal["tensorboard", "wandb", "swanlab"], ...]] = None
    """RLinf's loggers for every run (`runner.logger.logger_backends`), e.g. `[tensorboard, wandb]` with the W&B key from `training.secretEnv` (`WANDB_API_KEY: wandbApiKey`); none = the config's own (`[tensorboard]`); TensorBoard must stay while the curves are on"""

    @field_validator("image")
    @classmethod
    def _pinned(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        last = v.rsplit("/", 1)[-1]
        if "@sha256:" not in v and (":" not in last or last.rsplit(":", 1)[1] in ("latest", "")):
            raise ValueError("use a specific tag or @sha256 digest, not :latest or no tag (policy rule image-pinned)")
        return v
