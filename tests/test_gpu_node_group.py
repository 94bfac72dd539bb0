"""The GPU node group's launch template across a scale and a replacement (issue 44 items 8 and 9),
through the mock engine."""

from __future__ import annotations

import pytest
from support import rendered
from test_kueue_support import variant

from components.stack import catalog, node_efa
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
