"""Named training runs (`workloads.runs`): the researcher's unit (issue 43).

A run is a name, what it trains (the trainer profile's config), on how many whole GPU nodes, with
which hyperparameter overrides; its identity (checkpoint directory, curves, retention, cost) is
derived from everything that makes its checkpoints unusable for it: the run's name, the model, the
config, the node count and the overrides (components/workloads/env.py run_dir). A changed override
is a new directory, so no change silently continues another run; continuing from another run's
step is explicit (`resumeFrom`, a warm start).

`workloads.singleNode` and `workloads.multiNode` stay, as two implicit runs `single-node` and
`multi-node` with the resource names (Job `rltrain-training`, `rltrain-multinode`) and checkpoint
directories they always had: a deployed stack upgrades without any run restarting or losing its
resume point. `multiNode`'s other keys (form, Ray port, token) are the multi-node form of every
run of 2+ nodes.

Pure data: no Pulumi; of ours only the model base and the trainer profiles (config.py imports this module).
The checks that read more than one key (a duplicate name, an override of a key the program sets,
more nodes than the stack ever has, a warm start of another shape) are components/stack/validate.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field, field_validator

from components.stack import trainers
from components.stack.model_base import _Model

# The run's Kubernetes objects are `rltrain-run-<name>` (+ `-svc`, + `-<index>` for a pod of an
# Indexed Job: `<job>-<index>` is its hostname, a DNS label of at most 63 characters): 40 leaves room.
NAME_PATTERN = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$"
RESOURCE_PREFIX = "rltrain-run-"
# A Hydra override key: a dotted path, optionally `+` (add) or `++` (add or override) in front
# (Hydra's override grammar, hydra/grammar/OverrideParser.g4 at hydra-core 1.3/1.4: `key=value`,
# `+key=value`, `++key=value`; the key a DOT_PATH of IDs and list indices).
KEY_PATTERN = re.compile(r"^(\+\+|\+)?[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$")
# Characters a value may hold unquoted in Hydra's VALUE_MODE (ID characters, digits and
# UNQUOTED_CHAR `/ - \ + . $ % * @ ? |`, hydra/grammar/OverrideLexer.g4); a string with any other
# (`, : = ( ) { }`) is passed single-quoted, a quoted string to Hydra.
_UNQUOTED = re.compile(r"^[A-Za-z0-9_/+.%@|-]+$")
# Never in a value: the trainer's command line gets the overrides through a shell variable
# ($HYDRA_OVERRIDES, word-split: whitespace would cut a value in two; * ? [ ] would be globbed), and
# quotes, backslashes and $ would change what Hydra reads (escapes, interpolation).
_REFUSED = re.compile(r"[\s'\"\\*?\[\]$]")

Scalar = Any  # str | int | float | bool, checked by RunConfig._scalars


class ResumeFrom(_Model):
    """A warm start: the run's first attempt starts from another run's checkpoint step (its weights,
    optimizer and data state, in the trainer's own resume setting); later attempts resume from the
    run's own newest complete step."""

    run: str = Field(pattern=NAME_PATTERN)
    """the run whose checkpoint it starts from (a run of this stack, enabled or not: its directory is derived from its entry)"""
    step: int = Field(ge=1)
    """that run's step; a step the config saves, complete when the run starts (the resume wrapper checks, and fails the run otherwise)"""


class RunConfig(_Model):
    """One named training run."""

    name: str = Field(pattern=NAME_PATTERN)
    """unique in the stack: lowercase letters, digits and '-', at most 40 characters, starting with a letter; names the run's Job (`rltrain-run-<name>`), its checkpoint directory and its curves"""
    trainer: Optional[str] = None
    """trainer profile; none = `workloads.trainer`"""
    config_name: Optional[str] = None
    """the trainer's config (Hydra --config-name); none = `workloads.configName`"""
    nodes: int = Field(1, ge=1)
    """whole GPU nodes: 1 = a single-node Job, 2 or more = the multi-node form (`workloads.multiNode.form`)"""
    overrides: dict[str, Scalar] = {}
    """Hydra overrides, dotted key -> one scalar value (text, number, true/false), e.g. `actor.optim.lr: 1.0e-6`; keys the program sets (placement, node count, checkpoint and log directories, experiment name, loggers, resume, staged model and data paths: the refusal lists them for the run) are refused; keys are checked for form, not against the trainer config (a misspelt key fails when the run starts, in Hydra). Part of the run's identity: a changed value is a fresh checkpoint directory"""
    priority: Optional[int] = Field(None, ge=0, le=1000000000)
    """the run's PriorityClass value (its place in the queue); none = `workloads.priority`"""
    max_run_minutes: Optional[int] = Field(None, ge=5)
    """the run's deadline (plus the 10-minute image-pull margin); none = `workloads.maxRunMinutes`"""
    enabled: bool = True
    """`false` deletes the run's Job and keeps its entry: its checkpoints stay where they are, counted by the volume budget, and another run can warm-start from them"""
    resume_from: Optional[ResumeFrom] = None
    """warm start from another run's step: `{run: NAME, step: N}`"""

    @field_validator("overrides")
    @classmethod
    def _scalars(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, value in v.items():
            if not KEY_PATTERN.match(key):
                raise ValueError(f"{key!r} is not a Hydra key: a dotted path such as actor.optim.lr "
                                 "(optionally + or ++ in front)")
            if value is None:
                raise ValueError(f"{key}: empty; an override takes one scalar value (text, number, true/false), "
                                 f"e.g. {key}: 1.0e-6; to keep the config's own value, leave the key out")
            if isinstance(value, (dict, list, tuple)):
                raise ValueError(f"{key}: {'a mapping' if isinstance(value, dict) else 'a list'}; an override takes "
                                 f"one scalar value (text, number, true/false): one dotted key per value, e.g. "
                                 f"{_example(key, value)}")
            if isinstance(value, str) and _REFUSED.search(value):
                raise ValueError(f"{key}: {value!r} holds whitespace, a quote, a backslash, $ or * ? [ ]: the "
                                 "trainer gets the overrides through a shell variable and Hydra's grammar")
        return v


def _example(key: str, value: Any) -> str:
    """The first scalar of a mapping or list written as the dotted key an override takes
    ({actor.optim: {lr: 1e-6}} -> `actor.optim.lr: 1e-06`; a list's items are keys 0, 1, ...)."""
    while isinstance(value, (dict, list, tuple)) and value:
        sub, value = next(iter(value.items())) if isinstance(value, dict) else (0, value[0])
        key = f"{key}.{sub}"
    return f"{key}: {value}" if not isinstance(value, (dict, list, tuple)) and value is not None else f"{key}.NAME: VALUE"


def hydra_value(value: Scalar) -> str:
    """One value in Hydra's override syntax: true/false, a number as Python writes it (Hydra reads
    1e-06 as a float), text as it is or single-quoted (a quoted string) when it holds characters
    Hydra would read otherwise."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    return text if _UNQUOTED.match(text) else f"'{text}'"


def hydra_overrides(overrides: dict[str, Scalar]) -> list[str]:
    """`key=value` words, sorted by key (the same overrides, the same words: the run's identity)."""
    return [f"{k}={hydra_value(overrides[k])}" for k in sorted(overrides)]


def bare_key(key: str) -> str:
    return key.lstrip("+")


@dataclass(frozen=True)
class Run:
    """A training run of the stack, resolved: an implicit one (`singleNode`, `multiNode`) or a named one."""

    name: str
    nodes: int
    enabled: bool
    trainer: str
    config_name: str
    overrides: tuple[tuple[str, Scalar], ...]
    priority: int
    max_run_minutes: int
    resume_from: Optional[ResumeFrom]
    implicit: bool
    key: tuple[Any, ...]  # where the stack file declares it: ("workloads", "runs", i) or ("workloads", "singleNode")

    @property
    def resource_name(self) -> str:
        """The run's Kubernetes objects: the implicit runs keep theirs (components/workloads/job.py NAME,
        multinode.py RUN)."""
        if self.implicit:
            return "rltrain-training" if self.name == "single-node" else "rltrain-multinode"
        return f"{RESOURCE_PREFIX}{self.name}"

    @property
    def pulumi_name(self) -> str:
        """The suffix of its Pulumi resource names (the implicit runs keep theirs)."""
        return self.name if self.implicit else f"run-{self.name}"

    @property
    def multi_node(self) -> bool:
        return self.nodes >= 2

    @property
    def override_map(self) -> dict[str, Scalar]:
        return dict(self.overrides)


def named(rc: RunConfig, index: int, *, trainer: str, config_name: str, priority: int,
          max_run_minutes: int) -> Run:
    """A named run with the stack's defaults filled in: another trainer profile brings its own
    default config (components/stack/trainers.py)."""
    own = rc.trainer or trainer
    if rc.config_name is None and own != trainer:
        profile = trainers.get(own)
        config_name = profile.default_config if profile else ""
    return Run(name=rc.name, nodes=rc.nodes, enabled=rc.enabled, trainer=own,
               config_name=rc.config_name or config_name,
               overrides=tuple(sorted(rc.overrides.items())), priority=rc.priority if rc.priority is not None else priority,
               max_run_minutes=rc.max_run_minutes or max_run_minutes, resume_from=rc.resume_from, implicit=False,
               key=("workloads", "runs", index))


def implicit(name: str, nodes: int, *, trainer: str, config_name: str, priority: int, max_run_minutes: int) -> Run:
    return Run(name=name, nodes=nodes, enabled=True, trainer=trainer, config_name=config_name, overrides=(),
               priority=priority, max_run_minutes=max_run_minutes, resume_from=None, implicit=True,
               key=("workloads", "singleNode" if name == "single-node" else "multiNode"))
