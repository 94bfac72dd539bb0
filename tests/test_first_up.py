"""A first `up` on a fresh account (issue 33): what the program refuses on a real deploy before it
creates anything, and what it owns so that `pulumi destroy` leaves nothing behind."""

from __future__ import annotations

import contextvars
import json
from types import SimpleNamespace

import pytest
from support import rendered

from components.aws import account_checks, platform
from components.offline import mock_engine, unset_secrets
from components.offline.mock_engine import run_program
from components.stack import stackfile, validate

ROLE = "arn:aws:iam::123456789012:role/platform/Deployer"
ASSUMED = "arn:aws:sts::123456789012:assumed-role/Deployer/alice@example.com"


@pytest.mark.parametrize("cidr", ["192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "203.0.113.7/32"])
def test_documentation_ranges_are_placeholders(cidr):
    assert account_checks.documentation_cidrs([cidr, "10.20.0.0/16"]) == [cidr]


def test_caller_role_compares_by_account_and_name_not_path():
    assert account_checks.caller_role(ASSUMED) == ("123456789012", "Deployer")
    assert account_checks.creator_in_admins(ASSUMED, ["arn:aws:iam::123456789012:role/Other", ROLE]) == ROLE
    assert account_checks.creator_in_admins(ASSUMED, ["arn:aws:iam::999999999999:role/Deployer"]) is None
    assert account_checks.creator_in_admins("arn:aws:iam::123456789012:user/bob", [ROLE]) is None


def _real_deploy(monkeypatch, caller=ASSUMED, zones=None):
    """The program as `pulumi up` runs it: not under a mock engine, sts:GetCallerIdentity and
    ec2:DescribeAvailabilityZones answer."""
    zones = zones or {"us-east-1a": "use1-az4", "us-east-1b": "use1-az6"}
    monkeypatch.setattr(platform, "offline", lambda: False)
    monkeypatch.setattr(platform.aws, "get_caller_identity", lambda: SimpleNamespace(arn=caller))
    monkeypatch.setattr(platform.aws, "get_availability_zones",
                        lambda filters: SimpleNamespace(names=list(zones), zone_ids=list(zones.values())))
    monitors = []
    real = mock_engine.RecordingMonitor

    def recording(*a, **kw):
        monitors.append(real(*a, **kw))
        return monitors[-1]
    monkeypatch.setattr(mock_engine, "RecordingMonitor", recording)
    return monitors


def _with(values, section, **patch):
    doc = json.loads(values[f"rltrain:{section}"])
    doc.update(patch)
    return {**values, f"rltrain:{section}": json.dumps(doc)}


def test_the_placeholder_cidr_is_refused_by_a_real_deploy_before_any_aws_resource(monkeypatch):
    monitors = _real_deploy(monkeypatch)
    vals, secret, _ = unset_secrets.load_stack("p5")
    with pytest.raises(validate.ConfigError) as e:
        run_program(stack="p5", config=vals, secret_keys=secret)
    assert "rltrain:cluster.publicAccessCidrs: 203.0.113.0/24 is a documentation range" in str(e.value)
    assert [r for r in monitors[0].records if r.type.startswith(("aws:", "eks:"))] == []


def test_the_deploying_role_in_admin_role_arns_is_refused_by_a_real_deploy(monkeypatch):
    monitors = _real_deploy(monkeypatch)
    vals, secret, _ = unset_secrets.load_stack("p5")
    vals = _with(vals, "cluster", publicAccessCidrs=["198.18.0.0/15"], adminRoleArns=[ROLE])
    with pytest.raises(validate.ConfigError) as e:
        run_program(stack="p5", config=vals, secret_keys=secret)
    assert "rltrain:cluster.adminRoleArns" in str(e.value) and "ResourceInUseException (409)" in str(e.value)
    assert [r for r in monitors[0].records if r.type.startswith(("aws:", "eks:"))] == []


def test_an_az_eks_refuses_is_refused_by_a_real_deploy(monkeypatch):
    monitors = _real_deploy(monkeypatch, zones={"us-east-1a": "use1-az4", "us-east-1b": "use1-az3"})
    vals, secret, _ = unset_secrets.load_stack("p5")
    vals = _with(vals, "cluster", publicAccessCidrs=["198.18.0.0/15"])
    with pytest.raises(validate.ConfigError) as e:
        run_program(stack="p5", config=vals, secret_keys=secret)
    assert "rltrain:network.availabilityZones: us-east-1b is use1-az3" in str(e.value)
    assert "UnsupportedAvailabilityZoneException" in str(e.value)
    assert [r for r in monitors[0].records if r.type.startswith(("aws:", "eks:"))] == []


def test_a_real_deploy_with_real_cidrs_and_another_admin_goes_ahead(monkeypatch):
    _real_deploy(monkeypatch)
    vals, secret, _ = unset_secrets.load_stack("p5")
    vals = _with(vals, "cluster", publicAccessCidrs=["198.18.0.0/15"],
                 adminRoleArns=["arn:aws:iam::123456789012:role/Admins"])
    result = run_program(stack="p5", config=vals, secret_keys=secret)
    assert result.one("eks:index:Cluster").inputs["publicAccessCidrs"] == ["198.18.0.0/15"]


def test_the_offline_render_keeps_accepting_the_placeholder():
    assert rendered("p5").cfg.cluster.public_access_cidrs == ("203.0.113.0/24",)


def test_the_render_tells_the_program_it_is_offline_and_no_stack_file_can(monkeypatch, tmp_path):
    # The offline engine says so in the run's own config (stackfile.OFFLINE_KEY), and only there.
    seen = []
    run_program(stack="p5", config={}, program=lambda: seen.append(platform.offline()))
    assert seen == [True] and contextvars.Context().run(platform.offline) is False
    # A stack file cannot say it: the render refuses to read it, a real deploy refuses to run it.
    doc = tmp_path / "Pulumi.x.yaml"
    doc.write_text(f"config:\n  {stackfile.OFFLINE_KEY}: true\n")
    with pytest.raises(stackfile.StackFileError, match="set by the offline render's engine only"):
        stackfile.read(doc)
    monkeypatch.setenv("PULUMI_CONFIG", json.dumps({stackfile.OFFLINE_KEY: "true"}))
    with pytest.raises(validate.ConfigError) as e:
        contextvars.Context().run(validate.from_pulumi)
    assert e.value.problems == [(stackfile.OFFLINE_KEY, "set by the offline render's engine only "
                                 "(components/stack/stackfile.py): remove it, it would skip the deploy's account checks")]


def test_the_stack_owns_the_control_plane_log_group():
    rs = rendered("p5").resources
    # (the other log group is the training image build's: components/aws/image.py)
    [lg] = [r for r in rs if r["type"] == "aws:cloudwatch/logGroup:LogGroup" and r["parent"] != "image"]
    assert lg["inputs"]["name"] == "/aws/eks/rltrain-p5/cluster" and lg["inputs"]["retentionInDays"] == 90
    eks = next(r for r in rs if r["type"] == "eks:index:Cluster")
    assert "aws:cloudwatch/logGroup:LogGroup::cluster-control-plane-logs" in eks["dependsOn"]
    assert not lg["options"]["protect"] and not lg["options"]["retainOnDelete"]


def test_running_for_real_has_a_first_up_checklist_in_order():
    from components.offline.mock_engine import ROOT
    text = (ROOT / "docs" / "running-for-real.md").read_text()
    section = text.split("## The first `up`: a checklist, top to bottom", 1)[1].split("\n## ", 1)[0]
    steps = ["**Pulumi CLI**", "**AWS CLI v2**", "**Credentials**", "**Backend**", "**Secrets**",
             "**Endpoint CIDRs**", "**Capacity**", "**Preflight**", "**Up**", "**Kubeconfig**"]
    at = [section.index(s) for s in steps]
    assert at == sorted(at)
    assert "ResourceInUseException" in section and "documentation range" in section


def test_aws_operations_has_the_failed_node_group_recovery():
    from components.offline.mock_engine import ROOT
    text = (ROOT / "docs" / "aws-operations.md").read_text()
    section = text.split("## A GPU node group that failed to create", 1)[1].split("\n## ", 1)[0]
    for needed in ("InsufficientInstanceCapacity", "aws eks delete-nodegroup", "aws eks wait nodegroup-deleted",
                   "pulumi refresh", "ResourceInUseException"):
        assert needed in section, needed


def test_policy_rule_holds_the_node_roll_opt_in():
    import copy
    from components.offline import policy
    rs = rendered("p5").resources
    assert policy.evaluate(rs, ["gpu-roll-opt-in"]) == []
    bare = copy.deepcopy(rs)
    ng = next(r for r in bare if r["type"] == "aws:eks/nodeGroup:NodeGroup")
    del ng["options"]["ignoreChanges"]
    [v] = policy.evaluate(bare, ["gpu-roll-opt-in"])
    assert "launchTemplate.version, version not in ignoreChanges" in v.message
    ng["inputs"]["tags"] = {"rltrain/allow-node-roll": "true"}  # the stack opted in
    assert policy.evaluate(bare, ["gpu-roll-opt-in"]) == []


def test_opting_in_tags_the_node_group(monkeypatch):
    vals, secret, _ = unset_secrets.load_stack("p5")
    result = run_program(stack="p5", config=_with(vals, "gpuNodes", allowNodeRoll=True), secret_keys=secret)
    ng = result.one("aws:eks/nodeGroup:NodeGroup")
    assert ng.inputs["tags"] == {"rltrain/allow-node-roll": "true"}


def test_the_destroy_docs_say_what_each_key_really_does():
    """The FSx key is protected and retained (its backups need it); the cluster-secrets key only
    protected: the docs say each, not "the keys retain"."""
    from components.offline.mock_engine import ROOT
    keys = {r["name"]: r["options"] for r in rendered("p5").resources if r["type"] == "aws:kms/key:Key"}
    assert keys["storage-key"]["protect"] and keys["storage-key"]["retainOnDelete"]
    assert keys["cluster-secrets-key"]["protect"] and not keys["cluster-secrets-key"]["retainOnDelete"]
    destroy = (ROOT / "docs" / "aws-operations.md").read_text().split("\n## Destroy", 1)[1].split("\n## ", 1)[0]
    assert "The keys have `retainOnDelete`" not in destroy
    assert "The FSx key is protected **and** `retainOnDelete`" in destroy
    assert "The cluster-secrets key is only\n     protected" in destroy
