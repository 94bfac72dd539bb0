"""What a run produced reaches S3 (issue 43): the served step's export whenever a bucket is set, every
run's directory (its checkpoints) only on opt-in, through at most two data repository associations
that no change of the runs touches; a changed association never reaches the file system."""

from __future__ import annotations

import copy

import pytest
from support import stack_copy

from components.offline import impact, render, runs_summary, unset_secrets
from components.stack import data_repository, validate
from components.stack.data_repository import FsxS3
from components.workloads import env, export

DRA = "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation"
FS = "aws:fsx/lustreFileSystem:LustreFileSystem"


def _with_bucket(stack: str, tmp_path, **s3):
    def edit(doc):
        doc["config"]["rltrain:storage"]["fsx"]["s3"] = {"bucket": "my-models", **s3}
    tmp_path.mkdir(parents=True, exist_ok=True)
    return render.render_stack(stack, stack_copy(tmp_path, stack, edit))


def _associations(r) -> dict[str, dict]:
    return {row["name"]: row for row in r.resources if row["type"] == DRA}


def test_exports_by_default_checkpoints_only_on_opt_in():
    [exports] = data_repository.associations(FsxS3(bucket="my-models"))
    assert (exports.file_system_path, exports.data_repository_path) == ("/exports", "s3://my-models/rltrain/exports/")
    both = data_repository.associations(FsxS3(bucket="bkt", prefix="team/x", checkpoints=True))
    assert [(a.key, a.file_system_path, a.data_repository_path) for a in both] == [
        ("exports", "/exports", "s3://bkt/team/x/exports/"), ("runs", "/runs", "s3://bkt/team/x/runs/")]
    # AWS: at most 8 per file system, no two with overlapping file system paths or S3 prefixes.
    assert len(both) <= data_repository.MAX_ASSOCIATIONS
    a, b = both
    assert not a.file_system_path.startswith(b.file_system_path + "/") and not b.file_system_path.startswith(
        a.file_system_path + "/") and a.file_system_path != b.file_system_path
    assert not a.data_repository_path.startswith(b.data_repository_path)
    assert not b.data_repository_path.startswith(a.data_repository_path)
    root = data_repository.associations(FsxS3(bucket="bkt", prefix=""))[0]
    assert root.data_repository_path == "s3://bkt/exports/"


def test_the_export_job_writes_where_the_association_exports(tmp_path):
    r = _with_bucket("dev-reasoning", tmp_path)
    out = export.out_dir(r.cfg)
    # Outside the run's directory (never under /runs, which is exported only on opt-in), the same
    # relative path as the run's directory.
    run_dir = env.dir_of(r.cfg, "single-node")
    assert out == f"/fsx/exports{run_dir[len('/fsx/runs'):]}/global_step_200"
    [exports] = data_repository.associations(r.cfg.storage.fsx.s3)
    assert data_repository.covers(exports, out)
    dras = _associations(r)
    assert set(dras) == {"storage-s3"}
    inputs = dras["storage-s3"]["inputs"]
    assert inputs["fileSystemPath"] == "/exports" and inputs["dataRepositoryPath"] == "s3://my-models/rltrain/exports/"
    assert inputs["deleteDataInFilesystem"] is False
    assert dras["storage-s3"]["options"]["deleteBeforeReplace"] is True
    lines, warnings = runs_summary.s3_export(r.cfg)
    text = "\n".join(lines)
    assert warnings == []
    assert f"run single-node step 200: {out} -> s3://my-models/rltrain/exports{out[len('/fsx/exports'):]}/" in text
    assert "checkpoints: on the volume only (/fsx/runs; rltrain:storage.fsx.s3.checkpoints: true" in text
    # The summary the render prints carries the same lines.
    assert "  exports: /fsx/exports -> s3://my-models/rltrain/exports/" in render.summary(r)


def test_checkpoints_are_exported_on_opt_in_after_the_exports(tmp_path):
    r = _with_bucket("dev-reasoning", tmp_path, checkpoints=True)
    dras = _associations(r)
    assert set(dras) == {"storage-s3", "storage-s3-runs"}
    runs = dras["storage-s3-runs"]
    assert runs["inputs"]["fileSystemPath"] == "/runs"
    assert runs["inputs"]["dataRepositoryPath"] == "s3://my-models/rltrain/runs/"
    assert "storage-s3" in str(runs["dependsOn"]) and runs["options"]["deleteBeforeReplace"] is True
    text = "\n".join(runs_summary.s3_export(r.cfg)[0])
    run = r.cfg.run("lr-2e-6")
    d = env.run_dir(r.cfg, run)
    assert f"    run lr-2e-6: {d} -> s3://my-models/rltrain/runs{d[len('/fsx/runs'):]}/" in text
    assert "3 + 1 per run, deletions mirrored" in text


def _data(stack: str) -> dict:
    """The stack file's `rltrain:` sections, as validate.load takes them."""
    values, _, _ = unset_secrets.load_stack(stack)
    return {k.split(":", 1)[1]: validate.parse_value(v) for k, v in values.items() if k.startswith("rltrain:")}


def _load(data: dict):
    return validate.load(data, secret_keys={k for k in data if k not in validate.SECTIONS})


def test_the_render_warns_when_nothing_the_runs_write_reaches_the_bucket():
    data = _data("dev")
    data["storage"]["fsx"]["s3"] = {"bucket": "my-models"}
    lines, warnings = runs_summary.s3_export(_load(data))
    assert len(warnings) == 1 and "nothing the runs write reaches s3://my-models/rltrain/" in warnings[0]
    assert "set it to true" in warnings[0]
    assert lines[-1] == f"  WARNING: {warnings[0]}"
    data["storage"]["fsx"]["s3"]["checkpoints"] = True
    assert runs_summary.s3_export(_load(data))[1] == []


def test_the_old_file_system_path_key_is_refused_by_name():
    data = _data("dev")
    data["storage"]["fsx"]["s3"] = {"bucket": "my-models", "fileSystemPath": "/runs"}
    with pytest.raises(validate.ConfigError) as e:
        _load(data)
    assert "unknown key" in dict(e.value.problems)["rltrain:storage.fsx.s3.fileSystemPath"]


def test_a_changed_association_is_replaced_and_never_the_file_system(tmp_path):
    after = _with_bucket("dev-reasoning", tmp_path / "a", checkpoints=True)
    # A stack deployed before issue 43: one association of /runs under the same name.
    base = copy.deepcopy([row for row in after.resources if row["name"] != "storage-s3-runs"])
    old = next(row for row in base if row["type"] == DRA)
    old["inputs"].update(fileSystemPath="/runs", dataRepositoryPath="s3://my-models/checkpoints/")
    impacts = impact.classify(base, after.resources, after.cfg)
    by_name = {i.name: i for i in impacts}
    assert by_name["storage-s3"].kind == impact.REPLACE
    assert "fileSystemPath /runs -> /exports" in by_name["storage-s3"].why
    assert "the old one deleted first; the file system is untouched" in by_name["storage-s3"].why
    assert by_name["storage-s3-runs"].kind == impact.CREATE
    assert not [i for i in impacts if i.type == FS]
    assert impact.check(base, after.resources, after.cfg).refused == []
    # Checkpoints off again: that association goes, the files stay.
    impacts = impact.classify(after.resources, base, after.cfg)
    [gone] = [i for i in impacts if i.name == "storage-s3-runs"]
    assert gone.kind == impact.DELETE and "its files stay on the volume" in gone.why
    # Another prefix: replaced, the file system again untouched.
    moved = _with_bucket("dev-reasoning", tmp_path / "b", prefix="elsewhere/")
    impacts = impact.classify(_associations_only(after), _associations_only(moved), moved.cfg)
    assert {i.name: i.kind for i in impacts}["storage-s3"] == impact.REPLACE
    assert not [i for i in impact.classify(after.resources, moved.resources, moved.cfg) if i.type == FS]


def _associations_only(r) -> list[dict]:
    return [row for row in r.resources if row["type"] == DRA]
