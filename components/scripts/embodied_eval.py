#!/usr/bin/env python3
"""Evaluate an embodied checkpoint with RLinf's own evaluation in the simulator; write its success rate.

Runs in the embodied evaluation Job's pod (components/workloads/embodied_eval.py), a GPU Job queued
by Kueue, in the trainer image's venv (RLinf, the simulator, torch):

    python3 /scripts/embodied_eval.py --steps-dir DIR --prefix global_step_ \\
        --marks actor/dcp_checkpoint/.metadata,actor/model_state_dict/full_weights.pt \\
        [--step N] --out-dir /fsx/runs/EXP/ID/eval --config-name maniskill_ppo_openvlaoft \\
        [--rlinf-repo /workspace/RLinf] -- HYDRA_OVERRIDE ...

1. The step: `--step N` (complete, or refused: exit 4), else the newest complete step (none: exit 4).
   Complete is the shared test (components/scripts/checkpoint_complete.py, mounted beside this
   file): every mark loads; a newer torn step is skipped, named with the reason.
   A result file of that step already there: nothing to do (exit 0).
2. RLinf's evaluation entry (RLinf/RLinf@0505431899574619 evaluations/eval_embodied_agent.py, the
   program evaluations/run_eval.sh runs; for a ManiSkill config not under evaluations/maniskill
   run_eval.sh falls back to examples/embodiment/config, as here) with the training config's own
   `env.eval` section, the checkpoint's full state dict as `runner.ckpt_path` (the rollout worker
   torch.loads it into the policy: rlinf/workers/rollout/hf/huggingface_worker.py init_worker),
   `runner.only_eval=True`, and the log directory on the volume (`runner.logger.log_path`: RLinf's
   TensorBoard logs and the evaluation videos, env.eval.video_cfg). The environment run_eval.sh
   sets for it: PYTHONPATH = the repository, EMBODIED_PATH, HYDRA_FULL_ERROR, MUJOCO_GL and
   PYOPENGL_PLATFORM osmesa.
3. The metrics: RLinf's EmbodiedEvalRunner.run logs one dict of `eval/<key>` means over every
   episode (rlinf/runners/embodied_eval_runner.py, rlinf/utils/metric_utils.py
   compute_evaluate_metrics); `eval/success_once` is the success rate (RLinf
   docs/source-en/rst_source/evaluations/reference/results.rst "Terminal Metrics"), and
   `eval/num_trajectories` the episodes. The last such line of the output is read.
4. The result, as evaluate.py writes the math accuracy: `<out-dir>/eval-step-<N>-<UTC>.json`
   (temporary name, then renamed) with a summary {step, scoring "embodied", success_rate, episodes,
   metrics, config, checkpoint}; the eval-metrics exporter serves it as rltrain_eval_success_rate.

Exit codes: 0 evaluated (EVAL DONE) or already evaluated; 2 usage; 4 no complete step to evaluate;
5 RLinf's evaluation failed or printed no success rate (EVAL ERROR). Standard library only.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from typing import Optional, Sequence

# The shared completeness test, mounted beside this file (see resume_wrapper.py for the two ways in).
if __package__:
    from .checkpoint_complete import incomplete_reason, newest_complete
else:
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    from checkpoint_complete import incomplete_reason, newest_complete

EXIT_USAGE = 2
EXIT_NO_STEP = 4
EXIT_EVAL = 5
SCORING = "embodied"
SUCCESS_KEY = "eval/success_once"
EPISODES_KEY = "eval/num_trajectories"
ENTRY = "evaluations/eval_embodied_agent.py"
CONFIG_DIR = "examples/embodiment/config"
WEIGHTS = "actor/model_state_dict/full_weights.pt"
# One `'eval/<key>': <value>` of the logged dict; the value is a numpy 0-d array's repr
# (`array(0.75, dtype=float32)`), a numpy scalar's (`np.float32(0.75)`) or a plain number.
_METRIC = re.compile(r"'(eval/[^']+)':\s*(?:array\(|np\.\w+\()?\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))")


def say(message: str) -> None:
    print(f"[embodied-eval] {message}", flush=True)


def choose_step(steps_dir: str, prefix: str, marks: Sequence[str], step: Optional[int]) -> tuple[Optional[int], str]:
    """(step, its directory) or (None, why not)."""
    if step is not None:
        d = os.path.join(steps_dir, f"{prefix}{step}")
        why = incomplete_reason(d, marks) if os.path.isdir(d) else "no such directory"
        if why is None:
            return step, d
        return None, f"step {step} is not complete under {steps_dir} ({why}; marks: {', '.join(marks)})"
    path, skipped = newest_complete(steps_dir, prefix, marks)
    for torn, why in skipped:
        say(f"skipping {torn}: incomplete, {why}")
    if path is None:
        return None, f"no complete step under {steps_dir} yet (marks: {', '.join(marks)})"
    return int(os.path.basename(path)[len(prefix):]), path


def already(out_dir: str, step: int) -> Optional[str]:
    for path in sorted(glob.glob(os.path.join(glob.escape(out_dir), f"eval-step-{step}-*.json"))):
        try:
            with open(path, encoding="utf-8") as f:
                s = json.load(f)["summary"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if s.get("scoring") == SCORING and s.get("step") == step:
            return path
    return None


def parse_metrics(output: str) -> dict[str, float]:
    """The `eval/...` values of the last line of the output that has the success rate."""
    found: dict[str, float] = {}
    for line in output.splitlines():
        if f"'{SUCCESS_KEY}'" not in line:
            continue
        pairs = {k: float(v) for k, v in _METRIC.findall(line)}
        if SUCCESS_KEY in pairs:
            found = pairs
    return found


def command(repo: str, config: str, log_dir: str, weights: str, overrides: Sequence[str]) -> list[str]:
    return [sys.executable, os.path.join(repo, ENTRY), "--config-path", os.path.join(repo, CONFIG_DIR),
            "--config-name", config, f"runner.logger.log_path={log_dir}", "runner.only_eval=True",
            f"runner.ckpt_path={weights}", *overrides]


def environment(repo: str) -> dict[str, str]:
    """What evaluations/run_eval.sh exports for a simulator benchmark (setup_sim_env and its top)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = repo + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["EMBODIED_PATH"] = os.path.join(repo, "examples/embodiment")
    env["HYDRA_FULL_ERROR"] = "1"
    env.setdefault("MUJOCO_GL", "osmesa")
    env.setdefault("PYOPENGL_PLATFORM", "osmesa")
    return env


def run(cmd: Sequence[str], cwd: str, env: dict[str, str], log_path: str) -> tuple[int, str]:
    """Run RLinf, its output to our stdout and a log file on the volume; (exit code, output)."""
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    lines = []
    with open(log_path, "w", encoding="utf-8") as log:
        proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        assert proc.stdout is not None
        for line in proc.stdout:
            sys.stdout.write(line)
            log.write(line)
            lines.append(line)
        code = proc.wait()
    return code, "".join(lines)


def write_result(out_dir: str, step: int, summary: dict, now: Optional[float] = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"eval-step-{step}-{stamp}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"summary": summary}, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, overrides = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps-dir", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--marks", required=True)
    ap.add_argument("--step", type=int)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--config-name", required=True)
    ap.add_argument("--rlinf-repo", default="/workspace/RLinf")
    try:
        a = ap.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0
    marks = [m.strip() for m in a.marks.split(",") if m.strip()]
    if WEIGHTS not in marks:
        marks.append(WEIGHTS)
    step, where = choose_step(a.steps_dir, a.prefix, marks, a.step)
    if step is None:
        say(f"nothing evaluated: {where}")
        return EXIT_NO_STEP
    done = already(a.out_dir, step)
    if done:
        say(f"step {step} is already evaluated: {done}")
        return 0
    weights = os.path.join(where, WEIGHTS)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    log_dir = os.path.join(a.out_dir, "embodied", f"step-{step}-{stamp}")
    cmd = command(a.rlinf_repo, a.config_name, log_dir, weights, overrides)
    say(f"step {step}: {' '.join(cmd)}")
    t0 = time.monotonic()
    code, output = run(cmd, a.rlinf_repo, environment(a.rlinf_repo), os.path.join(log_dir, "eval.log"))
    metrics = parse_metrics(output)
    if code != 0 or SUCCESS_KEY not in metrics:
        why = f"exit code {code}" if code != 0 else f"no {SUCCESS_KEY} in its output"
        say(f"EVAL ERROR: RLinf's evaluation of {weights} failed ({why}); its log: {log_dir}/eval.log")
        return EXIT_EVAL
    episodes = metrics.get(EPISODES_KEY)
    summary = {"step": step, "scoring": SCORING, "success_rate": round(metrics[SUCCESS_KEY], 4),
               "episodes": int(episodes) if episodes is not None else None,
               "metrics": {k: v for k, v in sorted(metrics.items())}, "config": a.config_name,
               "checkpoint": weights, "log_dir": log_dir, "seconds": round(time.monotonic() - t0, 1),
               "overrides": list(overrides)}
    path = write_result(a.out_dir, step, summary)
    n = "?" if summary["episodes"] is None else summary["episodes"]
    say(f"EVAL DONE: step {step}, success rate {summary['success_rate']:.2%} over {n} episodes -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
