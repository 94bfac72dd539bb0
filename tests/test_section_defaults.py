"""Sections never silently flip (issue 43): a section written without `enabled` keeps the default the
configuration reference documents for it, and the reference shows one default per key.

Walks every section model reachable from StackConfig that has an on/off switch (`enabled`)."""

from __future__ import annotations

import typing

import pytest
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from components.offline import config_reference
from components.stack import config


def _sections(model: type[BaseModel], loc: tuple[str, ...] = ()):
    for name, field in model.model_fields.items():
        key = field.alias or name
        inner = [a for a in (field.annotation, *typing.get_args(field.annotation))
                 if isinstance(a, type) and issubclass(a, BaseModel)]
        for sub in inner:
            yield loc + (key,), model, name, field, sub
            yield from _sections(sub, loc + (key,))


SWITCHED = [(loc, parent, name, field, sub) for loc, parent, name, field, sub in _sections(config.StackConfig)
            if "enabled" in sub.model_fields]


def test_the_walk_finds_the_sections_with_a_switch():
    found = {".".join(loc) for loc, *_ in SWITCHED}
    # The ones issue 43 found flipping, and the others of the same shape.
    assert {"workloads.singleNode", "workloads.validation", "workloads.multiNode", "workloads.ncclTest",
            "workloads.serving", "workloads.serving.evaluation", "gpuNodes.elastic", "monitoring"} <= found


@pytest.mark.parametrize("loc,parent,name,field,sub", SWITCHED, ids=[".".join(s[0]) for s in SWITCHED])
def test_a_section_written_without_enabled_keeps_its_default(loc, parent, name, field, sub):
    own = sub.model_fields["enabled"].default
    default = field.default
    if default is PydanticUndefined or not isinstance(default, BaseModel):
        return  # a required, optional or list section (workloads.runs): no instance default to disagree with
    # The section's default instance and a section written with other keys only agree.
    assert default.enabled == own, (
        f"{'.'.join(loc)}: the field's default says enabled={default.enabled}, the model's {own}: "
        "a section written without `enabled` would flip it")


def test_a_partial_validation_section_keeps_validation_on():
    w = config.WorkloadsConfig.model_validate({"image": "x/y:1", "validation": {"priority": 1000300},
                                               "singleNode": {}})
    assert w.validation.enabled and w.validation.priority == 1000300
    assert w.single_node.enabled


def test_the_reference_shows_one_default_per_key():
    text = config_reference.markdown()
    rows = [line.split("|") for line in text.splitlines() if line.startswith("| `")]
    keys: dict[tuple[str, str], set[str]] = {}
    section = ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line
        if line.startswith("| `"):
            cells = [c.strip() for c in line.split("|")]
            keys.setdefault((section, cells[1]), set()).add(cells[3])
    assert rows and all(len(v) == 1 for v in keys.values()), {k: v for k, v in keys.items() if len(v) > 1}
    # The switched sections' `enabled` rows say what the models say.
    for loc, _, _, field, sub in SWITCHED:
        if len(loc) < 2:
            continue
        own = sub.model_fields["enabled"].default
        shown = "none" if own is None else f"`{str(own).lower()}`"
        key = "`" + ".".join(loc[1:]) + ".enabled`"
        hits = [cells for cells in ([c.strip() for c in line.split("|")] for line in text.splitlines()
                                    if line.startswith("| `")) if cells[1] == key]
        assert hits and all(c[3] == shown for c in hits), (key, hits, shown)
