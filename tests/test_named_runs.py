"""Named runs (workloads.runs, issue 43): refusals before anything exists, a run's identity (its
checkpoint directory), its overrides and warm start in the pod, and one change touching one run."""

from __future__ import annotations

import copy
import json

import pytest
from support import rendered
from test_workloads_components import _render, container, env, find

from components.offline import impact, runs_summary
from components.stack import runs as runs_mod
from components.stack import validate, volume_budget
from components.workloads import env as env_mod
from components.workloads import trainer

BASE = {"gpuNodes": {"instanceType": "g6.12xlarge", "count": 2},
        "cluster": {"publicAccessCidrs": ["203.0.113.0/24"]},
        "workloads": {"image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/r:1", "trainer": "rlinf-reasoning",
                      "validation": {"enabled": False}}}


def load(*runs, **workloads):
    data = copy.deepcopy(BASE)
    data["workloads"].update(workloads, runs=list(runs))
    return validate.load(data)


def problems(*runs, **workloads) -> dict[str, str]:
    with pytest.raises(validate.ConfigError) as e:
        load(*runs, **workloads)
    return dict(e.value.problems)


# --- refusals: each names the key --------------------------------------------------------------------


def test_a_duplicate_name_is_refused():
    p = problems({"name": "a"}, {"name": "a"})
    assert "is already the name of rltrain:workloads.runs[0]" in p["rltrain:workloads.runs[1].name"]


def test_a_name_of_an_implicit_run_is_a_duplicate():
    p = problems({"name": "single-node"})
    assert "already the name of rltrain:workloads.singleNode" in p["rltrain:workloads.runs[0].name"]


def test_an_override_of_a_key_the_program_sets_is_refused_with_the_list():
    p = problems({"name": "a", "overrides": {"runner.output_dir": "/x", "++cluster.num_nodes": 2,
                                             "cluster.component_placement.actor": "0-1",
                                             "runner.resume_dir": "/y", "actor.optim.lr": 1e-6}})
    for key in ("runner.output_dir", "++cluster.num_nodes", "cluster.component_placement.actor", "runner.resume_dir"):
        assert p[f"rltrain:workloads.runs[0].overrides.{key}"].startswith("set by the program"), key
    assert "rltrain:workloads.runs[0].overrides.actor.optim.lr" not in p
    assert "runner.experiment_name" in p["rltrain:workloads.runs[0].overrides.runner.output_dir"]


def test_the_embodied_profile_lists_its_own_directories_and_placement():
    data = copy.deepcopy(BASE)
    data["gpuNodes"] = {"instanceType": "p5.48xlarge", "count": 2}
    data["workloads"] = {"image": "x.dkr.ecr.us-east-1.amazonaws.com/r:1", "validation": {"enabled": False},
                         "runs": [{"name": "a", "nodes": 2, "overrides": {
                             "runner.logger.log_path": "/x", "actor.global_batch_size": 99, "algorithm.gamma": 0.9}}]}
    with pytest.raises(validate.ConfigError) as e:
        validate.load(data)
    p = dict(e.value.problems)
    assert "run_training_eks.sh" in p["rltrain:workloads.runs[0].overrides.runner.logger.log_path"]
    assert "placement" in p["rltrain:workloads.runs[0].overrides.actor.global_batch_size"]
    assert not any("algorithm.gamma" in k for k in p)


@pytest.mark.parametrize("value,what", [([1, 2], "a list"), ({"a": 1}, "a mapping"), (None, "empty"),
                                        ("a b", "whitespace"), ("it's", "a quote"), ("${x}", "$")])
def test_a_value_that_is_not_one_scalar_word_is_refused(value, what):
    p = problems({"name": "a", "overrides": {"actor.optim.lr": value}})
    assert what in p["rltrain:workloads.runs[0].overrides"] and "actor.optim.lr" in p["rltrain:workloads.runs[0].overrides"]


@pytest.mark.parametrize("value,example", [({"lr": 1e-6}, "actor.optim.lr.lr: 1e-06"),
                                           ([0.9, 0.95], "actor.optim.lr.0: 0.9"), ({}, "actor.optim.lr.NAME: VALUE")])
def test_a_nested_value_is_refused_with_the_dotted_key_it_means(value, example):
    p = problems({"name": "a", "overrides": {"actor.optim.lr": value}})
    assert example in p["rltrain:workloads.runs[0].overrides"]


def test_an_empty_value_says_to_leave_the_key_out():
    p = problems({"name": "a", "overrides": {"actor.optim.lr": None}})["rltrain:workloads.runs[0].overrides"]
    assert "actor.optim.lr: empty" in p and "e.g. actor.optim.lr: 1.0e-6" in p and "leave the key out" in p


def test_a_key_that_is_not_a_hydra_key_is_refused():
    p = problems({"name": "a", "overrides": {"actor optim": 1}})
    assert "is not a Hydra key" in p["rltrain:workloads.runs[0].overrides"]


def test_more_nodes_than_the_stack_ever_has_is_refused():
    p = problems({"name": "a", "nodes": 3})
    assert "never has more than 2 (gpuNodes.count)" in p["rltrain:workloads.runs[0].nodes"]


def test_an_unknown_config_and_a_bad_name_are_refused():
    p = problems({"name": "a", "configName": "nope"})
    assert "is not a config of trainer rlinf-reasoning" in p["rltrain:workloads.runs[0].configName"]
    assert "a run name" in problems({"name": "Bad_Name"})["rltrain:workloads.runs[0].name"]


def test_a_warm_start_from_another_shape_an_unknown_run_or_an_unsaved_step_is_refused():
    p = problems({"name": "two", "nodes": 2}, {"name": "one"},
                 {"name": "w1", "resumeFrom": {"run": "two", "step": 50}},
                 {"name": "w2", "resumeFrom": {"run": "gone", "step": 50}},
                 {"name": "w3", "resumeFrom": {"run": "one", "step": 30}},
                 {"name": "w4", "resumeFrom": {"run": "w4", "step": 50}})
    assert "another shape (nodes 2 vs 1)" in p["rltrain:workloads.runs[2].resumeFrom.run"]
    assert "'gone' is not a run of this stack" in p["rltrain:workloads.runs[3].resumeFrom.run"]
    assert "30 is not a step one (qwen2.5-1.5b-grpo-fsdp) saves" in p["rltrain:workloads.runs[4].resumeFrom.step"]
    assert "is this run itself" in p["rltrain:workloads.runs[5].resumeFrom.run"]


def test_a_warm_start_follows_the_source_runs_own_save_interval():
    load({"name": "one", "overrides": {"runner.save_interval": 10}}, {"name": "w", "resumeFrom": {"run": "one", "step": 30}})


def test_serving_a_run_that_is_not_in_the_stack_is_refused():
    p = problems({"name": "a"}, serving={"enabled": True, "gpusPerReplica": 2, "model": {"run": "b", "step": 50}})
    assert "'b' is not a run of this stack" in p["rltrain:workloads.serving.model.run"]


# --- identity ----------------------------------------------------------------------------------------


def test_different_overrides_get_different_directories_the_same_ones_the_same():
    cfg = load({"name": "a", "overrides": {"actor.optim.lr": 1e-6, "algorithm.group_size": 8}},
               {"name": "b", "overrides": {"actor.optim.lr": 2e-6, "algorithm.group_size": 8}})
    a, b = cfg.run("a"), cfg.run("b")
    again = load({"name": "a", "overrides": {"algorithm.group_size": 8, "actor.optim.lr": 1e-6}}).run("a")
    changed = load({"name": "a", "overrides": {"actor.optim.lr": 3e-6, "algorithm.group_size": 8}}).run("a")
    assert env_mod.run_dir(cfg, a) != env_mod.run_dir(cfg, b)
    assert env_mod.run_dir(cfg, a) == env_mod.run_dir(load(*[{"name": "a", "overrides": {
        "algorithm.group_size": 8, "actor.optim.lr": 1e-6}}]), again)  # order in the file does not matter
    assert env_mod.run_dir(cfg, a) != env_mod.run_dir(load({"name": "a", "overrides": {
        "actor.optim.lr": 3e-6, "algorithm.group_size": 8}}), changed)
    assert env_mod.run_dir(cfg, a).startswith("/fsx/runs/math-grpo/a-")


def test_priority_and_deadline_are_not_part_of_the_identity():
    one = load({"name": "a", "overrides": {"actor.optim.lr": 1e-6}})
    two = load({"name": "a", "overrides": {"actor.optim.lr": 1e-6}, "priority": 5, "maxRunMinutes": 60})
    assert env_mod.run_dir(one, one.run("a")) == env_mod.run_dir(two, two.run("a"))


def test_the_implicit_runs_keep_their_directories():
    cfg = rendered("p5").cfg
    assert env_mod.run_dir(cfg, cfg.run("single-node")) == env_mod.checkpoint_dir(cfg, 1)
    assert env_mod.run_dir(cfg, cfg.run("multi-node")) == env_mod.checkpoint_dir(cfg, 2)


def test_hydra_values():
    assert runs_mod.hydra_overrides({"b": True, "a": 1e-6, "c": "x/y-1", "d": "a,b", "e": 3}) == [
        "a=1e-06", "b=true", "c=x/y-1", "d='a,b'", "e=3"]


# --- the pods ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_runs():
    def mutate(w):
        w["runs"] = [{"name": "lr-high", "overrides": {"actor.optim.lr": 2e-6}, "priority": 1000050},
                     {"name": "lr-low", "overrides": {"actor.optim.lr": 5e-7}},
                     {"name": "warm", "overrides": {"actor.optim.lr": 1e-6},
                      "resumeFrom": {"run": "lr-high", "step": 100}}]
    return _render("dev-reasoning", mutate)


def test_each_run_gets_its_job_directory_and_overrides(two_runs):
    cfg, _, docs = two_runs
    high = env(container(find(docs, "Job", "rltrain-run-lr-high")))
    low = env(container(find(docs, "Job", "rltrain-run-lr-low")))
    assert high["CKPT_PATH"] == high["CKPT_DIR"] == env_mod.run_dir(cfg, cfg.run("lr-high"))
    assert low["CKPT_DIR"] == env_mod.run_dir(cfg, cfg.run("lr-low")) != high["CKPT_DIR"]
    assert high["HYDRA_OVERRIDES"].endswith(" actor.optim.lr=2e-06")
    assert low["HYDRA_OVERRIDES"].endswith(" actor.optim.lr=5e-07")
    # The program's overrides come first (the run's never repeat them: refused above).
    assert high["HYDRA_OVERRIDES"].startswith("rollout.model.model_path=")
    job = find(docs, "Job", "rltrain-run-lr-high")
    assert job["spec"]["template"]["spec"]["priorityClassName"] == "rltrain-training-1000050"
    assert find(docs, "PriorityClass", "rltrain-training-1000050")["value"] == 1000050
    assert find(docs, "Job", "rltrain-training")  # the implicit run is still there, unchanged


def test_resume_from_renders_the_trainers_own_resume_setting(two_runs):
    cfg, _, docs = two_runs
    warm = container(find(docs, "Job", "rltrain-run-warm"))
    e = env(warm)
    source = env_mod.run_dir(cfg, cfg.run("lr-high"))
    # RLinf's reasoning runner resumes from runner.resume_dir=<...>/checkpoints/global_step_N
    # (RLinf/RLinf@0505431 rlinf/runners/reasoning_runner.py), the profile's resume_format.
    assert e["RESUME_FROM"] == f"{source}/grpo-1.5b/checkpoints/global_step_100"
    assert e["RESUME_FORMAT"] == "runner.resume_dir={step_dir}" and e["RESUME_ENV"] == "HYDRA_OVERRIDES"
    assert warm["command"][:4] == ["python3", trainer.WARM_PATH, "--", "python3"]
    assert warm["command"][4] == trainer.WRAPPER_PATH
    # Only the warm run mounts the warm start; the others' pod templates are as before.
    assert trainer.WARM_PATH not in container(find(docs, "Job", "rltrain-run-lr-low"))["command"]


def test_retention_keeps_the_step_a_warm_start_names_and_the_budget_counts_it(two_runs):
    """Before: only the served step was protected; with keep 3 and a save every 50 steps, lr-high's
    step 100 went once it saved step 250, and `warm` (queued behind lr-high) found nothing to start from."""
    cfg, _, docs = two_runs
    cron = find(docs, "CronJob", "rltrain-checkpoint-retention")
    args = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]
    high_steps = f"{env_mod.run_dir(cfg, cfg.run('lr-high'))}/grpo-1.5b/checkpoints"
    assert f"--protect={high_steps}=100" in args
    assert f"--steps-dir={high_steps}" in args
    served = cfg.run(cfg.workloads.serving.model.run)
    assert [a for a in args if a.startswith("--protect=")] == sorted(
        [f"--protect={high_steps}=100",
         f"--protect={env_mod.run_dir(cfg, served)}/grpo-1.5b/checkpoints={cfg.workloads.serving.model.step}"])
    budget = {line.split(":")[0]: line for line in volume_budget.lines(cfg)}
    assert "+ 1 kept for a warm start (step 100)) x" in budget["checkpoint budget lr-high"]
    assert "warm start" not in budget["checkpoint budget lr-low"]
    b = volume_budget.budget(cfg)
    per_run = dict(b.runs)
    assert per_run["lr-high"] == pytest.approx(per_run["lr-low"] + b.checkpoint_gib)


def test_the_summary_prints_directory_start_queue_cost_and_curves(two_runs):
    cfg, result, _ = two_runs
    resources = [r.as_json() for r in result.records]
    text = "\n".join(runs_summary.lines(cfg, resources))
    high = env_mod.run_dir(cfg, cfg.run("lr-high"))
    assert f"CKPT_PATH={high}" in text
    assert "start: resumes step 100 of run lr-high" in text
    # The queue place needs the node group the training Namespace records: the whole stack's render.
    r = rendered("dev-reasoning")
    queue = "\n".join(runs_summary.lines(r.cfg, r.resources))
    assert "queue: place 1 of 3 (priority 1000050, Job/rltrain-run-lr-2e-6): runs now" in queue
    assert "queue: place 2 of 3 (priority 1000000, Job/rltrain-run-lr-5e-7): queued behind Job/rltrain-run-lr-2e-6" in queue
    # lr-5e-7 and the implicit single-node run tie: Kueue takes the older Workload, which the render
    # cannot know, so it says so instead of implying the name order.
    assert ("queued behind Job/rltrain-run-lr-2e-6; same priority as Job/rltrain-training: Kueue admits whichever "
            "was created first (one that exists already before one this change adds); shown here by name") in queue
    assert "place 1 of 3 (priority 1000050, Job/rltrain-run-lr-2e-6): runs now\n" in queue + "\n"
    # 4 attempts x 24 h x 1 node x $4.60/h (the catalog's g6.12xlarge price).
    assert "= 96 node-hours x $4.60/h = $441.60" in text
    assert f"TensorBoard run lr-low ({env_mod.run_dir(cfg, cfg.run('lr-low'))}/grpo-1.5b/tensorboard)" in text


# --- one change, one run -----------------------------------------------------------------------------


def _as_rows(result):
    return [r.as_json() for r in result.records]


def test_changing_one_runs_overrides_restarts_only_that_run_in_a_fresh_directory(two_runs):
    cfg, before, _ = two_runs

    def mutate(w):
        w["runs"] = [{"name": "lr-high", "overrides": {"actor.optim.lr": 3e-6}, "priority": 1000050},
                     {"name": "lr-low", "overrides": {"actor.optim.lr": 5e-7}},
                     {"name": "warm", "overrides": {"actor.optim.lr": 1e-6},
                      "resumeFrom": {"run": "lr-high", "step": 100}}]
    cfg2, after, _ = _render("dev-reasoning", mutate)
    impacts = impact.classify(_as_rows(before), _as_rows(after), cfg2)
    restarts = {i.name for i in impacts if i.kind == impact.RUN_RESTART}
    # lr-high's identity changed; warm starts from lr-high's step, whose directory moved with it.
    assert restarts == {"workloads-run-lr-high-job", "workloads-run-warm-job"}
    [i] = [i for i in impacts if i.name == "workloads-run-lr-high-job"]
    assert "a fresh checkpoint directory, nothing resumed" in i.why and not i.allowed
    assert not any(i.name.startswith(("workloads-run-lr-low", "workloads-single-node")) and i.kind != impact.IN_PLACE
                   for i in impacts)


def test_adding_a_run_creates_only_it_and_removing_one_keeps_its_checkpoints(two_runs):
    cfg, with_three, _ = two_runs
    rows = _as_rows(with_three)
    base = [r for r in rows if "lr-low" not in r["name"]]
    added = impact.classify(base, rows, cfg)
    assert {i.kind for i in added} == {impact.CREATE}
    [job] = [i for i in added if i.name == "workloads-run-lr-low-job"]
    assert job.why == f"new run: CKPT_DIR {env_mod.run_dir(cfg, cfg.run('lr-low'))}, nothing resumed (a fresh start)"
    removed = impact.classify(rows, base, cfg)
    assert {i.kind for i in removed} == {impact.DELETE}
    [job] = [i for i in removed if i.name == "workloads-run-lr-low-job"]
    assert f"its checkpoints stay in {env_mod.run_dir(cfg, cfg.run('lr-low'))}" in job.why


def test_disabling_a_run_says_so_and_the_curves_rollout_is_no_serving_restart(two_runs):
    """Before: a disabled run's Job read "removed from the stack ... pruned by nothing now" (its
    retention goes on), and the TensorBoard Deployment, whose run list changed, was a "serving restart"."""
    cfg, before, _ = two_runs

    def mutate(w):
        w["runs"] = [{"name": "lr-high", "overrides": {"actor.optim.lr": 2e-6}, "priority": 1000050},
                     {"name": "lr-low", "overrides": {"actor.optim.lr": 5e-7}, "enabled": False},
                     {"name": "warm", "overrides": {"actor.optim.lr": 1e-6},
                      "resumeFrom": {"run": "lr-high", "step": 100}}]
    cfg2, after, _ = _render("dev-reasoning", mutate)
    impacts = {i.name: i for i in impact.classify(_as_rows(before), _as_rows(after), cfg2)}
    job = impacts["workloads-run-lr-low-job"]
    assert job.kind == impact.DELETE
    assert job.why.startswith("run lr-low disabled (enabled: false): the run is stopped and its Job deleted")
    assert f"its checkpoints stay in {env_mod.run_dir(cfg2, cfg2.run('lr-low'))}, still pruned" in job.why
    assert "pruned by nothing" not in job.why
    assert "workloads-curves-deployment" not in impacts  # TensorBoard keeps showing the disabled run

    def add(w):
        mutate(w)
        w["runs"].append({"name": "lr-mid", "overrides": {"actor.optim.lr": 1.5e-6}})
    cfg3, added, _ = _render("dev-reasoning", add)
    impacts = {i.name: i for i in impact.classify(_as_rows(after), _as_rows(added), cfg3)}
    curves = impacts["workloads-curves-deployment"]  # one TensorBoard run more
    assert curves.kind == impact.IN_PLACE and "its pods (curves) are replaced by a rolling update" in curves.why
    assert impact.SERVING_RESTART not in {i.kind for i in impacts.values()}


def test_a_disabled_run_has_no_job_and_its_checkpoints_stay_counted():
    cfg = load({"name": "a"}, {"name": "b", "enabled": False})
    assert [r.name for r in cfg.enabled_runs] == ["single-node", "a"]
    from components.stack import volume_budget
    assert [name for name, _ in volume_budget.budget(cfg).runs] == ["single-node", "a", "b"]
    text = "\n".join(runs_summary.lines(cfg))
    assert f"run b: disabled (enabled: false): no Job; its checkpoints stay in {env_mod.run_dir(cfg, cfg.run('b'))}" in text


def test_the_committed_stack_has_two_runs_at_different_learning_rates():
    cfg = rendered("dev-reasoning").cfg
    named = [r for r in cfg.enabled_runs if not r.implicit]
    assert [r.override_map for r in named] == [{"actor.optim.lr": 2e-6}, {"actor.optim.lr": 5e-7}]
    docs = rendered("dev-reasoning").manifests
    assert json.dumps(docs).count('"rltrain-run-lr-') >= 2


# What a run produced reaches S3: tests/test_data_repository.py.


def test_wandb_through_rlinfs_logger_setting_keeps_tensorboard():
    data = copy.deepcopy(BASE)
    data["workloads"]["curves"] = {"loggerBackends": ["wandb"]}
    with pytest.raises(validate.ConfigError) as e:
        validate.load(data)
    assert "keep tensorboard in the list" in dict(e.value.problems)["rltrain:workloads.curves.loggerBackends"]
    data["workloads"]["curves"] = {"loggerBackends": ["tensorboard", "wandb"]}
    data["workloads"]["runs"] = [{"name": "a", "overrides": {"runner.logger.logger_backends": "wandb"}}]
    with pytest.raises(validate.ConfigError) as e:
        validate.load(data)
    assert "workloads.curves.loggerBackends" in dict(e.value.problems)[
        "rltrain:workloads.runs[0].overrides.runner.logger.logger_backends"]
    data["workloads"]["runs"] = [{"name": "a"}]
    cfg = validate.load(data)
    extra = trainer.trainer_env(cfg, 1, env_mod.run_dir(cfg, cfg.run("a")), run=cfg.run("a"))["HYDRA_OVERRIDES"]
    assert "runner.logger.logger_backends=[tensorboard,wandb]" in extra.split()


# --- a removed run's checkpoints are accounted (through the render, against the base record) --------


def _render_cli(tmp_path, edit, base, capsys):
    """`python -m components.offline.render --stack dev-reasoning` on an edited copy of the stack, judged
    against `base` (a directory of base records): (exit code, stdout, stderr)."""
    from support import stack_copy
    from components.offline import render

    proj = stack_copy(tmp_path, "dev-reasoning", edit)
    code = render.main(["--stack", "dev-reasoning", "--project-dir", str(proj), "--base", str(base),
                        "--out", str(tmp_path / "out")])
    out = capsys.readouterr()
    return code, out.out, out.err


def _drop_lr_5e_7(doc):
    w = doc["config"]["rltrain:workloads"]
    w["runs"] = [r for r in w["runs"] if r["name"] != "lr-5e-7"]


def test_a_removed_run_says_where_its_checkpoints_stay_and_the_budget_counts_them(tmp_path, capsys):
    from components.offline.mock_engine import ROOT
    base = rendered("dev-reasoning")
    gone = env_mod.run_dir(base.cfg, base.cfg.run("lr-5e-7"))
    code, out, _ = _render_cli(tmp_path, _drop_lr_5e_7, ROOT / "rendered", capsys)
    assert code == 0
    assert (f"  run lr-5e-7: removed since the base record (its Job is deleted); its checkpoints stay in {gone}, "
            "pruned by nothing now and counted in the volume budget below") in out
    assert (f"  checkpoint budget left in {gone}: (at most 3 kept + 1 being written) x 26.5 GiB = 105.9 GiB") in out
    # 352.9 GiB with the run (the committed render), the same with its entry gone: it is still on the volume.
    assert ("  volume budget: models+assets 5.3 + export 3.3 + checkpoints 238.3 + left behind 105.9 = 352.9 GiB "
            "of 1,080 GiB usable") in out
    assert f"its checkpoints stay in {gone}, pruned by nothing now (the summary counts them" in out
    # Without a base record there is nothing to compare with: nothing is counted twice.
    assert "left behind" not in "\n".join(runs_summary.lines(base.cfg, base.resources))


def test_a_changed_identity_leaves_its_old_directory_counted(tmp_path, capsys):
    from components.offline.mock_engine import ROOT
    old = env_mod.run_dir(rendered("dev-reasoning").cfg, rendered("dev-reasoning").cfg.run("lr-2e-6"))

    def edit(doc):
        w = doc["config"]["rltrain:workloads"]
        w["runs"][0]["overrides"] = {"actor.optim.lr": 3.0e-6}
        w["allowRunRestart"] = True
    code, out, _ = _render_cli(tmp_path, edit, ROOT / "rendered", capsys)
    assert code == 0
    assert f"  run lr-2e-6: its previous directory {old} stays (its identity changed: a new directory starts)" in out
    assert f"  checkpoint budget left in {old}:" in out


def test_what_removed_runs_left_can_overfill_the_volume_and_the_render_says_so(tmp_path, capsys):
    from components.offline.mock_engine import ROOT
    # A base record in which 10 more runs once wrote their checkpoints (each 105.9 GiB at most).
    rows = json.loads((ROOT / "rendered" / "dev-reasoning" / "resources.json").read_text())
    job = next(r for r in rows if r["name"] == "workloads-run-lr-5e-7-job")
    dirs = []
    for i in range(10):
        extra = copy.deepcopy(job)
        extra["name"] = f"workloads-run-old-{i}-job"
        extra["inputs"]["metadata"]["labels"]["rltrain/run"] = f"rltrain-run-old-{i}"
        text = json.dumps(extra).replace(env_mod.run_dir(rendered("dev-reasoning").cfg,
                                                         rendered("dev-reasoning").cfg.run("lr-5e-7")),
                                         f"/fsx/runs/math-grpo/old-{i}-0123456789ab")
        rows.append(json.loads(text))
        dirs.append(f"/fsx/runs/math-grpo/old-{i}-0123456789ab")
    (tmp_path / "base" / "dev-reasoning").mkdir(parents=True)
    (tmp_path / "base" / "dev-reasoning" / "resources.json").write_text(json.dumps(rows))
    code, out, err = _render_cli(tmp_path, None, tmp_path / "base", capsys)
    assert code == 0  # the config's own runs fit: the stack is not refused, the review is told
    budget = next(line for line in out.splitlines() if line.startswith("  volume budget:"))
    assert "+ left behind 1,059.2 = 1,412.1 GiB of 1,080 GiB usable" in budget and "DOES NOT FIT; delete what" in budget, budget
    assert "warning: the volume does not hold what the runs keep and what 10 run(s) gone since the base record left" in err
    assert all(d in err for d in dirs)
