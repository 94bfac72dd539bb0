"""Container environment of the training pods: run settings, NCCL/EFA settings, secrets by reference only (D16).
"""

from __future__ import annotations

from typing import Mapping, Optional
from urllib.parse import urlsplit

import pulumi
import pulumi_kubernetes as k8s

from components.stack import catalog
from components.stack.config import StackConfig
# Env the program sets, which `workloads.env` may not override (the config checks refuse them).
from components.stack.labels import PROTECTED_ENV
from components.workloads import trainer
from components.workloads.runs import short_hash

# The resume contract: every run writes checkpoints under its own directory on FSx, keyed by what
# makes old checkpoints unusable (model, trainer config, node count), and resumes from the newest
# complete one there. A change of any of these starts a fresh directory.
CHECKPOINT_ROOT = "/fsx/runs"


def run_identity(cfg: StackConfig, num_nodes: int) -> str:
    w = cfg.workloads
    return short_hash(w.model_path or "", w.config_name, str(num_nodes), length=12)


def checkpoint_dir(cfg: StackConfig, num_nodes: int) -> str:
    return f"{CHECKPOINT_ROOT}/{cfg.workloads.experiment_name}/{run_identity(cfg, num_nodes)}"


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
             secret_refs: Mapping[str, str] = {}) -> list[k8s.core.v1.EnvVarArgs]:
    """The container env, sorted by name. `extra` is component-specific (Ray, validation);
    `checkpoints`: a training run, which gets the resume contract (CKPT_DIR, RESUME=auto);
    `secret_refs`: further env name -> key of the training Secret (the Ray token)."""
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
        values["CKPT_DIR"] = checkpoint_dir(cfg, num_nodes)
        values["RESUME"] = "auto"
        # The same directory in the trainer's own terms, PATH to the image's venv, assets,
        # placement and the resume wrapper's settings (components/workloads/trainer.py).
        values.update(trainer.trainer_env(cfg, num_nodes, checkpoint_dir(cfg, num_nodes)))
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
