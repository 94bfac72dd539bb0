"""The trained policy's life (issue 29): the reasoning trainer profile, the volume budget, the
retention CronJob and HF_ENDPOINT of staging - through config and the mock engine."""

from __future__ import annotations

import json

from test_refusals import problems, section
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
