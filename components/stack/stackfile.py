"""Read a `Pulumi.<stack>.yaml` the way the Pulumi CLI hands it to the program."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

# The project directory (Pulumi.yaml, __main__.py, the stack files).
ROOT = Path(__file__).resolve().parents[2]
# How a `secure:` config value (and any secret output) shows in the offline render.
SECRET = "[secret]"
# How a secret the stack needs and its file does not hold shows there: `[secret not set: <command>]`
# (components/offline/unset_secrets.py).
NOT_SET_PREFIX = "[secret not set: "
# The offline render's engine tells the program it runs offline, with no AWS account to ask, by this
# config key, set in-process beside the stack's own config (components/offline/mock_engine.py;
# read by components/aws/platform.py `offline`). Config, not an environment variable: it lives in
# the run's context only, so it neither leaks into a later program of the same process nor into a
# child process (a real `pulumi up` the simulated-cluster tests start). Never a stack file's key:
# `read` refuses it, and so does the program when the CLI hands it over (validate.from_pulumi).
OFFLINE_NAMESPACE, OFFLINE_NAME = "rltrain-render", "offline"
OFFLINE_KEY = f"{OFFLINE_NAMESPACE}:{OFFLINE_NAME}"


class StackFileError(Exception):
    pass


def stack_names(root: Path = ROOT) -> list[str]:
    return sorted(p.name[len("Pulumi."):-len(".yaml")] for p in root.glob("Pulumi.*.yaml"))


def _has_secure(value: Any) -> bool:
    if isinstance(value, dict):
        return "secure" in value or any(_has_secure(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_secure(v) for v in value)
    return False


def read(path: Path) -> tuple[dict[str, str], set[str]]:
    """Return (config with full keys and string values, secret keys).

    `secure:` values are replaced by a placeholder: the render never sees a real secret.
    """
    try:
        doc = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as e:
        raise StackFileError(f"{path}: cannot read stack file: {e}") from None
    raw = doc.get("config") or {}
    if not isinstance(raw, dict):
        raise StackFileError(f"{path}: 'config' must be a mapping")
    config: dict[str, str] = {}
    secret: set[str] = set()
    for key, value in raw.items():
        if key == OFFLINE_KEY:
            raise StackFileError(f"{path}: {key} is set by the offline render's engine only: a stack file that sets "
                                 "it would skip a real deploy's account checks")
        if isinstance(value, dict) and set(value) == {"secure"}:
            config[key] = SECRET
            secret.add(key)
        elif _has_secure(value):
            raise StackFileError(
                f"{path}: {key}: secrets must be top-level keys (pulumi config set --secret KEY), "
                "not nested inside an object"
            )
        elif value is None:  # `rltrain:training:` with nothing under it
            config[key] = ""
        elif isinstance(value, (dict, list)):
            config[key] = json.dumps(value)
        elif isinstance(value, bool):
            config[key] = "true" if value else "false"
        else:
            config[key] = str(value)
    return config, secret
