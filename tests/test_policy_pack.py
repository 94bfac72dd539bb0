"""The CrossGuard pack runs the same rule functions as the render (policy/pack.py)."""

import copy
import importlib.util
import sys

import pytest
from pulumi_policy import PolicyResource, PolicyResourceOptions, StackValidationArgs
from support import rendered

from components.offline import policy
from components.offline.mock_engine import ROOT


@pytest.fixture(scope="module")
def pack():
    sys.path.insert(0, str(ROOT / "policy"))
    spec = importlib.util.spec_from_file_location("rltrain_policy_pack", ROOT / "policy" / "pack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_policy_resources(rows):
    out = []
    for r in rows:
        opts = PolicyResourceOptions(protect=r["options"]["protect"], ignore_changes=[], delete_before_replace=None,
                                     aliases=[], custom_timeouts=None, additional_secret_outputs=[])
        out.append(PolicyResource(resource_type=r["type"], props=r["inputs"], urn=f"urn:pulumi:p5::rltrain::{r['name']}",
                                  name=r["name"], opts=opts, provider=None, parent=None, dependencies=[],
                                  property_dependencies={}))
    return out


def run_pack(pack, rows):
    reported = []
    for p in pack.policies():
        p.validate(StackValidationArgs(resources=as_policy_resources(rows)),
                   lambda message, urn=None, name=p.name: reported.append((name, message, urn)))
    return reported


def test_one_policy_per_rule(pack):
    assert [p.name for p in pack.policies()] == list(policy.RULES)


def test_pack_passes_the_committed_stacks(pack):
    assert run_pack(pack, rendered("p5").resources) == []


@pytest.mark.parametrize("mutate,rule", [
    (lambda c, s: c.update(image="repo/rl:latest"), "image-pinned"),
    (lambda c, s: c["resources"]["limits"].update({"vpc.amazonaws.com/efa": 4}), "efa-count"),
    (lambda c, s: s.update(volumes=[v for v in s["volumes"] if v["name"] != "dshm"]), "shm-memory"),
])
def test_pack_refuses_with_rule_name(pack, mutate, rule):
    rows = copy.deepcopy(rendered("p5").resources)
    job = next(r for r in rows if r["inputs"].get("kind") == "Job"
               and r["inputs"]["metadata"]["name"] == "rltrain-training")
    spec = job["inputs"]["spec"]["template"]["spec"]
    mutate(spec["containers"][0], spec)
    reported = run_pack(pack, rows)
    assert [name for name, _, _ in reported] == [rule]
    assert reported[0][2] == "urn:pulumi:p5::rltrain::workloads-single-node-job"
