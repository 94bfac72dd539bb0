"""The CrossGuard pack (policy/), driven through pulumi-policy's own analyzer entry point.

`pulumi preview --policy-pack policy` starts policy/__main__.py, whose PolicyPack serves a
`pulumi_policy.policy._PolicyAnalyzerServicer`; the engine calls its `AnalyzeStack` with an
`AnalyzeStackRequest`. These tests build that request from the committed renders
(rendered/<stack>/resources.json) the way the engine sends it: properties as protobuf Structs,
secrets as the secret signature object, values not known yet as the engine's unknown sentinel,
`protect` in the options, a URN per resource. pulumi-policy then wraps the properties in its
read-only proxies, exactly as on a real preview.
"""

from __future__ import annotations

import copy
import json
import re
import runpy
import sys
from typing import Any

import pulumi_policy
import pytest
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import proto  # what pulumi_policy.policy builds its responses from
from pulumi_policy.deserialize import SPECIAL_SECRET_SIG, SPECIAL_SIG_KEY
from pulumi_policy.policy import _PolicyAnalyzerServicer
from pulumi_policy.proxy import UNKNOWN_STRING_VALUE, unknown_checking_proxy  # the engine's unknown; the wrapper

import preview_records
from components.offline import policy
from components.offline.resources import POD_TEMPLATES
from components.offline.mock_engine import ROOT, UNKNOWN
from components.stack.stackfile import SECRET

STACKS = ("byo", "dev", "p4de", "p5")
PROJECT = "rltrain"
AFTER_DEPLOY = re.compile(r"\[known after deploy: [^\]]*\]")
PLAINTEXT = "plaintext-the-render-hides"  # what a `[secret]` of the render stands for on the wire
# The slow tier: each analyzer call wraps every resource of a stack in pulumi-policy's proxies (seconds
# per call, ~25 calls). The rules themselves are in the default tier (tests/test_policy.py).
pytestmark = pytest.mark.slow


# --- the pack, as the CLI loads it ---------------------------------------------------------------

@pytest.fixture(scope="module")
def pack_args(monkeypatch_module):
    """Run policy/__main__.py with PolicyPack captured instead of served (it would block forever)."""
    captured: dict[str, Any] = {}
    monkeypatch_module.setattr(pulumi_policy, "PolicyPack", lambda **kwargs: captured.update(kwargs))
    monkeypatch_module.syspath_prepend(str(ROOT / "policy"))
    runpy.run_path(str(ROOT / "policy" / "__main__.py"), run_name="__main__")
    return captured


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


@pytest.fixture(scope="module")
def pack(pack_args):
    return sys.modules["pack"]


@pytest.fixture(scope="module")
def analyzer(pack_args):
    """The servicer PolicyPack.__init__ builds (pulumi_policy/policy.py), minus the gRPC server."""
    return _PolicyAnalyzerServicer(pack_args["name"], "0.0.1", pack_args["policies"],
                                   pack_args.get("enforcement_level") or pulumi_policy.EnforcementLevel.ADVISORY)


# --- requests as the engine builds them ----------------------------------------------------------

def committed(stack: str) -> list[dict[str, Any]]:
    return json.loads((ROOT / "rendered" / stack / "resources.json").read_text())


def stack_urn(stack: str) -> str:
    return f"urn:pulumi:{stack}::{PROJECT}::pulumi:pulumi:Stack::{PROJECT}-{stack}"


def urns(stack: str, rows: list[dict[str, Any]]) -> list[str]:
    """URN of each row: the parent chain's types joined by `$` (the stack itself not included)."""
    components = {r["name"]: r for r in rows if not r["custom"]}

    def qualified(r: dict[str, Any]) -> str:
        parent = components.get(r["parent"] or "")
        return f"{qualified(parent)}${r['type']}" if parent else r["type"]

    return [f"urn:pulumi:{stack}::{PROJECT}::{qualified(r)}::{r['name']}" for r in rows]


def urn_of(stack: str, rows: list[dict[str, Any]], type_: str, name: str) -> str:
    return next(u for r, u in zip(rows, urns(stack, rows)) if r["type"] == type_ and r["name"] == name)


def wire(value: Any, first_preview: bool) -> Any:
    """A rendered value as the engine marshals it for the analyzer."""
    if isinstance(value, dict):
        return {k: wire(v, first_preview) for k, v in value.items()}
    if isinstance(value, list):
        return [wire(v, first_preview) for v in value]
    if value == SECRET:
        return {SPECIAL_SIG_KEY: SPECIAL_SECRET_SIG, "value": PLAINTEXT}
    if value == UNKNOWN or (first_preview and isinstance(value, str) and AFTER_DEPLOY.search(value)):
        return UNKNOWN_STRING_VALUE  # an interpolation of an unknown is unknown as a whole
    return value


def request(stack: str, rows: list[dict[str, Any]], first_preview: bool = False):
    resources = [proto.AnalyzerResource(type="pulumi:pulumi:Stack", name=f"{PROJECT}-{stack}",
                                        urn=stack_urn(stack), properties=struct_pb2.Struct())]
    by_name = {r["name"]: u for r, u in zip(rows, urns(stack, rows)) if not r["custom"]}
    by_ref = {f"{r['type']}::{r['name']}": u for r, u in zip(rows, urns(stack, rows))}
    for r, urn in zip(rows, urns(stack, rows)):
        props = struct_pb2.Struct()
        props.update(wire(r["inputs"], first_preview))
        opts = r["options"]
        parent = by_name[r["parent"]] if r["parent"] else stack_urn(stack)
        # The engine sends each resource's dependencies (URNs) and its provider.
        deps = [by_ref[d] for d in r.get("dependsOn") or [] if d in by_ref]
        provider = r.get("provider")
        resources.append(proto.AnalyzerResource(
            type=r["type"], name=r["name"], urn=urn, properties=props, parent=parent, dependencies=deps,
            provider=proto.AnalyzerProviderResource(type=provider.split("::")[0], name=provider.split("::")[1],
                                                    urn=by_ref.get(provider, ""), properties=struct_pb2.Struct())
            if provider else None,
            options=proto.AnalyzerResourceOptions(protect=opts["protect"], parent=parent,
                                                  deleteBeforeReplace=opts["deleteBeforeReplace"],
                                                  deleteBeforeReplaceDefined=True,
                                                  ignoreChanges=opts.get("ignoreChanges", []))))
    return proto.AnalyzeStackRequest(resources=resources)


def analyze(analyzer, stack: str, rows: list[dict[str, Any]], first_preview: bool = False):
    return analyzer.AnalyzeStack(request(stack, rows, first_preview), None)


def trainer(rows: list[dict[str, Any]]) -> dict[str, Any]:
    job = next(r for r in rows if r["inputs"].get("kind") == "Job"
               and r["inputs"]["metadata"]["name"] == "rltrain-training")
    return job["inputs"]["spec"]["template"]["spec"]


# --- tests ---------------------------------------------------------------------------------------

def test_one_mandatory_policy_per_rule(pack_args):
    assert [p.name for p in pack_args["policies"]] == list(policy.RULES)
    assert {p.enforcement_level for p in pack_args["policies"]} == {pulumi_policy.EnforcementLevel.MANDATORY}


def test_the_requests_are_what_the_engine_sends():
    """Guards the harness: placeholders become sentinels and secrets, nothing else changes."""
    rows = committed("p5")
    first = {r.urn: r for r in request("p5", rows, first_preview=True).resources}
    text = json.dumps([json_format.MessageToDict(r.properties) for r in first.values()])
    assert "known after deploy" not in text and UNKNOWN_STRING_VALUE in text
    assert SECRET not in text and SPECIAL_SECRET_SIG in text
    fs = first[urn_of("p5", rows, "aws:fsx/lustreFileSystem:LustreFileSystem", "storage-fs")]
    assert fs.options.protect and fs.urn.endswith("rltrain:index:FsxLustreVolume$aws:fsx/lustreFileSystem:"
                                                   "LustreFileSystem::storage-fs")


@pytest.mark.parametrize("stack", STACKS)
def test_committed_stacks_pass(analyzer, stack, capsys):
    response = analyze(analyzer, stack, committed(stack))
    assert list(response.diagnostics) == [] and list(response.not_applicable) == []
    assert capsys.readouterr().err == ""  # every value known: nothing to report


@pytest.mark.parametrize("stack", STACKS)
def test_first_preview_runs_every_rule(analyzer, stack, capsys):
    """Every `[known after deploy: …]` sent as unknown: no "can't run policy" (the whole rule skipped),
    no violation, and every rule ran to the end: its line on what it could not see comes after it."""
    rows = committed(stack)
    response = analyze(analyzer, stack, rows, first_preview=True)
    assert [(d.policyName, d.message) for d in response.diagnostics] == []
    err = capsys.readouterr().err.splitlines()
    if not any(AFTER_DEPLOY.search(json.dumps(r["inputs"])) for r in rows):  # byo: nothing created
        assert err == []
        return
    assert [line.split(":", 1)[0] for line in err] == [f"rltrain-guardrails/{name}" for name in policy.RULES]
    assert all("unknown until deploy" in line for line in err)


def test_first_preview_names_the_unknown_values(analyzer, capsys):
    rows = committed("p5")
    analyze(analyzer, "p5", rows, first_preview=True)
    line = next(x for x in capsys.readouterr().err.splitlines() if x.startswith("rltrain-guardrails/pv-retain:"))
    # One value per string holding a marker: an interpolation of unknowns (the built image's
    # repository URL and digest in one reference) is one unknown value as a whole.
    def strings(v):
        if isinstance(v, dict):
            return [s for x in v.values() for s in strings(x)]
        if isinstance(v, list):
            return [s for x in v for s in strings(x)]
        return [v] if isinstance(v, str) else []
    total = sum(1 for r in rows for s in strings(r["inputs"]) if AFTER_DEPLOY.search(s))
    assert f"ran with {total} value(s) unknown until deploy, seen as '[unknown before deploy]'" in line
    assert "; storage-pv (spec.csi.volumeAttributes.dnsname, spec.csi.volumeAttributes.mountname, " \
           "spec.csi.volumeHandle)" in line  # the FSx file system's id and names in the PersistentVolume
    assert re.search(r"; gpu-lt \(networkInterfaces\[\*\]\.securityGroups\[\*\] x\d+\);", line)  # folded
    assert "; aws:ec2/natGateway:NatGateway::network-nat (subnetId, allocationId)" in line  # names repeat


@pytest.mark.parametrize("first_preview", [False, True], ids=["update", "first-preview"])
@pytest.mark.parametrize("mutate,rule", [
    (lambda c, s: c.update(image="repo/rl:latest"), "image-pinned"),
    # The single-node Job requests no EFA (trainer profile): 4 devices with their huge pages.
    (lambda c, s: [c["resources"][k].update({"vpc.amazonaws.com/efa": 4, "hugepages-2Mi": "5120Mi"})
                   for k in ("limits", "requests")], "efa-count"),
    (lambda c, s: s.update(volumes=[v for v in s["volumes"] if v["name"] != "dshm"]), "shm-memory"),
])
def test_violation_is_mandatory_with_the_resource_urn(analyzer, mutate, rule, first_preview):
    rows = copy.deepcopy(committed("p5"))
    spec = trainer(rows)
    mutate(spec["containers"][0], spec)
    response = analyze(analyzer, "p5", rows, first_preview)
    assert [d.policyName for d in response.diagnostics] == [rule]
    d = response.diagnostics[0]
    assert d.urn == urn_of("p5", rows, "kubernetes:batch/v1:Job", "workloads-single-node-job")
    assert d.enforcementLevel == proto.MANDATORY and d.policyPackName == "rltrain-guardrails"
    assert d.message.startswith(policy.RULES[rule].description + "\nJob/rltrain-training")


def test_efa_message_reads_as_the_render(analyzer):
    """Numbers arrive as floats on the wire; the rules see the render's integers."""
    rows = copy.deepcopy(committed("p5"))
    for k in ("limits", "requests"):
        trainer(rows)["containers"][0]["resources"][k].update({"vpc.amazonaws.com/efa": 4, "hugepages-2Mi": "5120Mi"})
    (d,) = analyze(analyzer, "p5", rows).diagnostics
    assert "vpc.amazonaws.com/efa limit 4," in d.message and "4.0" not in d.message


@pytest.mark.parametrize("first_preview", [False, True], ids=["update", "first-preview"])
def test_unprotected_file_system(analyzer, first_preview):
    rows = copy.deepcopy(committed("p5"))
    fs = next(r for r in rows if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem")
    fs["options"]["protect"] = False
    response = analyze(analyzer, "p5", rows, first_preview)
    assert [(d.policyName, d.urn, d.enforcementLevel) for d in response.diagnostics] == [
        ("stateful-protected", urn_of("p5", rows, fs["type"], "storage-fs"), proto.MANDATORY)]


def test_rules_get_plain_dicts(pack):
    """The rules' `a | b` and isinstance checks need dicts, not pulumi-policy's proxies."""
    props = unknown_checking_proxy({"a": {"b": [{"c": 1.0}, UNKNOWN_STRING_VALUE]}, "d": UNKNOWN_STRING_VALUE})
    resource = pulumi_policy.PolicyResource("t:m:T", props, "urn:x", "x", None, None, None, [], {})
    unknowns: list[tuple[str, str]] = []
    view = pack.resource_view(resource, unknowns)
    assert view["inputs"] == {"a": {"b": [{"c": 1}, UNKNOWN]}, "d": UNKNOWN}
    assert type(view["inputs"]["a"]) is dict and type(view["inputs"]["a"]["b"]) is list
    assert unknowns == [("x", "a.b[1]"), ("x", "d")]


def test_policy_requirements_are_the_repository_pins():
    def pins(path):
        out = {}
        for line in path.read_text().splitlines():
            m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)$", line.strip())
            if m:
                out[re.sub(r"[-_.]+", "-", m.group(1)).lower()] = m.group(2)
        return out

    req = (ROOT / "policy" / "requirements.txt").read_text()
    assert "-c ../constraints.txt" in req.splitlines()  # transitive pins, as for the program
    constraints = pins(ROOT / "constraints.txt")
    own = pins(ROOT / "policy" / "requirements.txt")
    assert "pulumi-policy" in own and "pulumi" in own
    assert {k: constraints.get(k) for k in own} == own


def test_rule_failing_on_a_placeholder_is_advisory_only_on_preview(analyzer, monkeypatch):
    """A rule that cannot run on `[unknown before deploy]` gets pulumi-policy's advisory; without
    unknowns the same failure is a broken rule and fails the analysis."""
    def broken(rows, rules):
        raise AttributeError("'str' object has no attribute 'get'")
    monkeypatch.setattr(policy, "evaluate", broken)
    response = analyze(analyzer, "p5", committed("p5"), first_preview=True)
    assert {(d.policyName, d.enforcementLevel, d.urn) for d in response.diagnostics} == {
        (name, proto.ADVISORY, "") for name in policy.RULES}
    assert "during preview: it failed on a value unknown until deploy (AttributeError: " \
           in response.diagnostics[0].message
    with pytest.raises(AttributeError):
        analyze(analyzer, "p5", committed("p5"))


@pytest.mark.parametrize("first_preview", [False, True], ids=["update", "first-preview"])
def test_deploy_order_sees_the_engine_edges(analyzer, first_preview):
    """The deploy model runs in the pack on the dependencies the engine sends: an FSx CSI add-on
    with no path to the cluster is refused there as in the render."""
    rows = copy.deepcopy(committed("p5"))
    addon = next(r for r in rows if r["name"] == "addons-fsx-csi")
    addon["dependsOn"], addon["parent"] = [], None
    response = analyze(analyzer, "p5", rows, first_preview)
    assert [(d.policyName, d.urn) for d in response.diagnostics] == [
        ("deploy-order", urn_of("p5", rows, addon["type"], "addons-fsx-csi"))]


# --- what a real preview sends: outputs, pulumi-eks's children, any order -------------------------
# tests/preview_records.py: a recording of a real preview's request when there is one, otherwise
# output-shaped records synthesized from the render (see its docstring for the sources).

SHUFFLES = (0, 1, 2)


def test_output_shaped_records_are_what_the_engine_sends():
    """Guards the fixture: the component has no endpoint inputs, its children carry them; the system
    node group's NodeGroup (role: system, no taint) stands beside the GPU one."""
    rows = preview_records.records("p5")
    component = next(r for r in rows if r["type"] == "eks:index:Cluster")
    assert not {"endpointPublicAccess", "publicAccessCidrs", "vpcCniOptions"} & set(component["inputs"])
    assert set(component["inputs"]) <= set(preview_records.CLUSTER_OUTPUTS)
    child = next(r for r in rows if r["type"] == "aws:eks/cluster:Cluster")
    assert child["parent"] == component["name"] and child["inputs"]["vpcConfig"]["publicAccessCidrs"] == ["203.0.113.0/24"]
    groups = {r["inputs"]["labels"]["role"]: r for r in rows if r["type"] == "aws:eks/nodeGroup:NodeGroup"}
    assert set(groups) == {"system", "gpu-training"} and "taints" not in groups["system"]["inputs"]
    assert [r["name"] for r in preview_records.shuffled(rows, 1)] != [r["name"] for r in rows]


@pytest.mark.parametrize("seed", SHUFFLES)
@pytest.mark.parametrize("stack", STACKS)
def test_output_shaped_records_pass_in_any_order(analyzer, stack, seed):
    """The committed stacks pass on what a real preview sends, whatever the order (before: the endpoint
    rule fired on every EKS stack, and "the GPU node group" was whichever NodeGroup came last)."""
    rows = preview_records.shuffled(preview_records.records(stack), seed)
    response = analyze(analyzer, stack, rows)
    assert [(d.policyName, d.message) for d in response.diagnostics] == []


def _output_rows(stack: str = "p5", seed: int = 0) -> list[dict[str, Any]]:
    return copy.deepcopy(preview_records.shuffled(preview_records.records(stack), seed))


@pytest.mark.parametrize("seed", SHUFFLES)
def test_the_gpu_node_group_is_the_tainted_one(analyzer, seed):
    rows = _output_rows(seed=seed)
    gpu = next(r for r in rows if r["type"] == "aws:eks/nodeGroup:NodeGroup" and r["inputs"].get("taints"))
    gpu["inputs"]["labels"]["role"] = "gpu-train"  # the pods select role: gpu-training
    messages = [d.message for d in analyze(analyzer, "p5", rows).diagnostics
                if d.policyName == "schedules-on-gpu-nodes"]
    assert messages and all("matches no GPU node group (labels {" in m and "'role': 'gpu-train'" in m
                            for m in messages)  # the GPU group's labels, never the system group's


def test_no_tainted_node_group_is_an_error_not_a_pass(analyzer):
    rows = _output_rows()
    gpu = next(r for r in rows if r["type"] == "aws:eks/nodeGroup:NodeGroup" and r["inputs"].get("taints"))
    del gpu["inputs"]["taints"]
    messages = [d.message for d in analyze(analyzer, "p5", rows).diagnostics
                if d.policyName == "schedules-on-gpu-nodes"]
    assert messages and all("no node group of the stack carries the GPU taint nvidia.com/gpu" in m for m in messages)


@pytest.mark.parametrize("cidrs", [["0.0.0.0/0"], []])
def test_open_endpoint_is_read_from_the_aws_cluster(analyzer, cidrs):
    rows = _output_rows()
    child = next(r for r in rows if r["type"] == "aws:eks/cluster:Cluster")
    child["inputs"]["vpcConfig"]["publicAccessCidrs"] = cidrs
    (d,) = analyze(analyzer, "p5", rows).diagnostics
    assert d.policyName == "endpoint-not-open" and d.urn == urn_of("p5", rows, child["type"], child["name"])
    assert f"aws:eks/cluster:Cluster {child['name']}: public endpoint open to" in d.message
    child["inputs"]["vpcConfig"]["endpointPublicAccess"] = False
    assert list(analyze(analyzer, "p5", rows).diagnostics) == []


def test_endpoint_with_nothing_to_read_is_an_error_not_a_pass(analyzer):
    rows = [r for r in _output_rows() if r["type"] != "aws:eks/cluster:Cluster"]
    (d,) = analyze(analyzer, "p5", rows).diagnostics
    assert d.policyName == "endpoint-not-open" and d.enforcementLevel == proto.MANDATORY
    assert "rule endpoint-not-open read nothing: expected the endpoint settings" in d.message
    assert d.urn == urn_of("p5", rows, "eks:index:Cluster", "cluster-eks")  # the one cluster it could not read


def test_network_policy_enforcement_is_read_from_the_vpc_cni_addon(analyzer):
    rows = _output_rows()
    cni = next(r for r in rows if r["type"] == "aws:eks/addon:Addon" and r["inputs"].get("addonName") == "vpc-cni")
    values = json.loads(cni["inputs"]["configurationValues"])
    assert values["enableNetworkPolicy"] == "true"
    cni["inputs"]["configurationValues"] = json.dumps({**values, "enableNetworkPolicy": "false"})
    assert [(d.policyName, "no enforcement" in d.message) for d in analyze(analyzer, "p5", rows).diagnostics] == [
        ("network-policy", True)]


def test_a_recorded_preview_replaces_the_synthesis(tmp_path, monkeypatch):
    """tests/fixtures/preview/STACK.json (rows recorded from a real preview's AnalyzeStack request, e.g.
    on the simulated cluster) is what records() returns when it exists; no test changes."""
    recorded = [{"type": "aws:eks/cluster:Cluster", "name": "c-eksCluster", "parent": None, "custom": True,
                 "dependsOn": [], "provider": None, "inputs": {"vpcConfig": {"endpointPublicAccess": False}},
                 "options": {"protect": False, "deleteBeforeReplace": False}}]
    (tmp_path / "p5.json").write_text(json.dumps(recorded))
    monkeypatch.setattr(preview_records, "RECORDINGS", tmp_path)
    assert preview_records.records("p5") == recorded
    assert preview_records.records("dev") == preview_records.synthesize(committed("dev"))


# --- the outputs recorded from a real preview (the sim stack on the simulated cluster) ------------

def sim_preview() -> list[dict[str, Any]]:
    """tests/fixtures/policy/sim-preview.json (python -m cluster.record_policy_input), minus the stack
    itself, which request() adds."""
    rows = json.loads((ROOT / "tests" / "fixtures" / "policy" / "sim-preview.json").read_text())
    stack = next(r["name"] for r in rows if r["type"] == "pulumi:pulumi:Stack")
    return [{**r, "parent": None if r["parent"] == stack else r["parent"]} for r in rows
            if r["type"] != "pulumi:pulumi:Stack"]


def test_the_recorded_real_preview_passes(analyzer):
    assert [(d.policyName, d.message) for d in analyze(analyzer, "sim", sim_preview()).diagnostics] == []


def test_a_recorded_job_without_its_spec_is_unread_not_passed(analyzer):
    """What a rule sees of a component that registers no outputs: the object, none of its fields.
    Every rule that reads it fails the preview on that object (before: each passed)."""
    rows = sim_preview()
    job = next(r for r in rows if r["name"] == "workloads-validation-job")
    del job["inputs"]["spec"]
    response = analyze(analyzer, "sim", rows)
    unread = {(d.policyName, d.urn, d.enforcementLevel) for d in response.diagnostics
              if "read nothing of Job workloads-validation-job (it was sent: apiVersion, kind, metadata" in d.message}
    readers = {name for name, rule in policy.RULES.items() if POD_TEMPLATES in rule.reads} | {"job-deadline"}
    assert unread == {(name, urn_of("sim", rows, job["type"], job["name"]), proto.MANDATORY) for name in readers}
