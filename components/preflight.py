"""Preflight: what only the AWS account knows, checked before `pulumi up` (read-only calls).

    python -m components.preflight --stack p5

The first thing to run on a fresh account. Each check prints one line as soon as it has finished,
PASS, FAIL or NOTE, naming the AWS API it asked, and for a failure what to do; a check that could
not ask its API for want of credentials prints NO CREDENTIALS with the permission it needs, and
every other check still runs. Exit status 1 when any check fails or lacks credentials, 0 otherwise
(2: the stack file itself is wrong). Needs AWS credentials for the stack's account (any read-only
role will do: sts:GetCallerIdentity, ec2:Describe*, servicequotas:GetServiceQuota,
eks:DescribeAddonVersions, ecr:DescribeImages, s3:GetBucketLocation). Creates nothing.
`--help` lists every check (CHECKS below) and why offline cannot make it.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, TextIO

from components.aws import account_checks
from components.aws import gpu_nodes
from components.stack import catalog, image_build, versions
from components.stack.config import StackConfig

Client = Any
ClientFactory = Callable[[str, str], Client]  # (service, region) -> a boto3 client

# Service Quotas codes of the On-Demand vCPU quotas per instance family (EC2 Service Quotas,
# "Running On-Demand ... instances"; the quota counts vCPUs, not instances).
ON_DEMAND_QUOTAS = {"p": ("L-417A185B", "Running On-Demand P instances"),
                    "g": ("L-DB2E81BA", "Running On-Demand G and VT instances")}
STANDARD_QUOTA = ("L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")
_ECR = re.compile(r"^(?P<account>\d{12})\.dkr\.ecr\.(?P<region>[a-z0-9-]+)\.amazonaws\.com(?:\.cn)?/"
                  r"(?P<repo>[^:@]+)(?::(?P<tag>[^@]+))?(?:@(?P<digest>sha256:[0-9a-f]{64}))?$")


# Every check: (name, what and why only the account knows, the AWS API it asks). `--help` prints it.
CHECKS = (
    ("AWS CLI", "the `aws` command is on PATH: the kubeconfig the stack exports runs `aws eks get-token`",
     "local (shutil.which)"),
    ("deploying identity", "who deploys; that principal is not in cluster.adminRoleArns (pulumi-eks already "
     "gives the cluster creator an admin access entry: a second one fails with ResourceInUseException)",
     "STS GetCallerIdentity"),
    ("endpoint access", "this machine's public IP is inside cluster.publicAccessCidrs, which holds no "
     "documentation range (the stack file's placeholder)", "checkip.amazonaws.com"),
    ("availability zones", "every configured AZ name maps to an AZ ID of this account that EKS accepts "
     "(use1-az3, usw1-az2, cac1-az3: CreateCluster fails with UnsupportedAvailabilityZoneException)",
     "EC2 DescribeAvailabilityZones / DescribeSubnets"),
    ("GPU instance type in the GPU AZ", "the instance type is offered in the GPU AZ's ID (not every zone has p5)",
     "EC2 DescribeInstanceTypeOfferings"),
    ("On-Demand vCPU quota", "the instance family's vCPU quota covers the GPU nodes, and a node roll's surge "
     "(on-demand); in elastic mode the maximum, gpuNodes.elastic.maxNodes", "Service Quotas GetServiceQuota"),
    ("On-Demand capacity", "whether EC2 has the instances for a cluster placement group cannot be known "
     "before the launch; the Capacity Blocks on offer instead (on-demand)",
     "EC2 DescribeCapacityBlockOfferings"),
    ("capacity reservation / Capacity Block", "active, in the GPU AZ, for the type and the node count "
     "(odcr, capacity-block)", "EC2 DescribeCapacityReservations"),
    ("Standard vCPU quota (system nodes)", "the Standard family quota covers the system nodes and their roll's "
     "surge", "EC2 DescribeInstanceTypes, Service Quotas GetServiceQuota"),
    ("add-on builds", "every pinned EKS add-on build exists for the Kubernetes minor", "EKS DescribeAddonVersions"),
    ("training image", "the image exists in its ECR repository", "ECR DescribeImages"),
    ("S3 buckets", "each bucket the stack names exists, in the stack's region", "S3 GetBucketLocation"),
)
# EKS's DEFAULT update launches new nodes first: "up to twice the number of Availability Zones"
# the group spans, or maxUnavailable if larger (EKS user guide, managed-node-update-behavior,
# "Scale up phase"); the system nodes keep EKS's default maxUnavailable 1.
SURGE_PER_AZ = 2


@dataclass(frozen=True)
class Result:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    api: str = ""
    # Passes, but says something the user must act on (a capacity nobody can check beforehand).
    note: bool = False
    # Not checked: the AWS call found no usable credentials; the IAM permission the check needs.
    needs: str = ""

    @property
    def status(self) -> str:
        if self.needs:
            return "NO CREDENTIALS"
        return "FAIL" if not self.ok else ("NOTE" if self.note else "PASS")

    def line(self) -> str:
        if self.needs:  # one line: which check, what it needs, how to provide it (CREDENTIALS_FIX)
            return f"{self.status}  {self.name}: needs {self.needs} [{self.api}]; {self.detail}"
        text = f"{self.status}  {self.name}: {self.detail}" + (f" [{self.api}]" if self.api else "")
        return text + (f"\n      what to do: {self.fix}" if (not self.ok or self.note) and self.fix else "")


def _error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__))


# botocore raises these before any request when the credential chain finds nothing usable
# (botocore/exceptions.py; botocore/credentials.py resolves env, shared files, SSO, container, IMDS):
# the check did not run, which is not the account's answer.
CREDENTIAL_EXCEPTIONS = ("NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",
                         "ProfileNotFound", "SSOTokenLoadError", "UnauthorizedSSOTokenError", "TokenRetrievalError",
                         "NoAuthTokenError", "LoginTokenLoadError", "UnknownCredentialError")
# What the services answer to credentials they do not accept (expired or unknown keys): the same for
# the user, credentials to renew (STS, EC2 and the JSON services' error codes).
CREDENTIAL_CODES = ("ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
                    "AuthFailure", "SignatureDoesNotMatch", "InvalidSignatureException")
CREDENTIALS_FIX = ("credentials of the stack's account: AWS_PROFILE=NAME after `aws sso login --profile NAME`, "
                   "or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY")


def credentials_missing(exc: BaseException) -> bool:
    """The call never reached the account: no usable credentials (or ones it refused as invalid)."""
    return (any(c.__name__ in CREDENTIAL_EXCEPTIONS for c in type(exc).__mro__)
            or _error_code(exc) in CREDENTIAL_CODES)


# --- the checks -------------------------------------------------------------------------------------


def check_cli(which: Callable[[str], Optional[str]] = shutil.which) -> Result:
    name = "AWS CLI"
    path = which("aws")
    if path:
        return Result(name, True, f"`aws` is {path}", api="local")
    return Result(name, False, "`aws` is not on PATH: the kubeconfig the stack exports runs `aws eks get-token`, "
                  "and kubectl (and every `pulumi up` after the first) fails without it",
                  "install AWS CLI v2 (https://docs.aws.amazon.com/cli/latest/userguide/getting-started-install.html)",
                  api="local")


def check_caller(sts: Client, admin_role_arns: Iterable[str]) -> Result:
    name, api = "deploying identity", "STS GetCallerIdentity"
    try:
        arn = sts.get_caller_identity()["Arn"]
    except Exception as exc:  # noqa: BLE001 - botocore raises per-service error classes
        if credentials_missing(exc):
            return Result(name, False, f"{_error_code(exc)}; provide {CREDENTIALS_FIX}", api=api,
                          needs=PERMISSIONS["deploying identity"])
        return Result(name, False, f"no identity: {_error_code(exc)}",
                      "log in to the stack's account (`aws sso login`, AWS_PROFILE)", api=api)
    mine = account_checks.creator_in_admins(arn, admin_role_arns)
    if mine:
        return Result(name, False, f"{arn} deploys and {mine} is in rltrain:cluster.adminRoleArns: pulumi-eks "
                      "already gives the cluster creator an admin access entry (bootstrapClusterCreatorAdminPermissions), "
                      "so CreateAccessEntry would fail with ResourceInUseException (409) after the cluster exists",
                      f"remove {mine} from rltrain:cluster.adminRoleArns (it is admin as the creator)", api=api)
    return Result(name, True, f"{arn}; the cluster creator gets admin access from pulumi-eks", api=api)


def check_endpoint(ip: Optional[str], public_access: bool, cidrs: tuple[str, ...]) -> Result:
    name, api = "endpoint access", "checkip.amazonaws.com"
    placeholders = account_checks.documentation_cidrs(cidrs)
    if public_access and placeholders:
        return Result(name, False, f"rltrain:cluster.publicAccessCidrs has {', '.join(placeholders)}, a documentation "
                      "range (RFC 5737) nobody connects from: after the cluster exists every Kubernetes resource "
                      "times out dialling the endpoint (`pulumi up` refuses it too)",
                      f"set your office/VPN CIDRs{f' (this machine: {ip}/32)' if ip else ''}", api=api)
    if not public_access:
        return Result(name, True, "private endpoint only: run `pulumi up` and kubectl from inside the VPC (or over "
                      "VPN / Direct Connect into it)", api=api, note=True,
                      fix="a machine outside the VPC cannot reach the API server")
    if ip is None:
        return Result(name, True, "could not learn this machine's public IP: not checked", api=api, note=True,
                      fix="check that your egress IP is inside rltrain:cluster.publicAccessCidrs")
    if account_checks.ip_allowed(ip, cidrs):
        return Result(name, True, f"{ip} is inside {', '.join(cidrs)}", api=api)
    return Result(name, False, f"{ip} (this machine) is outside rltrain:cluster.publicAccessCidrs ({', '.join(cidrs)}): "
                  "`pulumi up` would create the cluster, then time out on every Kubernetes resource",
                  f"add {ip}/32 (or your network's CIDR) to rltrain:cluster.publicAccessCidrs, or deploy from a "
                  "machine inside one", api=api)


def zone_ids(ec2: Client, names: Iterable[str]) -> dict[str, str]:
    zones = ec2.describe_availability_zones(ZoneNames=sorted(set(names)))["AvailabilityZones"]
    return {z["ZoneName"]: z["ZoneId"] for z in zones}


def check_zones(ec2: Client, names: tuple[str, ...]) -> tuple[Result, dict[str, str]]:
    """Every configured AZ name, mapped to this account's AZ ID and checked against EKS's refusals."""
    name, api = "availability zones", "EC2 DescribeAvailabilityZones"
    try:
        ids = zone_ids(ec2, names)
    except Exception as exc:  # noqa: BLE001
        if credentials_missing(exc):
            raise  # reported by guarded() as the credential it needs
        return Result(name, False, f"{', '.join(names)}: {_error_code(exc)}",
                      "set rltrain:network.availabilityZones to names `aws ec2 describe-availability-zones` lists",
                      api=api), {}
    missing = [n for n in names if n not in ids]
    if missing:
        return Result(name, False, f"{', '.join(missing)} not an availability zone of this account and region",
                      "set rltrain:network.availabilityZones to names `aws ec2 describe-availability-zones` lists",
                      api=api), ids
    return _zone_result(name, api, ids, "rltrain:network.availabilityZones (and gpuAvailabilityZone)"), ids


def check_subnet_zones(ec2: Client, subnet_ids: tuple[str, ...]) -> Result:
    """An existing network: the AZ IDs of its subnets."""
    name, api = "availability zones", "EC2 DescribeSubnets"
    try:
        subnets = ec2.describe_subnets(SubnetIds=list(subnet_ids))["Subnets"]
    except Exception as exc:  # noqa: BLE001
        if credentials_missing(exc):
            raise  # reported by guarded() as the credential it needs
        return Result(name, False, f"{', '.join(subnet_ids)}: {_error_code(exc)}",
                      "check rltrain:network.existing.privateSubnetIds and aws:region", api=api)
    ids = {f"{s['SubnetId']} ({s['AvailabilityZone']})": s["AvailabilityZoneId"] for s in subnets}
    return _zone_result(name, api, ids, "rltrain:network.existing.privateSubnetIds")


def _zone_result(name: str, api: str, ids: dict[str, str], key: str) -> Result:
    bad = account_checks.unsupported_zones(ids)
    mapped = ", ".join(f"{n} = {z}" for n, z in sorted(ids.items()))
    if bad:
        return Result(name, False, f"{', '.join(f'{n} is {z}' for n, z in sorted(bad.items()))}, an AZ EKS does not "
                      "support: CreateCluster fails with UnsupportedAvailabilityZoneException (EKS user guide, "
                      f"network-reqs); this account maps {mapped}",
                      f"replace it in {key} with an AZ whose ID EKS supports (names map to different IDs in "
                      "each account: `aws ec2 describe-availability-zones`)", api=api)
    return Result(name, True, f"{mapped}; none refused by EKS", api=api)


def check_offering(ec2: Client, instance_type: str, az: str, zone_id: Optional[str] = None) -> Result:
    name, api = "GPU instance type in the GPU AZ", "EC2 DescribeInstanceTypeOfferings"
    if zone_id is None:
        zones = ec2.describe_availability_zones(ZoneNames=[az])["AvailabilityZones"]
        zone_id = zones[0]["ZoneId"] if zones else None
    if not zone_id:
        return Result(name, False, f"{az} is not an availability zone of this account",
                      "set rltrain:network.gpuAvailabilityZone to one `aws ec2 describe-availability-zones` lists",
                      api="EC2 DescribeAvailabilityZones")
    offers = ec2.describe_instance_type_offerings(
        LocationType="availability-zone-id",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}, {"Name": "location", "Values": [zone_id]}],
    )["InstanceTypeOfferings"]
    if offers:
        return Result(name, True, f"{instance_type} is offered in {az} ({zone_id} in this account)", api=api)
    others = ec2.describe_instance_type_offerings(
        LocationType="availability-zone-id", Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )["InstanceTypeOfferings"]
    where = sorted(o["Location"] for o in others)
    return Result(name, False, f"{instance_type} is not offered in {az} ({zone_id} in this account); offered in "
                  f"zone ids {', '.join(where) or 'none of this region'}",
                  "set rltrain:network.gpuAvailabilityZone (and availabilityZones) to the AZ name of an offered zone "
                  "id (`aws ec2 describe-availability-zones` maps ids to names); moving the AZ replaces FSx and "
                  "the node group", api=api)


def check_quota(quotas: Client, instance_type: str, count: int, surge: int = 0,
                name: str = "On-Demand vCPU quota", what: str = "", vcpus: Optional[int] = None) -> Result:
    """The vCPU quota of the instance's family for `count` nodes, and for `count + surge` while a
    roll launches before it terminates. The quota is a limit for the whole account and region:
    instances already running elsewhere in it count against it. `vcpus`: the type's vCPUs when the
    catalog (GPU types only) does not know it."""
    vcpu = vcpus if vcpus is not None else catalog.get(instance_type).vcpu
    family = instance_type[0]
    code, label = ON_DEMAND_QUOTAS.get(family, STANDARD_QUOTA)
    need, roll = vcpu * count, vcpu * (count + surge)
    api = "Service Quotas GetServiceQuota"
    nodes = f"{count} x {instance_type}{f' ({what})' if what else ''}"
    try:
        value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
    except Exception as exc:  # noqa: BLE001 - botocore raises per-service error classes
        if credentials_missing(exc):
            raise  # reported by guarded() as the credential it needs
        return Result(name, False, f"could not read {label} ({code}): {_error_code(exc)}",
                      "allow servicequotas:GetServiceQuota, or check the quota in the Service Quotas console", api=api)
    text = f"{label} ({code}) is {value:g} vCPUs, {nodes} need {need}"
    if surge:
        text += f", {roll} during a node roll (+{surge} launched first)"
    increase = (f"aws service-quotas request-service-quota-increase --service-code ec2 --quota-code {code} "
                f"--desired-value {roll}")
    if value < need:
        return Result(name, False, text, f"request an increase to at least {roll}: {increase}"
                      + ("; or lower rltrain:gpuNodes.elastic.maxNodes" if what.startswith("elastic") else "")
                      + ("; or use a reservation (rltrain:gpuNodes.capacity)"
                         if not what or what.startswith("elastic") else ""), api=api)
    if value < roll:
        return Result(name, False, text + ": the first `up` fits, a roll's new nodes cannot launch (the update fails "
                      "and the next control-plane upgrade waits for the nodes)",
                      f"request an increase to {roll} before the first roll: {increase}", api=api)
    return Result(name, True, text + " (the limit: instances already running in the account count against it)",
                  api=api)


def instance_vcpus(ec2: Client, instance_type: str) -> Optional[int]:
    """The default vCPU count of an instance type (EC2 DescribeInstanceTypes), None if unreadable."""
    try:
        [it] = ec2.describe_instance_types(InstanceTypes=[instance_type])["InstanceTypes"]
        return int(it["VCpuInfo"]["DefaultVCpus"])
    except Exception as exc:  # noqa: BLE001
        if credentials_missing(exc):
            raise  # reported by guarded() as the credential it needs
        return None


def check_system_quota(ec2: Client, quotas: Client, instance_type: str, count: int, azs: int) -> Result:
    name = "Standard vCPU quota (system nodes)"
    vcpus = instance_vcpus(ec2, instance_type)
    if vcpus is None:
        return Result(name, False, f"could not read the vCPUs of {instance_type}",
                      "allow ec2:DescribeInstanceTypes, or check rltrain:cluster.systemNodes.instanceType",
                      api="EC2 DescribeInstanceTypes")
    # pulumi-eks's ManagedNodeGroup sets no updateConfig: EKS's default (DEFAULT, maxUnavailable 1)
    # launches up to 2 nodes per AZ of the group first (managed-node-update-behavior).
    return check_quota(quotas, instance_type, count, surge=SURGE_PER_AZ * azs, name=name, what="system nodes",
                       vcpus=vcpus)


def quota_nodes(cfg: StackConfig) -> tuple[int, int, str]:
    """(nodes, surge, what) the GPU quota must cover. Fixed mode: `gpuNodes.count` and the managed
    group's roll surge. Elastic mode: `gpuNodes.elastic.maxNodes`, the most Karpenter may launch
    (the NodePool's limits.nodes), whatever runs now; no surge, since a drifted node is replaced
    within the same limit (components/k8s/karpenter_nodes.py budgets one node at a time)."""
    g = cfg.gpu_nodes
    if cfg.gpu_nodes.elastic.enabled:
        return cfg.gpu_nodes.node_limit, 0, "elastic: gpuNodes.elastic.maxNodes, the most Karpenter may launch"
    return g.count, gpu_nodes.roll_surge(g.capacity.type), ""


def check_on_demand_capacity(ec2: Client, instance_type: str, count: int, az: str) -> Result:
    """On-Demand capacity cannot be read before the launch: EC2 answers a cluster placement group's
    launch with InsufficientInstanceCapacity, or not. What can be read is the reserved alternative."""
    name, api = "On-Demand capacity", "EC2 DescribeCapacityBlockOfferings"
    known = (f"whether EC2 has {count} x {instance_type} for one cluster placement group in {az} is known only "
             "when the node group launches them (no read-only API answers it)")
    fix = ("if the GPU node group ends CREATE_FAILED with InsufficientInstanceCapacity, follow "
           "docs/aws-operations.md \"A GPU node group that failed to create\"; to know beforehand, reserve: "
           "rltrain:gpuNodes.capacity odcr (an On-Demand Capacity Reservation) or capacity-block")
    try:
        offers = ec2.describe_capacity_block_offerings(InstanceType=instance_type, InstanceCount=count,
                                                       CapacityDurationHours=24)["CapacityBlockOfferings"]
    except Exception as exc:  # noqa: BLE001
        if credentials_missing(exc):
            raise  # reported by guarded() as the credential it needs
        return Result(name, True, f"{known}; Capacity Block offerings not readable ({_error_code(exc)})", fix,
                      api=api, note=True)
    here = sorted((o for o in offers if o.get("AvailabilityZone") == az), key=lambda o: o["StartDate"])
    if here:
        blocks = f"a 24 h Capacity Block for {count} node(s) in {az} is on offer from {here[0]['StartDate']}"
    else:
        blocks = f"no 24 h Capacity Block for {count} node(s) in {az} is on offer"
    return Result(name, True, f"{known}; {blocks}", fix, api=api, note=True)


def check_reservation(ec2: Client, reservation_id: str, capacity_type: str, instance_type: str, az: str,
                      count: int) -> Result:
    what = "Capacity Block" if capacity_type == "capacity-block" else "capacity reservation"
    name, api = f"{what} {reservation_id}", "EC2 DescribeCapacityReservations"
    try:
        [cr] = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except Exception as exc:  # noqa: BLE001
        if credentials_missing(exc):
            raise  # reported by guarded() as the credential it needs
        return Result(name, False, f"not found in this account and region: {_error_code(exc)}",
                      "check rltrain:gpuNodes.capacity.reservationId and aws:region", api=api)
    problems = []
    if cr.get("State") != "active":
        start = cr.get("StartDate")
        problems.append(f"state {cr.get('State')}" + (f" (starts {start})" if start else ""))
    if cr.get("InstanceType") != instance_type:
        problems.append(f"instance type {cr.get('InstanceType')}, the stack wants {instance_type}")
    if cr.get("AvailabilityZone") != az:
        problems.append(f"in {cr.get('AvailabilityZone')}, the GPU AZ is {az}")
    have = cr.get("AvailableInstanceCount", 0) if capacity_type == "odcr" else cr.get("TotalInstanceCount", 0)
    if have < count:
        problems.append(f"{have} instance(s) {'available' if capacity_type == 'odcr' else 'in the block'}, "
                        f"the stack wants {count}")
    if cr.get("ReservationType") == "capacity-block" and capacity_type != "capacity-block":
        problems.append("it is a Capacity Block: set capacity.type capacity-block")
    if problems:
        return Result(name, False, "; ".join(problems),
                      "match rltrain:gpuNodes (instanceType, count) and rltrain:network.gpuAvailabilityZone to the "
                      "reservation, or wait for a Capacity Block's window (the node group may hold 0 nodes until then)",
                      api=api)
    end = cr.get("EndDate")
    return Result(name, True, f"active, {instance_type} in {az}, {have} instance(s) for {count} node(s)"
                  + (f", ends {end}" if end else ""), api=api)


def check_addons(eks: Client, kubernetes_version: str, pinned: dict[str, str]) -> list[Result]:
    out = []
    api = "EKS DescribeAddonVersions"
    for addon, version in sorted(pinned.items()):
        name = f"add-on {addon} {version}"
        found: set[str] = set()
        try:
            pages = eks.get_paginator("describe_addon_versions").paginate(
                addonName=addon, kubernetesVersion=kubernetes_version)
            for page in pages:
                for a in page.get("addons", []):
                    found |= {v["addonVersion"] for v in a.get("addonVersions", [])}
        except Exception as exc:  # noqa: BLE001
            if credentials_missing(exc):
                raise  # reported by guarded() as the credential it needs
            out.append(Result(name, False, f"could not list its versions: {_error_code(exc)}",
                              "allow eks:DescribeAddonVersions", api=api))
            continue
        if version in found:
            out.append(Result(name, True, f"exists for Kubernetes {kubernetes_version}", api=api))
        else:
            newest = sorted(found)[-3:]
            out.append(Result(name, False, f"does not exist for Kubernetes {kubernetes_version} (some that do: "
                              f"{', '.join(newest) or 'none'})",
                              "pin an existing build in components/stack/versions.py EKS_ADDON_VERSIONS "
                              f"(aws eks describe-addon-versions --kubernetes-version {kubernetes_version} "
                              f"--addon-name {addon})", api=api))
    return out


def check_image(clients: ClientFactory, image: str) -> Result:
    name, api = "training image", "ECR DescribeImages"
    m = _ECR.match(image)
    if not m:
        return Result(name, True, f"{image} is not in ECR: not checked here (its registry is not AWS's)")
    ecr = clients("ecr", m.group("region"))
    image_id = {"imageDigest": m.group("digest")} if m.group("digest") else {"imageTag": m.group("tag") or "latest"}
    try:
        ecr.describe_images(registryId=m.group("account"), repositoryName=m.group("repo"), imageIds=[image_id])
    except Exception as exc:  # noqa: BLE001
        if credentials_missing(exc):
            raise  # reported by guarded() as the credential it needs
        code = _error_code(exc)
        return Result(name, False, f"{image}: {code}",
                      "push the image (or fix rltrain:workloads.image); the nodes' role reads ECR in its account"
                      if code in ("ImageNotFoundException", "RepositoryNotFoundException")
                      else "allow ecr:DescribeImages on the repository to check it", api=api)
    return Result(name, True, f"{image} exists", api=api)


def check_bucket(s3: Client, bucket: str, region: str, key: str) -> Result:
    name, api = f"S3 bucket {bucket} ({key})", "S3 GetBucketLocation"
    try:
        loc = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
    except Exception as exc:  # noqa: BLE001
        if credentials_missing(exc):
            raise  # reported by guarded() as the credential it needs
        code = _error_code(exc)
        return Result(name, False, f"{code}", "create the bucket in the stack's region, or fix the bucket name"
                      if code == "NoSuchBucket" else "allow s3:GetBucketLocation on the bucket to check it", api=api)
    where = loc or "us-east-1"  # GetBucketLocation answers null for us-east-1
    if where == "EU":
        where = "eu-west-1"
    if where != region:
        return Result(name, False, f"is in {where}, the stack is in {region}",
                      "use a bucket in the stack's region (an FSx data repository and cheap transfer need it)", api=api)
    return Result(name, True, f"exists in {region}", api=api)


# --- running them -----------------------------------------------------------------------------------


def buckets(cfg: StackConfig) -> Iterable[tuple[str, str]]:
    fsx = cfg.storage.fsx
    if fsx and fsx.s3 and not cfg.byo_cluster:
        yield fsx.s3.bucket, "rltrain:storage.fsx.s3.bucket"
    if cfg.training.s3:
        yield cfg.training.s3.bucket, "rltrain:training.s3.bucket"


# The IAM permission each AWS check needs (what a missing-credentials line names).
PERMISSIONS = {
    "deploying identity": "sts:GetCallerIdentity",
    "availability zones": "ec2:DescribeAvailabilityZones (ec2:DescribeSubnets with network.existing)",
    "GPU instance type in the GPU AZ": "ec2:DescribeInstanceTypeOfferings",
    "On-Demand vCPU quota": "servicequotas:GetServiceQuota",
    "On-Demand capacity": "ec2:DescribeCapacityBlockOfferings",
    "capacity reservation / Capacity Block": "ec2:DescribeCapacityReservations",
    "Standard vCPU quota (system nodes)": "ec2:DescribeInstanceTypes, servicequotas:GetServiceQuota",
    "add-on builds": "eks:DescribeAddonVersions",
    "training image": "ecr:DescribeImages",
    "S3 buckets": "s3:GetBucketLocation",
}


def guarded(name: str, api: str, permission: str, check: Callable[[], Any]) -> list[Result]:
    """Run one check; whatever it raises becomes its own result, never a traceback that hides the
    others. No usable credentials: one NO CREDENTIALS line naming the permission and how to provide
    it. Another error: FAIL with the error's code (an answer nobody expected is still an answer)."""
    try:
        out = check()
    except Exception as exc:  # noqa: BLE001 - botocore raises per-service error classes
        if credentials_missing(exc):
            return [Result(name, False, f"{_error_code(exc)}; provide {CREDENTIALS_FIX}", api=api, needs=permission)]
        return [Result(name, False, f"could not check: {_error_code(exc)}: {exc}",
                       f"allow {permission}, then run the preflight again", api=api)]
    return out if isinstance(out, list) else [out]


def iter_checks(cfg: StackConfig, region: str, clients: ClientFactory,
                public_ip: Optional[Callable[[], Optional[str]]] = None,
                which: Callable[[str], Optional[str]] = shutil.which) -> Iterator[Result]:
    """Every check in CHECKS order, each result as soon as its check has finished."""
    if not cfg.byo_cluster:
        c, n, g = cfg.cluster, cfg.network, cfg.gpu_nodes
        yield check_cli(which)
        yield from guarded("deploying identity", "STS GetCallerIdentity", PERMISSIONS["deploying identity"],
                           lambda: check_caller(clients("sts", region), c.admin_role_arns))
        yield check_endpoint((public_ip or my_public_ip)() if c.endpoint_public_access else None,
                             c.endpoint_public_access, c.public_access_cidrs)
        ec2 = lambda: clients("ec2", region)  # noqa: E731 - created inside each guard
        az = n.gpu_az
        ids: dict[str, str] = {}
        if n.existing:
            yield from guarded("availability zones", "EC2 DescribeSubnets", PERMISSIONS["availability zones"],
                               lambda: check_subnet_zones(ec2(), n.existing.private_subnet_ids))
        else:
            def zones() -> Result:
                result, found = check_zones(ec2(), tuple(dict.fromkeys((*n.availability_zones, az))))
                ids.update(found)  # the GPU AZ's ID for the offering check
                return result
            yield from guarded("availability zones", "EC2 DescribeAvailabilityZones",
                               PERMISSIONS["availability zones"], zones)
        yield from guarded("GPU instance type in the GPU AZ", "EC2 DescribeInstanceTypeOfferings",
                           PERMISSIONS["GPU instance type in the GPU AZ"],
                           lambda: check_offering(ec2(), g.instance_type, az, ids.get(az)))
        quotas = lambda: clients("service-quotas", region)  # noqa: E731
        count, surge, what = quota_nodes(cfg)
        if g.capacity.type == "on-demand":
            yield from guarded("On-Demand vCPU quota", "Service Quotas GetServiceQuota",
                               PERMISSIONS["On-Demand vCPU quota"],
                               lambda: check_quota(quotas(), g.instance_type, count, surge=surge, what=what))
            yield from guarded("On-Demand capacity", "EC2 DescribeCapacityBlockOfferings",
                               PERMISSIONS["On-Demand capacity"],
                               lambda: check_on_demand_capacity(ec2(), g.instance_type, count, az))
        else:
            yield from guarded("capacity reservation / Capacity Block", "EC2 DescribeCapacityReservations",
                               PERMISSIONS["capacity reservation / Capacity Block"],
                               lambda: check_reservation(ec2(), g.capacity.reservation_id or "", g.capacity.type,
                                                         g.instance_type, az, count))
        azs = len(n.existing.private_subnet_ids) if n.existing else len(n.availability_zones)
        yield from guarded("Standard vCPU quota (system nodes)", "EC2 DescribeInstanceTypes, Service Quotas "
                           "GetServiceQuota", PERMISSIONS["Standard vCPU quota (system nodes)"],
                           lambda: check_system_quota(ec2(), quotas(), c.system_nodes.instance_type,
                                                      c.system_nodes.count, azs))
        yield from guarded("add-on builds", "EKS DescribeAddonVersions", PERMISSIONS["add-on builds"],
                           lambda: check_addons(clients("eks", region), c.kubernetes_version,
                                                versions.eks_addons(c.kubernetes_version)))
    if image_build.built(cfg.workloads.image):
        # Nothing to look up before the first `up`: the stack's own repository does not exist yet,
        # and `up` uses a tag already there or builds it (docs/running-for-real.md).
        yield Result("training image", True, "built by the stack (workloads.image.build): `pulumi up` "
                     "uses the tag its inputs give if the repository has it, else builds it",
                     api="ECR DescribeImages")
    elif cfg.workloads.image:
        yield from guarded("training image", "ECR DescribeImages", PERMISSIONS["training image"],
                           lambda: check_image(clients, cfg.workloads.image))
    for bucket, key in buckets(cfg):
        yield from guarded(f"S3 bucket {bucket} ({key})", "S3 GetBucketLocation", PERMISSIONS["S3 buckets"],
                           lambda b=bucket, k=key: check_bucket(clients("s3", region), b, region, k))


def my_public_ip() -> Optional[str]:  # pragma: no cover - needs the network
    """This machine's public IPv4 as AWS sees it (checkip.amazonaws.com answers with it, one line)."""
    import urllib.request

    try:
        with urllib.request.urlopen("https://checkip.amazonaws.com", timeout=5) as resp:  # noqa: S310
            return resp.read().decode().strip() or None
    except OSError:
        return None


def boto3_clients() -> ClientFactory:  # pragma: no cover - needs credentials
    import boto3

    cache: dict[Any, Any] = {}

    def get(service: str, region: str) -> Client:
        # The session inside the call: a bad AWS_PROFILE (ProfileNotFound) is then one check's
        # NO CREDENTIALS line, not a traceback before the first check.
        if "session" not in cache:
            cache["session"] = boto3.Session()
        if (service, region) not in cache:
            cache[(service, region)] = cache["session"].client(service, region_name=region)
        return cache[(service, region)]
    return get


def checks_help() -> str:
    width = max(len(n) for n, _, _ in CHECKS)
    return "checks, in order (each line of the output names its AWS API):\n" + "\n".join(
        f"  {n:<{width}}  {what} [{api}]" for n, what, api in CHECKS)


def main(argv: Optional[list[str]] = None, clients: Optional[ClientFactory] = None,
         public_ip: Optional[Callable[[], Optional[str]]] = None,
         which: Callable[[str], Optional[str]] = shutil.which, out: Optional[TextIO] = None) -> int:
    from components.offline import unset_secrets  # reads the stack file as the render does
    from components.stack import stackfile
    from components.stack.validate import ConfigError

    ap = argparse.ArgumentParser(prog="python -m components.preflight", description=__doc__.split("\n\n")[0],
                                 epilog=checks_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stack", required=True)
    args = ap.parse_args(argv)
    out = out or sys.stdout
    try:
        cfg_values, _, cfg = unset_secrets.load_stack(args.stack)
    except (ConfigError, stackfile.StackFileError) as exc:
        print(f"Pulumi.{args.stack}.yaml: {exc}", file=sys.stderr)
        return 2
    region = cfg_values.get("aws:region")
    if not region:
        print(f"Pulumi.{args.stack}.yaml: aws:region is not set", file=sys.stderr)
        return 2
    print(f"preflight for stack {args.stack} in {region}:", file=out, flush=True)
    passed = failed = missing = 0
    # Each line as soon as its check has finished: a slow or failing call never hides what came before.
    for r in iter_checks(cfg, region, clients or boto3_clients(), public_ip=public_ip, which=which):
        print("  " + r.line(), file=out, flush=True)
        if r.needs:
            missing += 1
        elif r.ok:
            passed += 1
        else:
            failed += 1
    print(f"{passed} passed, {failed} failed" + (f", {missing} not checked for want of credentials"
                                                    if missing else ""), file=out, flush=True)
    return 1 if failed or missing else 0


if __name__ == "__main__":
    sys.exit(main())
