"""components/scripts/embodied_eval.py as a program: RLinf-layout steps in a temporary directory and
a stand-in for RLinf's evaluations/eval_embodied_agent.py that checks its command line and prints
the metrics line EmbodiedEvalRunner.run logs (a dict of numpy 0-d arrays)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from checkpoint_files import tear, write_step

from components.scripts import embodied_eval, eval_metrics
from components.stack import trainers

SCRIPT = Path(__file__).resolve().parents[2] / "components" / "scripts" / "embodied_eval.py"
MARKS = trainers.RLINF.resume.complete_marks
# RLinf's logger.info(eval_metrics) of rlinf/runners/embodied_eval_runner.py: the values are
# compute_evaluate_metrics' numpy means, printed with their repr.
LOGGED = ("[INFO] {'eval/success_once': array(0.6875, dtype=float32), 'eval/return': array(1.25, dtype=float32), "
          "'eval/episode_len': array(80., dtype=float32), 'eval/num_trajectories': 16}")
STANDIN = textwrap.dedent('''\
    import json, os, sys
    args = sys.argv[1:]
    with open(os.environ["STANDIN_ARGS"], "w") as f:
        json.dump({"argv": args, "cwd": os.getcwd(), "EMBODIED_PATH": os.environ.get("EMBODIED_PATH"),
                   "PYTHONPATH": os.environ.get("PYTHONPATH"), "MUJOCO_GL": os.environ.get("MUJOCO_GL")}, f)
    print("starting the env and rollout groups")
    mode = os.environ.get("STANDIN_MODE", "ok")
    if mode == "crash":
        sys.exit(1)
    if mode == "ok":
        print(os.environ["STANDIN_LINE"])
    ''')


def rlinf(tmp: Path) -> Path:
    repo = tmp / "RLinf"
    (repo / "evaluations").mkdir(parents=True)
    (repo / "examples/embodiment/config").mkdir(parents=True)
    (repo / embodied_eval.ENTRY).write_text(STANDIN)
    return repo


def make_step(root: Path, n: int, complete: bool = True) -> Path:
    d = root / f"global_step_{n}"
    (d / "actor").mkdir(parents=True)
    return write_step(d, MARKS if complete else MARKS[:1], n)


def run(tmp: Path, *extra: str, mode: str = "ok", line: str = LOGGED) -> subprocess.CompletedProcess:
    env = {"PATH": "/usr/bin:/bin", "STANDIN_ARGS": str(tmp / "args.json"), "STANDIN_MODE": mode, "STANDIN_LINE": line}
    return subprocess.run([sys.executable, str(SCRIPT), "--steps-dir", str(tmp / "ckpt"), "--prefix", "global_step_",
                           "--marks", ",".join(MARKS), "--out-dir", str(tmp / "eval"),
                           "--config-name", "maniskill_ppo_openvlaoft", "--rlinf-repo", str(rlinf_dir(tmp)), *extra],
                          capture_output=True, text=True, timeout=60, env=env)


def rlinf_dir(tmp: Path) -> Path:
    return tmp / "RLinf" if (tmp / "RLinf").exists() else rlinf(tmp)


def results(tmp: Path) -> list[dict]:
    return [json.loads(p.read_text())["summary"] for p in sorted((tmp / "eval").glob("eval-step-*.json"))]


def test_newest_complete_step_evaluated_with_rlinf_entry_and_success_rate_written(tmp_path):
    make_step(tmp_path / "ckpt", 40)
    make_step(tmp_path / "ckpt", 80)
    make_step(tmp_path / "ckpt", 120, complete=False)  # being written: never evaluated
    r = run(tmp_path, "--", "cluster.num_nodes=1", "env.eval.total_num_envs=16")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "EVAL DONE: step 80, success rate 68.75% over 16 episodes" in r.stdout
    [s] = results(tmp_path)
    assert (s["step"], s["scoring"], s["success_rate"], s["episodes"]) == (80, "embodied", 0.6875, 16)
    assert s["metrics"]["eval/return"] == 1.25
    a = json.loads((tmp_path / "args.json").read_text())
    repo = str(tmp_path / "RLinf")
    weights = str(tmp_path / "ckpt/global_step_80/actor/model_state_dict/full_weights.pt")
    assert a["argv"][:4] == ["--config-path", f"{repo}/examples/embodiment/config", "--config-name",
                             "maniskill_ppo_openvlaoft"]
    assert a["argv"][5:] == ["runner.only_eval=True", f"runner.ckpt_path={weights}", "cluster.num_nodes=1",
                             "env.eval.total_num_envs=16"]
    assert a["argv"][4].startswith(f"runner.logger.log_path={tmp_path}/eval/embodied/step-80-")
    # What evaluations/run_eval.sh sets up for RLinf
    assert (a["cwd"], a["EMBODIED_PATH"], a["PYTHONPATH"], a["MUJOCO_GL"]) == (
        repo, f"{repo}/examples/embodiment", repo, "osmesa")
    # RLinf's output kept on the volume beside the result
    assert LOGGED in (Path(s["log_dir"]) / "eval.log").read_text()
    # The metrics exporter serves it as the success rate of step 80
    text = eval_metrics.render(str(tmp_path / "eval"), "exp")
    assert 'rltrain_eval_success_rate{model="exp",step="80",scoring="embodied"} 0.6875' in text
    assert 'rltrain_eval_episodes{model="exp",step="80",scoring="embodied"} 16' in text
    assert "rltrain_eval_accuracy{" not in text


def test_a_step_evaluated_already_is_not_evaluated_again(tmp_path):
    make_step(tmp_path / "ckpt", 40)
    assert run(tmp_path).returncode == 0
    (tmp_path / "args.json").unlink()
    r = run(tmp_path)
    assert r.returncode == 0 and "step 40 is already evaluated" in r.stdout
    assert not (tmp_path / "args.json").exists() and len(results(tmp_path)) == 1


def test_the_configured_step_must_be_complete(tmp_path):
    make_step(tmp_path / "ckpt", 40)
    make_step(tmp_path / "ckpt", 80, complete=False)
    r = run(tmp_path, "--step", "80")
    assert r.returncode == embodied_eval.EXIT_NO_STEP
    assert "step 80 is not complete" in r.stdout and "full_weights.pt" in r.stdout
    assert run(tmp_path, "--step", "40").returncode == 0 and results(tmp_path)[0]["step"] == 40


def test_a_torn_newest_step_is_skipped_and_the_previous_one_evaluated(tmp_path):
    make_step(tmp_path / "ckpt", 40)
    tear(make_step(tmp_path / "ckpt", 80) / "actor/model_state_dict/full_weights.pt")
    r = run(tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "EVAL DONE: step 40" in r.stdout
    assert "global_step_80: incomplete, actor/model_state_dict/full_weights.pt: not a complete zip archive" in r.stdout


def test_no_complete_step_is_refused(tmp_path):
    make_step(tmp_path / "ckpt", 40, complete=False)
    r = run(tmp_path)
    assert r.returncode == embodied_eval.EXIT_NO_STEP and "no complete step" in r.stdout
    assert not (tmp_path / "eval").exists() or not results(tmp_path)


def test_rlinf_failing_or_printing_no_success_rate_writes_no_result(tmp_path):
    make_step(tmp_path / "ckpt", 40)
    r = run(tmp_path, mode="crash")
    assert r.returncode == embodied_eval.EXIT_EVAL and "exit code 1" in r.stdout and "eval.log" in r.stdout
    r = run(tmp_path, mode="silent")
    assert r.returncode == embodied_eval.EXIT_EVAL and "no eval/success_once" in r.stdout
    assert results(tmp_path) == []


def test_metrics_line_forms():
    assert embodied_eval.parse_metrics(LOGGED)["eval/success_once"] == 0.6875
    # numpy 2 scalar repr and a plain float
    assert embodied_eval.parse_metrics("{'eval/success_once': np.float32(0.5), 'eval/num_trajectories': 8}") == {
        "eval/success_once": 0.5, "eval/num_trajectories": 8.0}
    assert embodied_eval.parse_metrics("{'eval/success_once': 1.0}")["eval/success_once"] == 1.0
    # the last line wins (a second evaluation epoch's summary)
    two = LOGGED + "\n" + LOGGED.replace("0.6875", "0.75")
    assert embodied_eval.parse_metrics(two)["eval/success_once"] == 0.75
    assert embodied_eval.parse_metrics("eval/return only") == {}
