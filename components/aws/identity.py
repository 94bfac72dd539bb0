"""TrainingIdentity: the IAM role training pods get through EKS Pod Identity.

Read/write on the configured S3 bucket and prefix (checkpoints and data), nothing else; the node
role is never widened to serve pods.
"""

from __future__ import annotations

import json
from typing import Optional

import pulumi
import pulumi_aws as aws
from pydantic import BaseModel, ConfigDict

from components.aws import iam
class TrainingIdentityArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_name: str
    namespace: str
    service_account: str
    bucket: str
    prefix: str


def s3_policy(a: TrainingIdentityArgs) -> dict:
    prefix = a.prefix.lstrip("/")
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "ListPrefix", "Effect": "Allow", "Action": ["s3:ListBucket"],
             "Resource": f"arn:aws:s3:::{a.bucket}",
             "Condition": {"StringLike": {"s3:prefix": [prefix, f"{prefix}*"]}}},
            {"Sid": "ReadWritePrefix", "Effect": "Allow",
             "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
             "Resource": f"arn:aws:s3:::{a.bucket}/{prefix}*"},
        ],
    }


class TrainingIdentity(pulumi.ComponentResource):
    role_arn: pulumi.Output[str]

    def __init__(self, name: str, args: TrainingIdentityArgs, *, depends_on: list[pulumi.Resource],
                 cluster: tuple[pulumi.Input[str], pulumi.Input[str]],
                 opts: Optional[pulumi.ResourceOptions] = None):
        """`cluster`: the cluster's (name, ARN) as outputs of the cluster; the role trusts only the
        training service account of that cluster."""
        super().__init__("rltrain:index:TrainingIdentity", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        role = iam.pod_identity_role(f"{name}-role", [], self, cluster=cluster, namespace=args.namespace,
                                     service_account=args.service_account)
        s3 = aws.iam.RolePolicy(f"{name}-s3", role=role.id, policy=json.dumps(s3_policy(args)), opts=child)
        # After its policy (iam.AttachedRole): created with its permissions, deleted before them.
        aws.eks.PodIdentityAssociation(
            f"{name}-association", cluster_name=cluster[0], namespace=args.namespace,
            service_account=args.service_account, role_arn=role.arn,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[*depends_on, s3]))
        self.role_arn = role.arn
        self.register_outputs({"roleArn": self.role_arn})
