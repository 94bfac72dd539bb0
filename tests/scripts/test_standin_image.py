"""The rendered pod commands against a stand-in of the reference image's layout (issues 24, 20).

The stand-in: a virtual environment under <tmp>/opt/venv/openvla-oft/bin holding a fake `ray`,
`python3` (this interpreter) and the trainer stand-in (standin_rlinf.py behind a copy of the
reference's entry script), NOT on this test process's PATH. Each test takes a container's command
and env from the render, moves /opt/venv, /scripts and /workspace under <tmp>, and runs it: the
commands must find Ray and the trainer through the PATH the render sets, and say PATH when not.
The stand-in trainer has the reference script's checkpoint and resume interface, so the resume
tests run the rendered single-node command through real kills and restarts.
No real Ray is started (the real-Ray launcher tests are tests/scripts/test_ray_launcher.py).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from checkpoint_files import write_step
from support import rendered
from test_workloads_components import _render, container, find

from components.scripts import ray_launcher, resume_wrapper

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "components" / "scripts"
STANDIN = Path(__file__).resolve().parent / "standin_rlinf.py"
VENV = "/opt/venv/openvla-oft"
ENTRY = "/workspace/eks/scripts/run_training_eks.sh"


class Image:
    """The stand-in image under `root`: path rewriting and the fake tools."""

    def __init__(self, root: Path, *, with_venv: bool = True):
        self.root = root
        self.record = root / "ray-calls.txt"
        self.report = root / "trainer-report.txt"
        entry = root / ENTRY.lstrip("/")
        entry.parent.mkdir(parents=True)
        # The reference script's last line: python3 (the venv's, through PATH) runs the trainer.
        entry.write_text(f"#!/bin/bash\nset -euo pipefail\nexec python3 {STANDIN} \"$@\"\n")
        if with_venv:
            bin_ = root / VENV.lstrip("/") / "bin"
            bin_.mkdir(parents=True)
            (bin_ / "python3").symlink_to(sys.executable)
            ray = bin_ / "ray"
            ray.write_text("#!/bin/bash\n"
                           f"echo \"ray $* RLINF_NODE_RANK=${{RLINF_NODE_RANK:-unset}}\" >> {self.record}\n"
                           "exit 1\n")  # a `ray start` that fails: the caller's error path, no cluster
            ray.chmod(0o755)

    def path(self, value: str) -> str:
        """Image paths at the start of a value, a PATH entry or an override's value, moved."""
        def move(m: re.Match) -> str:
            where = f"{SCRIPTS}/" if m.group(2) == "/scripts/" else f"{self.root}{m.group(2)}"
            return m.group(1) + where
        return re.sub(r"(^|[:= ])(/opt/venv/|/workspace/|/fsx/|/scripts/)", move, value)

    def env(self, c: dict, **extra: str) -> dict[str, str]:
        out = {e["name"]: self.path(e["value"]) for e in c["env"] if isinstance(e.get("value"), str)}
        out.update({"HOME": str(self.root), "STANDIN_REPORT": str(self.report), **extra})
        return out

    def command(self, argv: list[str]) -> list[str]:
        return [self.path(a) for a in argv]


def _run(argv, env, timeout=60):
    return subprocess.run(argv, env=env, text=True, capture_output=True, timeout=timeout)


def test_the_path_the_render_sets_is_not_this_process_path():
    c = container(find(rendered("p5").manifests, "Job", "rltrain-multinode"))
    path = {e["name"]: e["value"] for e in c["env"] if "value" in e}["PATH"]
    assert path.split(":")[0] == f"{VENV}/bin"
    assert os.path.dirname(sys.executable) not in path.split(":")


def test_single_node_command_runs_the_trainer_with_the_venv_python(tmp_path):
    img = Image(tmp_path)
    c = container(find(rendered("p5").manifests, "Job", "rltrain-training"))
    env = img.env(c, STANDIN_LAST_STEP="2")
    p = _run(img.command(c["command"]), env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "finished at step 2" in p.stdout
    report = img.report.read_text()
    assert f"python={tmp_path}{VENV}/bin/python3" in report
    assert f"MANISKILL_ASSET_DIR={tmp_path}/fsx/assets/maniskill" in report


def test_launcher_head_finds_ray_through_the_rendered_path_and_exports_the_node_rank(tmp_path):
    img = Image(tmp_path)
    c = container(find(rendered("p5").manifests, "Job", "rltrain-multinode"))
    env = img.env(c, JOB_COMPLETION_INDEX="0")
    p = _run(img.command(c["command"]), env)
    # The fake `ray start` fails: the launcher found and ran it (exit 5, not 127).
    assert p.returncode == ray_launcher.EXIT_RAY_START_FAILED, p.stdout + p.stderr
    calls = img.record.read_text()
    assert "ray start --head --port=6379" in calls
    assert "--include-dashboard=true --dashboard-host=127.0.0.1" in calls
    assert "RLINF_NODE_RANK=0" in calls


def test_launcher_without_the_venv_fails_naming_path(tmp_path):
    img = Image(tmp_path, with_venv=False)
    c = container(find(rendered("p5").manifests, "Job", "rltrain-multinode"))
    env = img.env(c, JOB_COMPLETION_INDEX="0")
    # The launcher itself run by this interpreter: only `ray` is looked up.
    p = _run([sys.executable, str(SCRIPTS / "ray_launcher.py"), "--", "true"], env)
    assert p.returncode == ray_launcher.EXIT_NOT_FOUND
    assert f"the ray CLI is not on PATH={env['PATH']}" in p.stderr


def test_rayjob_head_init_container_and_entrypoint_find_ray_and_the_trainer(tmp_path):
    _, _, docs = _render("p5", lambda w: w.update(multiNode={"enabled": True, "form": "rayjob",
                                                              "rayVersion": "2.60.0"}))
    job = find(docs, "RayJob", "rltrain-multinode")
    cluster = job["spec"]["rayClusterSpec"]
    img = Image(tmp_path)
    head = cluster["headGroupSpec"]["template"]["spec"]["containers"][0]
    worker = cluster["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    # KubeRay's Ray container command (common/pod.go BuildPod: `ulimit -n 65536; ray start ...`
    # through bash -c) and its wait-gcs-ready init container (`ray health-check`, the Ray
    # container's env copied): both resolve `ray` through the env the render sets.
    _run(["/bin/bash", "-c", "ulimit -n 65536 2>/dev/null; ray start --head --port=6379 --block"], img.env(head))
    _run(["/bin/bash", "-c", "ray health-check --address rltrain-multinode-head-svc:6379"], img.env(worker))
    calls = img.record.read_text()
    assert "ray start --head --port=6379 --block" in calls and "ray health-check" in calls
    # The entrypoint the operator submits runs on the head with the head's env.
    env = img.env(head, STANDIN_LAST_STEP="1")
    p = _run(img.command(shlex.split(job["spec"]["entrypoint"])), env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"python={tmp_path}{VENV}/bin/python3" in img.report.read_text()


# ---------------------------------------------------------------------------------------------
# resume (issue 20): the rendered single-node command, killed and started again


def _start(img: Image, c: dict, **extra: str) -> subprocess.Popen:
    env = img.env(c, **extra)
    return subprocess.Popen(img.command(c["command"]), env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def test_killed_mid_save_the_next_attempt_resumes_from_the_newest_complete_step(tmp_path):
    r = rendered("p5")
    c = container(find(r.manifests, "Job", "rltrain-training"))
    img = Image(tmp_path / "image")
    env_values = {e["name"]: e["value"] for e in c["env"] if "value" in e}
    # Where the trainer writes its steps (the reference script's log path + RLinf's layout) is
    # where the wrapper looks: both derived from the rendered env.
    steps = Path(img.path(env_values["CKPT_PATH"])) / env_values["EXPERIMENT_NAME"] / env_values["CONFIG_NAME"] / "checkpoints"
    assert str(steps) == img.path(env_values["RESUME_STEPS_DIR"])

    first = _start(img, c, STANDIN_HANG_AT="4")
    deadline = time.monotonic() + 60
    while not (steps / "global_step_4/actor/dcp_checkpoint/.metadata").exists():
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.1)
    os.killpg(first.pid, signal.SIGKILL)  # the node died in the middle of writing step 4
    first.communicate()
    assert not (steps / "global_step_4/actor/model_state_dict/full_weights.pt").exists()

    second = _start(img, c)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 0, out + err
    assert f"skipping {steps}/global_step_4: incomplete" in err
    assert f"resuming from {steps}/global_step_3" in err
    assert "resume: from step 3" in out and "step 4 value=" in out and "step 1 value=" not in out

    fresh = _start(Image(tmp_path / "other-volume"), c)
    fresh_out, _ = fresh.communicate(timeout=60)
    assert "resume: fresh" in fresh_out
    final = [ln for ln in out.splitlines() if ln.startswith("finished at step 6")]
    assert final and final == [ln for ln in fresh_out.splitlines() if ln.startswith("finished at step 6")]


def test_the_rendered_command_refuses_the_restart_over_the_bound_from_the_same_step(tmp_path):
    """Issue 31: the rendered env bounds restarts from the same complete step (the ledger under the
    run's checkpoint directory, the bound = workloads.infrastructureRestarts)."""
    r = rendered("p5")
    c = container(find(r.manifests, "Job", "rltrain-training"))
    img = Image(tmp_path)
    bound = r.cfg.workloads.infrastructure_restarts
    env = img.env(c, STANDIN_LAST_STEP="2")
    first = _run(img.command(c["command"]), env)
    assert first.returncode == 0 and "resume: fresh" in first.stdout, first.stdout + first.stderr
    for _ in range(bound + 1):  # the first start from step 2, then `bound` restarts from it
        p = _run(img.command(c["command"]), env)
        assert p.returncode == 0 and "resume: from step 2" in p.stdout, p.stdout + p.stderr
    p = _run(img.command(c["command"]), env)
    assert p.returncode == resume_wrapper.EXIT_NO_PROGRESS, p.stdout + p.stderr
    assert "resume: from" not in p.stdout  # the trainer did not start
    ledger = env["RESUME_LEDGER"]  # the rendered path, moved under tmp_path
    assert ledger.startswith(str(tmp_path)) and f"delete {ledger}" in p.stderr
    assert f"started {bound + 1} times in a row from step " in p.stderr


def test_two_runs_never_share_a_checkpoint_directory():
    r = rendered("p5")
    dirs = []
    for name in ("rltrain-training", "rltrain-multinode"):
        c = container(find(r.manifests, "Job", name))
        dirs.append({e["name"]: e["value"] for e in c["env"] if "value" in e}["CKPT_PATH"])
    assert len(set(dirs)) == 2 and not dirs[0].startswith(dirs[1]) and not dirs[1].startswith(dirs[0])


def test_wrapper_refuses_missing_settings_naming_them(tmp_path):
    p = _run([sys.executable, str(SCRIPTS / "resume_wrapper.py"), "--", "true"], {"PATH": os.environ["PATH"]})
    assert p.returncode == 2 and "not set: RESUME_STEPS_DIR" in p.stderr
    env = {"PATH": str(tmp_path), "RESUME_STEPS_DIR": str(tmp_path), "RESUME_STEP_PREFIX": "global_step_",
           "RESUME_COMPLETE_MARKS": "a", "RESUME_ENV": "X", "RESUME_FORMAT": "r={step_dir}"}
    p = _run([sys.executable, str(SCRIPTS / "resume_wrapper.py"), "--", "no-such-trainer"], env)
    assert p.returncode == 127 and f"looked up on PATH={tmp_path}" in p.stderr


@pytest.mark.parametrize("marks,expected", [
    (("actor/dcp_checkpoint/.metadata", "actor/model_state_dict/full_weights.pt"), "global_step_2"),
    (("actor/dcp_checkpoint/.metadata",), "global_step_10"),
])
def test_newest_complete_orders_steps_numerically(tmp_path, marks, expected):
    sys.path.insert(0, str(SCRIPTS))
    try:
        import resume_wrapper
    finally:
        sys.path.remove(str(SCRIPTS))
    for n, files in ((2, marks), (10, ("actor/dcp_checkpoint/.metadata",)), (9, ())):
        write_step(tmp_path / f"global_step_{n}", files)
        (tmp_path / f"global_step_{n}").mkdir(exist_ok=True)
    found, _ = resume_wrapper.newest_complete(str(tmp_path), "global_step_", list(marks))
    assert found == str(tmp_path / expected)


def test_launcher_dashboard_and_node_rank_settings():
    base = {"NUM_NODES": "2", "JOB_COMPLETION_INDEX": "0", "RAY_HEAD_HOST": "run-0.svc"}
    cfg = ray_launcher.config.load_config(base)
    assert cfg.dashboard == "off" and cfg.node_rank_env is None
    assert "--include-dashboard=false" in ray_launcher.start.head_start_command(cfg)
    cfg = ray_launcher.config.load_config({**base, "RAY_DASHBOARD": "loopback", "NODE_RANK_ENV": "RLINF_NODE_RANK"})
    cmd = ray_launcher.start.head_start_command(cfg)
    assert cmd[-3:-1] == ["--include-dashboard=true", "--dashboard-host=127.0.0.1"]
    assert cfg.node_rank_env == "RLINF_NODE_RANK"
    with pytest.raises(ray_launcher.common.ConfigError, match="RAY_DASHBOARD='public'"):
        ray_launcher.config.load_config({**base, "RAY_DASHBOARD": "public"})
    with pytest.raises(ray_launcher.common.ConfigError, match="NODE_RANK_ENV='1X'"):
        ray_launcher.config.load_config({**base, "NODE_RANK_ENV": "1X"})
