"""Network: a VPC with public and private subnets across the configured AZs, or an existing one.

GPU nodes, their placement group and the FSx file system all live in the private subnet of one AZ
(`network.gpuAvailabilityZone`): EFA needs every node of a group in one AZ, and pinning the subnet
keeps AWS from replacing the node group when it adds an AZ (KNOWN-FAILURES F7).
"""

from __future__ import annotations

import ipaddress
from typing import Optional

import pulumi
import pulumi_aws as aws
from pydantic import BaseModel, ConfigDict, Field


class NetworkArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    vpc_cidr: str
    availability_zones: tuple[str, ...] = Field(min_length=2, max_length=3)
    gpu_availability_zone: str
    cluster_name: str
    # The stack's region (`aws:region`): the S3 gateway endpoint's service name carries it.
    region: str


def subnet_cidrs(vpc_cidr: str, count: int) -> tuple[list[str], list[str]]:
    """(private, public) CIDRs: a quarter of the VPC per private subnet (pods take VPC IPs: p5
    nodes run up to 100 pods each), small public subnets carved from the last quarter."""
    vpc = ipaddress.ip_network(vpc_cidr)
    quarters = list(vpc.subnets(prefixlen_diff=2))
    private = [str(q) for q in quarters[:count]]
    public = [str(s) for s in list(quarters[3].subnets(prefixlen_diff=4))[:count]]
    return private, public


def _tags(name: str, **extra: str) -> dict[str, str]:
    return {"Name": name, "app.kubernetes.io/part-of": "rltrain", **extra}


class Network(pulumi.ComponentResource):
    vpc_id: pulumi.Output[str]
    private_subnet_ids: list[pulumi.Output[str]]
    public_subnet_ids: list[pulumi.Output[str]]
    gpu_subnet_id: pulumi.Output[str]

    def __init__(self, name: str, args: NetworkArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:index:Network", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=args.vpc_cidr, enable_dns_hostnames=True,
                          enable_dns_support=True, tags=_tags(f"{name}-vpc"), opts=child)
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=vpc.id, tags=_tags(f"{name}-igw"), opts=child)
        public_rt = aws.ec2.RouteTable(
            f"{name}-public", vpc_id=vpc.id, tags=_tags(f"{name}-public"), opts=child,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", gateway_id=igw.id)])
        private_cidrs, public_cidrs = subnet_cidrs(args.vpc_cidr, len(args.availability_zones))
        elb = {f"kubernetes.io/cluster/{args.cluster_name}": "shared"}
        self.private_subnet_ids, self.public_subnet_ids = [], []
        public_by_az = {}
        for az, priv, pub in zip(args.availability_zones, private_cidrs, public_cidrs):
            ps = aws.ec2.Subnet(f"{name}-public-{az}", vpc_id=vpc.id, cidr_block=pub, availability_zone=az,
                                map_public_ip_on_launch=False, opts=child,
                                tags=_tags(f"{name}-public-{az}", **elb, **{"kubernetes.io/role/elb": "1"}))
            aws.ec2.RouteTableAssociation(f"{name}-public-{az}", subnet_id=ps.id,
                                          route_table_id=public_rt.id, opts=child)
            public_by_az[az] = ps
            self.public_subnet_ids.append(ps.id)
        # One NAT gateway, in the GPU AZ: the heavy egress (image pulls) comes from GPU nodes, and
        # cross-AZ NAT traffic is billed.
        eip = aws.ec2.Eip(f"{name}-nat", domain="vpc", tags=_tags(f"{name}-nat"), opts=child)
        nat = aws.ec2.NatGateway(f"{name}-nat", allocation_id=eip.id,
                                 subnet_id=public_by_az[args.gpu_availability_zone].id,
                                 tags=_tags(f"{name}-nat"), opts=pulumi.ResourceOptions(parent=self, depends_on=[igw]))
        private_rt = aws.ec2.RouteTable(
            f"{name}-private", vpc_id=vpc.id, tags=_tags(f"{name}-private"), opts=child,
            routes=[aws.ec2.RouteTableRouteArgs(cidr_block="0.0.0.0/0", nat_gateway_id=nat.id)])
        for az, priv in zip(args.availability_zones, private_cidrs):
            s = aws.ec2.Subnet(f"{name}-private-{az}", vpc_id=vpc.id, cidr_block=priv, availability_zone=az,
                               opts=child, tags=_tags(f"{name}-private-{az}", **elb,
                                                      **{"kubernetes.io/role/internal-elb": "1"}))
            aws.ec2.RouteTableAssociation(f"{name}-private-{az}", subnet_id=s.id,
                                          route_table_id=private_rt.id, opts=child)
            self.private_subnet_ids.append(s.id)
            if az == args.gpu_availability_zone:
                self.gpu_subnet_id = s.id
        # S3 gateway endpoint on the private route table: image layers from ECR (stored in S3),
        # checkpoints and data go to S3 without the NAT gateway, which bills per GB processed; a
        # gateway endpoint costs nothing (AWS Prescriptive Guidance; FACTS "AWS: first up and day
        # two"). Its default policy allows all S3 actions; the roles decide what is allowed.
        aws.ec2.VpcEndpoint(f"{name}-s3", vpc_id=vpc.id, service_name=f"com.amazonaws.{args.region}.s3",
                            vpc_endpoint_type="Gateway", route_table_ids=[private_rt.id],
                            tags=_tags(f"{name}-s3"), opts=child)
        self.vpc_id = vpc.id
        self.register_outputs({"vpcId": self.vpc_id, "gpuSubnetId": self.gpu_subnet_id})


class ExistingNetwork:
    """The same outputs as `Network`, from ids named in config; creates nothing."""

    def __init__(self, vpc_id: str, private_subnet_ids: tuple[str, ...], gpu_subnet_id: str):
        self.vpc_id = pulumi.Output.from_input(vpc_id)
        self.private_subnet_ids = [pulumi.Output.from_input(s) for s in private_subnet_ids]
        self.public_subnet_ids: list[pulumi.Output[str]] = []
        self.gpu_subnet_id = pulumi.Output.from_input(gpu_subnet_id)
