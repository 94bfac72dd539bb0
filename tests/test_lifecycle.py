"""The trained policy's life (issue 29): the reasoning trainer profile, the volume budget, the
retention CronJob and HF_ENDPOINT of staging - through config and the mock engine."""

from __future__ import annotations

import dataclasses
import json

from test_validate import problems, section
from test_workloads_components import _render, container, env, find

from components.stack import config, trainers, volume_budget
from components.workloads import retention

R = trainers.RLINF_REASONING
REASONING = {"trainer": "rlinf-reasoning"}


def test_reasoning_profile_defaults_its_own_config_command_and_experiment():
    w = config.WorkloadsConfig.model_validate({"image": "repo/rlinf:reason-1", **REASONING})
    assert w.config_name == "qwen2.5-1.5b-grpo-fsdp" and w.venv_name == "reason"
    assert w.model_path == "/fsx/models/DeepSeek-R1-Distill-Qwen-1.5B"
    assert w.command[:2] == ("bash", "-c") and "examples/reasoning/main_grpo.py" in w.command[2]
    assert w.experiment_name == "math-grpo"
    # the embodied profile stays the default
    d = config.WorkloadsConfig.model_validate({"image": "repo/rlinf:1"})
    assert d.trainer == "rlinf" and d.config_name == "maniskill_ppo_openvlaoft"
    assert d.command == ("bash", "/workspace/eks/scripts/run_training_eks.sh")


def test_unknown_trainer_lists_both_profiles(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(trainer="verl"), tmp_path)
    assert "known: rlinf, rlinf-reasoning, none" in p["rltrain:workloads.trainer"]


def test_embodied_config_name_under_reasoning_is_refused_listing_its_configs(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(trainer="rlinf-reasoning",
                                                            configName="maniskill_ppo_openvlaoft"), tmp_path)
    assert "known: qwen2.5-1.5b-grpo-fsdp" in p["rltrain:workloads.configName"]


def test_reasoning_runs_on_two_dev_nodes_with_its_venv_staging_and_resume_marks():
    cfg, _, docs = _render("dev", lambda w: w.update(REASONING))
    multi = env(container(find(docs, "Job", "rltrain-multinode")))
    single = env(container(find(docs, "Job", "rltrain-training")))
    for e in (single, multi):
        assert e["PATH"].startswith("/opt/venv/reason/bin:") and e["VIRTUAL_ENV"] == "/opt/venv/reason"
        assert e["CONFIG_NAME"] == "qwen2.5-1.5b-grpo-fsdp"
        assert e["RESUME_COMPLETE_MARKS"] == ("actor/dcp_checkpoint/.metadata,"
                                              "actor/model_state_dict/full_weights.pt,data/data.pt")
        assert e["RESUME_STEPS_DIR"] == f"{e['CKPT_PATH']}/grpo-1.5b/checkpoints"
        words = e["HYDRA_OVERRIDES"].split()
        assert "actor.model.model_path=/fsx/models/DeepSeek-R1-Distill-Qwen-1.5B" in words
        assert "data.train_data_paths=[/fsx/datasets/boba/AReaL-boba-106k.jsonl]" in words
    assert "cluster.num_nodes=2" in multi["HYDRA_OVERRIDES"].split()
    assert "cluster.num_nodes=1" in single["HYDRA_OVERRIDES"].split()
    staging = env(container(find(docs, "Job", "rltrain-staging")))
    assert [i["source"] for i in json.loads(staging["STAGE_ITEMS"])] == [
        "hf:deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "hf-dataset:inclusionAI/AReaL-boba-Data"]


def test_staging_sets_hf_endpoint_explicitly():
    _, _, docs = _render("p5")
    assert env(container(find(docs, "Job", "rltrain-staging")))["HF_ENDPOINT"] == "https://huggingface.co"
    _, _, docs = _render("p5", lambda w: w.update(staging={"hfEndpoint": "https://hub.internal.example"}))
    assert env(container(find(docs, "Job", "rltrain-staging")))["HF_ENDPOINT"] == "https://hub.internal.example"


# ---------------------------------------------------------------------------------------------
# checkpoint sizes and the volume budget


def test_checkpoint_size_is_derived_from_the_model_and_what_rlinf_saves():
    tc = R.configs["qwen2.5-1.5b-grpo-fsdp"]
    # fp32 parameters: DCP = parameters + two Adam moments (12 B), full_weights.pt 4 B
    assert tc.saves.checkpoint_gib(tc.model) == tc.model.params * 16 / 2**30
    oft = trainers.RLINF.configs["maniskill_ppo_openvlaoft"]
    # bf16 LoRA: the moments only for the adapters
    assert round(oft.saves.checkpoint_gib(oft.model), 1) == 28.4


def test_over_full_volume_refused_with_the_numbers_and_the_fix(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(checkpoints={"keep": 40}), tmp_path, stack="p4de")
    msg = p["rltrain:workloads.checkpoints.keep"]
    assert "(40 + 1) checkpoints per run (28.4 GiB each, saved every 40 steps" in msg
    assert "> 2,160 GiB usable of the 2400 GiB FSx" in msg
    assert "rltrain:storage.fsx.storageCapacityGiB: 2400" not in msg  # the fix is a larger file system
    assert "rltrain:storage.fsx.storageCapacityGiB: 4800" in msg and "rltrain:workloads.checkpoints.keep: 36" in msg


def test_the_default_stacks_fit_and_the_summary_prints_each_run_budget():
    cfg, _, _ = _render("p4de")
    b = volume_budget.budget(cfg)
    assert b is not None and b.fits and b.keep == 3
    lines = volume_budget.lines(cfg)
    assert lines[0] == "checkpoint budget single-node: (3 kept + 1 being written) x 28.4 GiB = 113.6 GiB"
    assert lines[1].startswith("checkpoint budget multi-node:")
    assert lines[-1].endswith("fits")


def test_no_retention_no_budget_and_said_so():
    cfg, _, docs = _render("p4de", lambda w: w.update(checkpoints={"enabled": False}))
    assert volume_budget.budget(cfg) is None
    assert "nothing prunes checkpoints" in volume_budget.lines(cfg)[0]
    assert not [d for d in docs if d["kind"] == "CronJob"]


def test_retention_cronjob_prunes_every_run_and_protects_the_served_step():
    cfg, _, docs = _render("p5")
    cj = find(docs, "CronJob", retention.NAME)
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cj["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    args = c["args"]
    dirs = [a.split("=", 1)[1] for a in args if a.startswith("--steps-dir=")]
    assert dirs == list(retention.steps_dirs(cfg).values()) and len(dirs) == 2
    assert "--keep=3" in args and "--prefix=global_step_" in args
    assert "--marks=actor/dcp_checkpoint/.metadata,actor/model_state_dict/full_weights.pt" in args


# ---------------------------------------------------------------------------------------------
# export, then serve


def _serving(**model):
    return {"validation": {"enabled": False},
            "serving": {"enabled": True, "gpusPerReplica": 2, "model": {"run": "single-node", "step": 200, **model}}}


def test_serving_an_embodied_policy_is_refused_naming_what_vllm_serves(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(_serving()), tmp_path)
    msg = p["rltrain:workloads.serving.model.run"]
    assert "OpenVLAForActionPrediction (embodied family), which vLLM does not serve" in msg
    assert "servable: rlinf-reasoning qwen2.5-1.5b-grpo-fsdp (Qwen2ForCausalLM)" in msg


def test_a_step_the_config_never_saves_is_refused(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update({**REASONING, **_serving(step=220)}), tmp_path)
    assert "runner.save_interval 50" in p["rltrain:workloads.serving.model.step"]
    assert "nearest: 200 or 250" in p["rltrain:workloads.serving.model.step"]


def test_a_step_after_the_configs_last_is_refused(tmp_path, monkeypatch):
    # The embodied config's last step is 1000 (max_epochs 1000): the docs' old example served 1200.
    assert trainers.RLINF.configs["maniskill_ppo_openvlaoft"].saves.last_step == 1000
    # The reasoning config's last step depends on its data set (None); give it one to check the rule.
    tc = R.configs["qwen2.5-1.5b-grpo-fsdp"]
    capped = dataclasses.replace(tc, saves=dataclasses.replace(tc.saves, last_step=1000))
    monkeypatch.setitem(trainers.PROFILES, R.name, dataclasses.replace(R, configs={"qwen2.5-1.5b-grpo-fsdp": capped}))
    p, _ = problems(lambda c: section(c, "workloads").update({**REASONING, **_serving(step=1200)}), tmp_path)
    assert "1200 is after the last step of qwen2.5-1.5b-grpo-fsdp (1000)" in p["rltrain:workloads.serving.model.step"]


def test_tensor_parallel_not_dividing_the_heads_is_refused(tmp_path):
    def edit(c):
        section(c, "workloads").update({**REASONING, **_serving()})
        section(c, "workloads")["serving"]["gpusPerReplica"] = 8
    p, _ = problems(edit, tmp_path)
    assert "does not divide the 12 attention heads" in p["rltrain:workloads.serving.gpusPerReplica"]
    assert "allowed: 1, 2, 4" in p["rltrain:workloads.serving.gpusPerReplica"]


def test_a_max_length_whose_kv_cache_does_not_fit_the_gpu_is_refused(tmp_path):
    def edit(c):
        section(c, "workloads").update({**REASONING, **_serving()})
        section(c, "workloads")["serving"].update(gpusPerReplica=1, maxModelLen=2_000_000)
    p, _ = problems(edit, tmp_path, stack="dev")
    msg = p["rltrain:workloads.serving.maxModelLen"]
    assert "2000000 tokens" in msg and "per GPU" in msg and "24 GiB" in msg


def test_dev_reasoning_serving_exports_then_serves_the_export():
    cfg, _, docs = _render("dev", lambda w: w.update({**REASONING, **_serving(), "multiNode": {"enabled": False}}))
    from components.workloads import export, serving
    job = find(docs, "Job", "rltrain-export-step-200")
    assert job["metadata"]["annotations"]["pulumi.com/waitFor"] == "jsonpath={.metadata.uid}"
    spec = job["spec"]["template"]["spec"]
    [c] = spec["containers"]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    out = f"{cfg.workloads.serving and export.out_dir(cfg)}"
    assert out.startswith("/fsx/exports/") and out.endswith("/global_step_200")
    assert f"--out={out}" in c["args"] and "--step=200" in c["args"] and "--family=reasoning" in c["args"]
    assert "--base-model=/fsx/models/DeepSeek-R1-Distill-Qwen-1.5B" in c["args"]
    assert env(c)["PATH"].startswith("/opt/venv/reason/bin:")
    dep = find(docs, "Deployment", serving.NAME)
    assert dep["metadata"]["annotations"]["pulumi.com/waitFor"] == "jsonpath={.metadata.uid}"
    pod = dep["spec"]["template"]["spec"]
    [wait] = pod["initContainers"]
    assert wait["name"] == "wait-for-export"
    assert env(wait)["EXPORT_MARKER"] == f"{out}/.rltrain-export.json"
    assert env(wait)["EXPORT_JOB"] == "rltrain-export-step-200"
    server = pod["containers"][0]
    assert f"--model={out}" in server["args"]
    assert env(server)["VLLM_CACHE_ROOT"] == "/fsx/cache/vllm"


def test_wait_for_export_program_waits_bounded_and_names_the_marker(tmp_path):
    import subprocess
    import sys

    from components.workloads import serving
    marker = tmp_path / "exports" / "global_step_200" / ".rltrain-export.json"
    base = {"EXPORT_MARKER": str(marker), "EXPORT_JOB": "rltrain-export-step-200", "PATH": "/usr/bin:/bin"}
    r = subprocess.run([sys.executable, "-c", serving.WAIT_PROGRAM], env={**base, "EXPORT_WAIT_SECONDS": "0"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and str(marker) in r.stderr and "job/rltrain-export-step-200" in r.stderr
    marker.parent.mkdir(parents=True)
    marker.write_text("{}")
    r = subprocess.run([sys.executable, "-c", serving.WAIT_PROGRAM], env={**base, "EXPORT_WAIT_SECONDS": "5"},
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "found" in r.stdout


# ---------------------------------------------------------------------------------------------
# evaluation in the reasoning family's terms


def test_math_answers_are_extracted_like_rlincs_reward():
    from components.scripts._evaluate import answers
    assert answers.extract("so x = 5. \\boxed{5}") == "5"
    assert answers.extract("first \\boxed{3}, then \\boxed{\\frac{5}{6}}") == "\\frac{5}{6}"  # the last box
    assert answers.extract("The answer is 12") == "12"
    assert answers.extract("it is 12") is None  # no last-number fallback (use_last_number=False)
    assert answers.extract("\\boxed{\\frac{1}{2") is None  # cut off inside the box
    assert answers.correct("$\\boxed{\\dfrac{5}{6}}$.", "\\frac{5}{6}")[0]
    assert answers.correct("\\boxed{x = 5}", "5")[0]
    assert not answers.correct("\\boxed{6}", "5")[0]


class _MathServer(__import__("http.server").server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def _send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send({"data": [{"id": "math-grpo"}]})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        assert self.path == "/v1/chat/completions" and body["temperature"] == 0
        q = body["messages"][0]["content"]
        text = ("<think>17 plus 25</think> \\boxed{42}" if "17 + 25" in q else
                "The sum is \\boxed{\\dfrac{5}{6}}." if "1/2 + 1/3" in q else "I think 7, \\boxed{7}")
        self._send({"choices": [{"message": {"role": "assistant", "content": text}}], "usage": {"completion_tokens": 9}})


def test_reasoning_evaluation_scores_the_shipped_set_through_the_chat_api(tmp_path):
    import subprocess
    import sys
    import threading
    from http.server import ThreadingHTTPServer
    from pathlib import Path

    from components.scripts._evaluate import math_set
    script = Path(__file__).resolve().parents[1] / "components" / "scripts" / "evaluate.py"
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _MathServer)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        r = subprocess.run([sys.executable, str(script), f"--endpoint=http://127.0.0.1:{httpd.server_address[1]}",
                            "--model=math-grpo", "--prompts=builtin:math", f"--out-dir={tmp_path}", "--label=step-200",
                            "--scoring=math", "--chat", "--step=200"], capture_output=True, text=True, timeout=60)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert r.returncode == 0, r.stderr
    [out] = list(tmp_path.glob("eval-step-200-*.json"))
    s = json.loads(out.read_text())["summary"]
    assert (s["step"], s["scoring"], s["judged"], s["correct"]) == (200, "math", len(math_set.PROBLEMS), 2)


def test_the_evaluation_cronjob_of_a_reasoning_run_scores_math_with_the_step():
    _, _, docs = _render("p5", lambda w: w.update({**REASONING, "validation": {"enabled": False}, "ncclTest": {"enabled": False},
                                                  "serving": {"enabled": True, "gpusPerReplica": 4,
                                                              "model": {"run": "single-node", "step": 200},
                                                              "evaluation": {"enabled": True}}}))
    from components.workloads import evaluation
    c = find(docs, "CronJob", evaluation.NAME)["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    for arg in ("--prompts=builtin:math", "--scoring=math", "--step=200", "--max-tokens=4096", "--chat"):
        assert arg in c["args"], c["args"]


def test_eval_metrics_serve_the_newest_result_per_step(tmp_path):
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    for name, step, acc, mtime in (("eval-step-100-a.json", 100, 0.25, 1000), ("eval-step-100-b.json", 100, 0.3, 2000),
                                   ("eval-step-200-a.json", 200, 0.5, 3000)):
        f = tmp_path / name
        f.write_text(json.dumps({"summary": {"step": step, "accuracy": acc, "correct": int(acc * 20), "judged": 20,
                                             "scoring": "math"}}))
        os.utime(f, (mtime, mtime))
    (tmp_path / "eval-step-300-torn.json").write_text("{")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = Path(__file__).resolve().parents[1] / "components" / "scripts" / "eval_metrics.py"
    proc = subprocess.Popen([sys.executable, str(script), f"--eval-dir={tmp_path}", "--model=math-grpo",
                             f"--port={port}", "--host=127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for _ in range(100):
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise AssertionError("eval_metrics.py did not answer")
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0  # SIGTERM ends it (PID 1 in its pod)
    assert 'rltrain_eval_accuracy{model="math-grpo",step="100",scoring="math"} 0.3' in text
    assert 'rltrain_eval_accuracy{model="math-grpo",step="200",scoring="math"} 0.5' in text
    assert "rltrain_eval_unreadable_files 1" in text


def test_eval_metrics_deployment_and_podmonitor_beside_the_cronjob():
    from components.k8s import dashboards
    from components.workloads import evaluation
    from test_workloads_components import _render as render_
    _, _, docs = render_("p5", lambda w: w.update({**REASONING, "validation": {"enabled": False},
                                                   "ncclTest": {"enabled": False},
                                                   "serving": {"enabled": True, "gpusPerReplica": 4,
                                                               "model": {"run": "single-node", "step": 200},
                                                               "evaluation": {"enabled": True}}}))
    dep = find(docs, "Deployment", evaluation.METRICS_NAME)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert "nvidia.com/gpu" not in c["resources"]["limits"]
    board = dashboards.serving_board("rltrain", evaluation=True)
    assert any("rltrain_eval_accuracy" in q for q in board.queries())
    assert not any("rltrain_eval_accuracy" in q for q in dashboards.serving_board("rltrain").queries())


def test_the_served_run_budgets_one_more_checkpoint():
    cfg, _, _ = _render("dev", lambda w: w.update({**REASONING, **_serving(), "multiNode": {"enabled": False}}))
    b = volume_budget.budget(cfg)
    assert dict(b.runs)["single-node"] == 5 * b.checkpoint_gib  # 3 kept + 1 being written + 1 served
    assert volume_budget.lines(cfg)[0].startswith("checkpoint budget single-node: (3 kept + 1 being written + 1 served)")
