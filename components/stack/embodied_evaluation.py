"""Config of the embodied family's evaluation (`workloads.embodiedEvaluation`, fed to
components/workloads/embodied_eval.py): RLinf's own evaluation of a run's checkpoint in the
simulator, as a GPU Job through the Kueue queue. vLLM does not serve an action policy, so the
embodied family has no serving and no math set; this is its counterpart of
`workloads.serving.evaluation`.

A module of its own beside the component it feeds (not stack/config.py).
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from components.stack.model_base import _Model


class EmbodiedEvaluation(_Model):
    """One Job `rltrain-embodied-eval-step-<N>` (or `-newest`): components/scripts/embodied_eval.py
    runs RLinf's evaluations/eval_embodied_agent.py with the training config's `env.eval` on the
    step's full weights, and writes the success rate with the step into the run's `eval` directory
    (served as rltrain_eval_success_rate, like the math evaluation's accuracy)."""

    enabled: bool = False
    """the embodied evaluation Job (only with a trainer profile of the embodied family); a finished Job stays until the step changes"""
    run: str = Field("single-node", pattern=r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")
    """training run whose checkpoints are evaluated: `single-node`, `multi-node` or a named run (workloads.runs) of the stack's trainer config"""
    step: Optional[int] = Field(None, ge=1)
    """checkpoint step evaluated (one the config saves); none = the newest complete step when the Job starts"""
    overrides: tuple[str, ...] = ()
    """extra Hydra overrides of RLinf's evaluation (e.g. env.eval.total_num_envs=64); the program sets runner.ckpt_path, runner.only_eval, runner.logger.log_path, the model paths and the placement"""
    deadline_minutes: int = Field(120, ge=10, le=1440)
    """the evaluation Job's deadline after admission (plus the image-pull margin)"""
