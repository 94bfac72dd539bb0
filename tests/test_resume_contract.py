"""The resume contract on the Pulumi side: every training run gets its checkpoint directory on FSx
keyed by its identity, RESUME=auto, head loss that does not burn the retry budget, the Ray token
from the Secret, and a warning when a checkpoint cannot be written within the grace period.
(The launcher and trainer side runs against real Ray in tests/scripts/test_ray_launcher.py.)"""

from __future__ import annotations

import copy

from support import rendered
from test_workloads_components import _render, container, env, find

from components.offline import checkpoints, impact
from components.scripts import ray_launcher
from components.workloads import env as env_mod


def test_training_runs_get_their_checkpoint_directory():
    cfg, _, docs = _render("p5")
    single = env(container(find(docs, "Job", "rltrain-training")))
    multi = env(container(find(docs, "Job", "rltrain-multinode")))
    w = cfg.workloads
    assert single["CKPT_DIR"] == f"/fsx/runs/{w.experiment_name}/{env_mod.run_identity(cfg, 1)}"
    assert multi["CKPT_DIR"] == f"/fsx/runs/{w.experiment_name}/{env_mod.run_identity(cfg, 2)}"
    assert single["CKPT_DIR"] != multi["CKPT_DIR"]  # the node count is part of the identity
    assert single["RESUME"] == multi["RESUME"] == "auto"
    validation = env(container(find(docs, "Job", "rltrain-validation")))
    assert "CKPT_DIR" not in validation and "RESUME" not in validation


def test_a_new_model_and_config_start_a_fresh_directory_and_the_impact_says_so():
    cfg, result, _ = _render("p5", lambda w: w.update(configName="maniskill_ppo_openvla"))
    before = copy.deepcopy(rendered("p5").resources)
    after = list(rendered("p5").resources)  # the same render as the session's, not computed again
    # Same stack, another model: swap the Job of the changed render into the committed record.
    changed = {r.name: r.as_json() for r in result.records}
    after = [changed.get(r["name"], r) if r["name"] == "workloads-single-node-job" else r for r in after]
    [i] = [i for i in impact.classify(before, after, cfg) if i.name == "workloads-single-node-job"]
    assert i.kind == impact.RUN_RESTART
    assert "a fresh checkpoint directory, nothing resumed" in i.why
    old = env_mod.checkpoint_dir(rendered("p5").cfg, 1)
    assert old in i.why and env_mod.checkpoint_dir(cfg, 1) in i.why


def test_head_and_peer_loss_are_disruptions_for_ray_runs_only():
    _, _, docs = _render("p5")
    rules = find(docs, "Job", "rltrain-multinode")["spec"]["podFailurePolicy"]["rules"]
    assert (ray_launcher.EXIT_HEAD_LOST, ray_launcher.EXIT_PEER_LOST) == (6, 9)
    # With a resume mapping, also the launcher's waits that ran out (3, 4): bounded by the start ledger.
    assert rules[1] == {"action": "Ignore", "onExitCodes": {
        "containerName": "trainer", "operator": "In", "values": [3, 4, 6, 9]}}
    assert rules[2] == {"action": "FailJob", "onExitCodes": {
        "containerName": "trainer", "operator": "In", "values": [2, 10, 126, 127]}}
    single = find(docs, "Job", "rltrain-training")["spec"]["podFailurePolicy"]["rules"]
    assert all(not {6, 9} & set((r.get("onExitCodes") or {}).get("values", [])) for r in single)


def test_fail_fast_codes_never_take_head_or_peer_loss_from_a_ray_run():
    # Listed as fail-fast, 6 and 9 still fail the single-node run at once (the trainer's own codes
    # there), but never the Ray run, where the launcher means another pod's loss by them.
    _, _, docs = _render("p5", lambda w: w.update(failFastExitCodes=[2, 6, 9, 127]))
    rules = find(docs, "Job", "rltrain-multinode")["spec"]["podFailurePolicy"]["rules"]
    assert [r["action"] for r in rules] == ["Ignore", "Ignore", "FailJob"]
    assert rules[1]["onExitCodes"]["values"] == [3, 4, 6, 9]
    assert rules[2]["onExitCodes"]["values"] == [2, 10, 127]  # 10: the resume wrapper's no-progress bound
    single = find(docs, "Job", "rltrain-training")["spec"]["podFailurePolicy"]["rules"]
    assert single[-1] == {"action": "FailJob", "onExitCodes": {
        "containerName": "trainer", "operator": "In", "values": [2, 6, 9, 10, 127]}}


def test_ray_token_comes_from_the_training_secret():
    cfg, _, docs = _render("p5", lambda w: w["multiNode"].update(rayAuthTokenSecret="hfToken"))
    e = env(container(find(docs, "Job", "rltrain-multinode")))
    assert e["RAY_AUTH_TOKEN"] == {"secretKeyRef": {"name": "training-secrets", "key": "hfToken", "optional": False}}
    assert "hfToken" in cfg.training_secret_keys


def test_ray_address_cannot_come_from_plain_env():
    assert {"RAY_ADDRESS", "RAY_AUTH_TOKEN", "CKPT_DIR", "RESUME"} <= env_mod.PROTECTED_ENV


def test_checkpoint_write_time_is_estimated_from_fsx_throughput():
    cfg = rendered("p5").cfg
    w = cfg.workloads.model_copy(update={"checkpoint_size_gib": 500})
    seconds, grace, line = checkpoints.estimate(cfg.model_copy(update={"workloads": w}))
    # p5: 4800 GiB x 500 MB/s/TiB = 2344 MB/s; 500 GiB = 512000 MB -> ~218 s < 300 s.
    assert round(seconds) == 218 and grace == 300 and "fits the 300 s grace period" in line
    w = w.model_copy(update={"checkpoint_size_gib": 1000})
    seconds, _, line = checkpoints.estimate(cfg.model_copy(update={"workloads": w}))
    assert round(seconds) == 437 and "EXCEEDS the 300 s grace period" in line
    # Unset: derived from the profile's model (28.4 GiB per OpenVLA-OFT save) -> ~12 s on p5.
    seconds, _, line = checkpoints.estimate(cfg)
    assert line.startswith("checkpoint: 28.4 GiB at 2,344 MB/s") and round(seconds) == 12
