"""Preflight: what only the AWS account knows, checked before `pulumi up` (read-only calls).

    python -m components.preflight --stack p5

Each check prints one line, PASS or FAIL, and for a failure what to do. Exit status 1 when any
check fails, 0 otherwise (2: the stack file itself is wrong). Needs AWS credentials for the stack's
account (any read-only role will do: ec2:Describe*, servicequotas:GetServiceQuota,
eks:DescribeAddonVersions, ecr:DescribeImages, s3:GetBucketLocation). Creates nothing.

What it checks, and why offline cannot:
- the GPU instance type is offered in the GPU AZ, by AZ *ID*: AZ names map to different physical
  zones per account and not every zone has p5 (EC2 DescribeInstanceTypeOfferings, location type
  availability-zone-id; pulumi-eks's EFA path filters subnets the same way);
- capacity: On-Demand, the vCPU quota of the instance family covers the nodes (Service Quotas,
  "Running On-Demand P instances" L-417A185B, "G and VT" L-DB2E81BA, "Standard" L-1216C47A);
  a reservation or Capacity Block, it is active, in the GPU AZ, for the type and the node count
  (EC2 DescribeCapacityReservations);
- every pinned EKS add-on version exists for the Kubernetes minor (EKS DescribeAddonVersions);
- the training image exists in its ECR repository (ECR DescribeImages; other registries are not
  checked and say so);
- each S3 bucket the stack names exists and is in the stack's region (S3 GetBucketLocation; a
  bucket elsewhere works but pays cross-region transfer and FSx data repositories need the same
  region).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from components.stack import catalog, versions
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


@dataclass(frozen=True)
class Result:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return text + (f"\n      what to do: {self.fix}" if not self.ok and self.fix else "")


def _error_code(exc: Exception) -> str:
    return str(getattr(exc, "response", {}).get("Error", {}).get("Code", type(exc).__name__))


# --- the checks -------------------------------------------------------------------------------------


def check_offering(ec2: Client, instance_type: str, az: str) -> Result:
    name = "GPU instance type in the GPU AZ"
    zones = ec2.describe_availability_zones(ZoneNames=[az])["AvailabilityZones"]
    zone_id = zones[0]["ZoneId"] if zones else None
    if not zone_id:
        return Result(name, False, f"{az} is not an availability zone of this account",
                      "set rltrain:network.gpuAvailabilityZone to one `aws ec2 describe-availability-zones` lists")
    offers = ec2.describe_instance_type_offerings(
        LocationType="availability-zone-id",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}, {"Name": "location", "Values": [zone_id]}],
    )["InstanceTypeOfferings"]
    if offers:
        return Result(name, True, f"{instance_type} is offered in {az} ({zone_id} in this account)")
    others = ec2.describe_instance_type_offerings(
        LocationType="availability-zone-id", Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )["InstanceTypeOfferings"]
    where = sorted(o["Location"] for o in others)
    return Result(name, False, f"{instance_type} is not offered in {az} ({zone_id} in this account); offered in "
                  f"zone ids {', '.join(where) or 'none of this region'}",
                  "set rltrain:network.gpuAvailabilityZone (and availabilityZones) to the AZ name of an offered zone "
                  "id (`aws ec2 describe-availability-zones` maps ids to names); moving the AZ replaces FSx and "
                  "the node group")


def check_quota(quotas: Client, instance_type: str, count: int) -> Result:
    it = catalog.get(instance_type)
    family = instance_type[0]
    code, label = ON_DEMAND_QUOTAS.get(family, STANDARD_QUOTA)
    need = it.vcpu * count
    name = "On-Demand vCPU quota"
    try:
        value = quotas.get_service_quota(ServiceCode="ec2", QuotaCode=code)["Quota"]["Value"]
    except Exception as exc:  # noqa: BLE001 - botocore raises per-service error classes
        return Result(name, False, f"could not read {label} ({code}): {_error_code(exc)}",
                      "allow servicequotas:GetServiceQuota, or check the quota in the Service Quotas console")
    if value >= need:
        return Result(name, True, f"{label} ({code}) is {value:g} vCPUs, {count} x {instance_type} need {need}")
    return Result(name, False, f"{label} ({code}) is {value:g} vCPUs, {count} x {instance_type} need {need}",
                  f"request an increase to at least {need}: aws service-quotas request-service-quota-increase "
                  f"--service-code ec2 --quota-code {code} --desired-value {need}; or use a reservation "
                  "(rltrain:gpuNodes.capacity)")


def check_reservation(ec2: Client, reservation_id: str, capacity_type: str, instance_type: str, az: str,
                      count: int) -> Result:
    what = "Capacity Block" if capacity_type == "capacity-block" else "capacity reservation"
    name = f"{what} {reservation_id}"
    try:
        [cr] = ec2.describe_capacity_reservations(CapacityReservationIds=[reservation_id])["CapacityReservations"]
    except Exception as exc:  # noqa: BLE001
        return Result(name, False, f"not found in this account and region: {_error_code(exc)}",
                      "check rltrain:gpuNodes.capacity.reservationId and aws:region")
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
                      "reservation, or wait for a Capacity Block's window (the node group may hold 0 nodes until then)")
    return Result(name, True, f"active, {instance_type} in {az}, {have} instance(s) for {count} node(s)")


def check_addons(eks: Client, kubernetes_version: str, pinned: dict[str, str]) -> list[Result]:
    out = []
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
            out.append(Result(name, False, f"could not list its versions: {_error_code(exc)}",
                              "allow eks:DescribeAddonVersions"))
            continue
        if version in found:
            out.append(Result(name, True, f"exists for Kubernetes {kubernetes_version}"))
        else:
            newest = sorted(found)[-3:]
            out.append(Result(name, False, f"does not exist for Kubernetes {kubernetes_version} (some that do: "
                              f"{', '.join(newest) or 'none'})",
                              "pin an existing build in components/stack/versions.py EKS_ADDON_VERSIONS "
                              f"(aws eks describe-addon-versions --kubernetes-version {kubernetes_version} "
                              f"--addon-name {addon})"))
    return out


def check_image(clients: ClientFactory, image: str) -> Result:
    name = "training image"
    m = _ECR.match(image)
    if not m:
        return Result(name, True, f"{image} is not in ECR: not checked here (its registry is not AWS's)")
    ecr = clients("ecr", m.group("region"))
    image_id = {"imageDigest": m.group("digest")} if m.group("digest") else {"imageTag": m.group("tag") or "latest"}
    try:
        ecr.describe_images(registryId=m.group("account"), repositoryName=m.group("repo"), imageIds=[image_id])
    except Exception as exc:  # noqa: BLE001
        code = _error_code(exc)
        return Result(name, False, f"{image}: {code}",
                      "push the image (or fix rltrain:workloads.image); the nodes' role reads ECR in its account"
                      if code in ("ImageNotFoundException", "RepositoryNotFoundException")
                      else "allow ecr:DescribeImages on the repository to check it")
    return Result(name, True, f"{image} exists")


def check_bucket(s3: Client, bucket: str, region: str, key: str) -> Result:
    name = f"S3 bucket {bucket} ({key})"
    try:
        loc = s3.get_bucket_location(Bucket=bucket).get("LocationConstraint")
    except Exception as exc:  # noqa: BLE001
        code = _error_code(exc)
        return Result(name, False, f"{code}", "create the bucket in the stack's region, or fix the bucket name"
                      if code == "NoSuchBucket" else "allow s3:GetBucketLocation on the bucket to check it")
    where = loc or "us-east-1"  # GetBucketLocation answers null for us-east-1
    if where == "EU":
        where = "eu-west-1"
    if where != region:
        return Result(name, False, f"is in {where}, the stack is in {region}",
                      "use a bucket in the stack's region (an FSx data repository and cheap transfer need it)")
    return Result(name, True, f"exists in {region}")


# --- running them -----------------------------------------------------------------------------------


def buckets(cfg: StackConfig) -> Iterable[tuple[str, str]]:
    fsx = cfg.storage.fsx
    if fsx and fsx.s3 and not cfg.byo_cluster:
        yield fsx.s3.bucket, "rltrain:storage.fsx.s3.bucket"
    if cfg.training.s3:
        yield cfg.training.s3.bucket, "rltrain:training.s3.bucket"


def run_checks(cfg: StackConfig, region: str, clients: ClientFactory) -> list[Result]:
    results: list[Result] = []
    if not cfg.byo_cluster:
        g = cfg.gpu_nodes
        ec2 = clients("ec2", region)
        az = cfg.network.gpu_az
        results.append(check_offering(ec2, g.instance_type, az))
        if g.capacity.type == "on-demand":
            results.append(check_quota(clients("service-quotas", region), g.instance_type, g.count))
        else:
            results.append(check_reservation(ec2, g.capacity.reservation_id or "", g.capacity.type,
                                             g.instance_type, az, g.count))
        results += check_addons(clients("eks", region), cfg.cluster.kubernetes_version,
                                versions.eks_addons(cfg.cluster.kubernetes_version))
    if cfg.workloads.image:
        results.append(check_image(clients, cfg.workloads.image))
    s3 = None
    for bucket, key in buckets(cfg):
        s3 = s3 or clients("s3", region)
        results.append(check_bucket(s3, bucket, region, key))
    return results


def boto3_clients() -> ClientFactory:  # pragma: no cover - needs credentials
    import boto3

    session = boto3.Session()
    cache: dict[tuple[str, str], Client] = {}

    def get(service: str, region: str) -> Client:
        if (service, region) not in cache:
            cache[(service, region)] = session.client(service, region_name=region)
        return cache[(service, region)]
    return get


def main(argv: Optional[list[str]] = None, clients: Optional[ClientFactory] = None) -> int:
    from components.offline import render  # reads the stack file as the render does
    from components.stack import stackfile
    from components.stack.config import ConfigError

    ap = argparse.ArgumentParser(prog="python -m components.preflight", description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", required=True)
    args = ap.parse_args(argv)
    try:
        cfg_values, _, cfg = render.load_stack(args.stack)
    except (ConfigError, stackfile.StackFileError) as exc:
        print(f"Pulumi.{args.stack}.yaml: {exc}", file=sys.stderr)
        return 2
    region = cfg_values.get("aws:region")
    if not region:
        print(f"Pulumi.{args.stack}.yaml: aws:region is not set", file=sys.stderr)
        return 2
    results = run_checks(cfg, region, clients or boto3_clients())
    print(f"preflight for stack {args.stack} in {region}:")
    for r in results:
        print("  " + r.line())
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
