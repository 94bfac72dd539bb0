"""GpuNodeGroup: the GPU nodes, with every setting that decides NCCL performance declared here.

Launch template (EFA interfaces per network card, IMDSv2, gp3 root volume, nodeadm user data),
cluster placement group, the node security group with its self rules, and an EKS managed node group
(`aws.eks.NodeGroup`, a plain resource, so all of it shows in the render and can be tested).
Pattern: terraform-aws-eks `modules/eks-managed-node-group` (`enable_efa_support`).
"""

from __future__ import annotations

import base64
from typing import Literal, Optional

import pulumi
import pulumi_aws as aws
from pydantic import BaseModel, ConfigDict, Field

from components.stack import catalog, node_repair

from components.aws import iam
from components.stack.labels import ALLOW_NODE_ROLL_TAG, GPU_TAINT_KEY, ROLL_INPUTS, gpu_node_labels
# Labels workloads select on; `nvidia.com/gpu.present` also satisfies the NVIDIA device plugin's
# default node affinity, which EKS does not set (FACTS.md: without it the plugin runs zero pods).
AMI_TYPE = "AL2023_x86_64_NVIDIA"
# How a roll replaces GPU nodes (GpuNodeGroupArgs.update_strategy): on reserved capacity terminate
# first, then launch (MINIMAL: the reservation has no spare instance); on On-Demand launch first,
# then terminate (DEFAULT: a replacement that cannot launch leaves the old node running).
RESERVED_UPDATE_STRATEGY = "MINIMAL"
ON_DEMAND_UPDATE_STRATEGY = "DEFAULT"
# A Capacity Block's group: EKS scales it down itself ahead of the block's end time, and the group
# is scaled to 0 around upgrades (EKS user guide, capacity-blocks-mng; the self-managed guide,
# capacity-blocks, asks for scaling to zero 30+ minutes before the end time). Pulumi must not set
# desiredSize back on the next `up` (a launch outside the window fails): EKS owns it after create.
CAPACITY_BLOCK_IGNORES = ("scalingConfig.desiredSize",)
_BOUNDARY = "//rltrain-nodeadm//"
# What an autonamed resource ignores: a stack created with a fixed name keeps it (GpuNodeGroup).
AUTONAMED_KEEP = ("name",)


# Node auto repair (EKS user guide, node-repair; API NodeRepairConfig; pulumi-aws 7.51.1
# eks.NodeGroupNodeRepairConfigArgs has enabled, max_parallel_nodes_repaired_count/_percentage,
# max_unhealthy_node_threshold_count/_percentage and node_repair_config_overrides). One node at a
# time: a repair replaces or reboots the node, and every run pod on it is lost (the run restarts
# from its newest complete checkpoint, docs/gpu-failure-runbook.md); two at once would take a
# second run, or both halves of one, down together.
REPAIR_MAX_PARALLEL = 1


def repair_unhealthy_threshold(count: int) -> int:
    """Unhealthy nodes above which EKS stops repairing (maxUnhealthyNodeThresholdCount: "above which
    node auto repair actions will stop"): half the group, at least 1. More than half unhealthy at
    once is rarely hardware (a bad AMI, driver or agent release, an AZ event): replacing them would
    replace the group, so repair stops and the alerts ask a person."""
    return max(1, count // 2)


def update_strategy(capacity_type: str) -> str:
    """MINIMAL only where capacity is reserved: an exactly sized reservation or Capacity Block has
    no spare instance to surge into (EKS user guide, managed-node-update-behavior: MINIMAL
    terminates first and is meant for reservations and accelerated instances). On On-Demand
    capacity MINIMAL terminates a p5 before its replacement is known to launch: an
    InsufficientInstanceCapacity leaves the group a node short and the update failed, which blocks
    the next control-plane upgrade. DEFAULT launches first (the same guide, "Scale up phase": EKS
    itself raises the Auto Scaling group's max and desired size for the surge, so the node group's
    maxSize needs no headroom); if the new nodes cannot launch, the old ones keep running."""
    return ON_DEMAND_UPDATE_STRATEGY if capacity_type == "on-demand" else RESERVED_UPDATE_STRATEGY


def roll_surge(capacity_type: str) -> int:
    """Extra instances a roll launches before it terminates: EKS's DEFAULT scale-up adds the larger
    of "up to twice the number of Availability Zones" and maxUnavailable (the guide above); one AZ,
    maxUnavailable 1: 2. None for MINIMAL. Preflight sizes the quota for it."""
    return 0 if update_strategy(capacity_type) == RESERVED_UPDATE_STRATEGY else 2


class GpuNodeGroupArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_name: str
    instance_type: str
    count: int = Field(ge=1)
    efa: bool
    capacity_type: Literal["on-demand", "capacity-block", "odcr"] = "on-demand"
    reservation_id: Optional[str] = None
    root_volume_gib: int
    root_volume_throughput: int
    root_volume_iops: int
    local_storage_raid0: bool
    fast_image_pull: bool
    # Kubelet CPU Manager and Topology Manager policies (components/stack/topology.py derives them
    # from the pods that run on the group); None: nodeadm's defaults (none / none).
    cpu_manager_policy: Optional[Literal["none", "static"]] = None
    topology_manager_policy: Optional[Literal["none", "best-effort", "restricted", "single-numa-node"]] = None

    @property
    def instance(self) -> catalog.InstanceType:
        return catalog.get(self.instance_type)

    @property
    def instance_type_in_launch_template(self) -> bool:
        # EKS user guide, capacity-blocks-mng: a Capacity Block node group is created with a
        # custom launch template that names the instance type (with InstanceMarketOptions
        # capacity-block and the reservation id); the node group itself names none.
        return self.capacity_type == "capacity-block"

    @property
    def min_size(self) -> int:
        # A Capacity Block exists only in its window: outside it (and while the node group is
        # upgraded, EKS user guide capacity-blocks-mng: "make sure that the desired size of the
        # node group is set to 0") the group must be allowed to hold no node.
        return 0 if self.capacity_type == "capacity-block" else self.count

    allow_node_roll: bool = False
    # False in elastic mode (rltrain:gpuNodes.elastic): only the security group and the placement
    # group are created (FSx and Karpenter's EC2NodeClass use them); no launch template, node role
    # or managed node group: Karpenter launches the GPU nodes (components/aws/karpenter.py).
    managed_group: bool = True

    @property
    def placement_group(self) -> bool:
        # A reservation already places its instances; forcing a cluster placement group on top of
        # it fails with InsufficientInstanceCapacity (KNOWN-FAILURES F6). Not tied to the node
        # count: a placement group added or removed when scaling between 1 and 2 nodes changes the
        # launch template, and every GPU node rolls (issue 33). One node in a cluster placement
        # group costs nothing.
        return self.capacity_type == "on-demand"

    @property
    def reserved(self) -> bool:
        return self.capacity_type != "on-demand"

    @property
    def update_strategy(self) -> str:
        return update_strategy(self.capacity_type)

    @property
    def roll_surge(self) -> int:
        return roll_surge(self.capacity_type)

    @property
    def ignore_changes(self) -> list[str]:
        out = [] if self.allow_node_roll else list(ROLL_INPUTS)
        if self.capacity_type == "capacity-block":
            out += CAPACITY_BLOCK_IGNORES
        return out

    def labels(self) -> dict[str, str]:
        return gpu_node_labels(self.instance_type)


def network_interfaces(a: GpuNodeGroupArgs, security_group_ids: list[pulumi.Input[str]]
                       ) -> list[aws.ec2.LaunchTemplateNetworkInterfaceArgs]:
    """One interface per network card: card 0 device 0 `efa` (it also carries IP traffic), every
    other card device 1 `efa-only` (no IP address used).

    The current EC2 guide (efa-acc-inst-types, "Maximize network bandwidth on instances with
    multiple network cards"): the primary interface (card 0, device 0) is an EFA with ENA, an
    EFA-only interface cannot be primary; each further interface takes the next card, device
    index 1, EFA or EFA-only by the need for ENA bandwidth and IP addresses (p5-efa: interface 0
    device 0, interfaces 1-31 device 1). EFA-only keeps the 31 extra p5 interfaces from taking VPC
    addresses the pods need; pulumi-eks and terraform-aws-eks ship the same layout."""
    return [
        aws.ec2.LaunchTemplateNetworkInterfaceArgs(
            network_card_index=card,
            device_index=0 if card == 0 else 1,
            interface_type="efa" if card == 0 else "efa-only",
            security_groups=security_group_ids,
            delete_on_termination="true",
        )
        for card in range(a.instance.network_cards)
    ]


def kubelet_config(a: GpuNodeGroupArgs) -> dict[str, str]:
    """The kubelet settings nodeadm merges over the configuration it generates (NodeConfig API,
    awslabs/amazon-eks-ami nodeadm/api/v1alpha1 KubeletOptions.Config), in the order written. A
    changed policy is a new launch template version: new nodes, so no stale cpu_manager_state.

    Graceful node shutdown, so that a reboot repair (EKS node repair reboots a node for most H100
    XIDs) is a disruption the Job's pod failure policy ignores, not a ContainerStatusUnknown exit
    137 it counts; the periods and their sources: components/stack/node_repair.py."""
    settings = (("cpuManagerPolicy", a.cpu_manager_policy), ("topologyManagerPolicy", a.topology_manager_policy))
    out = {k: v for k, v in settings if v}
    out["shutdownGracePeriod"] = f"{node_repair.shutdown_grace_seconds()}s"
    out["shutdownGracePeriodCriticalPods"] = f"{node_repair.CRITICAL_PODS_SHUTDOWN_SECONDS}s"
    return out


def node_config_yaml(a: GpuNodeGroupArgs, *, local_storage: bool = True) -> Optional[str]:
    """nodeadm NodeConfig: containerd and kubelet on the local NVMe disks as RAID0, SOCI parallel
    pull, the kubelet settings (CPU / Topology Manager policies, graceful node shutdown). EKS appends the cluster part itself for managed node groups.

    `local_storage` False: leave the RAID0 out, for Karpenter, which writes it into its own
    NodeConfig part from the EC2NodeClass's instanceStorePolicy (karpenter_node_class.py).

    Written line by line, not through a YAML dumper: these bytes are the launch template's user
    data, and any change to them is a new template version that rolls every GPU node."""
    spec = []
    if local_storage and a.local_storage_raid0 and a.instance.has_nvme:
        spec += ["  instance:", "    localStorage:", "      strategy: RAID0"]
    if a.fast_image_pull:
        spec += ["  featureGates:", "    FastImagePull: true"]
    kubelet = kubelet_config(a)
    if kubelet:
        spec += ["  kubelet:", "    config:", *(f"      {k}: {v}" for k, v in kubelet.items())]
    if not spec:
        return None
    return "\n".join(["---", "apiVersion: node.eks.aws/v1alpha1", "kind: NodeConfig", "spec:", *spec]) + "\n"


def user_data_mime(a: GpuNodeGroupArgs, *, local_storage: bool = True) -> Optional[str]:
    """The nodeadm NodeConfig as a MIME multi-part document (what EKS and Karpenter merge their
    cluster part into); None when there is nothing to set."""
    node_config = node_config_yaml(a, local_storage=local_storage)
    if node_config is None:
        return None
    return (f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{_BOUNDARY}"\n\n'
            f"--{_BOUNDARY}\nContent-Type: application/node.eks.aws\n\n{node_config}\n--{_BOUNDARY}--\n")


def user_data(a: GpuNodeGroupArgs) -> Optional[str]:
    mime = user_data_mime(a)
    return None if mime is None else base64.b64encode(mime.encode()).decode()


class GpuNodeGroup(pulumi.ComponentResource):
    security_group_id: pulumi.Output[str]

    def __init__(self, name: str, args: GpuNodeGroupArgs, *, vpc_id: pulumi.Input[str],
                 subnet_id: pulumi.Input[str], cluster: pulumi.Input[str],
                 kubernetes_version: pulumi.Input[str],
                 cluster_security_group_id: pulumi.Input[str],
                 depends_on: list[pulumi.Resource], opts: Optional[pulumi.ResourceOptions] = None):
        """`cluster` is the cluster's name as an output of the cluster (orders the node group after
        it); `kubernetes_version` the cluster's version, also as its output (the nodes follow a
        control-plane upgrade, after it); `cluster_security_group_id` the security group EKS created
        for the cluster."""
        super().__init__("rltrain:index:GpuNodeGroup", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        sg = aws.ec2.SecurityGroup(f"{name}-sg", vpc_id=vpc_id, description="GPU nodes: EFA and NCCL between nodes",
                                   tags={"Name": f"{args.cluster_name}-gpu-nodes"}, opts=child)
        # All traffic to and from itself, ingress AND egress: EFA's SRD traffic is not carried by a
        # CIDR egress rule, and memory registration then fails (KNOWN-FAILURES F4).
        aws.vpc.SecurityGroupIngressRule(f"{name}-self-ingress", security_group_id=sg.id,
                                         referenced_security_group_id=sg.id, ip_protocol="-1",
                                         description="all traffic from GPU nodes (EFA, NCCL)", opts=child)
        aws.vpc.SecurityGroupEgressRule(f"{name}-self-egress", security_group_id=sg.id,
                                        referenced_security_group_id=sg.id, ip_protocol="-1",
                                        description="all traffic to GPU nodes (EFA, NCCL)", opts=child)
        aws.vpc.SecurityGroupEgressRule(f"{name}-internet-egress", security_group_id=sg.id, cidr_ipv4="0.0.0.0/0",
                                        ip_protocol="-1", description="image pulls, S3, AWS APIs", opts=child)
        self.security_group_id = sg.id
        # A launch template that sets security groups gets no cluster security group from EKS
        # (EKS user guide, launch templates: "Amazon EKS doesn't add the cluster security group"),
        # so the nodes carry it themselves: with it they reach the API server (443), the control
        # plane reaches their kubelet (10250), and pods reach CoreDNS and webhooks on the system
        # nodes, which EKS gives the same group (it admits all traffic from its members).
        # pulumi-eks's own EFA node group does the same (nodejs/eks/nodes/nodegroup.ts).
        sg_ids = [sg.id, cluster_security_group_id]

        # Names and replacement (issue 44 item 9). A resource with a fixed AWS name cannot be created
        # before the old one is deleted (the names clash; FACTS "Fixed physical names and
        # replacement"); pulumi-terraform-bridge then deletes first on its own
        # (pkg/tfbridge/schema.go nameRequiresDeleteBeforeReplace). terraform-aws-eks names the
        # launch template, node role and security group with a prefix and creates before it destroys
        # (modules/eks-managed-node-group/main.tf at v21.19.0: launch_template_use_name_prefix,
        # iam_role_use_name_prefix, security_group_use_name_prefix, create_before_destroy). Here:
        # - the security groups and roles are autonamed already (no `name` input): replaced, the new
        #   one exists first, and the FSx rules follow its id. A security group is replaced only on a
        #   new VPC, name or description (pulumi-aws ForceNew): keep the descriptions as they are, a
        #   new FSx group would replace the file system (its securityGroupIds are ForceNew);
        # - the launch template is autonamed on a new stack (below), created before the old one goes;
        # - the placement group keeps its fixed name, as terraform-aws-eks's does (main.tf
        #   aws_placement_group: "${var.cluster_name}-${var.name}"): the launch template and the
        #   EC2NodeClass select it by name, so a new name is a new template version (every GPU node
        #   rolls) and a replaced group cannot be deleted while instances run in it; its name
        #   changes only with the cluster's, which replaces the cluster anyway;
        # - the node group is deleted first on purpose: GPU capacity rarely holds two groups at once
        #   (a reservation or a Capacity Block has no spare instance, On-Demand would need twice the
        #   quota), so it keeps its fixed name and deletes before it replaces.
        fixed_name = pulumi.ResourceOptions(parent=self, delete_before_replace=True)
        placement = None
        # The placement group's name as its output (None without one): Karpenter's EC2NodeClass
        # selects it by name in elastic mode.
        self.placement_group_name: Optional[pulumi.Output[str]] = None
        if args.placement_group:
            pg = aws.ec2.PlacementGroup(f"{name}-placement", name=f"{args.cluster_name}-gpu", strategy="cluster",
                                        opts=fixed_name)
            placement = aws.ec2.LaunchTemplatePlacementArgs(group_name=pg.name)
            self.placement_group_name = pg.name
        self.node_group: Optional[aws.eks.NodeGroup] = None
        if not args.managed_group:
            self.register_outputs({"securityGroupId": self.security_group_id})
            return
        market, reservation = None, None
        if args.capacity_type != "on-demand":
            reservation = aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
                capacity_reservation_target=aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
                    capacity_reservation_id=args.reservation_id))
        if args.capacity_type == "capacity-block":
            market = aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type="capacity-block")

        lt = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            # Autonamed: a replacement is created before the old template is deleted. `name` is
            # ignored so that a stack created with the fixed name `<cluster>-gpu` keeps it: the engine
            # takes an ignored input's deployed value before the provider sees it (pulumi/pulumi
            # pkg/resource/deploy/step_generator.go processIgnoreChanges), and a new name would
            # replace the template, whose id the node group takes (launchTemplate.id is ForceNew:
            # every GPU node replaced). Only a stack created from now on gets the generated name.
            # No node count here: any launch template change is a new version the node group
            # rolls every node to, and scaling must not replace running nodes.
            description=f"{args.instance_type} training nodes",
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=args.root_volume_gib, volume_type="gp3", iops=args.root_volume_iops,
                    throughput=args.root_volume_throughput, encrypted="true", delete_on_termination="true"))],
            # IMDSv2 only; hop limit 1 keeps pods from borrowing the node role (they get their own
            # through EKS Pod Identity).
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1),
            network_interfaces=network_interfaces(args, sg_ids) if args.efa else None,
            vpc_security_group_ids=None if args.efa else sg_ids,
            placement=placement,
            capacity_reservation_specification=reservation,
            instance_market_options=market,
            user_data=user_data(args),
            instance_type=args.instance_type if args.instance_type_in_launch_template else None,
            tag_specifications=[aws.ec2.LaunchTemplateTagSpecificationArgs(
                resource_type="instance", tags={"Name": f"{args.cluster_name}-gpu"})],
            opts=pulumi.ResourceOptions(parent=self, ignore_changes=list(AUTONAMED_KEEP)),
        )
        role = iam.node_role(f"{name}-node-role", self)
        scaling = aws.eks.NodeGroupScalingConfigArgs(desired_size=args.count, min_size=args.min_size,
                                                     max_size=args.count)
        self.node_group = aws.eks.NodeGroup(
            f"{name}-nodes",
            cluster_name=cluster,
            node_group_name=f"{args.cluster_name}-gpu",
            node_role_arn=role.arn,
            # One subnet, one AZ: EFA needs it, and so does the FSx file system's locality.
            subnet_ids=[subnet_id],
            # Capacity Blocks: the instance type is the launch template's, not the node group's
            # (EKS user guide, capacity-blocks-mng: "can only be created with custom launch templates").
            instance_types=None if args.instance_type_in_launch_template else [args.instance_type],
            ami_type=AMI_TYPE,
            # The nodes follow the control plane's minor. Unset, EKS takes the cluster's version at
            # creation only: a control-plane upgrade leaves the nodes behind (and the NVIDIA AMI
            # unpatched) and the next upgrade is refused until they catch up (FACTS "AWS: first up
            # and day two"; pulumi-aws eks.NodeGroup `version`).
            version=kubernetes_version,
            capacity_type="CAPACITY_BLOCK" if args.capacity_type == "capacity-block" else "ON_DEMAND",
            scaling_config=scaling,
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(id=lt.id, version=lt.latest_version.apply(str)),
            labels=args.labels(),
            tags={ALLOW_NODE_ROLL_TAG: "true"} if args.allow_node_roll else None,
            taints=[aws.eks.NodeGroupTaintArgs(key=GPU_TAINT_KEY, value="true", effect="NO_SCHEDULE")],
            # One node at a time; MINIMAL on reserved capacity, DEFAULT (launch first) on On-Demand
            # (GpuNodeGroupArgs.update_strategy; pulumi-aws 7.51 NodeGroupUpdateConfigArgs.update_strategy).
            update_config=aws.eks.NodeGroupUpdateConfigArgs(max_unavailable=1,
                                                            update_strategy=args.update_strategy),
            # Bounded repair (REPAIR_MAX_PARALLEL, repair_unhealthy_threshold); the EKS node monitoring
            # agent (components/k8s/node_health.py) sets the conditions it acts on. In place: the
            # CloudFormation reference (AWS::EKS::Nodegroup NodeRepairConfig) lists every field
            # "Update requires: No interruption".
            node_repair_config=aws.eks.NodeGroupNodeRepairConfigArgs(
                enabled=True, max_parallel_nodes_repaired_count=REPAIR_MAX_PARALLEL,
                max_unhealthy_node_threshold_count=repair_unhealthy_threshold(args.count)),
            # After the node role's policies and deleted before them (iam.AttachedRole): EKS needs
            # them to terminate the instances and delete their interfaces. ignore_changes: a roll
            # only with rltrain:gpuNodes.allowNodeRoll; a Capacity Block's desiredSize is EKS's.
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, *role.attachments],
                                        delete_before_replace=True, ignore_changes=args.ignore_changes),
        )
        self.register_outputs({"securityGroupId": self.security_group_id,
                               "nodeGroupName": self.node_group.node_group_name})
