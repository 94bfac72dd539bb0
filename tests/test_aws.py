"""AWS foundation (issue 3) through the mock engine: what decides performance and data safety."""

import base64

import pytest
from support import obj, rendered

from components.stack import catalog
from components.stack import config, versions


def inputs(r, type_token, name=None):
    return r.result.one(type_token, name).inputs


@pytest.mark.parametrize("stack,cards", [("p5", 32), ("p4de", 4), ("dev", 1)])
def test_launch_template_one_efa_interface_per_network_card(stack, cards):
    lt = inputs(rendered(stack), "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")
    nics = lt["networkInterfaces"]
    assert len(nics) == cards == catalog.get(rendered(stack).cfg.gpu_nodes.instance_type).network_cards
    assert (nics[0]["networkCardIndex"], nics[0]["deviceIndex"], nics[0]["interfaceType"]) == (0, 0, "efa")
    for i, nic in enumerate(nics[1:], start=1):
        assert (nic["networkCardIndex"], nic["deviceIndex"], nic["interfaceType"]) == (i, 1, "efa-only")
    assert "vpcSecurityGroupIds" not in lt  # with interfaces, security groups go on each interface


def test_launch_template_imdsv2_gp3_and_nodeadm_raid0(p5):
    lt = inputs(p5, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")
    assert lt["metadataOptions"]["httpTokens"] == "required"
    ebs = lt["blockDeviceMappings"][0]["ebs"]
    # RAID0 holds containerd, the kubelet and pod logs: the root volume keeps the AMI only, at gp3's
    # free baseline (components/aws/platform.py RAID0_ROOT).
    assert (ebs["volumeType"], ebs["volumeSize"], ebs["throughput"], ebs["iops"], ebs["encrypted"]) == (
        "gp3", 100, 125, 3000, "true")
    user_data = base64.b64decode(lt["userData"]).decode()
    assert "Content-Type: application/node.eks.aws" in user_data
    assert "kind: NodeConfig" in user_data and "strategy: RAID0" in user_data
    assert "FastImagePull" not in user_data  # off unless configured
    assert lt["placement"] == {"groupName": "rltrain-p5-gpu"}


def test_cluster_placement_group(p5):
    assert inputs(p5, "aws:ec2/placementGroup:PlacementGroup")["strategy"] == "cluster"


def test_node_security_group_self_rules_ingress_and_egress(p5):
    ingress = [r.inputs for r in p5.result.by_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
               if r.name == "gpu-self-ingress"]
    egress = [r.inputs for r in p5.result.by_type("aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")
              if r.name == "gpu-self-egress"]
    for rule in ingress + egress:
        assert rule["ipProtocol"] == "-1"
        assert rule["referencedSecurityGroupId"] == rule["securityGroupId"] == "[known after deploy: gpu-sg.id]"
    assert len(ingress) == len(egress) == 1


def test_node_group_one_subnet_shared_with_fsx(p5):
    ng = inputs(p5, "aws:eks/nodeGroup:NodeGroup")
    fs = inputs(p5, "aws:fsx/lustreFileSystem:LustreFileSystem")
    assert ng["subnetIds"] == ["[known after deploy: network-private-us-east-1a.id]"]
    assert fs["subnetIds"] == ng["subnetIds"][0]
    assert ng["labels"]["role"] == "gpu-training"
    assert ng["labels"]["rltrain/instance-type"] == "p5.48xlarge"
    assert ng["taints"] == [{"effect": "NO_SCHEDULE", "key": "nvidia.com/gpu", "value": "true"}]
    assert ng["amiType"] == "AL2023_x86_64_NVIDIA"
    # Bounded repair: one node at a time, and none while more than half the group is unhealthy.
    assert ng["nodeRepairConfig"] == {"enabled": True, "maxParallelNodesRepairedCount": 1,
                                      "maxUnhealthyNodeThresholdCount": 1}
    assert ng["scalingConfig"]["desiredSize"] == 2


def test_fsx_persistent_2_protected_and_retained(p5):
    rec = p5.result.one("aws:fsx/lustreFileSystem:LustreFileSystem")
    assert rec.protect and rec.retain_on_delete
    i = rec.inputs
    assert (i["deploymentType"], i["storageCapacity"], i["perUnitStorageThroughput"]) == ("PERSISTENT_2", 4800, 500)
    assert i["skipFinalBackup"] is False and i["automaticBackupRetentionDays"] == 7
    assert i["kmsKeyId"] == "[known after deploy: storage-key.arn]"
    assert p5.result.one("aws:kms/key:Key", "storage-key").protect


def test_fsx_security_group_lustre_ports_from_nodes(p5):
    rules = {r.name: r.inputs for r in p5.result.by_type("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule")
             if r.name.startswith("storage-lustre")}
    nodes = {(i["fromPort"], i["toPort"]) for i in rules.values()
             if i["referencedSecurityGroupId"] == "[known after deploy: gpu-sg.id]"}
    assert nodes == {(988, 988), (1018, 1023)}


def test_pv_and_claim_in_every_stack_with_storage(any_stack):
    claim = obj(any_stack, "PersistentVolumeClaim", "fsx-claim")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    if any_stack.cfg.byo_cluster:
        return
    pv = obj(any_stack, "PersistentVolume", "rltrain-fsx-claim")
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert pv["spec"]["csi"]["driver"] == "fsx.csi.aws.com"
    assert pv["spec"]["csi"]["volumeAttributes"]["mountname"] == "[known after deploy: storage-fs.mountName]"
    assert claim["spec"]["volumeName"] == pv["metadata"]["name"]


def test_device_plugins_pinned_and_tolerating_gpu_taint(any_stack):
    releases = {r.inputs["chart"]: r.inputs for r in any_stack.result.by_type("kubernetes:helm.sh/v3:Release")}
    if any_stack.cfg.byo_cluster:
        # Cluster-wide installs are opt-in on a cluster the stack does not own.
        assert not any_stack.cfg.device_plugins and not releases
        return
    nv = releases["nvidia-device-plugin"]
    assert (nv["version"], nv["repositoryOpts"]["repo"]) == ("0.20.0", "https://nvidia.github.io/k8s-device-plugin")
    efa = releases["aws-efa-k8s-device-plugin"]
    assert (efa["version"], efa["repositoryOpts"]["repo"]) == ("v0.5.30", "https://aws.github.io/eks-charts")
    for values in (nv["values"], efa["values"]):
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in values["tolerations"]
    # the EFA plugin runs only on this stack's EFA nodes (F2)
    assert efa["values"]["nodeSelector"]["node.kubernetes.io/instance-type"] == any_stack.cfg.gpu_nodes.instance_type


def test_efa_plugin_knows_every_efa_type_in_catalog():
    assert {t for t, it in catalog.CATALOG.items() if it.has_efa} <= set(versions.EFA_PLUGIN_KNOWN_TYPES)


@pytest.mark.parametrize("stack", ["dev", "p4de", "p5"])
def test_fsx_csi_addon_without_aws_permissions(stack):
    """A static FSx volume needs no AWS API: no role, no Pod Identity association, pinned version."""
    r = rendered(stack)
    addon = inputs(r, "aws:eks/addon:Addon", "addons-fsx-csi")
    assert addon["addonName"] == "aws-fsx-csi-driver"
    assert "podIdentityAssociations" not in addon and "serviceAccountRoleArn" not in addon
    assert addon["addonVersion"] == versions.eks_addons("1.35")["aws-fsx-csi-driver"]
    assert not [x for x in r.resources if "fsx-csi" in x["name"] and x["type"].startswith("aws:iam/")]
    rec = next(x for x in r.resources if x["name"] == "addons-fsx-csi")
    assert "aws:eks/addon:Addon::cluster-pod-identity-agent" in rec["dependsOn"]


@pytest.mark.parametrize("stack", ["dev", "p4de", "p5"])
def test_every_eks_addon_is_pinned_per_kubernetes_minor(stack):
    r = rendered(stack)
    pins = versions.eks_addons(r.cfg.cluster.kubernetes_version)
    addons = {x["inputs"]["addonName"]: x["inputs"] for x in r.resources if x["type"] == "aws:eks/addon:Addon"}
    assert set(addons) == {"eks-pod-identity-agent", "aws-fsx-csi-driver", "coredns", "aws-ebs-csi-driver",
                           "eks-node-monitoring-agent"}
    assert all(a["addonVersion"] == pins[name] for name, a in addons.items())
    c = inputs(r, "eks:index:Cluster")
    assert c["vpcCniOptions"]["addonVersion"] == pins["vpc-cni"]
    assert c["kubeProxyAddonOptions"]["version"] == pins["kube-proxy"]
    assert c["corednsAddonOptions"]["enabled"] is False  # created by the stack itself, pinned
    assert set(versions.EKS_ADDON_VERSIONS) == set(config.KUBERNETES_VERSIONS)
    assert all(set(v) == set(pins) for v in versions.EKS_ADDON_VERSIONS.values())


def test_cluster_settings(p5):
    c = inputs(p5, "eks:index:Cluster")
    assert c["authenticationMode"] == "API" and c["endpointPrivateAccess"] is True
    assert c["skipDefaultNodeGroup"] is True
    assert set(c["enabledClusterLogTypes"]) == {"api", "audit", "authenticator", "controllerManager", "scheduler"}
    assert "0.0.0.0/0" not in c["publicAccessCidrs"]
    assert inputs(p5, "aws:eks/addon:Addon", "cluster-pod-identity-agent")["addonName"] == "eks-pod-identity-agent"


def test_gpu_node_role_has_only_node_policies(p5):
    attached = {r.inputs["policyArn"] for r in p5.result.by_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                if r.parent == "gpu"}
    assert attached == {"arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
                        "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
                        "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly"}
