"""EksCluster: the EKS control plane, a small CPU system node group and the Kubernetes provider.

`pulumi_eks.Cluster` wraps what needs no review (control-plane plumbing); what decides safety is
declared here and visible in the render: the customer-managed KMS key for Secrets, the endpoint
access, the log types, the Pod Identity agent and the system node group's role.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict

from components.aws import iam
from components.stack import versions
LOG_TYPES = ("api", "audit", "authenticator", "controllerManager", "scheduler")
# Days CloudWatch keeps the control-plane logs (EKS's own group would keep them for ever).
LOG_RETENTION_DAYS = 90
# System nodes run operators and add-ons only; images are small.
SYSTEM_ROOT_GIB = 50
CLUSTER_ADMIN_POLICY = "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
# How every EKS add-on resolves conflicts with the self-managed add-ons EKS installs on a new cluster.
ADDON_CONFLICTS = "OVERWRITE"


class EksClusterArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_name: str
    kubernetes_version: str
    endpoint_public_access: bool
    public_access_cidrs: tuple[str, ...]
    admin_role_arns: tuple[str, ...] = ()
    system_instance_type: str
    system_node_count: int


class EksCluster(pulumi.ComponentResource):
    provider: k8s.Provider
    cluster: eks.Cluster
    # The cluster's name as an output of the cluster: whatever takes it (add-ons, node groups,
    # Pod Identity associations) is created after the cluster exists.
    cluster_name: pulumi.Output[str]
    # The security group EKS creates for the cluster (control plane ENIs and managed nodes without
    # a launch template carry it; it admits all traffic from its members). Not
    # `eks.Cluster.cluster_security_group_id`, which is the control-plane group pulumi-eks creates
    # (pulumi-eks nodejs/eks/cluster/cluster.ts; FACTS "Deploy semantics").
    cluster_security_group_id: pulumi.Output[str]
    kubeconfig: pulumi.Output[str]

    def __init__(self, name: str, args: EksClusterArgs, *, vpc_id: pulumi.Input[str],
                 private_subnet_ids: list[pulumi.Input[str]], public_subnet_ids: list[pulumi.Input[str]],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:index:EksCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        addon_versions = versions.eks_addons(args.kubernetes_version)
        # Envelope encryption of Kubernetes Secrets (the training tokens) with a key we own.
        key = aws.kms.Key(f"{name}-secrets-key", description=f"{args.cluster_name} Kubernetes Secrets",
                          enable_key_rotation=True, deletion_window_in_days=30,
                          opts=pulumi.ResourceOptions(parent=self, protect=True))
        # The control plane's log group, owned by the stack so that `pulumi destroy` deletes it: EKS
        # writes the enabled log types to /aws/eks/<cluster>/cluster and creates that group itself
        # when it is missing, which then outlives the cluster (EKS user guide, control-plane-logs;
        # pulumi-eks creates none: nodejs/eks/cluster/cluster.ts passes enabledClusterLogTypes only).
        # Created before the cluster, so EKS finds it; deleted after it.
        self.log_group = aws.cloudwatch.LogGroup(
            f"{name}-control-plane-logs", name=f"/aws/eks/{args.cluster_name}/cluster",
            retention_in_days=LOG_RETENTION_DAYS, opts=child)
        access = {
            f"admin-{i}": eks.AccessEntryArgs(
                principal_arn=arn,
                access_policies={"admin": eks.AccessPolicyAssociationArgs(
                    policy_arn=CLUSTER_ADMIN_POLICY,
                    access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"))})
            for i, arn in enumerate(args.admin_role_arns)
        }
        self.cluster = eks.Cluster(
            f"{name}-eks",
            name=args.cluster_name,
            version=args.kubernetes_version,
            vpc_id=vpc_id,
            private_subnet_ids=private_subnet_ids,
            public_subnet_ids=public_subnet_ids or None,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries=access or None,
            endpoint_private_access=True,
            endpoint_public_access=args.endpoint_public_access,
            public_access_cidrs=list(args.public_access_cidrs) or None,
            enabled_cluster_log_types=list(LOG_TYPES),
            encryption_config_key_arn=key.arn,
            skip_default_node_group=True,
            create_oidc_provider=False,
            # pulumi-eks creates the vpc-cni and kube-proxy add-ons with `mostRecent` unless a
            # version is given (pulumi-eks cni-addon.ts, cluster.ts): any `up` could then roll
            # aws-node across busy GPU nodes. Pinned per Kubernetes minor in versions.py.
            # enable_network_policy: the VPC CNI's network policy agent, without which EKS enforces
            # no NetworkPolicy at all (VPC CNI >= 1.14, kernel >= 5.10; pulumi-eks sets
            # {"enableNetworkPolicy": "true"} on the managed vpc-cni add-on; FACTS "Deploy semantics").
            vpc_cni_options=eks.VpcCniOptionsArgs(addon_version=addon_versions["vpc-cni"],
                                                  enable_network_policy=True),
            kube_proxy_addon_options=eks.KubeProxyAddonOptionsArgs(version=addon_versions["kube-proxy"]),
            # pulumi-eks manages coredns only with its default node group or Fargate; it is
            # created below, pinned, once the system nodes can run it.
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.log_group]),
        )
        self.cluster_name = self.cluster.eks_cluster.name
        self.cluster_arn = self.cluster.eks_cluster.arn
        self.cluster_security_group_id = self.cluster.eks_cluster.vpc_config.cluster_security_group_id
        # The cluster's Kubernetes minor as an output of the cluster: node groups that take it
        # follow a control-plane upgrade, after it (EKS refuses nodes newer than the control plane,
        # and blocks the next upgrade while nodes lag a minor behind; FACTS "AWS: first up and day two").
        self.kubernetes_version = self.cluster.eks_cluster.version
        system_role = iam.node_role(f"{name}-system-node-role", self)
        # Our own launch template for the system nodes: IMDSv2 only with hop limit 1 (pods get AWS
        # credentials through Pod Identity, never the node role; pulumi-eks's `enable_imd_sv2` sets
        # hop limit 2) and an encrypted gp3 root volume (pulumi-eks's default one is not). It sets
        # no security groups, so EKS still gives these nodes the cluster security group (EKS user
        # guide, launch templates), which the deploy model's reachability relies on. Auto-named:
        # a replacement needs no delete-first. Introducing it replaces the system nodes once.
        system_lt = aws.ec2.LaunchTemplate(
            f"{name}-system-lt",
            description=f"{args.cluster_name} system nodes",
            metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
                http_endpoint="enabled", http_tokens="required", http_put_response_hop_limit=1),
            block_device_mappings=[aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name="/dev/xvda",
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    volume_size=SYSTEM_ROOT_GIB, volume_type="gp3", encrypted="true",
                    delete_on_termination="true"))],
            opts=child)
        self.system_nodes = eks.ManagedNodeGroup(
            f"{name}-system",
            cluster=self.cluster,
            # pulumi-eks defaults `version` only without a launch template (nodes/nodegroup.ts); with
            # ours, unset, the nodes would stay on the old minor after a control-plane upgrade.
            version=self.kubernetes_version,
            node_role=system_role.role,
            instance_types=[args.system_instance_type],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                desired_size=args.system_node_count, min_size=args.system_node_count,
                max_size=args.system_node_count + 2),
            subnet_ids=private_subnet_ids,
            labels={"role": "system"},
            launch_template=aws.eks.NodeGroupLaunchTemplateArgs(id=system_lt.id,
                                                                version=system_lt.latest_version.apply(str)),
            # After the node role's policies, deleted before them (iam.AttachedRole).
            opts=pulumi.ResourceOptions(parent=self, depends_on=system_role.attachments),
        )
        # Add-ons come after the system nodes: on a first `up` they have nodes to run on, and on a
        # Kubernetes upgrade their new versions follow the control plane and the node roll (EKS
        # user guide, update-cluster: control plane, then nodes, then add-ons). Every add-on
        # resolves conflicts with OVERWRITE on create and update: EKS bootstrapped self-managed
        # CoreDNS/kube-proxy/VPC CNI when it created the cluster (bootstrapSelfManagedAddons, which
        # pulumi-eks leaves true and which replaces the cluster if changed), and CreateAddon over
        # them fails with ConfigurationConflict otherwise (deploy model rule `addon-conflicts`).
        after_nodes = pulumi.ResourceOptions(parent=self, depends_on=[self.system_nodes])
        # Pod Identity: the training role is handed to its service account by EKS.
        self.pod_identity_agent = aws.eks.Addon(
            f"{name}-pod-identity-agent", cluster_name=self.cluster_name,
            addon_name=versions.POD_IDENTITY_ADDON, addon_version=addon_versions[versions.POD_IDENTITY_ADDON],
            resolve_conflicts_on_create=ADDON_CONFLICTS, resolve_conflicts_on_update=ADDON_CONFLICTS,
            opts=after_nodes)
        aws.eks.Addon(f"{name}-coredns", cluster_name=self.cluster_name, addon_name="coredns",
                      addon_version=addon_versions["coredns"],
                      resolve_conflicts_on_create=ADDON_CONFLICTS, resolve_conflicts_on_update=ADDON_CONFLICTS,
                      opts=after_nodes)
        self.kubeconfig = pulumi.Output.secret(self.cluster.kubeconfig_json)
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig,
                                     enable_server_side_apply=True, opts=child)
        self.register_outputs({"clusterName": self.cluster_name, "kubeconfig": self.kubeconfig})
