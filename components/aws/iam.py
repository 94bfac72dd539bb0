"""IAM building blocks shared by components."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Optional, Sequence

import pulumi
import pulumi_aws as aws

# What a worker node itself needs, nothing for pods: pods get their own roles through EKS Pod
# Identity, so no node-role permission is widened to serve them.
NODE_POLICIES = (
    "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
    "arn:aws:iam::aws:policy/AmazonEKS_CNI_Policy",
    "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
)


def assume_role_policy(service: str, *, tag_session: bool = False) -> str:
    actions = ["sts:AssumeRole"] + (["sts:TagSession"] if tag_session else [])
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": actions}],
    })


@dataclass
class AttachedRole:
    """A role with the policies attached to it. Whatever uses the role (a node group, an add-on, a
    Pod Identity association) must be created after the attachments and deleted before them: EKS
    cannot terminate instances or delete network interfaces once the node role's policies are gone
    (terraform-provider-aws docs, eks_node_group: "ensure that IAM Role permissions are created
    before and deleted after the EKS Node Group"; FACTS "AWS: first up and day two"). `arn` carries
    that order: it resolves only after every attachment, so a resource that takes it depends on
    them (deploy model rule `iam-before-use`)."""

    role: aws.iam.Role
    attachments: list[pulumi.Resource] = field(default_factory=list)

    @property
    def arn(self) -> pulumi.Output[str]:
        return pulumi.Output.all(self.role.arn, *[a.id for a in self.attachments]).apply(lambda v: v[0])

    @property
    def id(self) -> pulumi.Output[str]:
        return self.role.id

    @property
    def name(self) -> pulumi.Output[str]:
        return self.role.name


def role_with_policies(name: str, service: str, policy_arns: Sequence[str],
                       parent: pulumi.Resource, *, tag_session: bool = False,
                       trust: Optional[pulumi.Input[str]] = None) -> AttachedRole:
    """A role `service` may assume (or `trust`, a whole trust policy), with managed policies."""
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(name, assume_role_policy=trust or assume_role_policy(service, tag_session=tag_session),
                        opts=child)
    attachments: list[pulumi.Resource] = []
    for arn in policy_arns:
        short = arn.rsplit("/", 1)[-1]
        attachments.append(aws.iam.RolePolicyAttachment(f"{name}-{short}", role=role.name, policy_arn=arn,
                                                        opts=child))
    return AttachedRole(role, attachments)


def node_role(name: str, parent: pulumi.Resource) -> AttachedRole:
    return role_with_policies(name, "ec2.amazonaws.com", NODE_POLICIES, parent)


def pod_identity_trust(cluster_name: str, cluster_arn: str, namespace: str, service_account: str) -> str:
    """Trust policy of a Pod Identity role, conditioned on the account, the cluster, the namespace
    and the service account: EKS Pod Identity sets `eks-cluster-name`, `kubernetes-namespace` and
    `kubernetes-service-account` as session tags when it assumes the role, so any other association
    in the account is refused (EKS user guide, pod-id-role "Setting Conditions", pod-id-abac).
    The account is the cluster ARN's (arn:aws:eks:REGION:ACCOUNT:cluster/NAME)."""
    parts = cluster_arn.split(":")
    account = parts[4] if cluster_arn.startswith("arn:") and len(parts) > 4 else cluster_arn
    return json.dumps({
        "Version": "2012-10-17",
        "Statement": [{
            "Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
            "Action": ["sts:AssumeRole", "sts:TagSession"],
            "Condition": {"StringEquals": {
                "aws:SourceAccount": account,
                "aws:RequestTag/eks-cluster-name": cluster_name,
                "aws:RequestTag/kubernetes-namespace": namespace,
                "aws:RequestTag/kubernetes-service-account": service_account,
            }},
        }],
    }, sort_keys=True)


def pod_identity_role(name: str, policy_arns: Sequence[str], parent: pulumi.Resource, *,
                      cluster: Optional[tuple[pulumi.Input[str], pulumi.Input[str]]] = None,
                      namespace: str = "", service_account: str = "") -> AttachedRole:
    """A role EKS Pod Identity can hand to one service account. With `cluster` = (name, ARN) the
    trust is limited to that cluster's `namespace`/`service_account` (pod_identity_trust)."""
    if cluster is None:
        return role_with_policies(name, "pods.eks.amazonaws.com", policy_arns, parent, tag_session=True)
    trust = pulumi.Output.all(cluster[0], cluster[1]).apply(
        lambda v: pod_identity_trust(v[0], v[1], namespace, service_account))
    return role_with_policies(name, "pods.eks.amazonaws.com", policy_arns, parent, trust=trust)
