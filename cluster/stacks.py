"""Read a stack file the way the offline render does (secrets not set are no error here)."""

from __future__ import annotations

from pathlib import Path

from components.offline.unset_secrets import load_stack
from components.stack.config import StackConfig
from components.stack.stackfile import ROOT


def stack_config(stack: str, root: Path = ROOT) -> tuple[StackConfig, dict[str, str]]:
    """The validated StackConfig of Pulumi.<stack>.yaml and its raw config values."""
    values, _, cfg = load_stack(stack, root)
    return cfg, values


def region(values: dict[str, str]) -> str:
    return values.get("aws:region") or "us-east-1"
