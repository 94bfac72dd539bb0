"""AWS first `up` and day two (issue 19): what the deploy and impact models now see and refuse.

Each race or day-two failure is asserted twice: the old program (the record edited back to what it
was) is refused with the reason, and the new program passes.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil

import pytest
import yaml
from support import rendered
from test_impact import edit, find, kinds, render_impact

from components.aws import gpu_nodes
from components.aws.gpu_nodes import GpuNodeGroupArgs
from components.offline import deploy_model, impact, policy, render
from components.offline.resources import Violation
from components.offline.mock_engine import ROOT

FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
ADDON = "aws:eks/addon:Addon"


@pytest.fixture
def project(tmp_path):
    """A scratch copy of the project whose base record is the committed p5 one (as test_impact's)."""
    proj = tmp_path / "proj"
    (proj / "rendered" / "p5").mkdir(parents=True)
    shutil.copy(ROOT / "rendered" / "p5" / "resources.json", proj / "rendered" / "p5" / "resources.json")
    for name in ("__main__.py", "Pulumi.yaml", "Pulumi.p5.yaml"):
        shutil.copy(ROOT / name, proj / name)
    (proj / "components").symlink_to(ROOT / "components")
    return proj


_P5_BY_STACK_FILE: dict[str, render.Rendered] = {}


def render_p5(project) -> render.Rendered:
    """render.render_stack("p5", project), once per distinct Pulumi.p5.yaml: every scratch project holds
    the same program (components/ links to this one), so its stack file decides the render. Each caller
    gets its own Rendered (tests set .base)."""
    text = (project / "Pulumi.p5.yaml").read_text()
    if text not in _P5_BY_STACK_FILE:
        _P5_BY_STACK_FILE[text] = render.render_stack("p5", project)
    return dataclasses.replace(_P5_BY_STACK_FILE[text])


def impact_of_p5(project) -> list[impact.Impact]:
    """test_impact.render_impact through render_p5: against the project's base record."""
    r = render_p5(project)
    base = json.loads((project / "rendered" / "p5" / "resources.json").read_text())
    return impact.classify(base, r.resources, r.cfg)


def rows(stack: str = "p5") -> list[dict]:
    return copy.deepcopy(rendered(stack).resources)


def violations(rs: list[dict], rule: str) -> list[Violation]:
    return [v for v in policy.evaluate(rs) if v.rule == rule]


@pytest.mark.parametrize("stack", ["p5", "p4de", "dev"])
def test_new_program_passes_the_new_rules(stack):
    rs = rows(stack)
    for rule in ("create-time-validation", "addon-conflicts", "iam-before-use"):
        assert violations(rs, rule) == [], rule


# --- first up: FSx waits for its rules ------------------------------------------------------------


def test_fsx_waits_for_every_lustre_rule_of_both_groups():
    rs = rows()
    fs = find(rs, FSX, "storage-fs")
    lustre = {r.name for r in deploy_model._lustre_rules(rs, fs)}
    # Own group (from the nodes and itself, 988 and 1018-1023), the nodes' group (from FSx), and
    # the file system's egress.
    assert lustre == {f"storage-lustre-{p}-{s}" for p in (988, 1018) for s in ("nodes", "self", "to-nodes")} \
        | {"storage-egress"}
    deps = set(fs["dependsOn"])
    assert all(f"aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule::{n}" in deps
               for n in lustre if n != "storage-egress")


def test_old_program_fsx_racing_its_rules_is_refused():
    rs = rows()
    fs = find(rs, FSX, "storage-fs")
    fs["dependsOn"] = [d for d in fs["dependsOn"] if "SecurityGroup" not in d.split("::")[0]
                       or d.endswith("::storage-sg")]
    vs = violations(rs, "create-time-validation")
    assert {v.resource for v in vs} == {"LustreFileSystem storage-fs"}
    assert len(vs) == 7 and all("InvalidNetworkSettings" in v.message for v in vs)


# --- first up: add-ons resolve conflicts with what EKS bootstrapped -------------------------------


def test_every_addon_overwrites_on_create_and_update():
    rs = rows()
    addons = [r for r in rs if r["type"] == ADDON]
    assert {r["inputs"]["addonName"] for r in addons} >= {"coredns", "eks-pod-identity-agent", "aws-fsx-csi-driver",
                                                          "aws-ebs-csi-driver"}
    for r in addons:
        assert (r["inputs"]["resolveConflictsOnCreate"], r["inputs"]["resolveConflictsOnUpdate"]) == \
            ("OVERWRITE", "OVERWRITE"), r["name"]
    cluster = find(rs, "eks:index:Cluster")
    # Turning the bootstrap off would replace a running cluster: it stays at pulumi-eks's default.
    assert "bootstrapSelfManagedAddons" not in cluster["inputs"]
    assert cluster["inputs"]["kubeProxyAddonOptions"]["resolveConflictsOnCreate"] == "OVERWRITE"


def test_old_program_addon_without_conflict_resolution_is_refused():
    rs = rows()
    coredns = find(rs, ADDON, "cluster-coredns")
    del coredns["inputs"]["resolveConflictsOnCreate"], coredns["inputs"]["resolveConflictsOnUpdate"]
    find(rs, "eks:index:Cluster")["inputs"]["kubeProxyAddonOptions"]["resolveConflictsOnUpdate"] = "NONE"
    vs = violations(rs, "addon-conflicts")
    assert sorted((v.resource, v.message.split(" is ")[0]) for v in vs) == [
        ("add-on coredns (cluster-coredns)", "resolveConflictsOnCreate"),
        ("add-on coredns (cluster-coredns)", "resolveConflictsOnUpdate"),
        ("add-on kube-proxy (pulumi-eks kubeProxyAddonOptions)", "resolveConflictsOnUpdate")]
    assert all("ConfigurationConflict" in v.message for v in vs)


# --- IAM policy attachments before what uses the role ---------------------------------------------


def test_attachments_record_their_role_and_come_first():
    rs = rows()
    policies = deploy_model.role_policies(rs)
    assert sorted(p["name"] for p in policies["gpu-node-role"]) == [
        "gpu-node-role-AmazonEC2ContainerRegistryReadOnly", "gpu-node-role-AmazonEKSWorkerNodePolicy",
        "gpu-node-role-AmazonEKS_CNI_Policy"]
    assert [p["name"] for p in policies["monitoring-ebs-csi-role"]] == [
        "monitoring-ebs-csi-role-AmazonEBSCSIDriverPolicy"]
    ng = find(rs, NODE_GROUP)
    assert {f"aws:iam/rolePolicyAttachment:RolePolicyAttachment::{p['name']}"
            for p in policies["gpu-node-role"]} <= set(ng["dependsOn"])


def test_old_program_node_group_before_its_policies_is_refused():
    rs = rows()
    ng = find(rs, NODE_GROUP)
    ng["dependsOn"] = [d for d in ng["dependsOn"] if "rolePolicyAttachment" not in d]
    vs = violations(rs, "iam-before-use")
    assert len(vs) == 3 and {v.resource for v in vs} == {"NodeGroup gpu-nodes"}
    assert "cannot delete the instances and network interfaces" in vs[0].message


def test_destroy_deletes_node_groups_addons_before_their_policies():
    waves, kept = deploy_model.destroy_plan(rows())
    at = {n: i for i, w in enumerate(waves) for n in w}
    for user, pol in (("aws:eks/nodeGroup:NodeGroup::gpu-nodes",
                       "aws:iam/rolePolicyAttachment:RolePolicyAttachment::gpu-node-role-AmazonEKS_CNI_Policy"),
                      ("eks:index:ManagedNodeGroup::cluster-system",
                       "aws:iam/rolePolicyAttachment:RolePolicyAttachment::cluster-system-node-role-AmazonEKS_CNI_Policy"),
                      ("aws:eks/addon:Addon::monitoring-ebs-csi",
                       "aws:iam/rolePolicyAttachment:RolePolicyAttachment::monitoring-ebs-csi-role-AmazonEBSCSIDriverPolicy"),
                      ):
        assert at[user] < at[pol], (user, pol)
    # Workloads before the cluster, the cluster before its subnets are even considered.
    assert at["kubernetes:batch/v1:Job::workloads-single-node-job"] < at["eks:index:Cluster::cluster-eks"]


def test_pod_identity_association_waits_for_its_inline_policy(project):
    edit(project, "p5", "training", s3={"bucket": "my-checkpoints", "prefix": "rltrain/"})
    from components.offline import render
    rs = render.render_stack("p5", project).resources
    assert [p["name"] for p in deploy_model.role_policies(rs)["training-identity-role"]] == ["training-identity-s3"]
    assert violations(rs, "iam-before-use") == []
    pia = find(rs, "aws:eks/podIdentityAssociation:PodIdentityAssociation")
    pia["dependsOn"] = [d for d in pia["dependsOn"] if "rolePolicy" not in d]
    assert [v.resource for v in violations(rs, "iam-before-use")] == [
        "PodIdentityAssociation training-identity-association"]


def test_destroy_keeps_the_protected_file_system_and_its_network():
    _, kept = deploy_model.destroy_plan(rows())
    names = {k.split("::", 1)[1] for k in kept}
    # A retained FSx keeps its interfaces in its subnet and security groups: those stay too.
    assert {"storage-fs", "storage-key", "cluster-secrets-key", "storage-sg", "gpu-sg", "network-private-us-east-1a",
            "network-vpc"} <= names
    assert "gpu-nodes" not in names and "cluster-eks" not in names


def test_summary_shows_destroy_order_and_the_ebs_claims():
    from components.offline import render
    text = render.summary(rendered("p5"))
    assert "destroy order (`pulumi destroy --exclude-protected`" in text
    assert "kept (protected, and what they depend on): " in text
    # Prometheus's claim goes with its StatefulSet, and the monitoring namespace (waited for on
    # destroy) goes before the EBS CSI add-on: no manual step is left.
    assert "before destroy: delete the claims" not in text


def test_monitoring_volumes_are_deleted_before_the_ebs_driver_goes():
    import copy as _copy
    from components.offline import deploy_model
    rs = rows()
    release = find(rs, "kubernetes:helm.sh/v3:Release", "monitoring-kube-prometheus-stack")
    spec = release["inputs"]["values"]["prometheus"]["prometheusSpec"]
    assert spec["persistentVolumeClaimRetentionPolicy"] == {"whenDeleted": "Delete", "whenScaled": "Retain"}
    ns = find(rs, "kubernetes:core/v1:Namespace", "monitoring-namespace")
    assert "aws:eks/addon:Addon::monitoring-ebs-csi" in ns["dependsOn"]
    assert deploy_model._ebs_claims_left(rs) == []
    # Either protection removed: the summary asks for the manual step again.
    kept = _copy.deepcopy(rs)
    del find(kept, "kubernetes:helm.sh/v3:Release", "monitoring-kube-prometheus-stack")["inputs"]["values"][
        "prometheus"]["prometheusSpec"]["persistentVolumeClaimRetentionPolicy"]
    assert deploy_model._ebs_claims_left(kept) == ["monitoring/kube-prometheus-stack"]
    racing = _copy.deepcopy(rs)
    find(racing, "kubernetes:core/v1:Namespace", "monitoring-namespace")["dependsOn"].remove(
        "aws:eks/addon:Addon::monitoring-ebs-csi")
    assert deploy_model._ebs_claims_left(racing) == ["monitoring/kube-prometheus-stack"]


# --- day two: versions, rolls, capacity -----------------------------------------------------------


def test_node_groups_follow_the_cluster_version_and_on_demand_rolls_launch_first():
    rs = rows()
    ng = find(rs, NODE_GROUP)
    assert ng["inputs"]["version"] == "1.35"
    assert "aws:eks/cluster:Cluster::cluster-eks-eksCluster" in ng["dependsOn"]
    # On-Demand p5: launch the replacement before terminating (a failed launch keeps the old node).
    assert ng["inputs"]["updateConfig"] == {"maxUnavailable": 1, "updateStrategy": "DEFAULT"}
    assert find(rs, "eks:index:ManagedNodeGroup")["inputs"]["version"] == "1.35"


def test_kubernetes_upgrade_order_control_plane_then_nodes_then_addons(project):
    edit(project, "p5", "cluster", kubernetesVersion="1.36")
    edit(project, "p5", "gpuNodes", allowNodeRoll=True)
    from components.offline import render
    r = render.render_stack("p5", project)
    base = json.loads((project / "rendered" / "p5" / "resources.json").read_text())
    impacts = impact.classify(base, r.resources, r.cfg)
    by = {i.name: i for i in impacts}
    assert by["cluster-eks"].kind == impact.IN_PLACE and "control plane Kubernetes 1.35 -> 1.36" in by["cluster-eks"].why
    assert by["gpu-nodes"].kind == impact.NODE_ROLL and by["gpu-nodes"].allowed
    assert "DEFAULT strategy" in by["gpu-nodes"].why and "leaves the old nodes running" in by["gpu-nodes"].why
    assert by["cluster-system"].kind == impact.NODE_ROLL
    assert "v1.13.2-eksbuild.3 -> v1.14.3-eksbuild.16" in by["cluster-coredns"].why
    lines = impact.sequence(impacts, r.resources)
    step = {}
    for line in lines[1:]:
        n, rest = line.strip().split(". ", 1)
        step[rest.split(": ")[1].split(" ")[1]] = int(n)
    assert step["cluster-eks"] < step["gpu-nodes"] and step["cluster-eks"] < step["cluster-system"]
    # The add-ons whose pinned build changes with the minor (versions.py); the CSI drivers keep theirs.
    assert "addons-fsx-csi" not in step and "monitoring-ebs-csi" not in step
    for addon in ("cluster-coredns", "cluster-pod-identity-agent"):
        assert step["gpu-nodes"] < step[addon] and step["cluster-system"] < step[addon], addon


def test_gpu_roll_refused_without_opt_in_says_how_it_proceeds(project):
    edit(project, "p5", "cluster", kubernetesVersion="1.36")
    [ng] = [i for i in impact_of_p5(project) if i.name == "gpu-nodes"]
    assert ng.refused and ng.opt_in == "rltrain:gpuNodes.allowNodeRoll"
    assert "EKS first launches new nodes (surge, up to 2 in one AZ), then drains 1 old node(s)" in ng.why


@pytest.mark.parametrize("before,after,allowed,reason", [
    ("1.35", "1.36", True, "control plane"),
    ("1.34", "1.36", False, "skips a minor"),
    ("1.36", "1.35", False, "goes down a version"),
])
def test_control_plane_version_steps(before, after, allowed, reason):
    ok, why = impact.version_change(before, after)
    assert ok is allowed and reason in why


def test_skipping_a_minor_is_refused_with_the_reason(project):
    base = json.loads((project / "rendered" / "p5" / "resources.json").read_text())
    find(base, "eks:index:Cluster")["inputs"]["version"] = "1.34"
    (project / "rendered" / "p5" / "resources.json").write_text(json.dumps(base))
    edit(project, "p5", "cluster", kubernetesVersion="1.36")
    [cl] = [i for i in impact_of_p5(project) if i.name == "cluster-eks"]
    assert cl.kind == impact.REFUSED and "set 1.35 first" in cl.why


def test_version_newly_recorded_is_no_roll():
    before, after = rows(), rows()
    del find(before, NODE_GROUP)["inputs"]["version"]
    [ng] = [i for i in impact.classify(before, after, rendered("p5").cfg) if i.name == "gpu-nodes"]
    assert ng.kind == impact.IN_PLACE and "no roll" in ng.why


def _lt_and_group(capacity_type, reservation=None):
    a = GpuNodeGroupArgs(cluster_name="c", instance_type="p5.48xlarge", count=2, efa=True, capacity_type=capacity_type,
                         reservation_id=reservation, root_volume_gib=500, root_volume_throughput=1000,
                         root_volume_iops=16000, local_storage_raid0=True, fast_image_pull=True)
    return a


def test_capacity_block_follows_the_eks_guide(project):
    edit(project, "p5", "gpuNodes.capacity", type="capacity-block", reservationId="cr-0123456789abcdef0")
    from components.offline import render
    r = render.render_stack("p5", project)
    lt = next(x for x in r.resources if x["name"] == "gpu-lt")["inputs"]
    ng = next(x for x in r.resources if x["type"] == NODE_GROUP)["inputs"]
    # EKS user guide capacity-blocks-mng: market type and reservation in the launch template, the
    # instance type there too, none on the node group; the group may shrink to 0 outside the window.
    assert lt["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"] == {
        "capacityReservationId": "cr-0123456789abcdef0"}
    assert lt["instanceType"] == "p5.48xlarge" and "instanceTypes" not in ng
    assert ng["capacityType"] == "CAPACITY_BLOCK" and ng["scalingConfig"] == {"desiredSize": 2, "minSize": 0,
                                                                              "maxSize": 2}
    assert "placement" not in lt  # a reservation places its instances itself (F6)


def test_odcr_targets_the_reservation_on_demand(project):
    edit(project, "p5", "gpuNodes.capacity", type="odcr", reservationId="cr-0123456789abcdef0")
    from components.offline import render
    r = render.render_stack("p5", project)
    lt = next(x for x in r.resources if x["name"] == "gpu-lt")["inputs"]
    ng = next(x for x in r.resources if x["type"] == NODE_GROUP)["inputs"]
    assert lt["capacityReservationSpecification"]["capacityReservationTarget"] == {
        "capacityReservationId": "cr-0123456789abcdef0"}
    assert "instanceMarketOptions" not in lt and "instanceType" not in lt
    assert ng["capacityType"] == "ON_DEMAND" and ng["instanceTypes"] == ["p5.48xlarge"]
    assert ng["scalingConfig"]["minSize"] == 2


def test_capacity_block_roll_names_the_guide_requirement():
    after = find(rows(), NODE_GROUP)
    after["inputs"]["capacityType"] = "CAPACITY_BLOCK"
    assert "desired size 0 while the group is upgraded" in impact.how_a_roll_proceeds(after)


# --- region move, static claim --------------------------------------------------------------------


def test_region_move_recreates_every_regional_resource_and_needs_the_cluster_opt_in(project):
    path = project / "Pulumi.p5.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["config"]["aws:region"] = "us-west-2"
    doc["config"]["rltrain:network"].update(availabilityZones=["us-west-2a", "us-west-2b"],
                                            gpuAvailabilityZone="us-west-2a")
    path.write_text(yaml.safe_dump(doc))
    impacts = render_impact(project)
    k = kinds(impacts)
    assert k["cluster-eks"] == impact.DATA_LOSS and k["storage-fs"] == impact.DATA_LOSS
    assert k["gpu-nodes"] == impact.NODE_ROLL
    for name in ("network-vpc", "network-nat", "cluster-secrets-key", "cluster-coredns", "gpu-lt", "gpu-sg",
                 "cluster-system"):
        assert k[name] in (impact.REPLACE, impact.NODE_ROLL, impact.DATA_LOSS), name
    assert "gpu-node-role" not in k  # IAM is global
    assert k["workloads-single-node-job"] == impact.RUN_RESTART
    [cl] = [i for i in impacts if i.name == "cluster-eks"]
    assert cl.refused and cl.opt_in == "rltrain:cluster.allowReplacement" and "us-east-1 -> us-west-2" in cl.why


def test_static_claim_never_follows_fsx_into_a_resize(project):
    edit(project, "p5", "storage.fsx", storageCapacityGiB=7200)
    by = {i.name: i for i in render_impact(project)}
    assert by["storage-claim"].kind == impact.IN_PLACE and by["storage-claim"].allowed
    assert "ignored" in by["storage-claim"].why
    claim = find(rows(), "kubernetes:core/v1:PersistentVolumeClaim", "storage-claim")
    assert claim["options"]["ignoreChanges"] == ["spec.resources"]


def test_old_program_claim_resize_is_refused():
    before, after = rows(), rows()
    claim = find(after, "kubernetes:core/v1:PersistentVolumeClaim", "storage-claim")
    claim["options"].pop("ignoreChanges")
    claim["inputs"]["spec"]["resources"]["requests"]["storage"] = "7200Gi"
    [c] = [i for i in impact.classify(before, after, rendered("p5").cfg) if i.name == "storage-claim"]
    assert c.kind == impact.REFUSED and "refuses to resize" in c.why


def test_unused_helper_is_consistent():
    assert gpu_nodes.RESERVED_UPDATE_STRATEGY == "MINIMAL" and gpu_nodes.ON_DEMAND_UPDATE_STRATEGY == "DEFAULT"
    assert _lt_and_group("capacity-block", "cr-0").min_size == 0
    assert _lt_and_group("odcr", "cr-0").min_size == 2


# --- network, identity, EFA -----------------------------------------------------------------------


def test_s3_gateway_endpoint_on_the_private_route_table():
    rs = rows()
    [ep] = [r for r in rs if r["type"] == "aws:ec2/vpcEndpoint:VpcEndpoint"]
    assert ep["inputs"]["serviceName"] == "com.amazonaws.us-east-1.s3"
    assert ep["inputs"]["vpcEndpointType"] == "Gateway"
    assert ep["inputs"]["routeTableIds"] == ["[known after deploy: network-private.id]"]


def test_ebs_csi_role_trusts_only_its_service_account_of_this_cluster():
    role = find(rows(), "aws:iam/role:Role", "monitoring-ebs-csi-role")
    trust = json.loads(role["inputs"]["assumeRolePolicy"])
    cond = trust["Statement"][0]["Condition"]["StringEquals"]
    assert cond["aws:RequestTag/kubernetes-namespace"] == "kube-system"
    assert cond["aws:RequestTag/kubernetes-service-account"] == "ebs-csi-controller-sa"
    assert cond["aws:RequestTag/eks-cluster-name"] == "rltrain-p5"
    assert "aws:SourceAccount" in cond


def test_p5_efa_layout_follows_the_ec2_guide():
    nics = find(rows(), "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")["inputs"]["networkInterfaces"]
    assert len(nics) == 32
    # EC2 guide efa-acc-inst-types / p5-efa: primary card 0 device 0 EFA with ENA; every other card
    # device 1, EFA-only here (no VPC address used).
    assert (nics[0]["networkCardIndex"], nics[0]["deviceIndex"], nics[0]["interfaceType"]) == (0, 0, "efa")
    assert all((n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) == (i, 1, "efa-only")
               for i, n in enumerate(nics) if i)


# --- GPU root volume --------------------------------------------------------------------------------


def _gpu_cfg(**gpu):
    from components.stack import config
    base = {"instanceType": "p5.48xlarge", "count": 2, **gpu}
    return config.GpuNodesConfig.model_validate(base)


def test_root_volume_sized_for_what_stays_on_it_with_raid0():
    from components.aws.platform import gpu_root_volume
    assert gpu_root_volume(_gpu_cfg()) == {"root_volume_gib": 100, "root_volume_throughput": 125,
                                           "root_volume_iops": 3000}
    # Without RAID0 images land on the root volume: the configured (fast) defaults stay.
    assert gpu_root_volume(_gpu_cfg(localStorage="none")) == {"root_volume_gib": 500, "root_volume_throughput": 1000,
                                                              "root_volume_iops": 16000}
    # A value set in the stack file wins (keeps a running stack's nodes from rolling).
    assert gpu_root_volume(_gpu_cfg(rootVolume={"sizeGiB": 500}))["root_volume_gib"] == 500


def test_pull_request_summary_shows_the_update_order(project):
    edit(project, "p5", "cluster", kubernetesVersion="1.36")
    r = render_p5(project)
    r.base = json.loads((project / "rendered" / "p5" / "resources.json").read_text())
    md = render.summary_markdown(r)
    assert "**Order of the update (each step after what it depends on)**:" in md
    assert "1. in place: Cluster cluster-eks: control plane Kubernetes 1.35 -> 1.36" in md


# --- issue 33: rolls, placement group, scaling, Capacity Blocks -----------------------------------


@pytest.mark.parametrize("capacity_type,reservation,strategy,surge", [
    ("on-demand", None, "DEFAULT", 2), ("odcr", "cr-0", "MINIMAL", 0), ("capacity-block", "cr-0", "MINIMAL", 0)])
def test_minimal_only_where_capacity_is_reserved(capacity_type, reservation, strategy, surge):
    a = _lt_and_group(capacity_type, reservation)
    assert (a.update_strategy, a.roll_surge) == (strategy, surge)


def test_placement_group_does_not_depend_on_the_node_count():
    base = dict(cluster_name="c", instance_type="p5.48xlarge", efa=True, root_volume_gib=500,
                root_volume_throughput=1000, root_volume_iops=16000, local_storage_raid0=True, fast_image_pull=False)
    assert all(GpuNodeGroupArgs(count=n, **base).placement_group for n in (1, 2, 4))
    assert not GpuNodeGroupArgs(count=2, capacity_type="odcr", reservation_id="cr-0", **base).placement_group


def test_scaling_1_to_2_with_efa_set_changes_no_launch_template(project):
    """With `efa` set explicitly, scaling 1 -> 2 touches only the node group's scaling: no placement
    group added, no new launch template version, no roll (before: the placement group was added)."""
    from components.offline import render
    edit(project, "p5", "workloads", multiNode={"enabled": False}, ncclTest={"enabled": False})
    edit(project, "p5", "gpuNodes", count=1, efa=True)
    one = render.render_stack("p5", project).resources
    edit(project, "p5", "gpuNodes", count=2, efa=True)
    two = render.render_stack("p5", project).resources
    pg = [r for r in one if r["type"] == "aws:ec2/placementGroup:PlacementGroup"]
    assert len(pg) == 1
    assert find(one, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt") == find(
        two, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")
    by = {i.name: i for i in impact.classify(one, two, rendered("p5").cfg) if i.type.startswith("aws:")}
    assert set(by) == {"gpu-nodes"} and by["gpu-nodes"].kind == impact.IN_PLACE


def test_growing_on_demand_in_the_placement_group_names_the_capacity_risk():
    before, after = rows(), rows()
    find(after, NODE_GROUP)["inputs"]["scalingConfig"].update(desiredSize=4, minSize=4, maxSize=4)
    [ng] = [i for i in impact.classify(before, after, rendered("p5").cfg) if i.name == "gpu-nodes"]
    assert ng.kind == impact.IN_PLACE and ng.allowed
    assert "2 -> 4 On-Demand" in ng.why and "InsufficientInstanceCapacity" in ng.why


def test_node_roll_opt_in_is_enforced_by_the_program_not_only_the_render(project):
    """Without rltrain:gpuNodes.allowNodeRoll the node group ignores a new launch template version
    and Kubernetes version: `pulumi up` (which never runs the render) does not roll the nodes."""
    from components.offline import render
    ng = find(rows(), NODE_GROUP)
    assert ng["options"]["ignoreChanges"] == ["launchTemplate.version", "version"]
    edit(project, "p5", "gpuNodes", allowNodeRoll=True)
    opened = find(render.render_stack("p5", project).resources, NODE_GROUP)
    assert "ignoreChanges" not in opened["options"]
    # The impact says the program holds the roll back.
    before, after = rows(), rows()
    find(after, NODE_GROUP)["inputs"]["launchTemplate"]["version"] = "7"
    [i] = [i for i in impact.classify(before, after, rendered("p5").cfg) if i.name == "gpu-nodes"]
    assert i.kind == impact.NODE_ROLL and not i.allowed and "`pulumi up` leaves the nodes as they are" in i.why


def test_capacity_block_desired_size_is_left_to_eks(project):
    from components.offline import render
    edit(project, "p5", "gpuNodes.capacity", type="capacity-block", reservationId="cr-0123456789abcdef0")
    ng = find(render.render_stack("p5", project).resources, NODE_GROUP)
    assert "scalingConfig.desiredSize" in ng["options"]["ignoreChanges"]
    assert ng["inputs"]["updateConfig"]["updateStrategy"] == "MINIMAL"
    assert "scalingConfig.desiredSize" not in find(rows(), NODE_GROUP)["options"]["ignoreChanges"]
