"""What a first `up` needs of the AWS account that the stack file cannot show: pure rules, shared by
preflight (components/preflight.py, before `up`) and the program (components/aws/platform.py, which
refuses them on a real deploy before it creates anything; the offline render has no account).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Iterable, Optional

# AZ IDs in which EKS creates no control plane: CreateCluster fails with
# UnsupportedAvailabilityZoneException ("At least one of your specified cluster subnets is in an
# Availability Zone that does not support Amazon EKS"; EKS API reference, CreateCluster errors).
# The list: EKS user guide, network-reqs ("Subnet requirements and considerations": subnets of
# these AZ IDs cannot be cluster subnets). Names map to different IDs in each account, so only the
# account can tell whether `us-east-1e` is one of them.
EKS_UNSUPPORTED_ZONE_IDS = {"use1-az3": "us-east-1", "usw1-az2": "us-west-1", "cac1-az3": "ca-central-1"}

# The IPv4 documentation ranges (RFC 5737: TEST-NET-1/2/3), never routed on the internet: a public
# endpoint limited to one of them admits nobody, and every Kubernetes resource then times out
# dialling the API server after the cluster exists. The committed stack files carry one as the
# placeholder to replace.
DOCUMENTATION_RANGES = tuple(ipaddress.ip_network(n) for n in ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24"))

_ASSUMED = re.compile(r"^arn:(?P<partition>aws[a-z-]*):sts::(?P<account>\d{12}):assumed-role/(?P<role>[^/]+)/.+$")
_ROLE = re.compile(r"^arn:(?P<partition>aws[a-z-]*):iam::(?P<account>\d{12}):role/(?:.*/)?(?P<role>[^/]+)$")


def documentation_cidrs(cidrs: Iterable[str]) -> list[str]:
    """The CIDRs that lie inside a documentation range."""
    out = []
    for c in cidrs:
        net = ipaddress.ip_network(c, strict=False)
        if net.version == 4 and any(net.subnet_of(d) for d in DOCUMENTATION_RANGES):
            out.append(c)
    return out


def unsupported_zones(zone_ids: dict[str, str]) -> dict[str, str]:
    """{AZ name: AZ ID} of the configured zones EKS refuses, from {name: id} as the account maps them."""
    return {name: zid for name, zid in zone_ids.items() if zid in EKS_UNSUPPORTED_ZONE_IDS}


def caller_role(caller_arn: str) -> Optional[tuple[str, str]]:
    """(account, role name) of an assumed-role caller (`sts:GetCallerIdentity`'s Arn), or None for a
    user or root. The assumed-role ARN drops the role's path: roles compare by account and name."""
    m = _ASSUMED.match(caller_arn) or _ROLE.match(caller_arn)
    return (m.group("account"), m.group("role")) if m else None


def creator_in_admins(caller_arn: str, admin_role_arns: Iterable[str]) -> Optional[str]:
    """The entry of `admin_role_arns` that is the deploying principal, if any.

    pulumi-eks creates the cluster with accessConfig.bootstrapClusterCreatorAdminPermissions set to
    true whenever authenticationMode is given (pulumi-eks nodejs/eks/cluster/cluster.ts, createCore;
    it ignores changes to it), so EKS already holds a cluster-admin access entry for the creator;
    CreateAccessEntry for the same principal then fails with `ResourceInUseException` (HTTP 409),
    after the cluster exists."""
    me = caller_role(caller_arn)
    for arn in admin_role_arns:
        if arn == caller_arn or (me is not None and caller_role(arn) == me):
            return arn
    return None


def ip_allowed(ip: str, cidrs: Iterable[str]) -> bool:
    addr = ipaddress.ip_address(ip)
    return any(addr in ipaddress.ip_network(c, strict=False) for c in cidrs)
