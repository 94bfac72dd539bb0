"""IAM building blocks shared by components."""

from __future__ import annotations

import json
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


def role_with_policies(name: str, service: str, policy_arns: Sequence[str],
                       parent: pulumi.Resource, *, tag_session: bool = False,
                       trust: Optional[pulumi.Input[str]] = None) -> aws.iam.Role:
    """A role `service` may assume (or `trust`, a whole trust policy), with managed policies."""
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(name, assume_role_policy=trust or assume_role_policy(service, tag_session=tag_session),
                        opts=child)
    for arn in policy_arns:
        short = arn.rsplit("/", 1)[-1]
        aws.iam.RolePolicyAttachment(f"{name}-{short}", role=role.name, policy_arn=arn, opts=child)
    return role


def node_role(name: str, parent: pulumi.Resource) -> aws.iam.Role:
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
                      namespace: str = "", service_account: str = "") -> aws.iam.Role:
    """A role EKS Pod Identity can hand to one service account. With `cluster` = (name, ARN) the
    trust is limited to that cluster's `namespace`/`service_account` (pod_identity_trust)."""
    if cluster is None:
        return role_with_policies(name, "pods.eks.amazonaws.com", policy_arns, parent, tag_session=True)
    trust = pulumi.Output.all(cluster[0], cluster[1]).apply(
        lambda v: pod_identity_trust(v[0], v[1], namespace, service_account))
    return role_with_policies(name, "pods.eks.amazonaws.com", policy_arns, parent, trust=trust)
