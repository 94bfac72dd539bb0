"""components/scripts/retention.py as a program, on a temporary directory of RLinf-layout steps."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from checkpoint_files import tear, write_mark

from components.stack import trainers

SCRIPT = Path(__file__).resolve().parents[2] / "components" / "scripts" / "retention.py"
MARKS = trainers.RLINF.resume.complete_marks
OLD = time.time() - 7200  # older than the default --min-age-seconds


def make_step(root: Path, n: int, complete: bool = True, old: bool = True, torn: bool = False) -> Path:
    """A step as RLinf writes it; `torn`: every mark there, full_weights.pt cut mid-write."""
    d = root / f"global_step_{n}"
    (d / "actor" / "dcp_checkpoint").mkdir(parents=True)
    (d / "actor" / "dcp_checkpoint" / "__0_0.distcp").write_bytes(b"x" * 1000)
    if complete or torn:
        for mark in MARKS:
            write_mark(d / mark, n)
    if torn:
        tear(d / "actor" / "model_state_dict" / "full_weights.pt")
    if old:
        for p in [d, *d.rglob("*")]:
            os.utime(p, (OLD, OLD))
    return d


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), "--prefix", "global_step_", "--marks", ",".join(MARKS), *args],
                          capture_output=True, text=True, timeout=60)


def names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


def test_keeps_exactly_the_newest_k_complete_and_is_idempotent(tmp_path):
    for n in (50, 100, 150, 200, 250):
        make_step(tmp_path, n)
    r = run("--steps-dir", str(tmp_path), "--keep", "3")
    assert r.returncode == 0, r.stdout + r.stderr
    assert names(tmp_path) == ["global_step_150", "global_step_200", "global_step_250"]
    assert "deleted" in r.stdout and "global_step_50" in r.stdout and "bytes freed" in r.stdout
    again = run("--steps-dir", str(tmp_path), "--keep", "3")
    assert again.returncode == 0 and "deleted" not in again.stdout and "0 to delete" in again.stdout
    assert names(tmp_path) == ["global_step_150", "global_step_200", "global_step_250"]


def test_never_deletes_a_newer_incomplete_step_being_written(tmp_path):
    for n in (50, 100, 150):
        make_step(tmp_path, n)
    make_step(tmp_path, 200, complete=False)  # newest, even if old: maybe still being written
    r = run("--steps-dir", str(tmp_path), "--keep", "1")
    assert r.returncode == 0
    assert names(tmp_path) == ["global_step_150", "global_step_200"]


def test_old_abandoned_incomplete_step_goes_a_recent_one_stays(tmp_path):
    make_step(tmp_path, 50, complete=False)  # killed mid-save long ago
    make_step(tmp_path, 75, complete=False, old=False)  # touched a moment ago
    make_step(tmp_path, 100)
    r = run("--steps-dir", str(tmp_path), "--keep", "3")
    assert r.returncode == 0
    assert names(tmp_path) == ["global_step_100", "global_step_75"]
    assert "incomplete" in r.stdout


def test_protected_step_kept_and_deletions_bounded_per_pass(tmp_path):
    for n in range(10, 110, 10):
        make_step(tmp_path, n)
    r = run("--steps-dir", str(tmp_path), "--keep", "2", "--protect", f"{tmp_path}=20", "--max-deletions", "3")
    assert r.returncode == 0
    # 7 to delete (10, 30..80), 3 per pass, the oldest first: 10, 30, 40
    assert names(tmp_path) == [f"global_step_{n}" for n in (100, 20, 50, 60, 70, 80, 90)]
    assert "3 this pass" in r.stdout
    for _ in range(2):
        run("--steps-dir", str(tmp_path), "--keep", "2", "--protect", f"{tmp_path}=20", "--max-deletions", "3")
    assert names(tmp_path) == ["global_step_100", "global_step_20", "global_step_90"]


def test_no_complete_step_deletes_nothing_and_missing_dir_is_fine(tmp_path):
    make_step(tmp_path, 50, complete=False)
    make_step(tmp_path, 100, complete=False)
    r = run("--steps-dir", str(tmp_path), "--steps-dir", str(tmp_path / "absent"), "--keep", "1")
    assert r.returncode == 0
    assert names(tmp_path) == ["global_step_100", "global_step_50"]
    assert "no checkpoints yet" in r.stdout


def test_interrupted_deletion_is_finished_and_links_are_left_alone(tmp_path):
    make_step(tmp_path, 100)
    leftover = tmp_path / ".rltrain-deleting-global_step_50"
    (leftover / "actor").mkdir(parents=True)
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    make_step(outside, 10)
    (tmp_path / "global_step_10").symlink_to(outside / "global_step_10")
    r = run("--steps-dir", str(tmp_path), "--keep", "1")
    assert r.returncode == 0
    assert names(tmp_path) == ["global_step_10", "global_step_100"]
    assert (outside / "global_step_10" / MARKS[1]).exists()


def test_dry_run_deletes_nothing_and_bad_usage_exits_2(tmp_path):
    for n in (1, 2, 3):
        make_step(tmp_path, n)
    r = run("--steps-dir", str(tmp_path), "--keep", "1", "--dry-run")
    assert r.returncode == 0 and "would delete" in r.stdout
    assert len(names(tmp_path)) == 3
    bad = run("--steps-dir", str(tmp_path), "--keep", "0")
    assert bad.returncode == 2 and "--keep 0" in bad.stdout
    assert run("--steps-dir", str(tmp_path), "--protect", "nostep").returncode == 2


def test_a_torn_step_is_never_counted_as_complete(tmp_path):
    """Every mark of 250 and of 200 exists, but their full_weights.pt was cut mid-write (torch.save
    writes it in place): they are not complete. Keeping the newest 2 complete keeps 100 and 150,
    and the torn ones are never what lets an older complete step go."""
    for n in (50, 100, 150):
        make_step(tmp_path, n)
    make_step(tmp_path, 200, torn=True)  # older than nothing complete: incomplete, abandoned
    make_step(tmp_path, 250, torn=True)
    r = run("--steps-dir", str(tmp_path), "--keep", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert names(tmp_path) == ["global_step_100", "global_step_150", "global_step_200", "global_step_250"]
    assert "complete [150, 100, 50]" in r.stdout
    assert (f"{tmp_path}/global_step_250: incomplete, actor/model_state_dict/full_weights.pt: not a complete zip "
            "archive") in r.stdout
    assert "deleted" in r.stdout and "global_step_50" in r.stdout


def test_a_torn_step_older_than_the_newest_complete_one_is_deleted_as_incomplete(tmp_path):
    make_step(tmp_path, 100, torn=True)
    make_step(tmp_path, 150)
    r = run("--steps-dir", str(tmp_path), "--keep", "3")
    assert r.returncode == 0
    assert names(tmp_path) == ["global_step_150"]
    assert "incomplete (actor/model_state_dict/full_weights.pt: not a complete zip archive" in r.stdout
