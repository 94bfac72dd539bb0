"""Every rule reads what the engine sends (issue 18): a rule that applies to the stack and finds nothing
to read is a violation of that rule, not a pass.

Driven through the pack's own code path without the CLI: the recorded real preview
(tests/fixtures/policy/sim-preview.json, `python -m cluster.record_policy_input`) becomes the
pulumi-policy `PolicyResource`s the analyzer builds (properties behind pulumi-policy's read-only
proxy), and each rule's validator from policy/pack.py runs on them as on `pulumi preview
--policy-pack policy`: resource_view, declared (the Pulumi-managed fields), policy.evaluate.
"""

from __future__ import annotations

import copy
import json
import sys
from typing import Any

import pulumi_policy
import pytest
from pulumi_policy.proxy import unknown_checking_proxy

from components.offline import policy
from components.offline.resources import POD_TEMPLATES, coverage, unread
from components.offline.mock_engine import ROOT, UNKNOWN
from components.stack.labels import GPU_INSTANCE_ANNOTATION

sys.path.insert(0, str(ROOT / "policy"))
import pack  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "policy" / "sim-preview.json"
STACK_URN = "urn:pulumi:sim::rltrain::pulumi:pulumi:Stack::rltrain-sim"


@pytest.fixture(scope="module")
def sent() -> list[dict[str, Any]]:
    return json.loads(FIXTURE.read_text())


def _urn(r: dict[str, Any]) -> str:
    return f"urn:pulumi:sim::rltrain::{r['type']}::{r['name']}"


def policy_resources(rows: list[dict[str, Any]]) -> list[pulumi_policy.PolicyResource]:
    """The rows as pulumi-policy hands them to a stack policy: props behind its proxy, options,
    provider, parent and dependencies as objects."""
    opts = [pulumi_policy.PolicyResourceOptions(r["options"]["protect"], [], r["options"]["deleteBeforeReplace"],
                                                [], None, []) for r in rows]
    out = [pulumi_policy.PolicyResource(r["type"], unknown_checking_proxy(copy.deepcopy(r["inputs"])), _urn(r),
                                        r["name"], o, None, None, [], {}) for r, o in zip(rows, opts)]
    by_ref = {f"{r['type']}::{r['name']}": p for r, p in zip(rows, out)}
    components = {r["name"]: p for r, p in zip(rows, out) if not r.get("custom")}
    for r, p in zip(rows, out):
        p.dependencies = [by_ref[d] for d in r.get("dependsOn") or [] if d in by_ref]
        p.parent = components.get(r.get("parent") or "")
        if r.get("provider"):
            type_, name = r["provider"].split("::", 1)
            p.provider = pulumi_policy.PolicyProviderResource(type_, {}, f"urn:pulumi:sim::rltrain::{type_}::{name}", name)
    return out


def run_pack(rows: list[dict[str, Any]], rules=None) -> dict[str, list[tuple[str, str]]]:
    """rule -> [(message, urn)] the pack's validators report (the analyzer sends each as a mandatory
    diagnostic of that policy, its description before the message)."""
    resources = policy_resources(rows)
    args = pulumi_policy.StackValidationArgs(resources)
    found: dict[str, list[tuple[str, str]]] = {}
    for name in rules or policy.RULES:
        reported: list[tuple[str, str]] = []
        pack._validator(name, log=lambda line: None)(args, lambda message, urn=None: reported.append((message, urn)))
        if reported:
            found[name] = reported
    return found


def views(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the rules see in the pack (resource_view: plain values, Kubernetes objects cut down)."""
    return [pack.resource_view(p) for p in policy_resources(rows)]


def job(rows, name="workloads-validation-job") -> dict[str, Any]:
    return next(r for r in rows if r["name"] == name)


# --- the real preview: every applicable rule reads every object it applies to --------------------

PODS = ("pod templates", 6, 6)  # 5 Jobs and the NCCL MPIJob
INSTANCE = ("instance type", 1, 1)  # the training Namespace
NODES = ("node count", 1, 1)
DEPENDS = ("dependencies", 52, 52)
# rule -> (what, resources in scope, resources read) for each read that applies to the sim stack.
EXPECTED = {
    "gpu-count": [PODS, INSTANCE], "efa-count": [PODS, INSTANCE], "efa-env-needs-efa": [PODS],
    "shm-memory": [PODS], "image-pinned": [PODS], "pod-fits-node": [PODS, INSTANCE], "efa-hugepages": [PODS],
    "one-pod-per-node": [PODS, INSTANCE], "placement-uses-every-node": [PODS], "schedules-on-gpu-nodes": [PODS],
    "job-deadline": [("Job, MPIJob", 6, 6)], "no-plain-secret-env": [PODS],
    "pv-retain": [("PersistentVolume", 1, 1)],  # the claim (the sim stack's volume is dynamic)
    "deploy-order": [DEPENDS, PODS], "create-time-validation": [DEPENDS], "iam-before-use": [DEPENDS],
    "run-replacement": [("metadata of every Job", 6, 6)],
    "network-policy": [PODS, ("NetworkPolicy", 7, 7)],
    "schedule-fits": [PODS, INSTANCE, NODES], "rollout-fits": [PODS, INSTANCE, NODES],
    "kueue-queue": [PODS, ("LocalQueue", 1, 1), ("ClusterQueue", 1, 1)],
    "gpu-runs-queued": [PODS, ("LocalQueue", 1, 1)],
    "numa-policy-admits": [PODS, INSTANCE],
}
# Nothing of theirs on a bring-your-own cluster (no AWS resources, no node groups): not an error.
NOTHING_IN_SCOPE = {"stateful-protected", "imdsv2", "endpoint-not-open", "addon-conflicts", "network-flows",
                    "least-privilege", "gpu-roll-opt-in"}


def test_every_rule_is_accounted_for():
    assert set(EXPECTED) | NOTHING_IN_SCOPE == set(policy.RULES)
    assert all(rule.reads for rule in policy.RULES.values())  # every rule declares what it reads


def test_the_real_preview_every_applicable_rule_reads_what_it_checks(sent):
    rows = views(sent)
    for name in policy.RULES:
        got = [(c.what, len(c.scope), len(c.read)) for c in coverage(rows, policy.RULES[name]) if c.applies]
        want = EXPECTED.get(name, [])
        assert [(n, r) for _, n, r in got] == [(n, r) for _, n, r in want], name
        assert all(w in what for (what, _, _), (w, _, _) in zip(got, want)), (name, got)
        assert not any(c.failed for c in coverage(rows, policy.RULES[name])), name
    for name in NOTHING_IN_SCOPE:
        # network-flows reads the pods too (where they land decides the flows): in scope, never
        # applying without security groups.
        assert all((not c.scope or name == "network-flows") and not c.applies
                   for c in coverage(rows, policy.RULES[name])), name


def test_the_real_preview_passes_the_pack(sent):
    assert run_pack(sent) == {}


# --- nothing to read is an error, through the pack --------------------------------------------------

def test_a_job_without_its_spec_is_an_error_of_every_rule_that_reads_it(sent):
    """What a component with no outputs looks like to a rule: the object is there, its fields are not."""
    rows = copy.deepcopy(sent)
    del job(rows)["inputs"]["spec"]
    found = run_pack(rows)
    readers = {name for name, rule in policy.RULES.items() if POD_TEMPLATES in rule.reads}
    assert set(found) == readers | {"job-deadline"}
    urn = _urn(job(rows))
    # The rule's own verdict on an object without a deadline stays; the unread one comes first.
    (message, at), own = found["job-deadline"]
    assert own == ("Job/rltrain-validation: no activeDeadlineSeconds: a hung "
                   "collective burns GPUs forever. Fix: set a deadline (rltrain:workloads.maxRunMinutes + 10 min)", urn)
    assert at == urn
    assert message.startswith("Job workloads-validation-job: rule job-deadline "
                              "read nothing of Job workloads-validation-job (it was sent: apiVersion, kind, metadata): "
                              "expected spec of every Job, MPIJob (5 of 6 read)")
    [(message, at)] = found["gpu-count"]
    assert at == urn and "rule gpu-count read nothing of Job workloads-validation-job" in message
    assert "expected the pod templates (spec.template.spec.containers" in message


def test_no_workload_readable_at_all_is_an_error_not_a_pass(sent):
    """Before: every Job and the MPIJob without spec, and each pod rule passed (it found no pod)."""
    rows = copy.deepcopy(sent)
    for r in rows:
        if r["type"].startswith("kubernetes:") and r["inputs"].get("kind") in ("Job", "MPIJob"):
            del r["inputs"]["spec"]
    rules = ["shm-memory", "image-pinned", "job-deadline"]
    found = run_pack(rows, rules)
    assert sorted(found) == sorted(rules)
    [(message, urn)] = found["shm-memory"]
    assert urn is None  # six objects: the stack's diagnostic
    assert "policy rule shm-memory: rule shm-memory read nothing of Job workloads-multi-node-job, " in message
    assert "MPIJob workloads-nccl-test-mpijob" in message and "(0 of" not in message


def test_the_offline_evaluation_says_the_same(sent):
    """The render runs policy.evaluate on its own record: the same violation there."""
    rows = views(sent)
    next(r for r in rows if r["name"] == "workloads-validation-job")["inputs"].pop("spec")
    v, own = policy.evaluate(rows, rules=["job-deadline"])
    assert (v.rule, v.resource, v.pulumi_name) == ("job-deadline", "Job workloads-validation-job",
                                                   "workloads-validation-job")
    assert "read nothing of Job workloads-validation-job" in v.message
    assert own.resource == "Job/rltrain-validation" and own.pulumi_name == "workloads-validation-job"


def test_without_the_instance_type_the_sizing_rules_say_so(sent):
    rows = copy.deepcopy(sent)
    ns = next(r for r in rows if r["inputs"].get("kind") == "Namespace")
    del ns["inputs"]["metadata"]["annotations"][GPU_INSTANCE_ANNOTATION]
    found = run_pack(rows, ["gpu-count", "pod-fits-node", "schedule-fits", "shm-memory"])
    assert sorted(found) == ["gpu-count", "pod-fits-node", "schedule-fits"]
    [(message, urn)] = found["gpu-count"]
    assert urn == _urn(ns) and "rule gpu-count read nothing: expected the GPU instance type (annotation " \
        "rltrain/gpu-instance-type of the training Namespace), found in none of Namespace training-namespace" in message


def test_two_namespaces_recording_different_instance_types_are_ambiguous(sent):
    rows = copy.deepcopy(sent)
    ns = next(r for r in rows if r["inputs"].get("kind") == "Namespace")
    other = copy.deepcopy(ns)
    other["name"], other["inputs"]["metadata"]["name"] = "monitoring-namespace", "monitoring"
    other["inputs"]["metadata"]["annotations"][GPU_INSTANCE_ANNOTATION] = "p4de.24xlarge"
    rows.append(other)
    found = run_pack(rows, ["gpu-count"])
    [(message, urn)] = found["gpu-count"]
    assert "the Namespaces record different instance types (monitoring: p4de.24xlarge, rltrain: p5.48xlarge)" \
        in message and urn is None


def test_a_value_unknown_until_deploy_is_not_an_error(sent):
    """A first preview: the pack reports what a rule could not see (policy/pack.py unseen_report)."""
    rows = views(sent)
    next(r for r in rows if r["name"] == "workloads-validation-job")["inputs"]["spec"] = UNKNOWN
    [c] = coverage(rows, policy.RULES["job-deadline"])
    assert (len(c.scope), len(c.read), c.unknown, c.missing, c.failed) == (
        6, 5, ("Job workloads-validation-job",), (), False)
    assert unread(rows, policy.RULES["job-deadline"]) == []


def test_endpoint_rule_without_settings_to_read_is_an_error():
    """The component's outputs only (no aws:eks/cluster:Cluster child): unread, not "open" nor a pass."""
    component = {"type": "eks:index:Cluster", "name": "cluster-eks", "custom": False, "parent": None,
                 "dependsOn": [], "provider": None, "inputs": {"kubeconfig": "{}"},
                 "options": {"protect": False, "deleteBeforeReplace": False}}
    [v] = policy.evaluate([component], rules=["endpoint-not-open"])
    assert v.resource == "Cluster cluster-eks" and v.pulumi_name == "cluster-eks"
    assert "read nothing: expected the endpoint settings" in v.message
