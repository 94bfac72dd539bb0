"""No rule depends on the order of the resources (issue 18): the engine hands a stack policy its
resources in no set order (it iterates a map; FACTS "PR review as GitHub runs it"), so every rule
gives the same violations, in the same order, for any order of the same resources.

Checked on the outputs recorded from a real preview (tests/fixtures/policy/sim-preview.json, as the
pack sees them), on the render's inputs of every stack (rendered/<stack>/resources.json), and on
stacks built to have two of what the rules once took one of: two GPU node groups with their own
launch templates and security groups, two Namespaces, two Helm releases of one chart, a name two
resources share. Each is evaluated in its own order, reversed and shuffled with fixed seeds.
"""

from __future__ import annotations

import base64
import copy
import json
import random
import sys
from typing import Any

import pytest

from components.offline import deploy_model, policy, schedule
from components.offline.mock_engine import ROOT

sys.path.insert(0, str(ROOT / "policy"))
import pack  # noqa: E402

Row = dict[str, Any]
STACKS = ("byo", "dev", "p4de", "p5", "sim")
SEEDS = (0, 1, 2, 3, 4)
FIXTURE = ROOT / "tests" / "fixtures" / "policy" / "sim-preview.json"


def committed(stack: str) -> list[Row]:
    return json.loads((ROOT / "rendered" / stack / "resources.json").read_text())


def recorded() -> list[Row]:
    """The real preview's resources as the pack's rules see them (cut to the Pulumi-managed fields)."""
    return [{**r, "inputs": pack.declared(r["inputs"])} if r["type"].startswith("kubernetes:") else r
            for r in json.loads(FIXTURE.read_text())]


def orders(rows: list[Row]) -> list[tuple[str, list[Row]]]:
    out = [("as recorded", list(rows)), ("reversed", list(reversed(rows)))]
    for seed in SEEDS:
        shuffled = list(rows)
        random.Random(seed).shuffle(shuffled)
        out.append((f"seed {seed}", shuffled))
    return out


def verdict(rows: list[Row]) -> dict[str, list[str]]:
    """What the render and the pack say of a record: the violations (with the resource each is
    reported on), and the render's order-sensitive summaries (schedule, network flows)."""
    rows = copy.deepcopy(rows)
    return {"violations": [f"{v} @{v.pulumi_name}" for v in policy.evaluate(rows)],
            "schedule": schedule.report(rows), "flows": deploy_model.flow_table(rows)}


def assert_same_in_every_order(rows: list[Row]) -> dict[str, list[str]]:
    first = verdict(rows)
    for label, shuffled in orders(rows):
        assert verdict(shuffled) == first, label
    return first


# --- records built with two of a kind ---------------------------------------------------------------

def _row(rows: list[Row], name: str) -> Row:
    return next(r for r in rows if r["name"] == name)


def _user_data(topology: str) -> str:
    text = ("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"//b//\"\n\n--//b//\n"
            "Content-Type: application/node.eks.aws\n\n---\napiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\n"
            f"spec:\n  kubelet:\n    config:\n      cpuManagerPolicy: none\n      topologyManagerPolicy: {topology}\n"
            "\n--//b//--\n")
    return base64.b64encode(text.encode()).decode()


def two_gpu_node_groups() -> list[Row]:
    """p5 with a second GPU node group `gpu-nodes-b`: its own labels, its own launch template
    (`single-numa-node`, which rejects a whole-node pod) and its own security group with no rule."""
    rows = copy.deepcopy(committed("p5"))
    lt, group, sg = (copy.deepcopy(_row(rows, n)) for n in ("gpu-lt", "gpu-nodes", "gpu-sg"))
    sg["name"] = "gpu-b-sg"
    lt["name"] = "gpu-lt-b"
    lt["inputs"]["userData"] = _user_data("single-numa-node")
    for nic in lt["inputs"]["networkInterfaces"]:
        nic["securityGroups"] = ["[known after deploy: gpu-b-sg.id]"]
    group["name"] = "gpu-nodes-b"
    group["inputs"]["labels"] = {**group["inputs"]["labels"], "role": "gpu-training-b"}
    group["inputs"]["launchTemplate"] = {"id": "[known after deploy: gpu-lt-b.id]",
                                         "version": "[known after deploy: gpu-lt-b.latestVersion]"}
    return rows + [sg, lt, group]


def two_instance_types() -> list[Row]:
    """dev records its instance type on two Namespaces; here they disagree."""
    rows = copy.deepcopy(committed("dev"))
    ns = _row(rows, "monitoring-namespace")
    ns["inputs"]["metadata"]["annotations"]["rltrain/gpu-instance-type"] = "p5.48xlarge"
    return rows


def shared_name() -> list[Row]:
    """A ConfigMap registered under the same Pulumi name as the training Job (names are unique per
    type only), ordered after nothing."""
    rows = copy.deepcopy(committed("p5"))
    job = _row(rows, "workloads-single-node-job")
    rows.insert(0, {**copy.deepcopy(job), "type": "kubernetes:core/v1:ConfigMap", "dependsOn": [], "parent": None,
                    "inputs": {"apiVersion": "v1", "kind": "ConfigMap",
                               "metadata": {"name": "notes", "namespace": "rltrain"}, "data": {"a": "b"}}})
    return rows


def broken(stack: str) -> list[Row]:
    """Several violations of one rule across resources (their order once followed the record's)."""
    rows = copy.deepcopy(committed(stack))
    for r in rows:
        spec = ((r["inputs"].get("spec") or {}).get("template") or {}).get("spec") or {}
        for c in spec.get("containers") or []:
            c["image"] = "repo/rl:latest"
            c.setdefault("env", []).append({"name": "HF_TOKEN", "value": "hf_x"})
    return rows


# --- every order, one verdict --------------------------------------------------------------------

def test_the_recorded_preview_in_any_order():
    assert assert_same_in_every_order(recorded())["violations"] == []


@pytest.mark.parametrize("stack", STACKS)
def test_the_render_in_any_order(stack):
    assert assert_same_in_every_order(committed(stack))["violations"] == []


@pytest.mark.parametrize("stack", ("byo", "p5"))
def test_many_violations_come_in_one_order(stack):
    found = assert_same_in_every_order(broken(stack))["violations"]
    images = [v for v in found if v.startswith("[image-pinned]")]
    assert len(images) >= 3 and images == sorted(images)


def test_two_gpu_node_groups_each_checked_with_its_own_template_and_groups():
    """Before: the kubelet policy was whichever launch template came last (the single-numa-node
    violation came and went with the order), the network flows were checked for the last GPU node
    group only, and their carrying rule was the first in the record."""
    found = assert_same_in_every_order(two_gpu_node_groups())
    numa = [v for v in found["violations"] if v.startswith("[numa-policy-admits]")]
    assert numa and all("topologyManagerPolicy single-numa-node (launch template gpu-lt-b) on p5.48xlarge" in v
                        for v in numa)
    assert {v.split(":", 1)[0] for v in numa} >= {"[numa-policy-admits] Job/rltrain-training",
                                                  "[numa-policy-admits] Job/rltrain-multinode"}
    flows = [v for v in found["violations"] if v.startswith("[network-flows]")]
    assert flows and all("gpu-nodes-b" in v for v in flows)  # gpu-nodes (the original group) is fine
    assert "flow GPU node <-> GPU node, all traffic (EFA, NCCL) (gpu-nodes-b)" in " ".join(flows)
    # FSx flows for the groups its clients can land on: the pods select gpu-nodes' role, not -b's.
    fsx = [line for line in found["flows"] if "FSx Lustre" in line and "GPU nodes" in line]
    assert fsx and not any("gpu-nodes-b" in line for line in fsx)


def test_a_pod_fits_when_one_gpu_node_group_takes_it():
    rows = two_gpu_node_groups()
    spec = next(r for r in rows if r["name"] == "workloads-single-node-job")["inputs"]["spec"]["template"]["spec"]
    spec["nodeSelector"] = {"role": "gpu-training-b"}  # the second group's label: fits
    assert [v for v in policy.evaluate(rows, rules=["schedules-on-gpu-nodes"])] == []
    spec["nodeSelector"] = {"role": "gpu-inference"}  # neither
    [v] = policy.evaluate(rows, rules=["schedules-on-gpu-nodes"])
    assert v.message == ("fits none of the GPU node groups: gpu-nodes: node selector {'role': 'gpu-inference'} matches "
                         "no GPU node group (labels {'nvidia.com/gpu.present': 'true', 'rltrain/instance-type': "
                         "'p5.48xlarge', 'role': 'gpu-training'}); gpu-nodes-b: node selector {'role': 'gpu-inference'} "
                         "matches no GPU node group (labels {'nvidia.com/gpu.present': 'true', 'rltrain/instance-type': "
                         "'p5.48xlarge', 'role': 'gpu-training-b'})")


def test_the_gpu_node_requirement_is_read_from_required_node_affinity():
    """The program requires the GPU nodes by node affinity (Kueue owns nodeSelector: issue 34): the
    rule reads that form too, so a wrong role there is found as one in a nodeSelector would be."""
    rows = two_gpu_node_groups()
    spec = next(r for r in rows if r["name"] == "workloads-single-node-job")["inputs"]["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec
    [expr] = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchExpressions"]
    assert expr == {"key": "role", "operator": "In", "values": ["gpu-training"]}
    assert [v for v in policy.evaluate(rows, rules=["schedules-on-gpu-nodes"])] == []
    expr["values"] = ["gpu-inference"]
    [v] = policy.evaluate(rows, rules=["schedules-on-gpu-nodes"])
    assert "gpu-nodes: node selector {'role': 'gpu-inference'} matches no GPU node group" in v.message


def test_two_namespaces_disagreeing_on_the_instance_type_are_ambiguous_in_any_order():
    """Before: the instance type was the last annotated Namespace's; gpu-count passed or refused every
    GPU pod depending on which of the two came last."""
    found = assert_same_in_every_order(two_instance_types())["violations"]
    gpu = [v for v in found if v.startswith("[gpu-count]")]
    assert gpu == ["[gpu-count] policy rule gpu-count: rule gpu-count cannot read the GPU instance type (annotation "
                   "rltrain/gpu-instance-type of the training Namespace): the Namespaces record different instance "
                   "types (monitoring: p5.48xlarge, rltrain: g6.12xlarge): which one the workloads are sized for is "
                   "ambiguous. A rule that reads nothing checks nothing. Fix: the pack reads each resource's outputs "
                   "(policy/pack.py): read the field where the engine sends it, or send it "
                   "(tests/test_policy_outputs.py) @"]


def test_a_shared_name_does_not_change_the_pods_row():
    """Before: deploy-order took the first custom row with the Job's name; a ConfigMap of that name
    listed first made the Job look unordered."""
    assert [v for v in assert_same_in_every_order(shared_name())["violations"]
            if v.startswith("[deploy-order]")] == []


def test_two_releases_of_one_chart_any_of_them_orders_the_run():
    rows = copy.deepcopy(committed("p5"))
    plugin = next(r for r in rows if r["type"] == "kubernetes:helm.sh/v3:Release"
                  and r["inputs"].get("chart") == "nvidia-device-plugin")
    rows.insert(0, {**copy.deepcopy(plugin), "name": "another-nvidia-plugin", "dependsOn": []})
    assert [v for v in assert_same_in_every_order(rows)["violations"] if v.startswith("[deploy-order]")] == []


def test_two_namespaces_disagreeing_on_the_node_count_are_ambiguous_in_any_order():
    """Before: the schedule silently took the larger count; now the rules that place runs on them say so."""
    rows = copy.deepcopy(committed("dev"))
    _row(rows, "monitoring-namespace")["inputs"]["metadata"]["annotations"]["rltrain/gpu-node-count"] = "4"
    found = assert_same_in_every_order(rows)["violations"]
    assert [v.split(":", 1)[0] for v in found] == ["[schedule-fits] policy rule schedule-fits",
                                                   "[rollout-fits] policy rule rollout-fits"]
    assert all("the Namespaces record different GPU node counts (monitoring: 4, rltrain: 2)" in v for v in found)
