"""Container environment of the training pods: run settings, NCCL/EFA settings, secrets by reference only (D16).
"""

from __future__ import annotations

import json
from typing import Mapping, Optional
from urllib.parse import urlsplit

import pulumi
import pulumi_kubernetes as k8s

from components.stack import catalog
from components.stack import data_repository
from components.stack import runs as runs_mod
from components.stack.config import StackConfig
from components.stack.runs import Run
# Env the program sets, which `workloads.env` may not override (the config checks refuse them).
from components.stack.labels import PROTECTED_ENV, short_hash
from components.workloads import trainer

# The resume contract: every run writes checkpoints under its own directory on FSx, keyed by what
# makes old checkpoints unusable (model, trainer config, node count; for a named run also its name
# and its overrides), and resumes from the newest complete one there. A change of any of these
# starts a fresh directory (issue 43: a new learning rate never resumes the old run's weights).
CHECKPOINT_ROOT = data_repository.FSX_MOUNT + data_repository.RUNS_PATH  # /fsx/runs
# What a run's checkpoints are exported to (the export Job, components/workloads/export.py), in a tree
# of its own beside the runs' (the same relative path as the run's directory): the file system's
# `/exports`, which reaches S3 whenever a bucket is set (components/stack/data_repository.py).
EXPORTS_ROOT = data_repository.FSX_MOUNT + data_repository.EXPORTS_PATH  # /fsx/exports


def run_identity(cfg: StackConfig, num_nodes: int) -> str:
    """The implicit runs' key (`single-node`, `multi-node`): unchanged since before named runs, so
    their directories, and a deployed run's resume point, stay where they were."""
    w = cfg.workloads
    return short_hash(w.model_path or "", w.config_name, str(num_nodes), length=12)


def checkpoint_dir(cfg: StackConfig, num_nodes: int) -> str:
    """The directory of the implicit run of `num_nodes` nodes."""
    return f"{CHECKPOINT_ROOT}/{cfg.workloads.experiment_name}/{run_identity(cfg, num_nodes)}"


def named_identity(cfg: StackConfig, run: Run) -> str:
    """A named run's key: its name, trainer, model, config, node count and overrides as the trainer
    reads them (components/stack/runs.py hydra_overrides: sorted, so their order in the stack file
    does not matter). Not in it: priority, deadline, image, retries (a checkpoint stays usable)."""
    w = cfg.stack.for_run(run).workloads
    return short_hash(run.name, run.trainer, w.model_path or "", run.config_name, str(run.nodes),
                      json.dumps(runs_mod.hydra_overrides(run.override_map)), length=12)


def run_dir(cfg: StackConfig, run: Run) -> str:
    """The run's checkpoint directory: `<root>/<experiment>/<run>-<identity>` for a named run."""
    stack = cfg.stack
    if run.implicit:
        return checkpoint_dir(stack, run.nodes)
    return f"{CHECKPOINT_ROOT}/{stack.for_run(run).workloads.experiment_name}/{run.name}-{named_identity(stack, run)}"


def dir_of(cfg: StackConfig, name: str) -> str:
    """The checkpoint directory of the run `name` (serving, export, evaluation and retention name a
    run): a run of the stack, else the implicit run the name stands for."""
    stack = cfg.stack
    run = stack.run(name) or implicit_run(stack, 1 if name == "single-node" else stack.multi_node_count)
    return run_dir(stack, run)


def export_dir(cfg: StackConfig, name: str) -> str:
    """Where the exports of the run `name` go: `/fsx/exports/<its directory below /fsx/runs>`."""
    return EXPORTS_ROOT + dir_of(cfg, name)[len(CHECKPOINT_ROOT):]


def implicit_run(cfg: StackConfig, num_nodes: int) -> Run:
    """The implicit run of `num_nodes` nodes (a caller that names no run)."""
    name = "single-node" if num_nodes == 1 else "multi-node"
    w = cfg.workloads
    return runs_mod.implicit(name, num_nodes, trainer=w.trainer, config_name=w.config_name, priority=w.priority,
                             max_run_minutes=w.max_run_minutes)


def mlflow_port(uri: Optional[str]) -> Optional[int]:
    if not uri:
        return None
    u = urlsplit(uri)
    return u.port or (443 if u.scheme == "https" else 80)


def _plain(name: str, value: pulumi.Input[str]) -> k8s.core.v1.EnvVarArgs:
    return k8s.core.v1.EnvVarArgs(name=name, value=value)


def _field(name: str, path: str) -> k8s.core.v1.EnvVarArgs:
    return k8s.core.v1.EnvVarArgs(name=name, value_from=k8s.core.v1.EnvVarSourceArgs(
        field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path=path)))


def secret_env(cfg: StackConfig, secret_name: Optional[pulumi.Input[str]]) -> list[k8s.core.v1.EnvVarArgs]:
    """Secrets as secretKeyRef only, never a plain value in the pod spec (D16)."""
    mapping = cfg.training.secret_env
    if mapping and secret_name is None:
        raise ValueError("training.secretEnv is set but no Secret name was passed to the workloads")
    return [
        k8s.core.v1.EnvVarArgs(name=env, value_from=k8s.core.v1.EnvVarSourceArgs(
            secret_key_ref=k8s.core.v1.SecretKeySelectorArgs(name=secret_name, key=key, optional=False)))
        for env, key in sorted(mapping.items())
    ]


def env_vars(cfg: StackConfig, *, num_nodes: int, secret_name: Optional[pulumi.Input[str]],
             efa: int, extra: Optional[Mapping[str, pulumi.Input[str]]] = None,
             include_secrets: bool = True, checkpoints: bool = True,
             secret_refs: Mapping[str, str] = {}, run: Optional[Run] = None) -> list[k8s.core.v1.EnvVarArgs]:
    """The container env, sorted by name. `extra` is component-specific (Ray, validation);
    `checkpoints`: a training run, which gets the resume contract (CKPT_DIR, RESUME=auto), for `run`
    (None: the implicit run of `num_nodes`); `secret_refs`: further env name -> key of the training
    Secret (the Ray token)."""
    w = cfg.workloads
    it = cfg.gpu_nodes.instance
    values: dict[str, pulumi.Input[str]] = {
        "NUM_GPUS": str(it.gpu_count),
        "NUM_NODES": str(num_nodes),
        "CONFIG_NAME": w.config_name,
        "EXPERIMENT_NAME": w.experiment_name,
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
        **catalog.nccl_env(it, efa),
    }
    # Without a trainer profile (workloads.trainer: none) these are only passed when configured.
    if w.venv_name:
        values["VENV_NAME"] = w.venv_name
    if w.model_path:
        values["MODEL_PATH"] = w.model_path
    if w.mlflow_tracking_uri:
        values["MLFLOW_TRACKING_URI"] = w.mlflow_tracking_uri
    if checkpoints:
        run = run or implicit_run(cfg, num_nodes)
        ckpt = run_dir(cfg, run)
        values["CKPT_DIR"] = ckpt
        values["RESUME"] = "auto"
        # The same directory in the trainer's own terms, PATH to the image's venv, assets,
        # placement, the run's overrides and the resume wrapper's settings (workloads/trainer.py).
        values.update(trainer.trainer_env(cfg, num_nodes, ckpt, run=run,
                                          warm_start=warm_start_dir(cfg, run)))
    clash = sorted(set(w.env) & PROTECTED_ENV)
    if clash:
        raise ValueError(f"rltrain:workloads.env may not set {', '.join(clash)}: the program sets them")
    values.update(w.env)  # user tuning (e.g. NCCL_DEBUG=INFO) wins over the defaults above
    values.update(extra or {})
    secrets = secret_env(cfg, secret_name) if include_secrets else []
    secrets += [k8s.core.v1.EnvVarArgs(name=env, value_from=k8s.core.v1.EnvVarSourceArgs(
        secret_key_ref=k8s.core.v1.SecretKeySelectorArgs(name=secret_name, key=key, optional=False)))
        for env, key in sorted(secret_refs.items()) if secret_name is not None]
    clash = sorted({s.name for s in secrets} & (set(values) | {"POD_NAMESPACE", "NODE_NAME"}))
    if clash:
        raise ValueError(f"training.secretEnv names {', '.join(clash)}, which is also a plain env var")
    out = [_plain(k, v) for k, v in values.items()]
    out += [_field("POD_NAMESPACE", "metadata.namespace"), _field("NODE_NAME", "spec.nodeName")]
    if checkpoints and trainer.resume_mapped(cfg):
        out.append(_field(trainer.LEDGER_SCOPE_ENV, trainer.LEDGER_SCOPE_FIELD))
    out += secrets
    return sorted(out, key=lambda e: e.name)


def warm_start_dir(cfg: StackConfig, run: Run) -> Optional[str]:
    """`resumeFrom`: the other run's step directory, in the trainer's layout (its own steps
    directory: components/workloads/trainer.py steps_dir)."""
    rf = run.resume_from
    if rf is None:
        return None
    stack = cfg.stack
    source = stack.run(rf.run)
    terms = stack.workloads.resume_terms
    if source is None or terms is None:
        return None
    view = stack.for_run(source)
    return f"{trainer.steps_dir(view, run_dir(stack, source))}/{terms.step_prefix}{rf.step}"
