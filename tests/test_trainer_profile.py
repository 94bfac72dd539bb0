"""The trainer profile (components/stack/trainers.py) and what the render derives from it: known
configs, venvs and models; PATH on every Ray container; staging before training; placement over
every GPU; the summary's placement and resume lines (issues 24 and 20)."""

from __future__ import annotations

import json

import pytest
from support import rendered
from test_validate import problems, section
from test_workloads_components import _render, container, env, find

from components.offline import render, runs_summary, unset_secrets
from components.offline.mock_engine import run_program
from components.stack import trainers, validate
from components.workloads import env as env_mod

P = trainers.RLINF


# ---------------------------------------------------------------------------------------------
# the profile and config validation


def test_the_default_config_venv_and_model_exist_in_the_profile():
    cfg = rendered("p5").cfg
    w = cfg.workloads
    assert w.trainer == "rlinf" and w.config_name == "maniskill_ppo_openvlaoft"
    tc = P.configs[w.config_name]
    assert w.venv_name == tc.venv == "openvla-oft"
    assert w.model_path == tc.model_path == "/fsx/models/RLinf-OpenVLAOFT-ManiSkill-Base-Main"
    assert w.model_path in {P.stages[s].dest for s in tc.stages}


def test_every_profile_config_names_stages_that_exist():
    for name, tc in P.configs.items():
        assert set(tc.stages) <= set(P.stages), name
        assert tc.model_path in {P.stages[s].dest for s in tc.stages}, name
        assert P.default_config in P.configs


def test_unknown_config_is_refused_naming_the_known_ones(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(configName="maniskill_openvla_ppo"), tmp_path)
    msg = p["rltrain:workloads.configName"]
    assert "'maniskill_openvla_ppo' is not a config of trainer rlinf" in msg
    for known in P.configs:
        assert known in msg


def test_unknown_config_is_refused_before_any_resource():
    values, secret_keys, _ = unset_secrets.load_stack("p5")
    values = dict(values)
    w = json.loads(values["rltrain:workloads"])
    w["configName"] = "maniskill_openvla_ppo"
    values["rltrain:workloads"] = json.dumps(w)
    with pytest.raises(Exception) as e:
        run_program(stack="p5", config=values, secret_keys=secret_keys)
    assert "rltrain:workloads.configName" in str(e.value) and "maniskill_ppo_openvlaoft" in str(e.value)


def test_wrong_venv_and_model_are_refused(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(venvName="openvla", modelPath="/fsx/models/openvla-7b"),
                    tmp_path)
    assert "runs in the image's venv 'openvla-oft' (/opt/venv/openvla-oft/bin)" in p["rltrain:workloads.venvName"]
    assert "expected /fsx/models/RLinf-OpenVLAOFT-ManiSkill-Base-Main" in p["rltrain:workloads.modelPath"]


def test_a_config_with_one_placement_key_is_refused_for_multi_node(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(configName="maniskill_ppo_openvlaoft_quickstart"),
                    tmp_path)
    msg = p["rltrain:workloads.configName"]
    assert "one comma-joined key" in msg and "maniskill_ppo_openvla" in msg


def test_unknown_trainer_refused_and_program_env_owned_by_the_profile(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(trainer="verl"), tmp_path)
    assert "unknown trainer profile; known: rlinf, rlinf-reasoning, none" in p["rltrain:workloads.trainer"]
    p, _ = problems(lambda c: section(c, "workloads").update(env={"PATH": "/usr/bin", "HYDRA_OVERRIDES": "x=1"}),
                    tmp_path)
    assert "set by the program from trainer profile rlinf" in p["rltrain:workloads.env.PATH"]
    assert "rltrain:workloads.env.HYDRA_OVERRIDES" in p


# ---------------------------------------------------------------------------------------------
# placement


@pytest.mark.parametrize("nodes", [1, 2, 4])
def test_placement_covers_every_gpu_of_every_node(nodes):
    tc = P.configs["maniskill_ppo_openvlaoft"]
    ranks = trainers.placement(tc, nodes, 8)
    used = {r for rs in ranks.values() for a, b in rs for r in range(a, b + 1)}
    assert used == set(range(nodes * 8))
    assert ranks["actor"] == [(k * 8, k * 8 + 7) for k in range(nodes)]
    assert ranks["env"] == [(k * 8, k * 8 + 3) for k in range(nodes)]
    assert ranks["rollout"] == [(k * 8 + 4, k * 8 + 7) for k in range(nodes)]
    assert trainers.idle_nodes(ranks, nodes, 8) == []
    # The config's own placement on more than one node leaves every node but the first idle.
    own = {c: [r] for c, r in tc.placement.items()}
    assert trainers.idle_nodes(own, nodes, 8) == list(range(1, nodes))


def test_placement_overrides_for_four_nodes_scale_the_batches():
    tc = P.configs["maniskill_ppo_openvlaoft"]
    assert trainers.placement_overrides(tc, 4, 8) == [
        "cluster.component_placement.actor=0-31",
        "cluster.component_placement.env='0-3,8-11,16-19,24-27'",
        "cluster.component_placement.rollout='4-7,12-15,20-23,28-31'",
        "env.train.total_num_envs=512", "actor.global_batch_size=2560"]
    assert trainers.parse_placement("'0-3,8-11'") == [(0, 3), (8, 11)]


def test_placement_on_a_four_gpu_node():
    ranks = trainers.placement(P.configs["maniskill_ppo_openvlaoft"], 2, 4)
    assert trainers.summary_text(ranks) == "actor 0-7, env 0-1,4-5, rollout 2-3,6-7"


# ---------------------------------------------------------------------------------------------
# the p5 render


def _env_values(c):
    return {e["name"]: e["value"] for e in c["env"] if "value" in e}


def test_p5_render_gives_every_run_path_assets_placement_and_resume():
    r = rendered("p5")
    venv_path = P.path("openvla-oft")
    single = _env_values(container(find(r.manifests, "Job", "rltrain-training")))
    multi = _env_values(container(find(r.manifests, "Job", "rltrain-multinode")))
    for e in (single, multi):
        assert e["PATH"] == venv_path and e["PATH"].startswith("/opt/venv/openvla-oft/bin:")
        assert e["VIRTUAL_ENV"] == "/opt/venv/openvla-oft"
        assert e["MANISKILL_ASSET_DIR"] == "/fsx/assets/maniskill"
        assert e["CONFIG_NAME"] == "maniskill_ppo_openvlaoft"
        assert e["RESUME_FORMAT"] == "runner.resume_dir={step_dir}" and e["RESUME_ENV"] == "HYDRA_OVERRIDES"
    assert single["CKPT_PATH"] == env_mod.checkpoint_dir(r.cfg, 1) != multi["CKPT_PATH"] == env_mod.checkpoint_dir(r.cfg, 2)
    words = multi["HYDRA_OVERRIDES"].split()
    assert "cluster.component_placement.actor=0-15" in words
    assert "cluster.component_placement.env='0-3,8-11'" in words
    assert "cluster.component_placement.rollout='4-7,12-15'" in words
    assert "env.train.total_num_envs=256" in words and "actor.global_batch_size=1280" in words
    assert multi["NODE_RANK_ENV"] == "RLINF_NODE_RANK" and multi["RAY_DASHBOARD"] == "loopback"
    assert "component_placement" not in single["HYDRA_OVERRIDES"]  # one p5 node = the config's own 8 GPUs


def test_p5_single_node_job_requests_no_efa_unless_the_profile_uses_it():
    r = rendered("p5")
    res = container(find(r.manifests, "Job", "rltrain-training"))["resources"]
    assert "vpc.amazonaws.com/efa" not in res["limits"] and "hugepages-2Mi" not in res["limits"]
    assert not P.configs["maniskill_ppo_openvlaoft"].single_node_efa
    multi = container(find(r.manifests, "Job", "rltrain-multinode"))["resources"]
    assert multi["limits"]["vpc.amazonaws.com/efa"] == "32"


def test_rayjob_head_and_workers_get_the_venv_path():
    _, _, docs = _render("p5", lambda w: w.update(multiNode={"enabled": True, "form": "rayjob", "rayVersion": "2.60.0"}))
    job = find(docs, "RayJob", "rltrain-multinode")
    cluster = job["spec"]["rayClusterSpec"]
    templates = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    for t in templates:
        # KubeRay copies this env into its wait-gcs-ready init container (kuberay v1.6.2 common/pod.go).
        [c] = t["spec"]["containers"]
        assert env(c)["PATH"] == P.path("openvla-oft")
    assert job["spec"]["entrypoint"].startswith("python3 /scripts/resume_wrapper.py -- ")


def test_staging_job_runs_before_training():
    r = rendered("p5")
    staging = find(r.manifests, "Job", "rltrain-staging")
    items = json.loads(_env_values(container(staging))["STAGE_ITEMS"])
    assert [i["source"] for i in items] == ["hf:RLinf/RLinf-OpenVLAOFT-ManiSkill-Base-Main",
                                            "hf:RLinf/RLinf-OpenVLAOFT-ManiSkill-Base-Lora",
                                            "hf-dataset:RLinf/maniskill_assets"]
    c = container(staging)
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "8Gi"}
    assert "pulumi.com/waitFor" not in staging["metadata"]["annotations"]  # the Job await: until Complete
    assert int(staging["metadata"]["annotations"]["pulumi.com/timeoutSeconds"]) == staging["spec"]["activeDeadlineSeconds"]
    by_name = {x["name"]: x for x in r.resources}
    for run in ("workloads-single-node-job", "workloads-multi-node-job"):
        assert "kubernetes:batch/v1:Job::workloads-staging-job" in by_name[run]["dependsOn"], run


def test_staging_from_s3_prefix():
    _, _, docs = _render("p5", lambda w: w.update(staging={"s3Prefix": "s3://my-bucket/rl/"}))
    items = json.loads(_env_values(container(find(docs, "Job", "rltrain-staging")))["STAGE_ITEMS"])
    assert items[0] == {"name": "openvlaoft-base", "source": "s3://my-bucket/rl/RLinf-OpenVLAOFT-ManiSkill-Base-Main/",
                        "dest": "/fsx/models/RLinf-OpenVLAOFT-ManiSkill-Base-Main"}


# ---------------------------------------------------------------------------------------------
# the summary


def test_summary_shows_placement_checkpoints_and_attempts():
    text = render.summary(rendered("p5"))
    assert "run multi-node (rltrain-multinode, 2 x 8 GPUs, maniskill_ppo_openvlaoft in /opt/venv/openvla-oft/bin)" in text
    assert "placement: actor 0-15, env 0-3,8-11, rollout 4-7,12-15" in text
    assert "runner.resume_dir=" in text and "global_step_N" in text
    # In dollars: 4 x 24 h x 2 nodes = 192 node-hours at the catalog's p5.48xlarge price.
    assert "cost bound: up to 4 attempt(s) (retries 3) x 24 h x 2 node(s) = 192 node-hours x $55.04/h = $10,567.68" in text
    assert runs_summary.RESTARTS not in text


def test_summary_flags_a_run_without_resume_mapping():
    cfg = validate.load({"gpuNodes": {"instanceType": "p5.48xlarge", "count": 2},
                       "cluster": {"endpointPublicAccess": False},
                       "workloads": {"image": "repo/img:1", "trainer": "none", "command": ["python", "train.py"],
                                     "retries": 2}},
                      region=None)
    lines = runs_summary.lines(cfg)
    assert "run single-node (rltrain-training, 1 x 8 GPUs, own command)" in lines
    assert f"  resume: none declared: {runs_summary.RESTARTS}" in lines
    assert ("  cost bound: up to 3 attempt(s) (retries 2) x 24 h x 1 node(s) = 72 node-hours x $55.04/h = $3,962.88 "
            f"(on-demand, p5.48xlarge, prices of 2025-06); each retry {runs_summary.RESTARTS}") in lines


def test_a_trainer_without_profile_gets_only_its_command_and_declared_resume():
    # A trainer without a profile brings its own image (p5 builds RLinf's: refused without a profile).
    own = "registry.example/own-trainer:1.0"
    cfg, _, docs = _render("p5", lambda w: w.update(trainer="none", command=["python", "/app/train.py"], image=own))
    e = env(container(find(docs, "Job", "rltrain-training")))
    assert container(find(docs, "Job", "rltrain-training"))["command"] == ["python", "/app/train.py"]
    assert not {"PATH", "VIRTUAL_ENV", "HYDRA_OVERRIDES", "MANISKILL_ASSET_DIR", "MODEL_PATH", "VENV_NAME"} & set(e)
    assert not [d for d in docs if d["metadata"]["name"] == "rltrain-staging"]
    # Its resume contract, declared: the wrapper gets it in the trainer's own names.
    resume = {"checkpointEnv": "OUTPUT_DIR", "stepsUnder": "ckpt", "stepPrefix": "step-",
              "completeMarks": ["COMPLETE"], "resumeEnv": "TRAIN_ARGS", "resumeFormat": "--resume-from={step_dir}"}
    cfg, _, docs = _render("p5", lambda w: w.update(trainer="none", command=["python", "/app/train.py"],
                                                    resume=resume, image=own))
    c = container(find(docs, "Job", "rltrain-training"))
    e = env(c)
    assert c["command"] == ["python3", "/scripts/resume_wrapper.py", "--", "python", "/app/train.py"]
    assert e["OUTPUT_DIR"] == env_mod.checkpoint_dir(cfg, 1) and e["RESUME_STEPS_DIR"] == e["OUTPUT_DIR"] + "/ckpt"
    assert e["RESUME_ENV"] == "TRAIN_ARGS" and e["RESUME_FORMAT"] == "--resume-from={step_dir}"
    assert runs_summary.RESTARTS not in "\n".join(runs_summary.lines(cfg))
