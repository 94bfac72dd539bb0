"""Elastic mode on a created cluster (issue 30) through the mock engine: Karpenter, its IAM, queue
and rules, and the GPU EC2NodeClass / NodePool / NodeOverlay (components/aws/karpenter.py)."""

import json

import pytest
from support import obj, rendered
from test_kueue_support import variant

from components.aws import iam, karpenter_node_class, karpenter_policy
from components.stack import catalog, versions

STACK = "p5-elastic"
RESERVATION = "cr-0123456789abcdef0"


def _all(r, type_token):
    return [x for x in r.resources if x["type"] == type_token]


def _one(r, type_token, name):
    found = [x for x in _all(r, type_token) if x["name"] == name]
    assert len(found) == 1, f"{type_token} {name}: {len(found)}"
    return found[0]["inputs"]


@pytest.fixture(scope="module")
def elastic():
    return rendered(STACK)


def test_no_managed_gpu_node_group_and_no_gpu_launch_template(elastic):
    assert _all(elastic, "aws:eks/nodeGroup:NodeGroup") == []
    assert [x["name"] for x in _all(elastic, "aws:ec2/launchTemplate:LaunchTemplate")] == ["cluster-system-lt"]
    # What FSx and the node class still use: the GPU security group and the placement group.
    assert _one(elastic, "aws:ec2/placementGroup:PlacementGroup", "gpu-placement")["strategy"] == "cluster"
    assert _all(elastic, "aws:ec2/securityGroup:SecurityGroup")


def test_fixed_stack_keeps_its_node_group_and_no_karpenter():
    p5 = rendered("p5")
    assert len(_all(p5, "aws:eks/nodeGroup:NodeGroup")) == 1
    assert not [x for x in p5.resources if "karpenter" in x["name"]]


def test_node_pool_limits_taint_labels_and_class_ref(elastic):
    spec = obj(elastic, "NodePool", "rltrain-gpu")["spec"]
    assert spec["limits"] == {"nodes": "2", "nvidia.com/gpu": "16"}
    t = spec["template"]
    assert t["spec"]["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NoSchedule"}]
    assert t["metadata"]["labels"] == {"role": "gpu-training", "rltrain/instance-type": "p5.48xlarge",
                                       "nvidia.com/gpu.present": "true"}
    assert t["spec"]["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "rltrain-gpu"}
    req = {r["key"]: r["values"] for r in t["spec"]["requirements"]}
    assert req == {"node.kubernetes.io/instance-type": ["p5.48xlarge"], "topology.kubernetes.io/zone": ["us-east-1a"],
                   "karpenter.sh/capacity-type": ["on-demand"]}
    assert spec["disruption"]["consolidationPolicy"] == "WhenEmpty"
    assert spec["disruption"]["consolidateAfter"] == "10m"


def test_node_overlay_adds_the_allocatable_huge_pages(elastic):
    o = obj(elastic, "NodeOverlay", "rltrain-gpu-hugepages")["spec"]
    mib = catalog.get("p5.48xlarge").allocatable(efa=True).hugepages_2mi_mib
    assert o["capacity"] == {"hugepages-2Mi": f"{mib}Mi"} and mib == 10256


def test_node_class_p5(elastic):
    spec = obj(elastic, "EC2NodeClass", "rltrain-gpu")["spec"]
    assert spec["amiSelectorTerms"] == [{"alias": "al2023@latest"}]
    assert spec["role"] == "[known after deploy: karpenter-node-role.name]"
    assert spec["subnetSelectorTerms"] == [{"id": "[known after deploy: network-private-us-east-1a.id]"}]
    assert spec["securityGroupSelectorTerms"] == [
        {"id": "[known after deploy: gpu-sg.id]"},
        {"id": "[known after deploy: cluster-eks.eksCluster.vpcConfig.clusterSecurityGroupId]"}]
    nics = spec["networkInterfaces"]
    assert nics[0] == {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}
    efa = [(n["networkCardIndex"], n["deviceIndex"]) for n in nics if n["interfaceType"] == "efa-only"]
    assert efa == [(card, 1) for card in range(32)]  # 32 EFA devices: Karpenter counts the efa-only entries
    assert spec["placementGroupSelector"] == {"name": "rltrain-p5-elastic-gpu"}
    assert "capacityReservationSelectorTerms" not in spec
    assert spec["blockDeviceMappings"] == [{"deviceName": "/dev/xvda", "rootVolume": True, "ebs": {
        "volumeSize": "100Gi", "volumeType": "gp3", "iops": 3000, "throughput": 125, "encrypted": True,
        "deleteOnTermination": True}}]
    assert spec["metadataOptions"]["httpTokens"] == "required"
    assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1
    text = "\n".join(spec["userData"]) if isinstance(spec["userData"], list) else spec["userData"]
    assert "Content-Type: application/node.eks.aws" in text and "kind: NodeConfig" in text


def test_node_class_raid0_is_karpenters_instance_store_policy(elastic):
    """Item 6: Karpenter sizes ephemeral-storage from the root volume (100 GiB) unless the class says
    instanceStorePolicy RAID0 (v1.14.0 pkg/providers/instancetype/types.go ephemeralStorage); RAID0
    in our user data alone left a pod asking for more without a node. Karpenter writes the RAID0
    into its own NodeConfig part, so ours leaves it out; the managed group's keeps it."""
    spec = obj(elastic, "EC2NodeClass", "rltrain-gpu")["spec"]
    assert spec["instanceStorePolicy"] == "RAID0"
    text = "\n".join(spec["userData"]) if isinstance(spec["userData"], list) else spec["userData"]
    assert "localStorage" not in text
    lt = rendered("p5").result.one("aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs
    import base64
    assert "strategy: RAID0" in base64.b64decode(lt["userData"]).decode()
    # No NVMe disks, or local storage off: no policy (Karpenter then counts the root volume, as it should).
    assert "instanceStorePolicy" not in karpenter_node_class.node_class(_args())["spec"]


def _args(**kw):
    base = dict(name="n", role="r", subnet_id="subnet-1", security_group_ids=("sg-1",), network_cards=4,
                efa_devices=4, root_volume_gib=100, root_volume_throughput=125, root_volume_iops=3000)
    return karpenter_node_class.NodeClassArgs(**{**base, **kw})


def test_node_class_p4de_interfaces():
    it = catalog.get("p4de.24xlarge")
    spec = karpenter_node_class.node_class(_args(network_cards=it.network_cards, efa_devices=it.efa_devices))["spec"]
    assert spec["networkInterfaces"] == [
        {"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"},
        *[{"networkCardIndex": c, "deviceIndex": 1, "interfaceType": "efa-only"} for c in range(4)]]


def test_node_class_without_efa_has_no_interfaces():
    assert "networkInterfaces" not in karpenter_node_class.node_class(_args(network_cards=1, efa_devices=0))["spec"]


def test_node_class_refuses_more_efa_than_cards():
    with pytest.raises(ValueError, match="at most one efa-only interface per card"):
        karpenter_node_class.network_interfaces(1, 2)


@pytest.mark.parametrize("cap", ["odcr", "capacity-block"])
def test_node_class_reservation_selector(cap):
    spec = karpenter_node_class.node_class(_args(capacity_type=cap, reservation_id=RESERVATION))["spec"]
    assert spec["capacityReservationSelectorTerms"] == [{"id": RESERVATION}]
    assert "placementGroupSelector" not in spec


def test_node_class_reservation_needs_its_id():
    with pytest.raises(ValueError, match="reservationId"):
        karpenter_node_class.node_class(_args(capacity_type="odcr"))


def test_p4de_odcr_elastic_through_the_wiring():
    r = variant("p4de", {"rltrain:gpuNodes": {"capacity": {"type": "odcr", "reservationId": RESERVATION},
                                               "elastic": {"enabled": True}}})
    spec = obj(r, "EC2NodeClass", "rltrain-gpu")["spec"]
    assert spec["capacityReservationSelectorTerms"] == [{"id": RESERVATION}]
    assert "placementGroupSelector" not in spec  # a reservation places its instances itself
    assert [n["networkCardIndex"] for n in spec["networkInterfaces"] if n["interfaceType"] == "efa-only"] == [0, 1, 2, 3]
    pool = obj(r, "NodePool", "rltrain-gpu")["spec"]
    assert {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]} in \
        pool["template"]["spec"]["requirements"]
    assert pool["limits"]["nodes"] == str(r.cfg.gpu_nodes.count)  # maxNodes unset: the count
    assert _all(r, "aws:eks/nodeGroup:NodeGroup") == []


def test_node_role_and_its_access_entry(elastic):
    role = json.loads(_one(elastic, "aws:iam/role:Role", "karpenter-node-role")["assumeRolePolicy"])
    assert role["Statement"][0]["Principal"] == {"Service": "ec2.amazonaws.com"}
    attached = sorted(x["inputs"]["policyArn"] for x in _all(elastic, "aws:iam/rolePolicyAttachment:RolePolicyAttachment")
                      if x["name"].startswith("karpenter-node-role-"))
    assert attached == sorted(iam.NODE_POLICIES)
    entry = _one(elastic, "aws:eks/accessEntry:AccessEntry", "karpenter-node-access")
    assert entry["type"] == "EC2_LINUX"
    assert entry["principalArn"].startswith("[known after deploy: karpenter-node-role")


def test_interruption_queue_policy_and_rules(elastic):
    q = _one(elastic, "aws:sqs/queue:Queue", "karpenter-interruption")
    assert (q["name"], q["sqsManagedSseEnabled"], q["messageRetentionSeconds"]) == ("rltrain-p5-elastic", True, 300)
    policy = json.loads(_one(elastic, "aws:sqs/queuePolicy:QueuePolicy", "karpenter-interruption-policy")["policy"])
    allow, deny = policy["Statement"]
    assert allow["Principal"]["Service"] == ["events.amazonaws.com", "sqs.amazonaws.com"]
    assert allow["Action"] == "sqs:SendMessage"
    assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    rules = {x["name"]: json.loads(x["inputs"]["eventPattern"]) for x in _all(elastic, "aws:cloudwatch/eventRule:EventRule")}
    assert {k: (v["source"][0], v["detail-type"][0]) for k, v in rules.items()} == {
        f"karpenter-{k}": v for k, v in karpenter_policy.EVENT_RULES.items()}
    assert len(rules) == 5  # the v1.14.0 template's four plus the capacity-reservation interruption warning
    targets = _all(elastic, "aws:cloudwatch/eventTarget:EventTarget")
    names = {x["inputs"]["name"] for x in _all(elastic, "aws:cloudwatch/eventRule:EventRule")}
    assert names == {f"rltrain-p5-elastic-{k}" for k in karpenter_policy.EVENT_RULES}
    assert sorted(t["inputs"]["rule"] for t in targets) == sorted(names)
    assert {t["inputs"]["arn"] for t in targets} == {"[known after deploy: karpenter-interruption.arn]"}


def test_controller_role_pod_identity_scoped_to_the_cluster(elastic):
    trust = json.loads(_one(elastic, "aws:iam/role:Role", "karpenter-controller-role")["assumeRolePolicy"])
    cond = trust["Statement"][0]["Condition"]["StringEquals"]
    assert cond["aws:RequestTag/kubernetes-namespace"] == "kube-system"
    assert cond["aws:RequestTag/kubernetes-service-account"] == "karpenter"
    assert cond["aws:RequestTag/eks-cluster-name"] == "rltrain-p5-elastic"
    assoc = _one(elastic, "aws:eks/podIdentityAssociation:PodIdentityAssociation", "karpenter-controller-association")
    assert (assoc["namespace"], assoc["serviceAccount"]) == ("kube-system", "karpenter")
    policies = {x["name"].removeprefix("karpenter-controller-"): json.loads(x["inputs"]["policy"])
                for x in _all(elastic, "aws:iam/rolePolicy:RolePolicy") if x["name"].startswith("karpenter-controller-")}
    assert set(policies) == set(karpenter_policy.POLICIES)
    life = {s["Sid"]: s for s in policies["node-lifecycle"]["Statement"]}
    assert life["AllowScopedDeletion"]["Condition"]["StringEquals"] == {
        "aws:ResourceTag/kubernetes.io/cluster/rltrain-p5-elastic": "owned"}
    assert life["AllowScopedEC2InstanceActionsWithTags"]["Condition"]["StringEquals"][
        "aws:RequestTag/eks:eks-cluster-name"] == "rltrain-p5-elastic"
    pass_role = policies["iam-integration"]["Statement"][0]
    assert pass_role["Action"] == "iam:PassRole"
    assert pass_role["Resource"].startswith("[known after deploy: karpenter-node-role")
    assert policies["interruption"]["Statement"][0]["Resource"] == "[known after deploy: karpenter-interruption.arn]"
    every = [s for p in policies.values() for s in p["Statement"]]
    assert all(":us-east-1:" in r for s in every for r in ([s["Resource"]] if isinstance(s["Resource"], str)
                                                          else s["Resource"]) if r.startswith("arn:aws:ec2"))


def test_helm_releases(elastic):
    releases = {x["name"]: x for x in _all(elastic, "kubernetes:helm.sh/v3:Release") if x["name"].startswith("karpenter")}
    crd, ctl = releases["karpenter-crd"]["inputs"], releases["karpenter-controller"]["inputs"]
    assert (crd["chart"], crd["version"]) == ("oci://public.ecr.aws/karpenter/karpenter-crd", "1.14.0")
    assert (ctl["chart"], ctl["version"], ctl["namespace"]) == ("oci://public.ecr.aws/karpenter/karpenter", "1.14.0",
                                                               "kube-system")
    assert ctl["skipCrds"] is True
    assert versions.KARPENTER.version == versions.KARPENTER_CRD.version
    v = ctl["values"]
    assert v["settings"]["clusterName"] == "rltrain-p5-elastic"
    assert v["settings"]["featureGates"] == {"nodeOverlay": True}
    assert v["nodeSelector"] == {"kubernetes.io/os": "linux", "role": "system"}
    assert v["replicas"] == 2 and v["serviceAccount"] == {"name": "karpenter"}
    # After its CRDs, its role's association and the node access entry; the node objects after it.
    deps = releases["karpenter-controller"]["dependsOn"]
    assert any(d.endswith("::karpenter-crd") for d in deps)
    assert any(d.endswith("::karpenter-controller-association") for d in deps)
    for kind, count in (("EC2NodeClass", 2), ("NodePool", 2), ("NodeOverlay", 1)):  # the GPU set and the CPU one
        cr = [x for x in elastic.resources if x["type"].endswith(f":{kind}")]
        assert len(cr) == count and all(any(d.endswith("::karpenter-controller") for d in c["dependsOn"]) for c in cr)


def test_controller_pods_come_long_after_their_association_and_know_the_region(elastic):
    """Item 5: the association is eventually consistent and the Pod Identity webhook mutates a pod
    only at creation. The release followed the association at once (both after the system nodes):
    a controller pod created first got neither credentials nor AWS_REGION, asked IMDS for the
    region (hop limit 1: refused) and crash-looped, never mutated again. Now the association is
    created beside the system node group, the release after the system nodes, and the region is
    set, and a new association rolls the pods (its id in their template)."""
    from components.offline.deploy_model import Graph
    g = Graph(elastic.resources)
    assoc = "aws:eks/podIdentityAssociation:PodIdentityAssociation::karpenter-controller-association"
    release = "kubernetes:helm.sh/v3:Release::karpenter-controller"
    system = {"eks:index:ManagedNodeGroup::cluster-system"}
    agent = {"aws:eks/addon:Addon::cluster-pod-identity-agent"}
    assert not g.reaches(assoc, system | agent)
    assert g.reaches(release, system) and g.reaches(release, agent) and g.reaches(release, {assoc})
    ctl = _one(elastic, "kubernetes:helm.sh/v3:Release", "karpenter-controller")["values"]
    assert {"name": "AWS_REGION", "value": "us-east-1"} in ctl["controller"]["env"]
    assert ctl["podAnnotations"] == {
        "rltrain/pod-identity-association": "[known after deploy: karpenter-controller-association.id]"}
