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


def zone(acct: Account, az: str = "us-east-1a", zone_id: str = ZONE_ID):
    acct.stub("ec2").add_response(
        "describe_availability_zones",
        {"AvailabilityZones": [{"ZoneName": az, "ZoneId": zone_id, "RegionName": REGION, "State": "available"}]},
        {"ZoneNames": [az]})


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


def quota(acct: Account, value: float):
    acct.stub("service-quotas").add_response(
        "get_service_quota",
        {"Quota": {"ServiceCode": "ec2", "QuotaCode": "L-417A185B", "QuotaName": "Running On-Demand P instances",
                   "Value": value}},
        {"ServiceCode": "ec2", "QuotaCode": "L-417A185B"})


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


def passing_p5(acct: Account):
    zone(acct)
    offering(acct, True)
    quota(acct, 384)
    addons(acct)
    image(acct)


def run(acct: Account, cfg=None) -> list[preflight.Result]:
    results = preflight.run_checks(cfg or rendered("p5").cfg, REGION, acct)
    acct.verify()
    return results


def failures(results):
    return [(r.name, r.detail) for r in results if not r.ok]


def test_passing_account():
    acct = Account()
    passing_p5(acct)
    results = run(acct)
    assert failures(results) == []
    assert [r.name for r in results][:2] == ["GPU instance type in the GPU AZ", "On-Demand vCPU quota"]
    assert "use1-az4 in this account" in results[0].detail
    assert "is 384 vCPUs, 2 x p5.48xlarge need 384" in results[1].detail
    assert len([r for r in results if r.name.startswith("add-on ")]) == len(PINNED)


def test_type_not_offered_in_the_gpu_az_names_the_zones_that_have_it():
    acct = Account()
    zone(acct)
    offering(acct, False, elsewhere=("use1-az6", "use1-az2"))
    quota(acct, 384)
    addons(acct)
    image(acct)
    [(name, detail)] = failures(run(acct))
    assert name == "GPU instance type in the GPU AZ"
    assert "not offered in us-east-1a (use1-az4 in this account); offered in zone ids use1-az2, use1-az6" in detail


def test_quota_too_small_says_how_much_to_request():
    acct = Account()
    zone(acct)
    offering(acct, True)
    quota(acct, 192)
    addons(acct)
    image(acct)
    results = run(acct)
    [r] = [r for r in results if not r.ok]
    assert r.detail == ("Running On-Demand P instances (L-417A185B) is 192 vCPUs, 2 x p5.48xlarge need 384")
    assert "--quota-code L-417A185B --desired-value 384" in r.fix


def test_missing_addon_build_is_named():
    acct = Account()
    zone(acct)
    offering(acct, True)
    quota(acct, 384)
    addons(acct, missing="coredns")
    image(acct)
    [(name, detail)] = failures(run(acct))
    assert name == f"add-on coredns {PINNED['coredns']}" and "does not exist for Kubernetes 1.35" in detail


def test_missing_image_fails():
    acct = Account()
    zone(acct)
    offering(acct, True)
    quota(acct, 384)
    addons(acct)
    image(acct, found=False)
    [r] = [r for r in run(acct) if not r.ok]
    assert r.name == "training image" and "ImageNotFoundException" in r.detail and "push the image" in r.fix


def _reservation(acct: Account, **over):
    cr = {"CapacityReservationId": "cr-0123456789abcdef0", "InstanceType": "p5.48xlarge",
          "AvailabilityZone": "us-east-1a", "State": "active", "TotalInstanceCount": 2, "AvailableInstanceCount": 2,
          "ReservationType": "capacity-block"}
    cr.update(over)
    acct.stub("ec2").add_response("describe_capacity_reservations", {"CapacityReservations": [cr]},
                                  {"CapacityReservationIds": ["cr-0123456789abcdef0"]})


def _block_cfg():
    cfg = rendered("p5").cfg
    cap = cfg.gpu_nodes.capacity.model_copy(update={"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"})
    return cfg.model_copy(update={"gpu_nodes": cfg.gpu_nodes.model_copy(update={"capacity": cap})})


def test_active_capacity_block_passes_without_a_quota_check():
    acct = Account()
    zone(acct)
    offering(acct, True)
    _reservation(acct)
    addons(acct)
    image(acct)
    results = run(acct, _block_cfg())
    assert failures(results) == []
    assert results[1].name == "Capacity Block cr-0123456789abcdef0" and "active" in results[1].detail


def test_capacity_block_before_its_window_in_another_az_fails_with_each_reason():
    acct = Account()
    zone(acct)
    offering(acct, True)
    _reservation(acct, State="scheduled", AvailabilityZone="us-east-1b", TotalInstanceCount=1,
                 StartDate=datetime.datetime(2026, 12, 3, 11, 30, tzinfo=datetime.timezone.utc))
    addons(acct)
    image(acct)
    [(name, detail)] = failures(run(acct, _block_cfg()))
    assert "state scheduled (starts 2026-12-03 11:30:00+00:00)" in detail
    assert "in us-east-1b, the GPU AZ is us-east-1a" in detail
    assert "1 instance(s) in the block, the stack wants 2" in detail


def test_bucket_in_another_region_and_missing_bucket():
    cfg = rendered("p5").cfg
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
    results = preflight.run_checks(rendered("byo").cfg, REGION, acct)
    assert all(r.name in ("training image",) or r.name.startswith("S3 bucket") for r in results)


def test_main_prints_pass_fail_lines_and_exits_1_on_a_failure(capsys):
    acct = Account()
    zone(acct)
    offering(acct, True)
    quota(acct, 0)
    addons(acct)
    image(acct)
    assert preflight.main(["--stack", "p5"], clients=acct) == 1
    out = capsys.readouterr().out
    assert "preflight for stack p5 in us-east-1:" in out
    assert "  PASS  GPU instance type in the GPU AZ" in out
    assert "  FAIL  On-Demand vCPU quota" in out and "what to do: request an increase to at least 384" in out
    assert out.rstrip().endswith("1 failed")


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
