"""The GPU node group's launch template across a scale and a replacement (issue 44 items 8 and 9),
through the mock engine."""

from __future__ import annotations

import pytest
from support import rendered
from test_kueue_support import variant

from components.stack import catalog
from components.workloads import sizing

LT = "aws:ec2/launchTemplate:LaunchTemplate"


def lt_inputs(r) -> dict:
    return r.result.one(LT, "gpu-lt").inputs


@pytest.mark.parametrize("stack", ["p5", "dev"])
def test_scaling_between_one_and_two_nodes_keeps_the_launch_template(stack):
    """Item 8: at one node the template dropped every EFA interface, so 1 -> 2 (and back) was a new
    template version and the running node was replaced. The interfaces now follow the instance."""
    named = {"rltrain:cluster": {"name": f"rltrain-{stack}"}}  # the committed stack's cluster name
    one = variant(stack, {**named, "rltrain:gpuNodes": {"count": 1}, "rltrain:workloads": {
        "multiNode": {"enabled": False}, "ncclTest": {"enabled": False}}})
    two = variant(stack, named)
    assert lt_inputs(one) == lt_inputs(two)
    assert len(lt_inputs(one)["networkInterfaces"]) == two.cfg.gpu_nodes.instance.network_cards
    # Only the pods' use of EFA follows the count: one node has no peer.
    from components.stack import node_efa
    assert one.cfg.gpu_nodes.efa_devices_per_node == 0 and node_efa.devices(one.cfg.gpu_nodes) > 0


def test_efa_false_still_removes_the_interfaces():
    r = variant("p5", {"rltrain:gpuNodes": {"efa": False}, "rltrain:workloads": {
        "multiNode": {"enabled": False}, "ncclTest": {"enabled": False}}})
    assert "networkInterfaces" not in lt_inputs(r) and lt_inputs(r)["vpcSecurityGroupIds"]


@pytest.mark.parametrize("instance", sorted(t for t, it in catalog.CATALOG.items() if it.has_efa))
def test_one_node_pod_fits_beside_the_efa_huge_pages(instance):
    """With the interfaces on a one-node group the EFA driver takes its huge pages out of memory:
    the whole-node pod is sized against that (a g6.12xlarge pod sized without them did not fit)."""
    base = rendered("p5").cfg
    g = base.gpu_nodes.model_copy(update={"instance_type": instance, "count": 1})
    cfg = base.model_copy(update={"gpu_nodes": g})
    s = sizing.pod_sizing(cfg, efa=False)
    alloc = catalog.get(instance).allocatable(efa=True)
    assert s.memory_mib + catalog.DAEMONSET_MEMORY_MIB <= alloc.memory_mib_conservative
    # Kueue's quota is net of them too: a quota above what the node offers admits pods the
    # scheduler cannot place.
    from components.k8s import kueue
    assert kueue.node_offer(cfg)["memory"] == alloc.memory_mib_conservative - catalog.DAEMONSET_MEMORY_MIB


def test_launch_template_is_autonamed_and_created_before_the_old_one_goes():
    """Item 9: the launch template had a fixed name, so a replacement deleted it first. Autonamed
    now, created before the old one is deleted (terraform-aws-eks launch_template_use_name_prefix,
    create_before_destroy), and a stack created with the fixed name keeps it (`name` ignored)."""
    rec = rendered("p5").result.one(LT, "gpu-lt")
    assert "name" not in rec.inputs and "namePrefix" not in rec.inputs
    assert rec.ignore_changes == ["name"] and not rec.delete_before_replace


def test_a_deployed_stack_keeps_its_fixed_launch_template_name():
    """The deployed record carries the old fixed name: the engine keeps an ignored, unset input at
    its deployed value, so nothing is replaced (the node group takes the template's id: a new
    template would replace every GPU node)."""
    import copy

    from components.offline import impact
    now = rendered("p5")
    before = copy.deepcopy(now.resources)
    for r in before:
        if r["type"] == LT and r["name"] == "gpu-lt":
            r["inputs"]["name"] = "rltrain-p5-gpu"
            r["options"] = {**r["options"], "deleteBeforeReplace": True}
            r["options"].pop("ignoreChanges", None)
    assert impact.classify(before, now.resources, now.cfg) == []


def test_security_groups_and_roles_are_autonamed_and_the_fsx_group_stays():
    """Security groups and roles carry no name (a replacement creates the new one first); the FSx
    group's ForceNew inputs are what the deployed one has, so the file system (whose securityGroupIds
    are ForceNew) keeps it, and every Lustre rule keeps its name."""
    r = rendered("p5")
    for t in ("aws:ec2/securityGroup:SecurityGroup", "aws:iam/role:Role"):
        for rec in r.result.by_type(t):
            assert "name" not in rec.inputs and "namePrefix" not in rec.inputs, rec.name
    sg = r.result.one("aws:ec2/securityGroup:SecurityGroup", "storage-sg").inputs
    assert (sg["description"], sg["vpcId"]) == ("FSx for Lustre: Lustre from GPU nodes",
                                                "[known after deploy: network-vpc.id]")
    assert r.result.one("aws:fsx/lustreFileSystem:LustreFileSystem").inputs["securityGroupIds"] == [
        "[known after deploy: storage-sg.id]"]
    rules = {x.name for x in r.result.by_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")}
    assert {f"storage-lustre-{p}-{w}" for p in (988, 1018) for w in ("nodes", "self", "to-nodes")} <= rules
