"""The policy pack reads what a real preview sends (issue 18): for a Kubernetes object, its outputs,
the live object with status, server defaults and what controllers wrote. The fixture is recorded
from a real preview of the `sim` stack on the simulated cluster by
`python -m cluster.record_policy_input` (re-run it to refresh the file)."""

from __future__ import annotations

import copy
import json
import sys

import pytest

from components.offline import policy
from components.offline.mock_engine import ROOT

sys.path.insert(0, str(ROOT / "policy"))
import pack  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "policy" / "sim-preview.json"


@pytest.fixture(scope="module")
def sent():
    return json.loads(FIXTURE.read_text())


def _job(rows, name="workloads-validation-job"):
    return next(r for r in rows if r["name"] == name)["inputs"]


def test_the_engine_sends_outputs_not_inputs(sent):
    job = _job(sent)
    assert job["status"] and job["metadata"]["managedFields"]
    managers = {m["manager"].split("-")[0] for m in job["metadata"]["managedFields"]}
    assert {"pulumi", "kueue", "kube"} <= managers
    # Kueue wrote these; the program did not.
    assert job["spec"]["suspend"] is False
    assert job["spec"]["template"]["spec"]["nodeSelector"] == {
        "node.kubernetes.io/instance-type": "p5.48xlarge", "role": "gpu-training"}
    # A component sends only what it registers as outputs.
    comp = next(r for r in sent if r["type"] == "rltrain:workloads:ClusterValidation")
    assert set(comp["inputs"]) == {"job"}


def test_read_as_sent_the_rules_refuse_the_correct_stack(sent):
    """What the pack did before it cut objects down: a false refusal of every queued run."""
    found = {(v.rule, v.resource) for v in policy.evaluate(sent)}
    assert ("kueue-queue", "Job/rltrain-training") in found
    assert ("schedules-on-gpu-nodes", "Job/rltrain-validation") in found


def test_cut_down_to_what_the_program_applied_every_rule_passes(sent):
    rows = [{**r, "inputs": pack.declared(r["inputs"])} if r["type"].startswith("kubernetes:") else r
            for r in copy.deepcopy(sent)]
    assert policy.evaluate(rows) == []
    job = _job(rows)
    assert "status" not in job and "managedFields" not in job["metadata"] and "suspend" not in job["spec"]
    # Queued, the program leaves node selection to Kueue's flavor (it adds the flavor's labels).
    assert "nodeSelector" not in job["spec"]["template"]["spec"]
    assert job["spec"]["template"]["spec"]["tolerations"] == [
        {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "training"
    # List items by their keys: the trainer container and its env, as applied.
    [c] = job["spec"]["template"]["spec"]["containers"]
    assert c["name"] == "trainer" and c["resources"]["limits"]["nvidia.com/gpu"] == "8"


def test_an_object_without_the_pulumi_manager_is_kept():
    created = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}}
    assert pack.declared(created) == created
