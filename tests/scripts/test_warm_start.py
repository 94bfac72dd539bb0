"""The warm start (workloads.runs[].resumeFrom, issue 43) run as the pods run it:
python3 warm_start.py -- python3 resume_wrapper.py -- <trainer>, the two programs side by side as in
/scripts. The trainer here records the resume argument it was given."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from checkpoint_files import write_mark

from components.scripts import checkpoint_complete, resume_wrapper, warm_start

MARKS = ("actor/.metadata", "actor/full_weights.pt")
TRAINER = "import os, sys; open(sys.argv[1], 'a').write(os.environ.get('OVR', '') + '\\n')"


def _setup(tmp_path: Path):
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    for mod in (checkpoint_complete, resume_wrapper, warm_start):  # as the ConfigMaps mount them: one directory
        shutil.copy(mod.__file__, scripts / Path(mod.__file__).name)
    own = tmp_path / "own" / "checkpoints"
    other = tmp_path / "other" / "checkpoints"
    env = {"PATH": os.environ["PATH"], "RESUME_STEPS_DIR": str(own), "RESUME_STEP_PREFIX": "global_step_",
           "RESUME_COMPLETE_MARKS": ",".join(MARKS), "RESUME_ENV": "OVR", "OVR": "actor.optim.lr=2e-06",
           "RESUME_FORMAT": "runner.resume_dir={step_dir}", "RESUME_FROM": str(other / "global_step_100")}
    return scripts, own, other, env


def _step(steps: Path, n: int, complete: bool = True) -> str:
    d = steps / f"global_step_{n}"
    for mark in MARKS if complete else MARKS[:1]:
        write_mark(d / mark)  # in the format the completeness test reads (a torch.save zip, a pickle)
    return str(d)


def _start(scripts: Path, env: dict, ran: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(scripts / "warm_start.py"), "--", sys.executable,
                           str(scripts / "resume_wrapper.py"), "--", sys.executable, "-c", TRAINER, str(ran)],
                          env=env, text=True, capture_output=True, timeout=60)


def test_first_start_resumes_the_other_runs_step(tmp_path):
    scripts, own, other, env = _setup(tmp_path)
    warm = _step(other, 100)
    p = _start(scripts, env, tmp_path / "ran")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "ran").read_text().splitlines() == [f"actor.optim.lr=2e-06 runner.resume_dir={warm}"]
    assert f"warm start from {warm}" in p.stderr


def test_once_the_run_has_its_own_step_that_one_is_resumed(tmp_path):
    scripts, own, other, env = _setup(tmp_path)
    _step(other, 100)
    mine = _step(own, 150)
    p = _start(scripts, env, tmp_path / "ran")
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "ran").read_text().splitlines() == [f"actor.optim.lr=2e-06 runner.resume_dir={mine}"]


def test_an_incomplete_or_missing_step_is_refused_not_trained_from_scratch(tmp_path):
    scripts, own, other, env = _setup(tmp_path)
    _step(other, 100, complete=False)
    p = _start(scripts, env, tmp_path / "ran")
    assert p.returncode == warm_start.EXIT_USAGE == 2
    assert "is not a complete step (actor/full_weights.pt: missing)" in p.stderr
    assert not (tmp_path / "ran").exists()


def test_a_torn_step_of_the_other_run_is_refused(tmp_path):
    """The shared completeness test: a full_weights.pt cut short mid-write (torch.save writes in
    place) is not a step to start from, though every mark exists."""
    scripts, own, other, env = _setup(tmp_path)
    warm = Path(_step(other, 100))
    weights = warm / "actor/full_weights.pt"
    weights.write_bytes(weights.read_bytes()[:-200])
    p = _start(scripts, env, tmp_path / "ran")
    assert p.returncode == warm_start.EXIT_USAGE
    assert "actor/full_weights.pt" in p.stderr and "torn" in p.stderr
    assert not (tmp_path / "ran").exists()
    shutil.rmtree(other)
    p = _start(scripts, env, tmp_path / "ran")
    assert p.returncode == 2 and not (tmp_path / "ran").exists()
