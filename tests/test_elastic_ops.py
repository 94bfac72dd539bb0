"""Elastic mode in the cost line, preflight's quota check and the impact table (issue 30):
components/stack/outputs.py, components/preflight.py quota_nodes, components/offline/impact.py."""

from __future__ import annotations

import copy

import pytest
from support import rendered
from test_preflight import (Account, addons, caller, failures, image, offering, p5_cfg, quota, run,
                            standard_quota, zones)

from components import preflight
from components.k8s import karpenter_nodes as kn
from components.offline import impact, render
from components.stack import outputs

FSX = 4800 * 0.340 / 730  # the p5 stack's FSx: PERSISTENT_2 4800 GiB at 500 MB/s/TiB (catalog.FSX_PRICE)


def elastic(cfg, **keys):
    g = cfg.gpu_nodes
    e = g.elastic.model_copy(update={"enabled": True, **keys})
    return cfg.model_copy(update={"gpu_nodes": g.model_copy(update={"elastic": e})})


def with_gpu(cfg, **keys):
    return cfg.model_copy(update={"gpu_nodes": cfg.gpu_nodes.model_copy(update=keys)})


# --- the cost line --------------------------------------------------------------------------------


def test_elastic_cost_is_fsx_at_zero_and_max_nodes_at_the_maximum():
    fixed = outputs.cost_per_hour(rendered("p5").cfg)
    cost = outputs.cost_per_hour(elastic(rendered("p5").cfg, max_nodes=2))
    assert cost["usdAtZero"] == pytest.approx(FSX, abs=0.005) and cost["usdAtZero"] == 2.24
    assert cost["usdAtMax"] == pytest.approx(2 * 55.04 + FSX, abs=0.005) and cost["usdAtMax"] == 112.32
    assert cost["usd"] == cost["usdAtMax"] == fixed["usd"]  # the ceiling, what a comparison reads
    assert cost["breakdown"] == "elastic: 0 to 2 x p5.48xlarge at $55.04/h + FSx 4800 GiB at $2.24/h"
    assert (cost["priceDate"], cost["priceSource"]) == (fixed["priceDate"], fixed["priceSource"])
    four = outputs.cost_per_hour(elastic(rendered("p5").cfg, max_nodes=4))
    assert (four["usdAtZero"], four["usdAtMax"]) == (2.24, round(4 * 55.04 + FSX, 2))


def test_fixed_cost_is_unchanged():
    cost = outputs.cost_per_hour(rendered("p5").cfg)
    assert set(cost) == {"usd", "breakdown", "priceDate", "priceSource"}
    assert cost["usd"] == 112.32 and cost["breakdown"] == "2 x p5.48xlarge at $55.04/h + FSx 4800 GiB at $2.24/h"
    assert outputs.usd_text(cost) == "$112.32/h"


def test_summary_and_pr_comment_print_both_figures():
    r = copy.copy(rendered("p5"))
    cost = outputs.cost_per_hour(elastic(r.cfg, max_nodes=2))
    r.result = copy.copy(r.result)
    r.result.stack_outputs = {**r.result.stack_outputs, "estimatedCostPerHour": cost}
    line = next(x for x in render.summary(r).splitlines() if "estimated cost" in x)
    assert line.strip() == ("estimated cost: $2.24/h at zero GPU nodes to $112.32/h at the maximum = elastic: 0 to "
                            f"2 x p5.48xlarge at $55.04/h + FSx 4800 GiB at $2.24/h (prices of {cost['priceDate']})")
    r.base_cost = outputs.cost_per_hour(rendered("p5").cfg)
    md = render._cost_markdown(r)
    assert "| after | $2.24/h at zero GPU nodes to $112.32/h at the maximum |" in md[3]
    assert md[-1] == "| change (at the maximum) | none | |"


# --- preflight: the quota for the maximum ----------------------------------------------------------


def _elastic_account(acct: Account, gpu_quota: float, nodes: int):
    caller(acct)
    zones(acct)
    offering(acct, True, elsewhere=("use1-az6", "use1-az2"))
    quota(acct, gpu_quota)
    acct.stub("ec2").add_response("describe_capacity_block_offerings", {"CapacityBlockOfferings": []},
                                  {"InstanceType": "p5.48xlarge", "InstanceCount": nodes, "CapacityDurationHours": 24})
    standard_quota(acct)
    addons(acct)
    image(acct)


def test_quota_nodes_is_the_maximum_in_elastic_mode_and_the_count_otherwise():
    assert preflight.quota_nodes(p5_cfg()) == (2, 2, "")
    n, surge, what = preflight.quota_nodes(elastic(p5_cfg(), max_nodes=4))
    assert (n, surge) == (4, 0) and "gpuNodes.elastic.maxNodes" in what
    assert preflight.quota_nodes(elastic(p5_cfg()))[0] == 2  # no maxNodes: gpuNodes.count


def test_elastic_quota_is_checked_for_the_maximum_not_the_count():
    cfg = elastic(with_gpu(p5_cfg(), count=1), max_nodes=4)
    acct = Account()
    _elastic_account(acct, gpu_quota=767, nodes=4)
    [(name, detail)] = failures(r := run(acct, cfg))
    assert name == "On-Demand vCPU quota"
    assert detail == ("Running On-Demand P instances (L-417A185B) is 767 vCPUs, 4 x p5.48xlarge (elastic: "
                      "gpuNodes.elastic.maxNodes, the most Karpenter may launch) need 768")
    fix = next(x for x in r if not x.ok).fix
    assert "--desired-value 768" in fix and "or lower rltrain:gpuNodes.elastic.maxNodes" in fix
    acct = Account()
    _elastic_account(acct, gpu_quota=768, nodes=4)
    results = run(acct, cfg)
    assert failures(results) == []
    on_demand = next(x for x in results if x.name == "On-Demand capacity")
    assert "4 x p5.48xlarge" in on_demand.detail


def test_elastic_quota_needs_no_roll_surge():
    # The fixed group needs 768 vCPUs for its roll's surge (test_preflight); elastic at 2 nodes 384.
    acct = Account()
    _elastic_account(acct, gpu_quota=384, nodes=2)
    assert failures(run(acct, elastic(p5_cfg(), max_nodes=2))) == []


# --- the impact table: Karpenter drift ------------------------------------------------------------

POOL_ARGS = dict(name="gpu", node_class_ref={"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"},
                 instance_type="p5.48xlarge", zone="us-east-1a", max_nodes=2, gpus_per_node=8, idle_minutes=10,
                 labels={"role": "gpu-training"}, taints=[{"key": "nvidia.com/gpu", "value": "true",
                                                           "effect": "NoSchedule"}])


def row(obj: dict) -> dict:
    t = f"kubernetes:{obj['apiVersion']}:{obj['kind']}"
    return {"type": t, "name": f"karpenter-{obj['kind'].lower()}", "custom": True, "inputs": obj, "options": {},
            "dependsOn": []}


def pool(**changes) -> dict:
    return row(kn.node_pool(kn.NodePoolArgs(**{**POOL_ARGS, **changes})))


def node_class(**spec) -> dict:
    return row({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": {"name": "gpu"},
                "spec": {"amiSelectorTerms": [{"alias": "al2023@v20261101"}], "role": "gpu-node-role",
                         "userData": "nodeadm", **spec}})


def one(before: dict, after: dict, cfg) -> impact.Impact:
    [i] = impact.classify([before], [after], cfg)
    return i


def test_a_node_pool_template_change_is_a_node_roll_needing_allow_node_roll():
    cfg = rendered("p5").cfg
    i = one(pool(), pool(labels={"role": "gpu-training", "new": "x"}), cfg)
    assert i.kind == impact.NODE_ROLL and i.opt_in == "rltrain:gpuNodes.allowNodeRoll" and not i.allowed
    assert "spec.template.metadata.labels.new" in i.why and "Drifted" in i.why and "do-not-disrupt" in i.why
    assert "REFUSED: set rltrain:gpuNodes.allowNodeRoll: true" in i.line()
    assert impact.check([pool()], [pool(instance_type="p5en.48xlarge")], cfg).refused[0].kind == impact.NODE_ROLL
    ok = one(pool(), pool(zone="us-east-1b"), with_gpu(cfg, allow_node_roll=True))
    assert ok.kind == impact.NODE_ROLL and ok.allowed


def test_node_pool_disruption_and_limits_are_in_place():
    cfg = rendered("p5").cfg
    for after in (pool(idle_minutes=30), pool(max_nodes=4)):
        i = one(pool(), after, cfg)
        assert i.kind == impact.IN_PLACE and i.allowed and "outside the NodePool hash" in i.why
    assert "spec.disruption.consolidateAfter" in one(pool(), pool(idle_minutes=30), cfg).why
    assert "spec.limits.nodes" in one(pool(), pool(max_nodes=4), cfg).why
    assert impact.check([pool()], [pool(max_nodes=4)], cfg).refused == []


def test_an_ec2_node_class_spec_change_is_a_node_roll():
    cfg = rendered("p5").cfg
    i = one(node_class(), node_class(amiSelectorTerms=[{"alias": "al2023@v20261201"}]), cfg)
    assert i.kind == impact.NODE_ROLL and i.opt_in == "rltrain:gpuNodes.allowNodeRoll" and not i.allowed
    assert "spec.amiSelectorTerms[0].alias" in i.why
    assert one(node_class(), node_class(userData="nodeadm v2"), cfg).kind == impact.NODE_ROLL
    labels = node_class()
    changed = copy.deepcopy(labels)
    changed["inputs"]["metadata"]["labels"] = {"a": "b"}
    assert one(labels, changed, cfg).kind == impact.IN_PLACE


def test_a_removed_or_renamed_node_pool_deletes_its_nodes():
    cfg = rendered("p5").cfg
    [gone] = impact.classify([pool()], [], cfg)
    assert gone.kind == impact.NODE_ROLL and gone.opt_in == "rltrain:gpuNodes.allowReplacement" and not gone.allowed
    renamed = pool(name="gpu2")
    assert one(pool(), renamed, cfg).opt_in == "rltrain:gpuNodes.allowReplacement"


def test_the_pinned_karpenter_hashes_only_the_template():
    # The rule's premise, read from the pinned module when it is on this machine.
    import pathlib
    src = pathlib.Path("/root/go/pkg/mod/sigs.k8s.io/karpenter@v1.14.0/pkg/apis/v1/nodepool.go")
    if not src.exists():
        pytest.skip("the Karpenter module is not on this machine")
    text = src.read_text()
    assert "hashstructure.Hash(in.Spec.Template," in text
    assert 'Budgets []Budget `json:"budgets,omitempty" hash:"ignore"`' in text




def test_the_rendered_p5_elastic_node_pool_and_node_class():
    r = rendered("p5-elastic")
    base = r.resources

    def changed(kind: str, path: tuple, value) -> list[impact.Impact]:
        after = copy.deepcopy(base)
        d = next(x for x in after if x["inputs"].get("kind") == kind)["inputs"]
        for p in path[:-1]:
            d = d[p]
        d[path[-1]] = value
        return impact.classify(base, after, r.cfg)

    [idle] = changed("NodePool", ("spec", "disruption", "consolidateAfter"), "30m")
    assert (idle.name, idle.kind) == ("karpenter-node-pool", impact.IN_PLACE)
    assert changed("NodePool", ("spec", "limits", "nodes"), "4")[0].kind == impact.IN_PLACE
    [expiry] = changed("NodePool", ("spec", "template", "spec", "expireAfter"), "720h")
    assert expiry.kind == impact.NODE_ROLL and not expiry.allowed
    [nc] = changed("EC2NodeClass", ("spec", "userData"), "changed")
    assert (nc.name, nc.kind, nc.opt_in) == ("karpenter-node-class", impact.NODE_ROLL, "rltrain:gpuNodes.allowNodeRoll")
