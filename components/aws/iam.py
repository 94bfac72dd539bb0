"""IAM building blocks shared by components."""

from __future__ import annotations

import json
from typing import Sequence

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
                       parent: pulumi.Resource, *, tag_session: bool = False) -> aws.iam.Role:
    child = pulumi.ResourceOptions(parent=parent)
    role = aws.iam.Role(name, assume_role_policy=assume_role_policy(service, tag_session=tag_session),
                        opts=child)
    for arn in policy_arns:
        short = arn.rsplit("/", 1)[-1]
        aws.iam.RolePolicyAttachment(f"{name}-{short}", role=role.name, policy_arn=arn, opts=child)
    return role


def node_role(name: str, parent: pulumi.Resource) -> aws.iam.Role:
    return role_with_policies(name, "ec2.amazonaws.com", NODE_POLICIES, parent)


def pod_identity_role(name: str, policy_arns: Sequence[str], parent: pulumi.Resource) -> aws.iam.Role:
    """A role EKS Pod Identity can hand to one service account."""
    return role_with_policies(name, "pods.eks.amazonaws.com", policy_arns, parent, tag_session=True)
