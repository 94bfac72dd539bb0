"""A failed GPU is detected and repaired (issue 31): the EKS node monitoring agent add-on on created
clusters, one DCGM host engine per GPU node, bounded node repair; nothing of it on a bring-your-own
cluster unless its owners run the agent. Through the mock engine (the offline render)."""

from __future__ import annotations

import json

import pytest
from support import rendered
from test_monitoring import releases, render_with

from components.aws import gpu_nodes
from components.offline import unset_secrets
from components.k8s import monitoring, node_health
from components.stack import catalog, validate, versions
from components.stack.labels import GPU_TAINT_KEY

CREATED = ("dev", "p4de", "p5")
ADDON = "aws:eks/addon:Addon"
# Key paths of the add-on's configuration schema (aws/eks-node-monitoring-agent tag v1.7.0,
# charts/configuration.schema.json; the schema sets additionalProperties false at every level
# listed): what EKS accepts as configuration values. "free": any key below it.
AGENT_SCHEMA_KEYS = {
    "global": "map", "global.podLabels": "free", "global.podAnnotations": "free",
    "nodeAgent": "map", "dcgmAgent": "map", "extraObjects": "leaf",
    **{f"nodeAgent.{k}": "leaf" for k in ("affinity", "additionalArgs", "podAnnotations", "podLabels",
                                          "nodeSelector", "priorityClassName", "probePort", "resources",
                                          "resizePolicy", "tolerations", "monitors")},
    **{f"dcgmAgent.{k}": "leaf" for k in ("affinity", "podAnnotations", "podLabels", "nodeSelector",
                                          "priorityClassName", "resources", "resizePolicy", "tolerations")},
}


def agent_runs_dcgm_on(instance_type: str) -> bool:
    """Whether the agent's dcgm-server is scheduled on this instance type (its default affinity)."""
    return instance_type in versions.NODE_MONITORING_AGENT_DCGM_TYPES


def exporter_starts_own_engine(values: dict) -> bool:
    """Whether a dcgm-exporter release with these values starts its own embedded host engine."""
    args = values.get("arguments", list(node_health.EXPORTER_COUNTERS_ARGS))
    return node_health.REMOTE_HOSTENGINE_FLAG not in args and "--remote-hostengine-info" not in args


def agent_addon(r) -> dict | None:
    found = [x["inputs"] for x in r.resources
             if x["type"] == ADDON and x["inputs"]["addonName"] == versions.NODE_MONITORING_AGENT_ADDON]
    assert len(found) <= 1
    return found[0] if found else None


def _paths(d: dict, prefix: tuple[str, ...] = ()) -> list[str]:
    out = []
    for k, v in d.items():
        p = (*prefix, k)
        out.append(".".join(p))
        if isinstance(v, dict) and AGENT_SCHEMA_KEYS.get(".".join(p)) == "map":
            out += _paths(v, p)
    return out


def tolerates_gpu_taint(tolerations: list[dict]) -> bool:
    return any(t.get("operator") == "Exists" and t.get("key") in (None, GPU_TAINT_KEY)
               and t.get("effect") in (None, "NoSchedule") for t in tolerations)


def hostengines_per_gpu_node(r) -> int:
    """DCGM host engines that start on one GPU node of the render: the agent's dcgm-server (the
    add-on present, scheduled on the instance type, tolerating the GPU taint) and the DCGM
    exporter's embedded one (the release present, not pointed at a running engine)."""
    n = 0
    addon = agent_addon(r)
    if addon is not None:
        dcgm = json.loads(addon["configurationValues"]).get("dcgmAgent", {})
        if agent_runs_dcgm_on(r.cfg.gpu_nodes.instance_type) and tolerates_gpu_taint(
                dcgm.get("tolerations", [])):
            n += 1
    exporter = releases(r).get(versions.DCGM_EXPORTER.chart)
    if exporter is not None and exporter_starts_own_engine(exporter["values"]):
        n += 1
    return n


# --- the add-on ----------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", CREATED)
def test_created_cluster_gets_the_pinned_agent_addon_tolerating_the_gpu_taint(stack):
    r = rendered(stack)
    addon = agent_addon(r)
    assert addon["addonVersion"] == versions.eks_addons(r.cfg.cluster.kubernetes_version)[
        versions.NODE_MONITORING_AGENT_ADDON] == "v1.7.0-eksbuild.1"
    assert addon["resolveConflictsOnCreate"] == addon["resolveConflictsOnUpdate"] == "OVERWRITE"
    values = json.loads(addon["configurationValues"])
    assert values == {"dcgmAgent": {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                     "effect": "NoSchedule"}]}}
    # Every key is one the add-on's schema at v1.7.0 accepts (EKS rejects the others at `up`).
    assert [p for p in _paths(values) if p not in AGENT_SCHEMA_KEYS] == []
    # After the GPU node group: its dcgm-server has nodes to run on.
    rec = next(x for x in r.resources if x["name"] == "addons-node-monitoring-agent")
    assert "aws:eks/nodeGroup:NodeGroup::gpu-nodes" in rec["dependsOn"]


def test_the_schema_check_catches_a_key_the_addon_refuses():
    # dcgmAgent.enabled (turning the agent's engine off) does not exist at v1.7.0.
    assert "dcgmAgent.enabled" not in AGENT_SCHEMA_KEYS
    assert _paths({"dcgmAgent": {"enabled": False}}) == ["dcgmAgent", "dcgmAgent.enabled"]


def test_agent_runs_its_host_engine_on_every_gpu_type_of_the_catalog():
    assert set(catalog.CATALOG) <= set(versions.NODE_MONITORING_AGENT_DCGM_TYPES)
    assert not agent_runs_dcgm_on("m7i.4xlarge")


# --- one DCGM host engine per GPU node -----------------------------------------------------------


@pytest.mark.parametrize("stack", CREATED)
def test_one_dcgm_host_engine_per_gpu_node_on_created_clusters(stack):
    r = rendered(stack)
    assert hostengines_per_gpu_node(r) == 1
    v = releases(r)[versions.DCGM_EXPORTER.chart]["values"]
    # The exporter connects to the agent's engine on the node's address (hostPort 5555).
    assert v["arguments"] == ["-f", "/etc/dcgm-exporter/default-counters.csv", "-r", "$(NODE_IP):5555"]
    assert v["extraEnv"] == [{"name": "NODE_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}]


def test_both_starting_their_own_engine_is_caught():
    """The exporter with its default arguments beside the agent: two engines on each GPU node."""
    a = monitoring.monitoring_args(rendered("p5").cfg)
    assert a.node_hostengine
    own = monitoring.dcgm_values(a.model_copy(update={"node_hostengine": False}))
    assert exporter_starts_own_engine(own)
    assert not exporter_starts_own_engine(monitoring.dcgm_values(a))


def test_byo_installs_no_agent_and_its_exporter_keeps_its_own_engine():
    r = render_with("byo", {"enabled": True, "storageClass": "gp3-existing"}, {"grafanaAdminPassword": "x"})
    assert agent_addon(r) is None
    assert not [x for x in r.resources if x["type"] == "aws:eks/nodeGroup:NodeGroup"]
    assert hostengines_per_gpu_node(r) == 1
    assert "arguments" not in releases(r)[versions.DCGM_EXPORTER.chart]["values"]


def test_byo_whose_owners_run_the_agent_points_the_exporter_at_it():
    r = render_with("byo", {"enabled": True, "storageClass": "gp3-existing", "nodeMonitoringAgent": True},
                    {"grafanaAdminPassword": "x"})
    assert agent_addon(r) is None  # theirs, not the stack's
    v = releases(r)[versions.DCGM_EXPORTER.chart]["values"]
    assert not exporter_starts_own_engine(v) and "$(NODE_IP):5555" in v["arguments"]


def test_node_monitoring_agent_key_only_on_byo():
    values, secret_keys, _ = unset_secrets.load_stack("p5")
    data = {k[8:]: v for k, v in values.items() if k.startswith("rltrain:")}
    mon = json.loads(data.get("monitoring", "{}"))
    data["monitoring"] = json.dumps({**mon, "nodeMonitoringAgent": True})
    with pytest.raises(validate.ConfigError) as e:
        validate.load(data, secret_keys={k[8:] for k in secret_keys}, program=False)
    assert "rltrain:monitoring.nodeMonitoringAgent" in str(e.value)
    assert "only with cluster.existing" in str(e.value)


# --- bounded node repair -------------------------------------------------------------------------


@pytest.mark.parametrize("count,threshold", [(1, 1), (2, 1), (3, 1), (4, 2), (16, 8)])
def test_repair_stops_when_more_than_half_the_group_is_unhealthy(count, threshold):
    assert gpu_nodes.repair_unhealthy_threshold(count) == threshold
    # Never more than half the group repaired because of one condition seen everywhere.
    assert threshold <= max(1, count // 2)


@pytest.mark.parametrize("stack", CREATED)
def test_gpu_node_group_repairs_one_node_at_a_time(stack):
    r = rendered(stack)
    ng = r.result.one("aws:eks/nodeGroup:NodeGroup", "gpu-nodes").inputs
    assert ng["nodeRepairConfig"] == {
        "enabled": True, "maxParallelNodesRepairedCount": 1,
        "maxUnhealthyNodeThresholdCount": gpu_nodes.repair_unhealthy_threshold(r.cfg.gpu_nodes.count)}


# --- the impact of turning it on -----------------------------------------------------------------


def test_impact_of_bounded_repair_says_what_it_does_to_a_running_run():
    import copy

    from components.offline import impact

    before, after = copy.deepcopy(rendered("p5").resources), copy.deepcopy(rendered("p5").resources)
    ng = next(r for r in before if r["type"] == "aws:eks/nodeGroup:NodeGroup")
    ng["inputs"]["nodeRepairConfig"] = {"enabled": True}  # the program before issue 31
    before = [r for r in before if r["name"] != "addons-node-monitoring-agent"]
    got = {i.name: i for i in impact.classify(before, after, rendered("p5").cfg)}
    assert got["gpu-nodes"].kind == impact.IN_PLACE and got["gpu-nodes"].allowed
    why = got["gpu-nodes"].why
    assert "1 node(s) at a time, none while more than 1 are unhealthy" in why
    assert "run pods on that node are lost" in why and "newest complete checkpoint" in why
    assert got["addons-node-monitoring-agent"].kind == impact.CREATE


def test_runbook_names_every_repair_alert():
    from pathlib import Path

    from components.k8s import monitoring_rules as mr

    page = Path(__file__).resolve().parents[1] / mr.REPAIR_RUNBOOK.split("#")[0]
    text = page.read_text()
    assert "\n## Alerts\n" in text
    spec = mr.rules_spec(mr.RulesArgs(training_namespace="rltrain", queued_alert_minutes=30, gpu_node_count=2))
    alerts = [r["alert"] for g in spec["groups"] for r in g["rules"]
              if r.get("annotations", {}).get("runbook_url") == mr.REPAIR_RUNBOOK]
    assert sorted(alerts) == ["RltrainGpuNodeRebootRepairInProgress", "RltrainGpuNodeRebooted",
                              "RltrainGpuNodeRepairInProgress", "RltrainGpuNodeUnhealthy", "RltrainRunPodsReplaced"]
    assert all(f"`{a}`" in text for a in alerts)
    # No repair-in-progress alert where the group's size is not fixed (byo, Capacity Block).
    spec0 = mr.rules_spec(mr.RulesArgs(training_namespace="rltrain", queued_alert_minutes=30))
    assert "RltrainGpuNodeRepairInProgress" not in [r.get("alert") for g in spec0["groups"] for r in g["rules"]]


def test_repair_in_progress_alert_only_where_the_group_size_is_fixed():
    a = monitoring.monitoring_args(rendered("p5").cfg)
    assert monitoring.rules_args(a).gpu_node_count == 2
    # A Capacity Block's group holds no node outside its window; a byo cluster's size is its owners'.
    assert monitoring.rules_args(a.model_copy(update={"gpu_capacity_block": True})).gpu_node_count == 0
    assert monitoring.rules_args(a.model_copy(update={"created_cluster": False})).gpu_node_count == 0
