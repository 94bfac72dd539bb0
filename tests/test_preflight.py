"""Preflight against recorded AWS responses (botocore's Stubber): a passing account and each failure.

The Stubber checks every request's parameters and every recorded response against the service
model of the pinned botocore, so a wrong operation, parameter or response field fails here.
"""

from __future__ import annotations

import datetime

import boto3
import pytest
from botocore.stub import ANY, Stubber
from support import rendered

from components import preflight
from components.stack import versions

REGION = "us-east-1"
ZONE_ID = "use1-az4"
PINNED = versions.eks_addons("1.35")


def run_checks(*args, **kw) -> list:
    return list(preflight.iter_checks(*args, **kw))


# One session for the module: its loader parses each service model once (ec2's is megabytes of JSON;
# a session per test parsed it again in every test). Each Account still gets clients of its own.
SESSION = boto3.Session(aws_access_key_id="AKIAEXAMPLE", aws_secret_access_key="example", region_name=REGION)


class Account:
    """Clients with dummy credentials, every call answered by a Stubber (no network)."""

    def __init__(self):
        self.session = SESSION
        self.clients: dict[tuple[str, str], object] = {}
        self.stubs: dict[tuple[str, str], Stubber] = {}

    def stub(self, service: str, region: str = REGION) -> Stubber:
        key = (service, region)
        if key not in self.stubs:
            self.clients[key] = self.session.client(service, region_name=region)
            self.stubs[key] = Stubber(self.clients[key])
            self.stubs[key].activate()
        return self.stubs[key]

    def __call__(self, service: str, region: str):
        self.stub(service, region)
        return self.clients[(service, region)]

    def verify(self):
        for s in self.stubs.values():
            s.assert_no_pending_responses()


CALLER = "arn:aws:sts::123456789012:assumed-role/Deployer/alice"
MY_IP = "203.0.113.9"  # inside the committed placeholder range: the tests give real ranges where it matters
OFFICE = ("198.18.0.0/15",)


def zone(acct: Account, az: str = "us-east-1a", zone_id: str = ZONE_ID):
    """The single-zone lookup of check_offering called on its own."""
    acct.stub("ec2").add_response(
        "describe_availability_zones",
        {"AvailabilityZones": [{"ZoneName": az, "ZoneId": zone_id, "RegionName": REGION, "State": "available"}]},
        {"ZoneNames": [az]})


def zones(acct: Account, ids: dict[str, str] | None = None):
    """Every configured AZ, mapped to this account's IDs (check_zones)."""
    ids = ids or {"us-east-1a": ZONE_ID, "us-east-1b": "use1-az6"}
    acct.stub("ec2").add_response(
        "describe_availability_zones",
        {"AvailabilityZones": [{"ZoneName": n, "ZoneId": z, "RegionName": REGION, "State": "available"}
                               for n, z in ids.items()]},
        {"ZoneNames": sorted(ids)})


def caller(acct: Account, arn: str = CALLER):
    acct.stub("sts").add_response("get_caller_identity",
                                  {"UserId": "AROAEXAMPLE:alice", "Account": "123456789012", "Arn": arn}, {})


def offering(acct: Account, offered: bool, elsewhere: tuple[str, ...] = ()):
    acct.stub("ec2").add_response(
        "describe_instance_type_offerings",
        {"InstanceTypeOfferings": [{"InstanceType": "p5.48xlarge", "LocationType": "availability-zone-id",
                                    "Location": ZONE_ID}] if offered else []},
        {"LocationType": "availability-zone-id",
         "Filters": [{"Name": "instance-type", "Values": ["p5.48xlarge"]}, {"Name": "location", "Values": [ZONE_ID]}]})
    if not offered:
        acct.stub("ec2").add_response(
            "describe_instance_type_offerings",
            {"InstanceTypeOfferings": [{"InstanceType": "p5.48xlarge", "LocationType": "availability-zone-id",
                                        "Location": z} for z in elsewhere]},
            {"LocationType": "availability-zone-id", "Filters": [{"Name": "instance-type", "Values": ["p5.48xlarge"]}]})


def quota(acct: Account, value: float, code: str = "L-417A185B", label: str = "Running On-Demand P instances"):
    acct.stub("service-quotas").add_response(
        "get_service_quota",
        {"Quota": {"ServiceCode": "ec2", "QuotaCode": code, "QuotaName": label, "Value": value}},
        {"ServiceCode": "ec2", "QuotaCode": code})


def standard_quota(acct: Account, value: float = 1000):
    acct.stub("ec2").add_response("describe_instance_types", {"InstanceTypes": [
        {"InstanceType": "m6i.xlarge", "VCpuInfo": {"DefaultVCpus": 4}}]}, {"InstanceTypes": ["m6i.xlarge"]})
    quota(acct, value, "L-1216C47A", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances")


def block_offerings(acct: Account, offered: bool = True):
    acct.stub("ec2").add_response(
        "describe_capacity_block_offerings",
        {"CapacityBlockOfferings": [{
            "CapacityBlockOfferingId": "cb-0123456789abcdef0", "InstanceType": "p5.48xlarge",
            "AvailabilityZone": "us-east-1a", "InstanceCount": 2,
            "StartDate": datetime.datetime(2026, 12, 9, 11, 30, tzinfo=datetime.timezone.utc),
            "EndDate": datetime.datetime(2026, 12, 10, 11, 30, tzinfo=datetime.timezone.utc),
            "CapacityBlockDurationHours": 24, "UpfrontFee": "2361.60", "CurrencyCode": "USD"}] if offered else []},
        {"InstanceType": "p5.48xlarge", "InstanceCount": 2, "CapacityDurationHours": 24})


def addons(acct: Account, missing: str = ""):
    for name, version in sorted(PINNED.items()):
        have = [] if name == missing else [{"addonVersion": version}]
        acct.stub("eks").add_response(
            "describe_addon_versions",
            {"addons": [{"addonName": name, "addonVersions": have + [{"addonVersion": "v0.0.1-eksbuild.1"}]}]},
            {"addonName": name, "kubernetesVersion": "1.35"})


def image(acct: Account, found: bool = True):
    s = acct.stub("ecr")
    params = {"registryId": "123456789012", "repositoryName": "rlinf-on-eks/rlinf",
              "imageIds": [{"imageTag": "20260401-085549"}]}
    if found:
        s.add_response("describe_images", {"imageDetails": [{"imageTags": ["20260401-085549"]}]}, params)
    else:
        s.add_client_error("describe_images", "ImageNotFoundException", "not found", expected_params=params)


def account(acct: Account, *, gpu_quota: float = 768, offered: bool = True, caller_arn: str = CALLER,
            zone_map: dict[str, str] | None = None, system_quota: float = 1000, blocks: bool = True):
    """Every call of a p5 preflight, in order, answered as given (defaults: a passing account)."""
    caller(acct, caller_arn)
    zones(acct, zone_map)
    offering(acct, offered, elsewhere=("use1-az6", "use1-az2"))
    quota(acct, gpu_quota)
    if blocks:
        block_offerings(acct)
    standard_quota(acct, system_quota)
    addons(acct)
    image(acct)


def passing_p5(acct: Account):
    account(acct)


# The image of a p5 that brings its own (the committed p5 builds its image: nothing to look up).
BROUGHT = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf-on-eks/rlinf:20260401-085549"


def p5_cfg(cidrs=OFFICE, admins=(), endpoint_public=True, image=BROUGHT):
    cfg = rendered("p5").cfg
    c = cfg.cluster.model_copy(update={"public_access_cidrs": tuple(cidrs), "admin_role_arns": tuple(admins),
                                       "endpoint_public_access": endpoint_public})
    w = cfg.workloads if image is None else cfg.workloads.model_copy(update={"image": image})
    return cfg.model_copy(update={"cluster": c, "workloads": w})


def run(acct: Account, cfg=None, ip: str | None = "198.18.0.10", aws_cli: str | None = "/usr/local/bin/aws"
        ) -> list[preflight.Result]:
    results = run_checks(cfg or p5_cfg(), REGION, acct, public_ip=lambda: ip, which=lambda _: aws_cli)
    acct.verify()
    return results


def failures(results):
    return [(r.name, r.detail) for r in results if not r.ok]


def test_passing_account():
    acct = Account()
    passing_p5(acct)
    results = run(acct)
    assert failures(results) == []
    assert [r.name for r in results][:7] == [
        "AWS CLI", "deploying identity", "endpoint access", "availability zones", "GPU instance type in the GPU AZ",
        "On-Demand vCPU quota", "On-Demand capacity"]
    by = {r.name: r for r in results}
    assert "us-east-1a = use1-az4, us-east-1b = use1-az6; none refused by EKS" in by["availability zones"].detail
    assert "use1-az4 in this account" in by["GPU instance type in the GPU AZ"].detail
    assert "is 768 vCPUs, 2 x p5.48xlarge need 384, 768 during a node roll (+2 launched first)" in by[
        "On-Demand vCPU quota"].detail
    # System nodes: 2 x m6i.xlarge (4 vCPUs) = 8, and EKS's surge of up to 2 per AZ (2 AZs) = 24.
    assert "2 x m6i.xlarge (system nodes) need 8, 24 during a node roll (+4 launched first)" in by[
        "Standard vCPU quota (system nodes)"].detail
    assert len([r for r in results if r.name.startswith("add-on ")]) == len(PINNED)
    # Every line names the AWS API it asked.
    assert all(r.api for r in results), [r.name for r in results if not r.api]


def test_on_demand_capacity_cannot_be_known_and_says_what_to_do():
    acct = Account()
    passing_p5(acct)
    [r] = [r for r in run(acct) if r.name == "On-Demand capacity"]
    assert r.ok and r.note and r.line().startswith("NOTE  On-Demand capacity: ")
    assert "known only when the node group launches them" in r.detail
    assert "a 24 h Capacity Block for 2 node(s) in us-east-1a is on offer from 2026-12-09 11:30:00+00:00" in r.detail
    assert "EC2 DescribeCapacityBlockOfferings" in r.line()
    assert "A GPU node group that failed to create" in r.fix and "odcr" in r.fix


def test_aws_cli_missing_fails():
    acct = Account()
    passing_p5(acct)
    [r] = [r for r in run(acct, aws_cli=None) if not r.ok]
    assert r.name == "AWS CLI" and "aws eks get-token" in r.detail and "install AWS CLI v2" in r.fix


def test_deploying_role_in_admin_role_arns_fails_naming_the_409():
    acct = Account()
    passing_p5(acct)
    cfg = p5_cfg(admins=("arn:aws:iam::123456789012:role/ops/Deployer",))
    [r] = [r for r in run(acct, cfg) if not r.ok]
    assert r.name == "deploying identity" and r.api == "STS GetCallerIdentity"
    assert "ResourceInUseException (409)" in r.detail and "bootstrapClusterCreatorAdminPermissions" in r.detail
    assert r.fix.startswith("remove arn:aws:iam::123456789012:role/ops/Deployer from rltrain:cluster.adminRoleArns")


def test_no_credentials_fails_the_identity_check():
    acct = Account()
    acct.stub("sts").add_client_error("get_caller_identity", "ExpiredToken", "expired", expected_params={})
    r = preflight.check_caller(acct("sts", REGION), ())
    assert not r.ok and r.needs == "sts:GetCallerIdentity" and "ExpiredToken" in r.line()
    assert r.line().count("\n") == 0 and "aws sso login" in r.line() and r.line().startswith("NO CREDENTIALS")


class NoCredentials:
    """What a boto3 client does without credentials: every call raises before any request."""

    def __init__(self, log: list[str]):
        self.log = log

    def __call__(self, service: str, region: str):
        outer = self

        class Client:
            def __getattr__(self, op):
                def call(*a, **kw):
                    outer.log.append(f"{service}.{op}")
                    from botocore.exceptions import NoCredentialsError
                    raise NoCredentialsError()
                return call
        return Client()


P5_CHECKS = ("AWS CLI", "deploying identity", "endpoint access", "availability zones",
             "GPU instance type in the GPU AZ", "On-Demand vCPU quota", "On-Demand capacity",
             "Standard vCPU quota (system nodes)", "add-on builds", "training image")


def test_without_credentials_every_check_is_listed_with_the_permission_it_needs():
    # Issue 44 item 7: the GPU AZ's lookup sat outside any try and the run ended in a traceback.
    log: list[str] = []
    results = run_checks(
        p5_cfg(), REGION, NoCredentials(log), public_ip=lambda: "198.18.0.10", which=lambda _: "/usr/bin/aws")
    assert [r.name for r in results] == list(P5_CHECKS)
    missing = {r.name: r.needs for r in results if r.needs}
    assert missing == {n: preflight.PERMISSIONS[n] for n in P5_CHECKS if n not in ("AWS CLI", "endpoint access")}
    assert all(not r.ok for r in results if r.needs)
    # The AZ lookup of the offering check was asked, and reported, not raised.
    assert "ec2.describe_instance_type_offerings" in log or "ec2.describe_availability_zones" in log


def test_results_are_printed_as_each_check_finishes():
    """The identity line is out before the next check asks anything (a hang or crash later no longer
    hides it)."""
    import io
    out = io.StringIO()
    seen: list[str] = []
    inner = NoCredentials([])

    def clients(service, region):
        seen.append((service, out.getvalue()))
        return inner(service, region)

    assert preflight.main(["--stack", "p5"], clients=clients, public_ip=lambda: None,
                          which=lambda _: "/usr/bin/aws", out=out) == 1
    first_ec2 = next(text for service, text in seen if service == "ec2")
    assert "NO CREDENTIALS  deploying identity: needs sts:GetCallerIdentity" in first_ec2
    assert out.getvalue().rstrip().endswith("2 passed, 1 failed, 7 not checked for want of credentials")


def test_preflight_without_credentials_as_a_program_exits_1_without_a_traceback(tmp_path):
    """`python -m components.preflight --stack p5` with no credentials anywhere: exit 1, no traceback,
    every check on a line of its own."""
    import os
    import subprocess
    import sys
    from components.offline.mock_engine import ROOT
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
                "AWS_EC2_METADATA_DISABLED": "true", "HOME": str(tmp_path),
                # checkip.amazonaws.com unreachable at once (no network in a test)
                "https_proxy": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"})
    done = subprocess.run([sys.executable, "-m", "components.preflight", "--stack", "p5"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    lines = done.stdout.splitlines()
    for name in P5_CHECKS[1:]:
        assert any(line.lstrip().split("  ", 1)[-1].startswith(name + ":") for line in lines), name
    assert sum("NO CREDENTIALS" in line for line in lines) == 7  # the training image p5 builds needs no look-up


def test_placeholder_cidr_fails():
    acct = Account()
    passing_p5(acct)
    [r] = [r for r in run(acct, p5_cfg(cidrs=("203.0.113.0/24",)), ip="198.18.0.10") if not r.ok]
    assert r.name == "endpoint access" and "203.0.113.0/24, a documentation range" in r.detail
    assert "times out dialling the endpoint" in r.detail and "198.18.0.10/32" in r.fix


def test_caller_ip_outside_the_cidrs_fails():
    acct = Account()
    passing_p5(acct)
    [r] = [r for r in run(acct, ip="192.168.7.7") if not r.ok]
    assert r.name == "endpoint access" and "192.168.7.7 (this machine) is outside" in r.detail
    assert "add 192.168.7.7/32" in r.fix and r.api == "checkip.amazonaws.com"


def test_private_endpoint_is_a_note():
    r = preflight.check_endpoint(None, False, ())
    assert r.ok and r.note and "inside the VPC" in r.detail


@pytest.mark.parametrize("zone_id,region_of", [("use1-az3", "us-east-1")])
def test_an_az_eks_refuses_fails_with_the_create_cluster_error(zone_id, region_of):
    acct = Account()
    account(acct, zone_map={"us-east-1a": ZONE_ID, "us-east-1b": zone_id})
    [r] = [r for r in run(acct) if not r.ok]
    assert r.name == "availability zones" and r.api == "EC2 DescribeAvailabilityZones"
    assert f"us-east-1b is {zone_id}, an AZ EKS does not support" in r.detail
    assert "UnsupportedAvailabilityZoneException" in r.detail and "rltrain:network.availabilityZones" in r.fix


@pytest.mark.parametrize("zone_id", ["usw1-az2", "cac1-az3"])
def test_every_eks_refused_zone_id_is_known(zone_id):
    assert "does not support" in preflight._zone_result("availability zones", "x", {"z": zone_id}, "k").detail


def test_existing_network_maps_its_subnets():
    acct = Account()
    acct.stub("ec2").add_response("describe_subnets", {"Subnets": [
        {"SubnetId": "subnet-0a", "AvailabilityZone": "us-east-1e", "AvailabilityZoneId": "use1-az3"},
        {"SubnetId": "subnet-0b", "AvailabilityZone": "us-east-1a", "AvailabilityZoneId": "use1-az4"}]},
        {"SubnetIds": ["subnet-0a", "subnet-0b"]})
    r = preflight.check_subnet_zones(acct("ec2", REGION), ("subnet-0a", "subnet-0b"))
    assert not r.ok and "subnet-0a (us-east-1e) is use1-az3" in r.detail and r.api == "EC2 DescribeSubnets"


def test_type_not_offered_in_the_gpu_az_names_the_zones_that_have_it():
    acct = Account()
    account(acct, offered=False)
    [(name, detail)] = failures(run(acct))
    assert name == "GPU instance type in the GPU AZ"
    assert "not offered in us-east-1a (use1-az4 in this account); offered in zone ids use1-az2, use1-az6" in detail


def test_quota_too_small_says_how_much_to_request():
    acct = Account()
    account(acct, gpu_quota=192)
    results = run(acct)
    [r] = [r for r in results if not r.ok]
    assert r.detail.startswith("Running On-Demand P instances (L-417A185B) is 192 vCPUs, 2 x p5.48xlarge need 384")
    assert "--quota-code L-417A185B --desired-value 768" in r.fix and r.api == "Service Quotas GetServiceQuota"


def test_quota_for_the_nodes_but_not_the_roll_fails_before_the_first_roll():
    acct = Account()
    account(acct, gpu_quota=384)
    [r] = [r for r in run(acct) if not r.ok]
    assert r.name == "On-Demand vCPU quota" and "the first `up` fits, a roll's new nodes cannot launch" in r.detail
    assert "request an increase to 768 before the first roll" in r.fix


def test_standard_quota_for_the_system_nodes():
    acct = Account()
    account(acct, system_quota=16)
    [r] = [r for r in run(acct) if not r.ok]
    assert r.name == "Standard vCPU quota (system nodes)" and "L-1216C47A" in r.detail
    assert "--quota-code L-1216C47A --desired-value 24" in r.fix


def test_missing_addon_build_is_named():
    acct = Account()
    caller(acct)
    zones(acct)
    offering(acct, True)
    quota(acct, 768)
    block_offerings(acct)
    standard_quota(acct)
    addons(acct, missing="coredns")
    image(acct)
    [r] = [r for r in run(acct) if not r.ok]
    assert r.name == f"add-on coredns {PINNED['coredns']}" and "does not exist for Kubernetes 1.35" in r.detail
    assert r.api == "EKS DescribeAddonVersions" and "describe-addon-versions" in r.fix


def test_an_image_the_stack_builds_is_not_looked_up():
    acct = Account()
    caller(acct)
    zones(acct)
    offering(acct, True)
    quota(acct, 768)
    block_offerings(acct)
    standard_quota(acct)
    addons(acct)  # and no ECR call: the stack's repository does not exist before the first `up`
    [r] = [r for r in run(acct, cfg=p5_cfg(image=None)) if r.name == "training image"]
    assert r.ok and "built by the stack" in r.detail


def test_missing_image_fails():
    acct = Account()
    caller(acct)
    zones(acct)
    offering(acct, True)
    quota(acct, 768)
    block_offerings(acct)
    standard_quota(acct)
    addons(acct)
    image(acct, found=False)
    [r] = [r for r in run(acct) if not r.ok]
    assert r.name == "training image" and "ImageNotFoundException" in r.detail and "push the image" in r.fix
    assert r.api == "ECR DescribeImages"


def _reservation(acct: Account, **over):
    cr = {"CapacityReservationId": "cr-0123456789abcdef0", "InstanceType": "p5.48xlarge",
          "AvailabilityZone": "us-east-1a", "State": "active", "TotalInstanceCount": 2, "AvailableInstanceCount": 2,
          "ReservationType": "capacity-block"}
    cr.update(over)
    acct.stub("ec2").add_response("describe_capacity_reservations", {"CapacityReservations": [cr]},
                                  {"CapacityReservationIds": ["cr-0123456789abcdef0"]})


def _block_cfg():
    cfg = p5_cfg()
    cap = cfg.gpu_nodes.capacity.model_copy(update={"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"})
    return cfg.model_copy(update={"gpu_nodes": cfg.gpu_nodes.model_copy(update={"capacity": cap})})


def _reserved_account(acct: Account, **reservation):
    caller(acct)
    zones(acct)
    offering(acct, True)
    _reservation(acct, **reservation)
    standard_quota(acct)
    addons(acct)
    image(acct)


def test_active_capacity_block_passes_without_a_gpu_quota_check():
    acct = Account()
    _reserved_account(acct)
    results = run(acct, _block_cfg())
    assert failures(results) == []
    by = {r.name: r for r in results}
    assert "On-Demand vCPU quota" not in by and "On-Demand capacity" not in by
    r = by["Capacity Block cr-0123456789abcdef0"]
    assert "active" in r.detail and r.api == "EC2 DescribeCapacityReservations"


def test_capacity_block_before_its_window_in_another_az_fails_with_each_reason():
    acct = Account()
    _reserved_account(acct, State="scheduled", AvailabilityZone="us-east-1b", TotalInstanceCount=1,
                      StartDate=datetime.datetime(2026, 12, 3, 11, 30, tzinfo=datetime.timezone.utc))
    [(name, detail)] = failures(run(acct, _block_cfg()))
    assert "state scheduled (starts 2026-12-03 11:30:00+00:00)" in detail
    assert "in us-east-1b, the GPU AZ is us-east-1a" in detail
    assert "1 instance(s) in the block, the stack wants 2" in detail


def test_bucket_in_another_region_and_missing_bucket():
    cfg = p5_cfg()
    s3 = {"bucket": "ckpt-eu", "prefix": "rltrain/"}
    cfg = cfg.model_copy(update={"training": cfg.training.model_copy(update={
        "s3": type(cfg.training).model_fields["s3"].annotation.__args__[0](**s3)})})
    acct = Account()
    passing_p5(acct)
    acct.stub("s3").add_response("get_bucket_location", {"LocationConstraint": "eu-central-1"}, {"Bucket": "ckpt-eu"})
    [(name, detail)] = failures(run(acct, cfg))
    assert name == "S3 bucket ckpt-eu (rltrain:training.s3.bucket)" and detail == "is in eu-central-1, the stack is in us-east-1"
    acct = Account()
    passing_p5(acct)
    acct.stub("s3").add_client_error("get_bucket_location", "NoSuchBucket", "no", expected_params={"Bucket": "ckpt-eu"})
    [r] = [r for r in run(acct, cfg) if not r.ok]
    assert r.detail == "NoSuchBucket" and "create the bucket" in r.fix


def test_us_east_1_bucket_answers_null():
    acct = Account()
    acct.stub("s3").add_response("get_bucket_location", {}, {"Bucket": "b"})
    assert preflight.check_bucket(acct("s3", REGION), "b", REGION, "k").ok


def test_byo_stack_checks_only_image_and_buckets():
    acct = Account()
    results = run_checks(rendered("byo").cfg, REGION, acct)
    assert all(r.name in ("training image",) or r.name.startswith("S3 bucket") for r in results)


def test_main_prints_pass_fail_lines_and_exits_1_on_a_failure(capsys):
    acct = Account()
    account(acct, gpu_quota=0)
    # The committed p5 stack file: its placeholder CIDR fails too.
    assert preflight.main(["--stack", "p5"], clients=acct, public_ip=lambda: "198.18.0.10",
                          which=lambda _: "/usr/bin/aws") == 1
    out = capsys.readouterr().out
    assert "preflight for stack p5 in us-east-1:" in out
    assert "  PASS  GPU instance type in the GPU AZ" in out and "[EC2 DescribeInstanceTypeOfferings]" in out
    assert "  FAIL  On-Demand vCPU quota" in out and "what to do: request an increase to at least 768" in out
    assert "  FAIL  endpoint access: rltrain:cluster.publicAccessCidrs has 203.0.113.0/24" in out
    assert "  NOTE  On-Demand capacity" in out
    assert out.rstrip().endswith("2 failed")


def test_help_lists_every_check_with_its_api():
    """`--help` as a program: every check the preflight makes, each with the AWS API it asks."""
    import subprocess
    import sys
    from components.offline.mock_engine import ROOT
    out = subprocess.run([sys.executable, "-m", "components.preflight", "--help"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    for name, _, api in preflight.CHECKS:
        assert name in out and api in out, name
    for api in ("STS GetCallerIdentity", "EC2 DescribeAvailabilityZones", "EC2 DescribeCapacityBlockOfferings",
                "EC2 DescribeCapacityReservations", "Service Quotas GetServiceQuota"):
        assert api in out


def test_main_refuses_an_unknown_stack(capsys):
    assert preflight.main(["--stack", "nope"], clients=Account()) == 2


@pytest.mark.parametrize("ref,ok", [
    ("public.ecr.aws/hpc-cloud/nccl-tests:cuda12", True),
])
def test_non_ecr_image_is_not_checked(ref, ok):
    r = preflight.check_image(Account(), ref)
    assert r.ok is ok and "not checked" in r.detail


def test_expected_params_are_exact():
    # A stray parameter (or a wrong one) fails the Stubber: the checks send only what is recorded.
    acct = Account()
    acct.stub("ec2").add_response("describe_availability_zones", {"AvailabilityZones": []}, {"ZoneNames": ANY})
    r = preflight.check_offering(acct("ec2", REGION), "p5.48xlarge", "us-east-1z")
    assert not r.ok and "is not an availability zone" in r.detail
