"""components/scripts/checkpoint_complete.py: the one test of a complete checkpoint step, which the
resume wrapper, the export, the retention and the embodied evaluation import (their own tests run
them as programs on torn steps)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
from checkpoint_files import tear, torch_save_bytes, write_step

from components.scripts import checkpoint_complete as cc
from components.stack import trainers

MARKS = trainers.RLINF_REASONING.resume.complete_marks  # .metadata, full_weights.pt, data.pt


def test_every_mark_loading_is_complete(tmp_path):
    step = write_step(tmp_path / "global_step_1", MARKS)
    assert cc.incomplete_reason(str(step), MARKS) is None and cc.is_complete(str(step), MARKS)


@pytest.mark.parametrize("mark", MARKS)
def test_a_torn_mark_is_named_with_why(tmp_path, mark):
    step = write_step(tmp_path / "global_step_1", MARKS)
    tear(step / mark)
    why = cc.incomplete_reason(str(step), MARKS)
    kind = "not a complete pickle" if mark.endswith(".metadata") else "not a complete zip archive"
    assert why is not None and why.startswith(f"{mark}: {kind}"), why


@pytest.mark.parametrize(("content", "why"), [
    (None, "missing"),
    (b"", "empty"),
    (b"not a zip at all", "not a complete zip archive"),
])
def test_missing_empty_or_foreign_weights_are_incomplete(tmp_path, content, why):
    step = write_step(tmp_path / "s", MARKS)
    weights = step / "actor/model_state_dict/full_weights.pt"
    weights.unlink()
    if content is not None:
        weights.write_bytes(content)
    assert cc.mark_problem(str(step), "actor/model_state_dict/full_weights.pt").startswith(why)


def test_a_zip_whose_member_runs_past_the_end_is_truncated(tmp_path):
    # The central directory survives (copied to the end) but a member's data was cut.
    data = torch_save_bytes(size=8192)
    cut = data[:1000] + data[-200:]
    p = tmp_path / "w.pt"
    p.write_bytes(cut)
    assert cc.mark_problem(str(tmp_path), "w.pt") is not None


def test_other_marks_need_only_exist_and_be_non_empty(tmp_path):
    (tmp_path / "DONE").write_text("x")
    assert cc.mark_problem(str(tmp_path), "DONE") is None
    (tmp_path / "EMPTY").write_text("")
    assert cc.mark_problem(str(tmp_path), "EMPTY") == "empty"


def test_the_metadata_pickle_is_parsed_not_loaded(tmp_path):
    """DCP's Metadata refers to torch classes: the pickle is parsed to its STOP opcode, never loaded,
    so a Python without torch checks it."""
    raw = b"ctorch.distributed.checkpoint.metadata\nMetadata\n(tR."  # GLOBAL, MARK, TUPLE, REDUCE, STOP
    (tmp_path / ".metadata").write_bytes(raw)
    assert cc.mark_problem(str(tmp_path), ".metadata") is None
    (tmp_path / ".metadata").write_bytes(raw[:-1])
    assert cc.mark_problem(str(tmp_path), ".metadata").startswith("not a complete pickle")
    (tmp_path / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": {}}))
    assert cc.mark_problem(str(tmp_path), ".metadata") is None


def test_newest_complete_skips_torn_and_partial_steps_newest_first(tmp_path):
    write_step(tmp_path / "global_step_5", MARKS)
    tear(write_step(tmp_path / "global_step_10", MARKS) / "actor/model_state_dict/full_weights.pt")
    write_step(tmp_path / "global_step_9", MARKS[:1])
    (tmp_path / "global_step_11").write_text("a file, not a step")
    path, skipped = cc.newest_complete(str(tmp_path), "global_step_", MARKS)
    assert path == str(tmp_path / "global_step_5")
    assert [(Path(p).name, why.split(":")[0]) for p, why in skipped] == [
        ("global_step_10", "actor/model_state_dict/full_weights.pt"), ("global_step_9", "actor/model_state_dict/full_weights.pt")]
    assert cc.newest_complete(str(tmp_path / "absent"), "global_step_", MARKS) == (None, [])
