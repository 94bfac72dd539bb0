"""The embodied family's evaluation (issue 29): RLinf's own evaluation of a checkpoint in the
simulator as a GPU Job through the Kueue queue, its refusals, and its success rate as a metric and
a dashboard panel - through config and the mock engine."""

from __future__ import annotations

from test_validate import problems, section
from test_workloads_components import _render, container, env, find

from components.k8s import dashboards, monitoring
from components.stack import trainers
from components.workloads import embodied_eval, runs

EVAL = {"embodiedEvaluation": {"enabled": True, "step": 400}}
NAME = "rltrain-embodied-eval-step-400"


def args_of(doc) -> list[str]:
    return container(doc)["command"]


def test_the_job_runs_rlinf_evaluation_of_the_step_queued_below_training():
    cfg, _, docs = _render("p5", lambda w: w.update(EVAL))
    job = find(docs, "Job", NAME)
    # Through the queue: Kueue's label, suspended until admitted; below training, never preempting.
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
    spec = job["spec"]["template"]["spec"]
    cls = find(docs, "PriorityClass", spec["priorityClassName"])
    train = find(docs, "PriorityClass", find(docs, "Job", "rltrain-training")["spec"]["template"]["spec"]["priorityClassName"])
    assert cls["value"] == train["value"] - runs.EVALUATION_PRIORITY_BELOW and cls["preemptionPolicy"] == "Never"
    # The config's env and rollout ranks (env 0-3, rollout 4-7): the p5 node's 8 GPUs, no EFA.
    r = container(job)["resources"]
    assert str(r["limits"]["nvidia.com/gpu"]) == "8" and "vpc.amazonaws.com/efa" not in r["limits"]
    cmd = args_of(job)
    assert cmd[:2] == ["python3", "/scripts/embodied_eval.py"]
    ckpt = env(container(find(docs, "Job", "rltrain-training")))["CKPT_PATH"]
    assert f"--steps-dir={ckpt}/maniskill-openvlaoft-ppo/maniskill_ppo_openvlaoft/checkpoints" in cmd
    assert "--step=400" in cmd and f"--out-dir={ckpt}/eval" in cmd
    assert "--config-name=maniskill_ppo_openvlaoft" in cmd and f"--rlinf-repo={trainers.RLINF_REPO}" in cmd
    hydra = cmd[cmd.index("--") + 1:]
    # The training run's model and overrides (run_training_eks.sh model paths, the LoRA path).
    assert "actor.model.model_path=/fsx/models/RLinf-OpenVLAOFT-ManiSkill-Base-Main" in hydra
    assert "rollout.model.model_path=/fsx/models/RLinf-OpenVLAOFT-ManiSkill-Base-Main" in hydra
    assert "actor.model.lora_path=/fsx/models/RLinf-OpenVLAOFT-ManiSkill-Base-Lora" in hydra
    assert "cluster.num_nodes=1" in hydra
    e = env(container(job))
    assert e["PATH"].startswith("/opt/venv/openvla-oft/bin:") and e["MANISKILL_ASSET_DIR"] == "/fsx/assets/maniskill"
    assert e["HF_HUB_OFFLINE"] == "1" and "HF_TOKEN" not in e
    # Refusals fail at once; a disruption is free.
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert rules[0]["action"] == "Ignore"
    assert sorted(rules[1]["onExitCodes"]["values"]) == [2, 4, 5] and rules[1]["action"] == "FailJob"
    assert job["metadata"]["annotations"]["pulumi.com/waitFor"]  # `up` waits only for it to exist
    # Nothing in or out
    pol = find(docs, "NetworkPolicy", NAME)["spec"]
    assert pol["policyTypes"] == ["Ingress", "Egress"] and not pol.get("ingress") and not pol.get("egress")
    # Its results served as metrics from the run's eval directory, scraped by the PodMonitor.
    metrics = find(docs, "Deployment", "rltrain-eval-metrics")
    assert f"--eval-dir={ckpt}/eval" in container(metrics, "eval-metrics")["args"]
    # (the monitoring stack's PodMonitor of it and the Evaluation dashboard: k8s/monitoring.py)
    assert monitoring.monitoring_args(cfg).embodied_evaluation


def test_on_a_4_gpu_node_the_placement_is_scaled_and_the_job_takes_the_node():
    _, _, docs = _render("dev", lambda w: w.update(EVAL))
    job = find(docs, "Job", NAME)
    hydra = args_of(job)[args_of(job).index("--") + 1:]
    assert {"cluster.component_placement.env=0-1", "cluster.component_placement.rollout=2-3"} <= set(hydra)
    assert str(container(job)["resources"]["limits"]["nvidia.com/gpu"]) == "4"


def test_quickstart_config_takes_its_own_gpu_count_and_newest_step_by_default():
    _, _, docs = _render("p5", lambda w: w.update(configName="maniskill_ppo_openvlaoft_quickstart",
                                                  multiNode={"enabled": False}, embodiedEvaluation={"enabled": True, "overrides": ["env.eval.total_num_envs=64"]}))
    job = find(docs, "Job", "rltrain-embodied-eval-newest")
    assert str(container(job)["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    cmd = args_of(job)
    assert not [a for a in cmd if a.startswith("--step=")] and cmd[-1] == "env.eval.total_num_envs=64"


def test_off_by_default_nothing_rendered():
    _, _, docs = _render("p5")
    assert not [d for d in docs if d["metadata"]["name"].startswith("rltrain-embodied-eval")]
    assert not [d for d in docs if d["kind"] == "PriorityClass" and "embodied" in d["metadata"]["name"]]


def test_reasoning_family_is_refused_naming_the_math_evaluation(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(trainer="rlinf-reasoning", **EVAL), tmp_path)
    msg = p["rltrain:workloads.embodiedEvaluation.enabled"]
    assert "embodied trainer profile (rlinf)" in msg and "workloads.serving.evaluation" in msg


def test_no_trainer_is_refused(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(trainer="none", **EVAL), tmp_path)
    assert "needs an embodied trainer profile" in p["rltrain:workloads.embodiedEvaluation.enabled"]


def test_a_step_the_config_never_saves_is_refused(tmp_path):
    # maniskill_ppo_openvlaoft: save_interval 40, max_epochs 1000 (trainers.py _OFT_SAVES)
    p, _ = problems(lambda c: section(c, "workloads").update(embodiedEvaluation={"enabled": True, "step": 410}), tmp_path)
    assert "not a step maniskill_ppo_openvlaoft saves" in p["rltrain:workloads.embodiedEvaluation.step"]
    assert "nearest: 400 or 440" in p["rltrain:workloads.embodiedEvaluation.step"]
    p, _ = problems(lambda c: section(c, "workloads").update(embodiedEvaluation={"enabled": True, "step": 1200}), tmp_path)
    assert "after the last step of maniskill_ppo_openvlaoft (1000)" in p["rltrain:workloads.embodiedEvaluation.step"]


def test_a_run_the_stack_does_not_train_is_refused(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(
        embodiedEvaluation={"enabled": True, "step": 400, "run": "multi-node"}, multiNode={"enabled": False}), tmp_path)
    assert "multi-node run is not enabled" in p["rltrain:workloads.embodiedEvaluation.run"]


def test_summary_and_dashboard():
    cfg, _, _ = _render("p5", lambda w: w.update(EVAL))
    [line] = embodied_eval.summary(cfg)
    assert f"Job {NAME} (queued, 8 GPU)" in line and "evaluations/eval_embodied_agent.py" in line
    assert "eval/success_once" in line
    board = dashboards.evaluation_board("rltrain")
    exprs = [q.expr for row in board.rows for p in row[1] for q in p.queries]
    assert any("rltrain_eval_success_rate" in e for e in exprs)
    uids = [b.uid for b in dashboards.all_dashboards("rltrain", embodied_evaluation=True)]
    assert "rltrain-evaluation" in uids and "rltrain-evaluation" not in [b.uid for b in dashboards.all_dashboards("rltrain")]
