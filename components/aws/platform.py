"""Wiring of the AWS components from stack config, kept out of `__main__.py` so it reads in a minute."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import pulumi
import pulumi_aws as aws

from components.aws import account_checks
from components.aws.cluster import EksCluster, EksClusterArgs
from components.stack.config import StackConfig
from components.stack.validate import ConfigError, path
from components.stack import stackfile, topology
from components.aws.gpu_nodes import GpuNodeGroup, GpuNodeGroupArgs, user_data_mime
from components.aws.karpenter import Karpenter, KarpenterArgs
from components.aws import karpenter_node_class
from components.k8s import cpu_nodes, karpenter_nodes
from components.stack import catalog, data_repository, node_efa
from components.aws.identity import TrainingIdentity, TrainingIdentityArgs
from components.aws.image import TrainingImage, training_image_args
from components.aws.network import ExistingNetwork, Network, NetworkArgs
from components.aws.storage import FsxArgs, FsxLustreVolume
from components.k8s.volumes import ClaimArgs


@dataclass
class AwsPlatform:
    cfg: StackConfig
    cluster_name: str
    network: object
    cluster: EksCluster
    gpu_nodes: GpuNodeGroup
    training_role_arn: Optional[pulumi.Output[str]] = None
    karpenter: Optional[Karpenter] = None
    node_groups: list[pulumi.Resource] = field(default_factory=list)
    image: Optional[TrainingImage] = None  # workloads.image: {build: ...}

    def attach_fsx(self, claim: ClaimArgs, k8s_opts: pulumi.ResourceOptions) -> FsxLustreVolume:
        fsx = self.cfg.storage.fsx
        assert fsx is not None  # config validation guarantees it without cluster.existing
        return FsxLustreVolume("storage", FsxArgs(
            name=self.cluster_name, storage_capacity_gib=fsx.storage_capacity_gib,
            per_unit_storage_throughput=fsx.per_unit_storage_throughput, metadata_iops=fsx.metadata_iops,
            backup_retention_days=fsx.backup_retention_days,
            s3_associations=data_repository.associations(fsx.s3) if fsx.s3 else (),
        ), claim, vpc_id=self.network.vpc_id, subnet_id=self.network.gpu_subnet_id,
            client_security_group_ids=fsx_client_groups(self.gpu_nodes.security_group_id,
                                                        self.cluster.cluster_security_group_id),
            after_cluster=("cluster",), k8s_opts=k8s_opts)


def fsx_client_groups(gpu_sg: pulumi.Input[str], cluster_sg: pulumi.Input[str]) -> dict[str, pulumi.Input[str]]:
    """The security groups FSx admits Lustre from, and calls back: every group a pod mounting /fsx
    can land on (the deploy model derives the same from the render: `network-flows`).

    - `nodes`: the GPU group (the GPU nodes' own; rule names as before, so the deployed rules stay);
    - `cluster`: the security group EKS creates for the cluster, which the system nodes carry (their
      launch template sets no groups: EKS user guide, launch templates), and so do the GPU nodes
      and Karpenter's CPU nodes (the EC2NodeClasses select it). The CPU-only pods that touch /fsx
      run there: the checkpoint retention and evaluation CronJobs and the eval-metrics Deployment
      (no GPU placement: the system nodes), and in elastic mode the staging Job (the CPU NodePool).
      The system nodes span the stack's AZs and the file system lives in the GPU AZ: a cross-AZ
      mount works within the VPC (FSx for Lustre guide, "accessing file systems"), at EC2's
      cross-AZ data rate, for small CPU helpers' reads and deletes only. EKS documents the group
      as admitting all traffic from its members and sending anywhere: the file system's calls back
      need this ingress rule on it; the control plane's interfaces carry it too (harmless: they
      mount nothing)."""
    return {"nodes": gpu_sg, "cluster": cluster_sg}


# The GPU root volume when the local NVMe disks hold containerd, the kubelet and pod logs as RAID0:
# nodeadm's localStorage RAID0 bind-mounts /var/lib/kubelet, /var/lib/containerd and /var/log/pods
# onto the array (amazon-eks-ami templates/shared/runtime/bin/setup-local-disks), so images, writable
# layers, emptyDirs and pod logs never touch the root volume; it holds the AMI (OS, NVIDIA driver,
# CUDA, EFA software) and the journal. 100 GiB leaves room for AMI growth; gp3's baseline 3000 IOPS
# and 125 MiB/s come free (the 1000 MiB/s / 16000 IOPS the default buys serve image pulls, which
# RAID0 moves to NVMe).
RAID0_ROOT = {"size_gib": 100, "throughput_mibps": 125, "iops": 3000}


def gpu_root_volume(g) -> dict[str, int]:
    """The GPU root volume's size, throughput and IOPS: a value set in the stack file wins; an unset
    one is sized for what stays on the root volume (RAID0_ROOT when RAID0 holds containerd)."""
    rv = g.root_volume
    values = {"size_gib": rv.size_gib, "throughput_mibps": rv.throughput_mibps, "iops": rv.iops}
    if g.local_storage == "raid0" and g.instance.has_nvme:
        values.update({k: v for k, v in RAID0_ROOT.items() if k not in rv.model_fields_set})
    return {"root_volume_gib": values["size_gib"], "root_volume_throughput": values["throughput_mibps"],
            "root_volume_iops": values["iops"]}


def deploy_problems(cfg: StackConfig, caller_arn: Optional[str],
                    zone_ids: Optional[dict[str, str]] = None) -> list[tuple[str, str]]:
    """What a real deploy refuses before it creates anything, that the offline render accepts (the
    committed stack files carry placeholders, and the render has no account): a documentation
    range as the only way to the public endpoint, the deploying principal in adminRoleArns, and a
    configured AZ whose ID (in this account) EKS does not support. `zone_ids`: {AZ name: AZ ID}.

    Not with the config checks (components/stack/validate.py): these need the account (the caller's
    ARN from sts:GetCallerIdentity, the account's AZ IDs from ec2:DescribeAvailabilityZones) and the
    AWS side's rules of components/aws/account_checks.py, which preflight shares; only the key paths
    are validate's (`path`)."""
    c = cfg.cluster
    problems = []
    bad = account_checks.unsupported_zones(zone_ids or {})
    if bad:
        problems.append((path("network", "availabilityZones"),
                         f"{', '.join(f'{n} is {z}' for n, z in sorted(bad.items()))} in this account, an AZ EKS does "
                         "not support: CreateCluster would fail with UnsupportedAvailabilityZoneException (EKS user "
                         "guide, network-reqs). Pick another AZ name (`aws ec2 describe-availability-zones`)"))
    placeholders = account_checks.documentation_cidrs(c.public_access_cidrs)
    if c.endpoint_public_access and placeholders:
        problems.append((path("cluster", "publicAccessCidrs"),
                         f"{', '.join(placeholders)} is a documentation range (RFC 5737), the stack file's "
                         "placeholder: nobody reaches the API endpoint through it, and every Kubernetes resource "
                         "would time out after the cluster exists. Set your office/VPN CIDRs (`curl -s "
                         "https://checkip.amazonaws.com` shows this machine's address), or endpointPublicAccess: "
                         "false and deploy from inside the VPC"))
    mine = account_checks.creator_in_admins(caller_arn, c.admin_role_arns) if caller_arn else None
    if mine:
        problems.append((path("cluster", "adminRoleArns"),
                         f"{mine} is the role deploying the stack ({caller_arn}); pulumi-eks already gives the "
                         "cluster creator admin access (bootstrapClusterCreatorAdminPermissions), and a second "
                         "access entry fails with ResourceInUseException (409). Remove it from adminRoleArns"))
    return problems


def offline() -> bool:
    """Run by the offline render's engine (the render, the tests), which says so explicitly
    (stackfile.OFFLINE_KEY): no account to ask."""
    return pulumi.Config(stackfile.OFFLINE_NAMESPACE).get_bool(stackfile.OFFLINE_NAME) is True


# The names of the elastic stack's Karpenter objects (cluster-scoped; one stack per cluster).
GPU_NODE_POOL = karpenter_nodes.NODE_POOL


def build_karpenter(cfg: StackConfig, cluster_name: str, network, cluster: EksCluster, gpu: GpuNodeGroup,
                    gpu_args: GpuNodeGroupArgs) -> Karpenter:
    """Karpenter and the GPU EC2NodeClass, NodePool and NodeOverlay of an elastic stack: the nodes
    the managed group would have made (gpu_args: user data, root volume, EFA, placement,
    reservation), their taint and labels, at most gpuNodes.node_limit, empty ones removed after
    idleMinutes."""
    g = cfg.gpu_nodes
    it = catalog.get(g.instance_type)
    karp = Karpenter("karpenter", KarpenterArgs(cluster_name=cluster_name,
                                                region=pulumi.Config("aws").require("region")),
                     cluster=(cluster.cluster_name, cluster.cluster_arn),
                     pod_identity_agent=cluster.pod_identity_agent, system_nodes=cluster.system_nodes,
                     k8s_provider=cluster.provider)
    node_class = pulumi.Output.all(network.gpu_subnet_id, gpu.security_group_id, cluster.cluster_security_group_id,
                                   karp.node_role_name, gpu.placement_group_name).apply(
        lambda v: karpenter_node_class.node_class(karpenter_node_class.NodeClassArgs(
            name=GPU_NODE_POOL, role=v[3], subnet_id=v[0], security_group_ids=(v[1], v[2]),
            network_cards=it.network_cards, efa_devices=node_efa.devices(g),
            capacity_type=g.capacity.type, reservation_id=g.capacity.reservation_id, placement_group=v[4],
            root_volume_gib=gpu_args.root_volume_gib, root_volume_throughput=gpu_args.root_volume_throughput,
            root_volume_iops=gpu_args.root_volume_iops,
            # RAID0 through instanceStorePolicy (Karpenter then counts the NVMe disks as the node's
            # ephemeral storage), not in our NodeConfig part.
            instance_store_raid0=gpu_args.local_storage_raid0 and it.has_nvme,
            user_data=user_data_mime(gpu_args, local_storage=False))))
    # The same NodePool and NodeOverlay the simulated cluster's Karpenter schedules (cluster/karpenter.py).
    pool = karpenter_nodes.gpu_node_pool(cfg, karpenter_node_class.node_class_ref(GPU_NODE_POOL), GPU_NODE_POOL)
    overlay = karpenter_nodes.gpu_node_overlay(cfg, GPU_NODE_POOL)
    karp.apply_nodes(node_class, pool, overlay, cluster.provider)
    # The CPU NodePool for the staging Job (components/k8s/cpu_nodes.py): a general-purpose node in
    # the GPU subnet (the file system's AZ) with the cluster's security group, which FSx admits
    # (fsx_client_groups) and with which it reaches the API server and CoreDNS; no EFA, no
    # placement group, no reservation, no user data (nodeadm's defaults); the same node role.
    cpu_class = pulumi.Output.all(network.gpu_subnet_id, cluster.cluster_security_group_id, karp.node_role_name).apply(
        lambda v: karpenter_node_class.node_class(karpenter_node_class.NodeClassArgs(
            name=cpu_nodes.NODE_POOL, role=v[2], subnet_id=v[0], security_group_ids=(v[1],), network_cards=1,
            efa_devices=0, root_volume_gib=cpu_nodes.ROOT_GIB, root_volume_throughput=125, root_volume_iops=3000)))
    karp.apply_nodes(cpu_class, cpu_nodes.node_pool(cfg, karpenter_node_class.node_class_ref(cpu_nodes.NODE_POOL)),
                     None, cluster.provider, prefix="cpu-")
    return karp


def build_aws_platform(cfg: StackConfig, cluster_name: str) -> AwsPlatform:
    if not offline():
        # Read-only invokes (sts:GetCallerIdentity, ec2:DescribeAvailabilityZones) before the first resource.
        zones = {}
        if not cfg.network.existing:
            found = aws.get_availability_zones(filters=[aws.GetAvailabilityZonesFilterArgs(
                name="zone-name", values=list(cfg.network.availability_zones))])
            zones = dict(zip(found.names, found.zone_ids))
        problems = deploy_problems(cfg, aws.get_caller_identity().arn, zones)
        if problems:
            raise ConfigError(problems)
    n = cfg.network
    if n.existing:
        network = ExistingNetwork(n.existing.vpc_id, n.existing.private_subnet_ids, n.existing.gpu_subnet_id)
    else:
        network = Network("network", NetworkArgs(vpc_cidr=n.vpc_cidr, availability_zones=n.availability_zones,
                                                 gpu_availability_zone=n.gpu_az, cluster_name=cluster_name,
                                                 region=pulumi.Config("aws").require("region")))
    c = cfg.cluster
    cluster = EksCluster("cluster", EksClusterArgs(
        cluster_name=cluster_name, kubernetes_version=c.kubernetes_version,
        endpoint_public_access=c.endpoint_public_access, public_access_cidrs=c.public_access_cidrs,
        admin_role_arns=c.admin_role_arns, system_instance_type=c.system_nodes.instance_type,
        system_node_count=c.system_nodes.count,
    ), vpc_id=network.vpc_id, private_subnet_ids=network.private_subnet_ids,
        public_subnet_ids=network.public_subnet_ids)
    g = cfg.gpu_nodes
    kubelet = topology.derive(cfg)  # CPU / Topology Manager policies from the pod shapes
    gpu_args = GpuNodeGroupArgs(
        # EFA interfaces whatever the count (stack/node_efa.py): 1 <-> 2 nodes is no new template version.
        cluster_name=cluster_name, instance_type=g.instance_type, count=g.count, efa=node_efa.interfaces(g),
        capacity_type=g.capacity.type, reservation_id=g.capacity.reservation_id,
        **gpu_root_volume(g), local_storage_raid0=g.local_storage == "raid0",
        fast_image_pull=g.fast_image_pull, allow_node_roll=g.allow_node_roll,
        cpu_manager_policy=kubelet.cpu_manager, topology_manager_policy=kubelet.topology_manager,
        # Elastic mode: Karpenter launches the GPU nodes; only the security and placement groups stay.
        managed_group=not g.elastic.enabled,
    )
    gpu = GpuNodeGroup("gpu", gpu_args, vpc_id=network.vpc_id, subnet_id=network.gpu_subnet_id,
        cluster=cluster.cluster_name,
        kubernetes_version=cluster.kubernetes_version,
        cluster_security_group_id=cluster.cluster_security_group_id,
        # Nothing but the cluster: the add-ons (Pod Identity agent included) come after the node
        # groups, so that on a Kubernetes upgrade they follow the node roll (EKS update-cluster).
        depends_on=[])
    platform = AwsPlatform(cfg=cfg, cluster_name=cluster_name, network=network, cluster=cluster, gpu_nodes=gpu,
                           node_groups=[gpu.node_group, cluster.system_nodes] if gpu.node_group else
                           [cluster.system_nodes])
    if g.elastic.enabled:
        # What comes after the GPU node group comes after Karpenter and its NodePool instead.
        platform.karpenter = build_karpenter(cfg, cluster_name, network, cluster, gpu, gpu_args)
        platform.node_groups.append(platform.karpenter)
    t = cfg.training
    if t.s3:
        identity = TrainingIdentity("training-identity", TrainingIdentityArgs(
            cluster_name=cluster_name, namespace=t.namespace, service_account=t.service_account,
            bucket=t.s3.bucket, prefix=t.s3.prefix), depends_on=[cluster.pod_identity_agent],
            cluster=(cluster.cluster_name, cluster.cluster_arn))
        platform.training_role_arn = identity.role_arn
    # The training image the stack builds (workloads.image: {build: ...}): nothing above waits for it.
    image = training_image_args(cfg, cluster_name, pulumi.Config("aws").require("region"))
    if image:
        platform.image = TrainingImage("image", image)
    return platform
