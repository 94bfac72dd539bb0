"""The Karpenter controller's IAM policy, scoped to one cluster (pure: plain strings in, JSON out).

The permissions of the getting-started CloudFormation template of aws/karpenter-provider-aws
v1.14.0 (website/content/en/v1.14/getting-started/getting-started-with-karpenter/cloudformation.yaml:
NodeLifecyclePolicy, IAMIntegrationPolicy, EKSIntegrationPolicy, InterruptionPolicy,
ZonalShiftPolicy, ResourceDiscoveryPolicy), with the same scoping: EC2 launches and deletions only
of resources tagged for this cluster and a NodePool, instance profiles only tagged for this cluster
and an EC2NodeClass, PassRole only of the GPU node role, the queue only this stack's. One inline
policy per template policy (components/aws/karpenter.py), so each stays under IAM's size limit.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Scope:
    partition: str
    region: str
    account: str
    cluster: str
    node_role_arn: str
    queue_arn: str

    def ec2(self, kind: str, *, account: bool = True) -> str:
        return f"arn:{self.partition}:ec2:{self.region}:{'*' if account else ''}:{kind}/*"

    @property
    def cluster_tag(self) -> str:
        return f"kubernetes.io/cluster/{self.cluster}"

    @property
    def cluster_arn(self) -> str:
        return f"arn:{self.partition}:eks:{self.region}:{self.account}:cluster/{self.cluster}"

    @property
    def instance_profiles(self) -> str:
        return f"arn:{self.partition}:iam::{self.account}:instance-profile/*"


def _allow(sid: str, actions, resources, condition=None) -> dict:
    st = {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources}
    if condition:
        st["Condition"] = condition
    return st


# Resources a launch creates and tags (the template's AllowScopedEC2InstanceActionsWithTags and
# AllowScopedResourceCreationTagging lists).
_CREATED = ("fleet", "instance", "volume", "network-interface", "launch-template", "spot-instances-request")
_LAUNCH = ["ec2:RunInstances", "ec2:CreateFleet"]


def node_lifecycle(s: Scope) -> dict:
    owned = {f"aws:ResourceTag/{s.cluster_tag}": "owned"}
    any_pool = {"aws:ResourceTag/karpenter.sh/nodepool": "*"}
    request = {f"aws:RequestTag/{s.cluster_tag}": "owned", "aws:RequestTag/eks:eks-cluster-name": s.cluster}
    request_pool = {"aws:RequestTag/karpenter.sh/nodepool": "*"}
    created = [s.ec2(k) for k in _CREATED]
    return {"Version": "2012-10-17", "Statement": [
        _allow("AllowScopedEC2InstanceAccessActions", _LAUNCH,
               [s.ec2("image", account=False), s.ec2("snapshot", account=False)]
               + [s.ec2(k) for k in ("security-group", "subnet", "capacity-reservation", "placement-group")]),
        _allow("AllowScopedEC2LaunchTemplateAccessActions", _LAUNCH, s.ec2("launch-template"),
               {"StringEquals": owned, "StringLike": any_pool}),
        _allow("AllowScopedEC2InstanceActionsWithTags", [*_LAUNCH, "ec2:CreateLaunchTemplate"], created,
               {"StringEquals": request, "StringLike": request_pool}),
        _allow("AllowScopedResourceCreationTagging", "ec2:CreateTags", created,
               {"StringEquals": {**request, "ec2:CreateAction": ["RunInstances", "CreateFleet",
                                                                 "CreateLaunchTemplate"]},
                "StringLike": request_pool}),
        _allow("AllowScopedResourceTagging", "ec2:CreateTags", s.ec2("instance"),
               {"StringEquals": owned, "StringLike": any_pool,
                "StringEqualsIfExists": {"aws:RequestTag/eks:eks-cluster-name": s.cluster},
                "ForAllValues:StringEquals": {"aws:TagKeys": ["eks:eks-cluster-name", "karpenter.sh/nodeclaim",
                                                              "Name"]}}),
        _allow("AllowScopedDeletion", ["ec2:TerminateInstances", "ec2:DeleteLaunchTemplate"],
               [s.ec2("instance"), s.ec2("launch-template")], {"StringEquals": owned, "StringLike": any_pool}),
    ]}


def iam_integration(s: Scope) -> dict:
    region_tag = "topology.kubernetes.io/region"
    node_class = "karpenter.k8s.aws/ec2nodeclass"
    owned_res = {f"aws:ResourceTag/{s.cluster_tag}": "owned", f"aws:ResourceTag/{region_tag}": s.region}
    owned_req = {f"aws:RequestTag/{s.cluster_tag}": "owned", "aws:RequestTag/eks:eks-cluster-name": s.cluster,
                 f"aws:RequestTag/{region_tag}": s.region}
    return {"Version": "2012-10-17", "Statement": [
        _allow("AllowPassingInstanceRole", "iam:PassRole", s.node_role_arn,
               {"StringEquals": {"iam:PassedToService": ["ec2.amazonaws.com", "ec2.amazonaws.com.cn"]}}),
        _allow("AllowScopedInstanceProfileCreationActions", ["iam:CreateInstanceProfile"], s.instance_profiles,
               {"StringEquals": owned_req, "StringLike": {f"aws:RequestTag/{node_class}": "*"}}),
        _allow("AllowScopedInstanceProfileTagActions", ["iam:TagInstanceProfile"], s.instance_profiles,
               {"StringEquals": {**owned_res, **owned_req},
                "StringLike": {f"aws:ResourceTag/{node_class}": "*", f"aws:RequestTag/{node_class}": "*"}}),
        _allow("AllowScopedInstanceProfileActions",
               ["iam:AddRoleToInstanceProfile", "iam:RemoveRoleFromInstanceProfile", "iam:DeleteInstanceProfile"],
               s.instance_profiles, {"StringEquals": owned_res, "StringLike": {f"aws:ResourceTag/{node_class}": "*"}}),
    ]}


def eks_integration(s: Scope) -> dict:
    return {"Version": "2012-10-17", "Statement": [
        _allow("AllowAPIServerEndpointDiscovery", "eks:DescribeCluster", s.cluster_arn)]}


def interruption(s: Scope) -> dict:
    return {"Version": "2012-10-17", "Statement": [
        _allow("AllowInterruptionQueueActions", ["sqs:DeleteMessage", "sqs:GetQueueUrl", "sqs:ReceiveMessage"],
               s.queue_arn)]}


def zonal_shift(s: Scope) -> dict:
    return {"Version": "2012-10-17", "Statement": [
        _allow("AllowZonalShiftStatusReadOnly", ["arc-zonal-shift:GetManagedResource"], "*",
               {"StringEquals": {"arc-zonal-shift:ResourceIdentifier": s.cluster_arn}})]}


_DESCRIBE = ("CapacityReservations", "Images", "Instances", "InstanceStatus", "InstanceTypeOfferings",
             "InstanceTypes", "LaunchTemplates", "PlacementGroups", "SecurityGroups", "SpotPriceHistory", "Subnets")


def resource_discovery(s: Scope) -> dict:
    return {"Version": "2012-10-17", "Statement": [
        _allow("AllowRegionalReadActions", [f"ec2:Describe{d}" for d in _DESCRIBE], "*",
               {"StringEquals": {"aws:RequestedRegion": s.region}}),
        _allow("AllowSSMReadActions", "ssm:GetParameter",
               f"arn:{s.partition}:ssm:{s.region}::parameter/aws/service/*"),
        _allow("AllowPricingReadActions", "pricing:GetProducts", "*"),
        _allow("AllowUnscopedInstanceProfileListAction", "iam:ListInstanceProfiles", "*"),
        _allow("AllowInstanceProfileReadActions", "iam:GetInstanceProfile", s.instance_profiles),
    ]}


POLICIES = {"node-lifecycle": node_lifecycle, "iam-integration": iam_integration,
            "eks-integration": eks_integration, "interruption": interruption, "zonal-shift": zonal_shift,
            "resource-discovery": resource_discovery}


def policy_json(which: str, s: Scope) -> str:
    return json.dumps(POLICIES[which](s), sort_keys=True)


def queue_policy(queue_arn: str) -> dict:
    """EventBridge (and SQS itself) may send to the queue; nothing over plain HTTP (the template's
    KarpenterInterruptionQueuePolicy)."""
    return {"Version": "2012-10-17", "Id": "EC2InterruptionPolicy", "Statement": [
        {"Effect": "Allow", "Principal": {"Service": ["events.amazonaws.com", "sqs.amazonaws.com"]},
         "Action": "sqs:SendMessage", "Resource": queue_arn},
        {"Sid": "DenyHTTP", "Effect": "Deny", "Action": "sqs:*", "Resource": queue_arn, "Principal": "*",
         "Condition": {"Bool": {"aws:SecureTransport": "false"}}},
    ]}


# The events Karpenter acts on (the template's five AWS::Events::Rule resources), each sent to the
# queue: {rule: (source, detail-type)}. Karpenter cordons and drains the node before EC2 stops it
# (pkg/controllers/interruption).
EVENT_RULES = {
    "scheduled-change": ("aws.health", "AWS Health Event"),
    "spot-interruption": ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    "rebalance": ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    "instance-state-change": ("aws.ec2", "EC2 Instance State-change Notification"),
    "capacity-reservation-interruption": ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}


def event_pattern(rule: str) -> str:
    source, detail = EVENT_RULES[rule]
    return json.dumps({"source": [source], "detail-type": [detail]})
