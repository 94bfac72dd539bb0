"""Replacement guard: a change that replaces FSx, the GPU node group or the cluster is refused."""

import copy
import shutil

import pytest
import yaml
from support import rendered

from components.offline import render
from components.offline import replacement
from components.offline.mock_engine import ROOT


def rows(stack="p5"):
    return copy.deepcopy(rendered(stack).resources)


def fsx(rs):
    return next(r for r in rs if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem")["inputs"]


def test_unchanged_stack_replaces_nothing():
    assert replacement.replacements(rows(), rows()) == []


def test_capacity_decrease_replaces_fsx_increase_does_not():
    after = rows()
    fsx(after)["storageCapacity"] = 2400
    [r] = replacement.replacements(rows(), after)
    assert "storageCapacity 4800 -> 2400" in r.message() and "its data is lost" in r.message()
    fsx(after)["storageCapacity"] = 7200
    assert replacement.replacements(rows(), after) == []


@pytest.mark.parametrize("path,value", [("kmsKeyId", "other"), ("subnetIds", "subnet-b"),
                                        ("deploymentType", "PERSISTENT_1")])
def test_fsx_replacing_inputs(path, value):
    after = rows()
    fsx(after)[path] = value
    assert [r.guard.what for r in replacement.replacements(rows(), after)] == ["the FSx file system"]


def test_node_group_instance_type_change_and_removal():
    after = rows()
    ng = next(r for r in after if r["type"] == "aws:eks/nodeGroup:NodeGroup")
    ng["inputs"]["instanceTypes"] = ["p5en.48xlarge"]
    [r] = replacement.replacements(rows(), after)
    assert "running training pods are killed" in r.message()
    assert "rltrain:gpuNodes.allowReplacement: true" in r.message()
    gone = [r for r in rows() if r["type"] != "aws:fsx/lustreFileSystem:LustreFileSystem"]
    assert [r.change for r in replacement.replacements(rows(), gone)] == ["removed from the stack"]


def test_scaling_and_labels_do_not_replace():
    after = rows()
    ng = next(r for r in after if r["type"] == "aws:eks/nodeGroup:NodeGroup")
    ng["inputs"]["scalingConfig"]["desiredSize"] = 4
    ng["inputs"]["labels"]["team"] = "rl"
    assert replacement.replacements(rows(), after) == []


@pytest.fixture
def project(tmp_path):
    """A scratch copy of the project (stack file, snapshot) to edit and render."""
    proj = tmp_path / "proj"
    (proj / "rendered" / "p5").mkdir(parents=True)
    for name in ("__main__.py", "Pulumi.yaml", "Pulumi.p5.yaml"):
        shutil.copy(ROOT / name, proj / name)
    shutil.copy(ROOT / "rendered" / "p5" / "resources.json", proj / "rendered" / "p5" / "resources.json")
    (proj / "components").symlink_to(ROOT / "components")
    return proj


def edit(proj, **storage):
    path = proj / "Pulumi.p5.yaml"
    doc = yaml.safe_load(path.read_text())
    fsx_cfg = doc["config"]["rltrain:storage"]
    for k, v in storage.items():
        (fsx_cfg if k == "allowReplacement" else fsx_cfg["fsx"])[k] = v
    path.write_text(yaml.safe_dump(doc))


def test_render_refuses_capacity_decrease_until_allowed(project, capsys):
    out = project / "out"
    edit(project, storageCapacityGiB=2400)
    assert render.main(["--stack", "p5", "--project-dir", str(project), "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "REFUSED: this change replaces the FSx file system" in err and "its data is lost" in err
    assert not out.exists()
    edit(project, storageCapacityGiB=2400, allowReplacement=True)
    assert render.main(["--stack", "p5", "--project-dir", str(project), "--out", str(out)]) == 0
    assert "warning: this change replaces the FSx file system" in capsys.readouterr().err
    assert (out / "resources.json").exists()


def test_render_refuses_moving_fsx_to_another_subnet(project, capsys):
    path = project / "Pulumi.p5.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["config"]["rltrain:network"]["gpuAvailabilityZone"] = "us-east-1b"
    path.write_text(yaml.safe_dump(doc))
    assert render.main(["--stack", "p5", "--project-dir", str(project), "--out", str(project / "out")]) == 1
    err = capsys.readouterr().err
    assert "replaces the FSx file system (storage-fs: subnetIds" in err and "its data is lost" in err
    assert "replaces the GPU node group (gpu-nodes: subnetIds" in err
