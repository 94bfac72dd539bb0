"""Stack config: every shipped stack validates; each bad input is rejected with its key path."""

import json

import pytest
import yaml

from components.stack import catalog
from components.stack import config, validate
from components.stack import stackfile
from components.offline import unset_secrets

BASE = {
    "cluster": {"publicAccessCidrs": ["203.0.113.0/24"]},
    "network": {"availabilityZones": ["us-east-1a", "us-east-1b"]},
    "gpuNodes": {"instanceType": "p5.48xlarge", "count": 2},
    "workloads": {"image": "repo/rl:1.0"},
}


def load(overrides=None, secret_keys=(), region="us-east-1", extra=None):
    values = json.loads(json.dumps(BASE))
    for section, patch in (overrides or {}).items():
        values.setdefault(section, {}).update(patch)
    values.update(extra or {})
    return validate.load(values, secret_keys=set(secret_keys), region=region)


def problems(**kw):
    with pytest.raises(validate.ConfigError) as e:
        load(**kw)
    return dict(e.value.problems)


@pytest.mark.parametrize("stack", stackfile.stack_names())
def test_every_stack_file_validates(stack):
    # As the render reads it: the committed files hold no secret, which is no error offline.
    cfg = unset_secrets.load_stack(stack)[-1]
    assert cfg.gpu_nodes.count >= 1


def test_stack_shapes():
    def cfg_of(stack):
        return unset_secrets.load_stack(stack)[-1]
    assert (cfg_of("p4de").gpu_nodes.instance_type, cfg_of("p4de").gpu_nodes.count) == ("p4de.24xlarge", 2)
    assert (cfg_of("p5").gpu_nodes.instance_type, cfg_of("p5").gpu_nodes.count) == ("p5.48xlarge", 2)
    dev = cfg_of("dev")
    assert dev.gpu_nodes.instance.price.usd_per_hour < cfg_of("p4de").gpu_nodes.instance.price.usd_per_hour
    assert dev.gpu_nodes.efa_enabled and dev.gpu_nodes.instance.has_nvme


def test_defaults_are_derived():
    cfg = load()
    assert cfg.gpu_nodes.efa_enabled and cfg.gpu_nodes.efa_devices_per_node == 32
    assert cfg.gpu_nodes.total_gpus == 16
    assert cfg.storage.claim_name == "fsx-claim"
    assert cfg.cluster.kubernetes_version in config.KUBERNETES_VERSIONS
    assert load(overrides={"gpuNodes": {"count": 1}}).gpu_nodes.efa_enabled is False


def test_misspelled_key_is_named_with_allowed_keys():
    p = problems(extra={"gpuNodes": {"instanceTyp": "p5.48xlarge", "count": 2}})
    assert "rltrain:gpuNodes.instanceTyp" in p
    assert "instanceType" in p["rltrain:gpuNodes.instanceTyp"]
    # the correct key is then missing, and reported in the same run
    assert p["rltrain:gpuNodes.instanceType"] == "required key is missing"


def test_unknown_top_level_key():
    p = problems(extra={"gpuNode": {"count": 2}})
    assert "gpuNodes" in p["rltrain:gpuNode"]


def test_unknown_instance_type_lists_every_known_type():
    msg = problems(overrides={"gpuNodes": {"instanceType": "p5.48xlarg"}})["rltrain:gpuNodes.instanceType"]
    assert "'p5.48xlarg'" in msg
    for name in catalog.INSTANCE_TYPES:
        assert name in msg


def test_all_errors_reported_together():
    p = problems(overrides={"gpuNodes": {"count": 0}, "workloads": {"image": "repo/rl:latest"},
                            "storage": {"fsx": {"storageCapacityGiB": 1000}}})
    assert {"rltrain:gpuNodes.count", "rltrain:workloads.image",
            "rltrain:storage.fsx.storageCapacityGiB"} <= set(p)


@pytest.mark.parametrize("overrides,path,needle", [
    ({"storage": {"fsx": {"storageCapacityGiB": 1000}}}, "rltrain:storage.fsx.storageCapacityGiB", "2400"),
    ({"storage": {"fsx": {"perUnitStorageThroughput": 300}}},
     "rltrain:storage.fsx.perUnitStorageThroughput", "125, 250, 500, 1000"),
    ({"storage": {"fsx": {"metadataIops": 7000}}}, "rltrain:storage.fsx.metadataIops", "12000"),
    ({"gpuNodes": {"instanceType": "g5.xlarge", "efa": True}}, "rltrain:gpuNodes.efa", "no EFA"),
    ({"gpuNodes": {"capacity": {"reservationId": "cr-0123456789abcdef0"}}},
     "rltrain:gpuNodes.capacity.reservationId", "capacity-block or odcr"),
    ({"gpuNodes": {"capacity": {"type": "capacity-block"}}},
     "rltrain:gpuNodes.capacity.reservationId", "needs the reservation id"),
    ({"cluster": {"endpointPublicAccess": False, "publicAccessCidrs": ["0.0.0.0/0"]}},
     "rltrain:cluster.publicAccessCidrs", "whole internet"),
    ({"cluster": {"endpointPublicAccess": False, "publicAccessCidrs": ["203.0.113.0/24"]}},
     "rltrain:cluster.publicAccessCidrs", "private-only"),
    ({"network": {"availabilityZones": ["us-east-1a", "us-west-2b"]}},
     "rltrain:network.availabilityZones[1]", "region us-east-1"),
    ({"network": {"gpuAvailabilityZone": "us-east-1c"}}, "rltrain:network.gpuAvailabilityZone",
     "not one of availabilityZones"),
    ({"workloads": {"image": "repo/rl:latest"}}, "rltrain:workloads.image", ":latest"),
    ({"workloads": {"image": "repo/rl"}}, "rltrain:workloads.image", "no tag"),
    ({"workloads": {"env": {"HF_TOKEN": "x"}}}, "rltrain:workloads.env.HF_TOKEN", "secretEnv"),
    ({"workloads": {"multiNode": {"form": "deployment"}}}, "rltrain:workloads.multiNode.form",
     "should be one of: indexed-job, statefulset"),
    ({"gpuNodes": {"count": 1}, "workloads": {"ncclTest": {"enabled": True}}},
     "rltrain:workloads.ncclTest.enabled", ">= 2"),
    ({"cluster": {"kubernetesVersion": "1.29"}}, "rltrain:cluster.kubernetesVersion", "1.35"),
])
def test_bad_input_rejected_with_key_path(overrides, path, needle):
    p = problems(overrides=overrides)
    assert path in p, p
    assert needle in p[path]


def test_secret_env_needs_secret_config_key():
    p = problems(overrides={"training": {"secretEnv": {"HF_TOKEN": "hfToken"}}}, extra={"hfToken": "plain"})
    assert "is not secret" in p["rltrain:hfToken"]
    p = problems(overrides={"training": {"secretEnv": {"HF_TOKEN": "hfToken"}}})
    assert "is missing" in p["rltrain:hfToken"]
    cfg = load(overrides={"training": {"secretEnv": {"HF_TOKEN": "hfToken"}}},
               extra={"hfToken": "[secret]"}, secret_keys={"hfToken"})
    assert cfg.training.secret_env == {"HF_TOKEN": "hfToken"}


def test_models_are_frozen():
    cfg = load()
    with pytest.raises(Exception):
        cfg.gpu_nodes.count = 3  # type: ignore[misc]


def test_nested_secure_value_rejected(tmp_path):
    f = tmp_path / "Pulumi.x.yaml"
    f.write_text(yaml.safe_dump({"config": {"rltrain:training": {"token": {"secure": "v1:abc"}}}}))
    with pytest.raises(stackfile.StackFileError, match="top-level"):
        stackfile.read(f)


def test_shm_default_scales_with_node_memory():
    assert catalog.shm_default_gib(catalog.get("p4de.24xlarge")) == 72
    assert catalog.shm_default_gib(catalog.get("p5.48xlarge")) == 128
    assert catalog.shm_default_gib(catalog.get("g5.xlarge")) == 8


def test_plain_env_allowed_unless_credential_like():
    cfg = load(overrides={"workloads": {"env": {"TOKENIZERS_PARALLELISM": "true", "OMP_NUM_THREADS": "8"}}})
    assert cfg.workloads.env["TOKENIZERS_PARALLELISM"] == "true"
    for name in ("HF_TOKEN", "MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY", "WANDB_API_KEY"):
        p = problems(overrides={"workloads": {"env": {name: "x"}}})
        assert "secretEnv" in p[f"rltrain:workloads.env.{name}"]
