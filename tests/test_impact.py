"""Update impact: what a change does to what is running, judged against a base record.

Each test edits a stack (or the record, where the change is one the program no longer makes) and
asserts the classification the providers' rules give, and that the render refuses what needs an
opt-in until the stack opts in.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import yaml
from support import rendered

from components.offline import deploy_model, impact, policy, render
from components.offline.mock_engine import ROOT
from components.stack import config
from components.workloads.script_files import read_scripts


def rows(stack: str = "p5") -> list[dict]:
    return copy.deepcopy(rendered(stack).resources)


def find(rs: list[dict], type_: str, name: str | None = None) -> dict:
    return next(r for r in rs if r["type"] == type_ and (name is None or r["name"] == name))


def kinds(impacts: list[impact.Impact]) -> dict[str, str]:
    """Name -> the worst impact on a resource of that name (names repeat across types)."""
    out: dict[str, str] = {}
    for i in impacts:  # worst first
        out.setdefault(i.name, i.kind)
    return out


def cfg(stack: str = "p5", **patch) -> config.StackConfig:
    return rendered(stack).cfg.model_copy(update=patch)


# --- a project copy to edit and render ----------------------------------------------------------


@pytest.fixture
def project(tmp_path):
    """A scratch copy of the project whose base record is the committed one."""
    proj = tmp_path / "proj"
    for stack in ("p5", "byo"):
        (proj / "rendered" / stack).mkdir(parents=True)
        shutil.copy(ROOT / "rendered" / stack / "resources.json", proj / "rendered" / stack / "resources.json")
        shutil.copy(ROOT / f"Pulumi.{stack}.yaml", proj / f"Pulumi.{stack}.yaml")
    for name in ("__main__.py", "Pulumi.yaml"):
        shutil.copy(ROOT / name, proj / name)
    (proj / "components").symlink_to(ROOT / "components")
    return proj


def edit(proj: Path, stack: str, section: str, **values):
    path = proj / f"Pulumi.{stack}.yaml"
    doc = yaml.safe_load(path.read_text())
    node = doc["config"].setdefault(f"rltrain:{section.split('.')[0]}", {})
    for part in section.split(".")[1:]:
        node = node.setdefault(part, {})
    node.update(values)
    path.write_text(yaml.safe_dump(doc))


def render_impact(proj: Path, stack: str = "p5") -> list[impact.Impact]:
    r = render.render_stack(stack, proj)
    base = json.loads((proj / "rendered" / stack / "resources.json").read_text())
    return impact.classify(base, r.resources, r.cfg)


# --- classification -----------------------------------------------------------------------------


def test_unchanged_stack_has_no_impact():
    assert impact.classify(rows(), rows(), cfg()) == []


def test_scaling_up_is_in_place_for_the_node_group(project):
    edit(project, "p5", "gpuNodes", count=4)
    k = kinds(render_impact(project))
    assert k["gpu-nodes"] == impact.IN_PLACE
    assert "gpu-lt" not in k  # no launch template version: no roll
    # More nodes change the runs that span every node (completions, workers): the training run
    # restarts (opt-in), the checks simply run again (no opt-in: a check loses no work).
    assert k["workloads-multi-node-job"] == impact.RUN_RESTART
    assert k["workloads-validation-job"] == k["workloads-nccl-test-mpijob"] == impact.CHECK_RERUN
    checks = [i for i in render_impact(project) if i.kind == impact.CHECK_RERUN]
    assert checks and all(i.allowed and not i.opt_in for i in checks)
    assert all("the check runs again" in i.why for i in checks)
    # The run's policy/v1 PodDisruptionBudget (minAvailable follows the node count) is patched in
    # place: the real preview said `update` (tests/sim/test_day_two.py scenario 9).
    assert k["workloads-multi-node-pdb"] == impact.IN_PLACE


def test_count_in_the_launch_template_description_rolled_every_node():
    """Today's program before the fix: the description carried the node count."""
    before, after = rows(), rows()
    find(before, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")["inputs"]["description"] = "2 x p5.48xlarge training nodes"
    find(after, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")["inputs"]["description"] = "4 x p5.48xlarge training nodes"
    find(after, "aws:eks/nodeGroup:NodeGroup")["inputs"]["scalingConfig"]["desiredSize"] = 4
    [ng] = [i for i in impact.classify(before, after, cfg()) if i.name == "gpu-nodes"]
    assert ng.kind == impact.NODE_ROLL and "new launch template version" in ng.why
    assert not ng.allowed and ng.opt_in == "rltrain:gpuNodes.allowNodeRoll"


def test_root_volume_change_is_a_node_roll_refused_until_opted_in(project, capsys):
    edit(project, "p5", "gpuNodes.rootVolume", sizeGiB=800)
    out = project / "out"
    assert render.main(["--stack", "p5", "--project-dir", str(project), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "REFUSED: node roll: NodeGroup gpu-nodes: new launch template version" in err
    assert "set rltrain:gpuNodes.allowNodeRoll: true" in err and not out.exists()
    edit(project, "p5", "gpuNodes", allowNodeRoll=True)
    assert render.main(["--stack", "p5", "--project-dir", str(project), "--out", str(out)]) == 0
    assert "warning: node roll: NodeGroup gpu-nodes" in capsys.readouterr().err


def test_vpc_cidr_change_replaces_network_fsx_and_nodes_and_aws_refuses_the_cluster(project):
    edit(project, "p5", "network", vpcCidr="10.8.0.0/16")
    impacts = render_impact(project)
    k = kinds(impacts)
    assert k["network-vpc"] == impact.REPLACE
    assert k["network-private-us-east-1a"] == k["network-public-us-east-1b"] == impact.REPLACE
    assert k["storage-fs"] == impact.DATA_LOSS
    assert k["gpu-nodes"] == impact.NODE_ROLL
    assert k["cluster-eks"] == impact.REFUSED
    [eks] = [i for i in impacts if i.name == "cluster-eks"]
    assert "EKS refuses" in eks.why and not eks.allowed and eks.opt_in == ""


def test_fsx_capacity_decrease_loses_data_until_allowed(project, capsys):
    edit(project, "p5", "storage.fsx", storageCapacityGiB=2400)
    out = project / "out"
    assert render.main(["--stack", "p5", "--project-dir", str(project), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert ("REFUSED: replace (data loss): LustreFileSystem storage-fs: storageCapacity 4800 -> 2400 (cannot shrink): "
            "a new, empty file system, its data is lost. To accept that, set rltrain:storage.allowReplacement: true") in err
    edit(project, "p5", "storage", allowReplacement=True)
    assert render.main(["--stack", "p5", "--project-dir", str(project), "--out", str(out)]) == 0


def test_moving_the_gpu_az_moves_fsx_and_the_node_group(project):
    edit(project, "p5", "network", gpuAvailabilityZone="us-east-1b")
    k = kinds(render_impact(project))
    assert k["storage-fs"] == impact.DATA_LOSS and k["gpu-nodes"] == impact.NODE_ROLL


@pytest.mark.parametrize("path,value", [("kmsKeyId", "other"), ("deploymentType", "PERSISTENT_1")])
def test_fsx_replacing_inputs(path, value):
    after = rows()
    find(after, "aws:fsx/lustreFileSystem:LustreFileSystem")["inputs"][path] = value
    # The PV reads the file system's id and DNS name: it is re-created too (Retain: no data lost).
    assert kinds(impact.classify(rows(), after, cfg())) == {"storage-fs": impact.DATA_LOSS,
                                                            "storage-pv": impact.REPLACE}


def test_nccl_message_size_restarts_the_mpijob_and_nothing_else(project):
    edit(project, "p5", "workloads.ncclTest", messageSizeBytes=4 << 30)
    assert kinds(render_impact(project)) == {"workloads-nccl-test-mpijob": impact.CHECK_RERUN}


def test_a_script_change_touches_only_the_runs_that_run_it(monkeypatch):
    scripts = read_scripts()
    changed = dict(scripts)
    changed["nccl_check.py"] = scripts["nccl_check.py"].model_copy(
        update={"text": scripts["nccl_check.py"].text + "# a comment\n"})
    from components.workloads import build
    monkeypatch.setattr(build, "read_scripts", lambda: changed)
    after = render.render_stack("p5")
    k = kinds(impact.classify(rows(), after.resources, after.cfg))
    assert k.pop("workloads-nccl-test-mpijob") == impact.CHECK_RERUN
    # The old script's ConfigMap goes, the new one comes; no other run's pod template changes.
    assert k == {"workloads-scripts-nccl-check": impact.REPLACE}


def test_a_change_to_a_part_of_the_launcher_restarts_only_the_run_that_runs_it(monkeypatch):
    """The launcher's package (_ray_launcher/) travels in the launcher's ConfigMap: editing one part
    is a new launcher ConfigMap and a restart of the multi-node run, nothing else."""
    scripts = read_scripts()
    launcher = scripts["ray_launcher.py"]
    parts = dict(launcher.parts)
    parts["_ray_launcher/worker.py"] += "# a comment\n"
    changed = {**scripts, "ray_launcher.py": launcher.model_copy(update={"parts": tuple(parts.items())})}
    from components.workloads import build
    monkeypatch.setattr(build, "read_scripts", lambda: changed)
    after = render.render_stack("p5")
    k = kinds(impact.classify(rows(), after.resources, after.cfg))
    assert k == {"workloads-multi-node-job": impact.RUN_RESTART, "workloads-scripts-ray-launcher": impact.REPLACE}


def test_crd_spec_change_without_replace_on_changes_is_only_patched():
    after = rows()
    mpi = find(after, "kubernetes:kubeflow.org/v2beta1:MPIJob")
    before = rows()
    for r in (before, after):
        find(r, "kubernetes:kubeflow.org/v2beta1:MPIJob")["options"].pop("replaceOnChanges", None)
    mpi["inputs"]["spec"]["slotsPerWorker"] = 4
    [i] = impact.classify(before, after, cfg())
    assert i.kind == impact.IN_PLACE and "does not run again" in i.why


def test_run_restart_is_refused_without_opt_in():
    after = rows()
    find(after, "kubernetes:batch/v1:Job", "workloads-single-node-job")["inputs"]["spec"]["template"]["spec"][
        "containers"][0]["image"] = "example.com/trainer:v2"
    [i] = impact.classify(rows(), after, cfg())
    assert (i.kind, i.allowed, i.opt_in) == (impact.RUN_RESTART, False, "rltrain:workloads.allowRunRestart")
    w = cfg().workloads.model_copy(update={"allow_run_restart": True})
    [i] = impact.classify(rows(), after, cfg(workloads=w))
    assert i.allowed


# --- run lifecycle -----------------------------------------------------------------------------


def test_replacing_a_run_waits_for_the_old_one():
    job = find(rows(), "kubernetes:batch/v1:Job", "workloads-single-node-job")
    assert deploy_model.replacement_sequence(job) == [
        "delete the old object (its pods get SIGTERM and their grace period)",
        "wait until the old object is gone", "create the new object"]


def test_run_replacement_rule_fails_on_the_old_job_options():
    """Fixed name + delete-before-replace + skipAwait: the provider skips the deletion wait."""
    rs = rows()
    job = find(rs, "kubernetes:batch/v1:Job", "workloads-single-node-job")
    job["inputs"]["metadata"]["annotations"].pop("pulumi.com/waitFor")
    job["inputs"]["metadata"]["annotations"]["pulumi.com/skipAwait"] = "true"
    [v] = policy.evaluate(rs, rules=["run-replacement"])
    assert v.resource == "Job/rltrain-training" and "AlreadyExists" in v.message
    # The MPIJob keeps skipAwait: for a custom resource the deletion is still awaited.
    assert find(rs, "kubernetes:kubeflow.org/v2beta1:MPIJob")["inputs"]["metadata"]["annotations"][
        "pulumi.com/skipAwait"] == "true"


@pytest.mark.parametrize("stack", ["byo", "dev", "p4de", "p5"])
def test_no_run_deletes_itself_after_finishing(stack):
    for r in rendered(stack).resources:
        kind = r["inputs"].get("kind")
        if kind == "Job":
            assert "ttlSecondsAfterFinished" not in r["inputs"]["spec"]
        if kind == "MPIJob":
            assert "ttlSecondsAfterFinished" not in r["inputs"]["spec"]["runPolicy"]


def test_two_byo_stacks_on_one_cluster_share_nothing_cluster_wide(project):
    second = yaml.safe_load((project / "Pulumi.byo.yaml").read_text())
    second["config"].setdefault("rltrain:training", {})["namespace"] = "team-b"
    (project / "Pulumi.byo2.yaml").write_text(yaml.safe_dump(second))
    owned = [set(deploy_model.owned_cluster_wide(render.render_stack(s, project).resources)) for s in ("byo", "byo2")]
    assert owned[0] and owned[1] and not owned[0] & owned[1], owned
    # No operator, device plugin or other Helm release on a cluster the stack does not own.
    assert not [o for o in owned[0] | owned[1] if o.startswith(("Helm release", "manifest"))]


def test_summary_lists_what_the_stack_owns_cluster_wide():
    text = render.summary(rendered("p5"))
    assert "cluster-wide objects this stack owns: " in text
    assert "Helm release kube-system/aws-efa-k8s-device-plugin (aws-efa-k8s-device-plugin v0.5.30)" in text
    assert "PriorityClass rltrain-training" in text


def test_a_quantity_written_another_way_changes_nothing():
    """The API server stores one canonical form (5120Mi is 5Gi) and the provider diffs against it."""
    before, after = rows(), rows()
    for r, value in ((before, "5120Mi"), (after, "5Gi")):
        c = find(r, "kubernetes:batch/v1:Job", "workloads-multi-node-job")["inputs"]["spec"]["template"]["spec"][
            "containers"][0]
        c["resources"]["limits"]["hugepages-2Mi"] = c["resources"]["requests"]["hugepages-2Mi"] = value
    assert impact.classify(before, after, cfg()) == []
    c["resources"]["limits"]["hugepages-2Mi"] = "6Gi"
    assert kinds(impact.classify(before, after, cfg())) == {"workloads-multi-node-job": impact.RUN_RESTART}


# --- a claim from a storage class (bring your own cluster) --------------------------------------
# What the API server does was measured on the simulated cluster (tests/sim/test_day_two.py,
# scenario 5): it grows a bound claim only when the class sets allowVolumeExpansion, never shrinks one.


def test_growing_a_claim_from_a_storage_class_needs_the_class_opt_in(project):
    edit(project, "byo", "storage", claimSizeGiB=2400)
    [c] = [i for i in render_impact(project, "byo") if i.name == "storage-claim"]
    assert (c.kind, c.allowed, c.opt_in) == (impact.REFUSED, False, "rltrain:storage.allowClaimExpansion")
    assert "1200Gi -> 2400Gi" in c.why and "allowVolumeExpansion: true" in c.why
    edit(project, "byo", "storage", claimSizeGiB=2400, allowClaimExpansion=True)
    [c] = [i for i in render_impact(project, "byo") if i.name == "storage-claim"]
    assert (c.kind, c.allowed) == (impact.IN_PLACE, True)


def test_shrinking_a_claim_from_a_storage_class_is_refused_even_with_the_opt_in(project):
    edit(project, "byo", "storage", claimSizeGiB=600, allowClaimExpansion=True)
    [c] = [i for i in render_impact(project, "byo") if i.name == "storage-claim"]
    assert (c.kind, c.allowed, c.opt_in) == (impact.REFUSED, False, "")
    assert "1200Gi -> 600Gi" in c.why and "never shrinks" in c.why


# --- day two in place (issue 34) -------------------------------------------------------------------


def test_a_priority_change_is_a_new_class_and_restarts_the_runs_that_name_it(project):
    """A PriorityClass's value may not be changed in an update (the simulated cluster's preview:
    `value: Forbidden: may not be changed in an update`), and a class replaced under its own name
    fails the preview's dry run too: the value is in the name, a new value a new class."""
    edit(project, "p5", "workloads", priority=2000000)
    k = kinds(render_impact(project))
    assert k.pop("workloads-priority") == impact.REPLACE
    # The runs that name it are recreated (their template names the new class): opt-in.
    assert k == {"workloads-single-node-job": impact.RUN_RESTART, "workloads-multi-node-job": impact.RUN_RESTART,
                 "workloads-staging-job": impact.RUN_RESTART}, k
    names = {r["inputs"]["metadata"]["name"] for r in render.render_stack("p5", project).resources
             if r["type"] == "kubernetes:scheduling.k8s.io/v1:PriorityClass"}
    assert names == {"rltrain-training-2000000", "rltrain-validation-1000200", "rltrain-nccl-test-1000100"}


def test_a_priority_change_under_the_same_name_is_refused():
    """The model without the value in the name: the API server would refuse the update."""
    after = rows()
    find(after, "kubernetes:scheduling.k8s.io/v1:PriorityClass", "workloads-priority")["inputs"]["value"] = 7
    [i] = impact.classify(rows(), after, cfg())
    assert (i.kind, i.allowed) == (impact.REFUSED, False) and "may not be changed in an update" in i.why
    # A description is not immutable: in place.
    after = rows()
    find(after, "kubernetes:scheduling.k8s.io/v1:PriorityClass", "workloads-priority")["inputs"]["description"] = "x"
    [i] = impact.classify(rows(), after, cfg())
    assert i.kind == impact.IN_PLACE


def test_a_deadline_change_is_in_place_on_a_template_kueue_can_own_the_selector_of(project):
    """maxRunMinutes changes only activeDeadlineSeconds (mutable): in place. It applies for real only
    because no run template sets nodeSelector, the field Kueue writes on admission (the simulated
    cluster: `conflict with "kueue" ... .spec.template.spec.nodeSelector`)."""
    edit(project, "p5", "workloads", maxRunMinutes=2000)
    k = kinds(render_impact(project))
    assert k and set(k.values()) == {impact.IN_PLACE}, k
    for r in render.render_stack("p5", project).resources:
        obj = r["inputs"]
        if r["type"].startswith("kubernetes:") and obj.get("kind") in ("Job", "MPIJob", "RayJob"):
            assert '"nodeSelector"' not in json.dumps(obj), r["name"]


def test_a_job_s_immutable_fields_replace_it_and_without_the_option_are_refused(project):
    """`workloads.failFastExitCodes` is the Jobs' podFailurePolicy, immutable (the sweep's real
    preview: `spec.podFailurePolicy: ... field is immutable`): the program replaces the runs on it;
    a Job without that option would be refused."""
    edit(project, "p5", "workloads", failFastExitCodes=[3])
    k = kinds(render_impact(project))
    assert k == {"workloads-single-node-job": impact.RUN_RESTART, "workloads-multi-node-job": impact.RUN_RESTART}, k
    before, after = rows(), rows()
    for r in (before, after):
        find(r, "kubernetes:batch/v1:Job", "workloads-single-node-job")["options"]["replaceOnChanges"] = [
            "metadata.labels"]
    find(after, "kubernetes:batch/v1:Job", "workloads-single-node-job")["inputs"]["spec"]["podFailurePolicy"] = {
        "rules": []}
    [i] = impact.classify(before, after, cfg())
    assert (i.kind, i.allowed) == (impact.REFUSED, False) and "immutable" in i.why
