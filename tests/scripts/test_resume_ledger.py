"""The resume wrapper's start ledger and its bound on restarts without progress (issue 31), the
wrapper run as a program (python3 resume_wrapper.py -- <command>), as the pods run it.

A node that keeps failing restarts the run without bound on a topology-aware stack: Kueue's count
(`workloads.infrastructureRestarts` as backoffLimitCount) grows only on PodsReady-timeout evictions
(kueue v0.19.2 pkg/controller/core/workload_controller.go), and the Job ignores a pod lost with its
node. The wrapper counts the starts from the same step itself and refuses the one over the bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from checkpoint_files import tear, write_step

from components.scripts import resume_wrapper

WRAPPER = Path(resume_wrapper.__file__)
MARKS = ("actor/.metadata", "actor/full_weights.pt")
# The "trainer": records that it ran and with which resume argument.
TRAINER = "import os, sys; open(sys.argv[1], 'a').write(os.environ.get('OVR', '') + '\\n')"


class Run:
    def __init__(self, root: Path, *, ledger: bool = True, limit: str | None = "2"):
        self.steps = root / "ckpt" / "checkpoints"
        self.ledger = root / "ckpt" / ".rltrain" / "starts.jsonl"
        self.ran = root / "ran.txt"
        self.env = {"PATH": os.environ["PATH"], "RESUME_STEPS_DIR": str(self.steps),
                    "RESUME_STEP_PREFIX": "global_step_", "RESUME_COMPLETE_MARKS": ",".join(MARKS),
                    "RESUME_ENV": "OVR", "RESUME_FORMAT": "runner.resume_dir={step_dir}", "NODE_NAME": "node-a"}
        if ledger:
            self.env["RESUME_LEDGER"] = str(self.ledger)
        if limit is not None:
            self.env["RESUME_MAX_STALLED_RESTARTS"] = limit

    def step(self, n: int, *, complete: bool = True) -> str:
        d = self.steps / f"global_step_{n}"
        write_step(d, MARKS if complete else MARKS[:1])
        return str(d)

    def start(self, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(WRAPPER), "--", sys.executable, "-c", TRAINER, str(self.ran)],
                              env={**self.env, **env}, text=True, capture_output=True, timeout=60)

    def record_stall(self, why: str = "nodes did not come", **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(WRAPPER), "--record-stall", why],
                              env={**self.env, **env}, text=True, capture_output=True, timeout=60)

    def runs(self) -> list[str]:
        return self.ran.read_text().splitlines() if self.ran.exists() else []

    def entries(self) -> list[dict]:
        return [json.loads(line) for line in self.ledger.read_text().splitlines()]


def test_a_fresh_start_appends_one_line_and_trains(tmp_path):
    run = Run(tmp_path)
    p = run.start()
    assert p.returncode == 0, p.stderr
    [e] = run.entries()
    assert e["step"] is None and e["node"] == "node-a" and e["hostname"]
    assert len(e["time"]) == 20 and e["time"].endswith("Z")  # 2026-12-03T12:00:00Z, UTC
    assert run.runs() == [""]
    assert "start 1 in a row from a fresh start (at most 3: workloads.infrastructureRestarts=2)" in p.stderr


def test_the_restart_over_the_bound_from_the_same_step_exits_no_progress(tmp_path):
    run = Run(tmp_path, limit="2")
    step = run.step(5)
    for _ in range(3):  # the first start and 2 restarts from step 5
        assert run.start().returncode == 0
    p = run.start()  # restart 3 from step 5: over the bound of 2
    assert p.returncode == resume_wrapper.EXIT_NO_PROGRESS == 10
    assert len(run.runs()) == 3  # the trainer did not run
    assert len(run.entries()) == 3  # the refused start is not recorded
    msg = p.stderr
    assert f"started 3 times in a row from step {step}" in msg
    assert all(f"{e['time']} on node-a" in msg for e in run.entries())
    assert "workloads.infrastructureRestarts" in msg and "RESUME_MAX_STALLED_RESTARTS=2" in msg
    assert f"delete {run.ledger}" in msg and "restart 3, over the bound of 2" in msg
    # Refused again while nothing changed; deleting the ledger lets the run start again.
    assert run.start().returncode == 10
    run.ledger.unlink()
    assert run.start().returncode == 0 and len(run.entries()) == 1


def test_zero_allows_the_first_start_only_and_a_fresh_run_that_never_checkpoints_is_bounded(tmp_path):
    run = Run(tmp_path, limit="0")
    assert run.start().returncode == 0
    p = run.start()
    assert p.returncode == 10 and "from a fresh start (no complete checkpoint)" in p.stderr


def test_a_newer_complete_checkpoint_resets_the_count(tmp_path):
    run = Run(tmp_path, limit="1")
    run.step(5)
    assert [run.start().returncode for _ in range(2)] == [0, 0]
    run.step(6, complete=False)  # a newer step, killed mid-write: no progress
    assert run.start().returncode == 10
    six = run.step(6)
    assert [run.start().returncode for _ in range(2)] == [0, 0]
    assert run.start().returncode == 10
    assert [e["step"] for e in run.entries()][-2:] == [six, six]
    assert run.runs()[-1] == f"runner.resume_dir={six}"


def test_a_truncated_last_line_is_skipped_and_the_next_line_starts_anew(tmp_path):
    run = Run(tmp_path, limit="2")
    step = run.step(1)
    run.ledger.parent.mkdir(parents=True)
    line = json.dumps({"time": "2026-01-01T00:00:00Z", "step": step, "hostname": "h", "node": "n"})
    run.ledger.write_text(f"{line}\n{line}\n{line[:17]}")  # a crash in the middle of the third write
    p = run.start()
    assert p.returncode == 0, p.stderr
    assert "start 3 in a row" in p.stderr
    lines = run.ledger.read_text().splitlines()
    assert lines[2] == line[:17] and json.loads(lines[3])["step"] == step
    assert run.start().returncode == 10  # the entry after the truncated line counted


def test_an_unusable_ledger_is_a_warning_and_the_trainer_runs(tmp_path):
    run = Run(tmp_path)
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / ".rltrain").write_text("a file where the ledger's directory should be")
    for _ in range(5):
        p = run.start()
        assert p.returncode == 0, p.stderr
        assert "warning: cannot read the start ledger" in p.stderr
    assert len(run.runs()) == 5


def test_a_ledger_that_cannot_be_written_is_a_warning(tmp_path, monkeypatch, capsys):
    def fail(*_):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(resume_wrapper, "append_entry", fail)
    assert resume_wrapper.keep_ledger(str(tmp_path / "starts.jsonl"), 2, None, {}) is True
    assert "warning: cannot write the start ledger" in capsys.readouterr().err


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux /proc")
def test_a_ledger_directory_that_cannot_be_created_is_a_warning(tmp_path):
    # /proc refuses new directories even to root: the read finds no ledger, the write fails.
    run = Run(tmp_path)
    run.env["RESUME_LEDGER"] = "/proc/rltrain-no-such-dir/starts.jsonl"
    p = run.start()
    assert p.returncode == 0 and "warning: cannot write the start ledger" in p.stderr
    assert run.runs() == [""]


def test_without_a_ledger_file_the_wrapper_is_unchanged(tmp_path):
    bounded, plain = Run(tmp_path / "a"), Run(tmp_path / "b", ledger=False, limit="0")
    bounded.step(3)
    plain.step(3)
    for _ in range(4):
        p = plain.start()
        assert p.returncode == 0 and "start ledger" not in p.stderr and "in a row" not in p.stderr
    assert not (tmp_path / "b" / "ckpt" / ".rltrain").exists()
    assert plain.runs() == [f"runner.resume_dir={plain.steps}/global_step_3"] * 4
    # The same messages as with a ledger, but for the ledger's own line.
    q = bounded.start()
    assert [ln for ln in q.stderr.splitlines() if "in a row" not in ln] == p.stderr.replace(
        str(plain.steps), str(bounded.steps)).splitlines()


def test_a_ledger_without_a_bound_only_records(tmp_path):
    run = Run(tmp_path, limit=None)
    assert [run.start().returncode for _ in range(4)] == [0] * 4
    assert len(run.entries()) == 4


@pytest.mark.parametrize("value", ["-1", "two", "1.5"])
def test_an_invalid_bound_is_a_usage_error_naming_it(tmp_path, value):
    p = Run(tmp_path, limit=value).start()
    assert p.returncode == resume_wrapper.EXIT_USAGE
    assert f"RESUME_MAX_STALLED_RESTARTS={value!r} is not an integer >= 0" in p.stderr


def test_the_ledger_stays_bounded(tmp_path):
    run = Run(tmp_path, limit="2")
    run.ledger.parent.mkdir(parents=True)
    old = [{"time": "2026-01-01T00:00:00Z", "step": f"/old/global_step_{i}", "hostname": "h", "node": None}
           for i in range(resume_wrapper.LEDGER_KEEP)]
    run.ledger.write_text("".join(json.dumps(e) + "\n" for e in old))
    assert run.start().returncode == 0
    entries = run.entries()
    assert len(entries) == resume_wrapper.LEDGER_KEEP
    assert entries[0]["step"] == "/old/global_step_1" and entries[-1]["step"] is None
    assert os.listdir(run.ledger.parent) == ["starts.jsonl"]  # no temporary file left
    assert run.start().returncode == 0 and len(run.entries()) == resume_wrapper.LEDGER_KEEP


def test_a_torn_newest_step_is_skipped_naming_it_and_the_previous_complete_one_is_used(tmp_path):
    """A node lost while torch.save wrote full_weights.pt in place: every mark exists, one is torn."""
    run = Run(tmp_path)
    five = run.step(5)
    six = run.step(6)
    tear(Path(six) / "actor/full_weights.pt")
    p = run.start()
    assert p.returncode == 0, p.stderr
    assert run.runs() == [f"runner.resume_dir={five}"]
    assert (f"skipping {six}: incomplete, actor/full_weights.pt: not a complete zip archive" in p.stderr
            and "the write was cut short" in p.stderr), p.stderr
    assert f"resuming from {five}" in p.stderr
    # A torn DCP metadata file is skipped the same way.
    seven = run.step(7)
    tear(Path(seven) / "actor/.metadata")
    q = run.start()
    assert f"skipping {seven}: incomplete, actor/.metadata: not a complete pickle" in q.stderr
    assert run.runs()[-1] == f"runner.resume_dir={five}"


def test_another_jobs_starts_do_not_refuse_the_first_start_of_a_new_job(tmp_path):
    """A run that ended (BackoffLimitExceeded, a refused start) leaves its trailing starts from the
    same step; the next Job on the same checkpoint directory counts only its own."""
    run = Run(tmp_path, limit="2")
    step = run.step(5)
    for _ in range(3):
        assert run.start(RESUME_LEDGER_SCOPE="uid-old").returncode == 0
    assert run.start(RESUME_LEDGER_SCOPE="uid-old").returncode == 10  # the old Job's bound held
    p = run.start(RESUME_LEDGER_SCOPE="uid-new")
    assert p.returncode == 0, p.stderr
    assert f"start 1 in a row of Job uid-new from {step}" in p.stderr
    assert [e["job"] for e in run.entries()] == ["uid-old"] * 3 + ["uid-new"]
    # The new Job's own bound still holds: two more starts, then refused, naming only its starts.
    assert [run.start(RESUME_LEDGER_SCOPE="uid-new").returncode for _ in range(3)] == [0, 0, 10]
    # Without a scope (a StatefulSet's pod, an older pod spec) every entry counts, as before.
    assert run.start().returncode == 10


def test_record_stall_counts_an_attempt_that_never_trained_against_the_same_bound(tmp_path):
    """The Ray launcher's head, when its nodes did not come within RAY_NODE_WAIT_SECONDS (exit 3):
    waiting for nodes that never come is bounded like restarting without progress."""
    run = Run(tmp_path, limit="2")
    step = run.step(5)
    assert run.start(RESUME_LEDGER_SCOPE="uid-1").returncode == 0
    first = run.record_stall("nodes: 1 of 2 within 2400 s", RESUME_LEDGER_SCOPE="uid-1")
    assert first.returncode == 0, first.stderr
    assert "attempt (nodes: 1 of 2 within 2400 s) 2 in a row of Job uid-1" in first.stderr
    assert run.record_stall(RESUME_LEDGER_SCOPE="uid-1").returncode == 0
    refused = run.record_stall(RESUME_LEDGER_SCOPE="uid-1")
    assert refused.returncode == resume_wrapper.EXIT_NO_PROGRESS, refused.stderr
    assert f"already started 3 times in a row from step {step}" in refused.stderr
    assert "(nodes: 1 of 2 within 2400 s)" in refused.stderr and "(nodes did not come)" in refused.stderr
    assert [e.get("kind") for e in run.entries()] == [None, "nodes: 1 of 2 within 2400 s", "nodes did not come"]
    assert len(run.runs()) == 1  # a recorded stall trains nothing
    # The next start of that Job is refused as well: the stalls counted.
    assert run.start(RESUME_LEDGER_SCOPE="uid-1").returncode == 10


def test_record_stall_without_a_ledger_does_nothing_and_bad_usage_is_2(tmp_path):
    plain = Run(tmp_path, ledger=False)
    assert plain.record_stall().returncode == 0
    assert not (tmp_path / "ckpt" / ".rltrain").exists()
    p = subprocess.run([sys.executable, str(WRAPPER), "--record-stall"], env=plain.env, text=True,
                       capture_output=True, timeout=60)
    assert p.returncode == resume_wrapper.EXIT_USAGE and "--record-stall <why>" in p.stderr
