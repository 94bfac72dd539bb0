"""Clean refusals and secrets by value (components/stack/validate.py, components/stack/secrets_scan.py).

Every refusal is pinned to its message; a table of bad configs goes through the render CLI and each
must end in exit 2 with its key path, no traceback and nothing written; token-shaped values are
refused under any name and no message shows more than 4 characters of them; what a stack
legitimately holds (digests, ARNs, S3 URIs, image tags, the committed stack files) passes.

The bases are the committed stack files (p5 for a created cluster, byo for a bring-your-own one),
so every key they require is there.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
import shutil
import string
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from pydantic import BaseModel
from support import STACKS, rendered

from components.offline import render, unset_secrets
from components.offline.mock_engine import ROOT
from components.stack import catalog, config, labels, secrets_scan, stackfile, validate

# ---------------------------------------------------------------------------------------------
# helpers


def stack_doc(stack: str) -> dict[str, Any]:
    return yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())


def load_doc(doc: dict[str, Any], tmp_path: Path) -> config.StackConfig:
    """Validated as the render validates a stack file (unset_secrets.load_stack)."""
    (tmp_path / "Pulumi.x.yaml").write_text(yaml.safe_dump(doc))
    return unset_secrets.load_stack("x", tmp_path)[-1]


def problems(mutate: Callable[[dict[str, Any]], Any], tmp_path: Path, stack: str = "p5") -> tuple[dict[str, str], str]:
    """(key path -> message, the whole error text) for the stack file changed by `mutate`."""
    doc = stack_doc(stack)
    mutate(doc["config"])
    with pytest.raises(validate.ConfigError) as e:
        load_doc(doc, tmp_path)
    return dict(e.value.problems), e.value.render()


def section(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return doc.setdefault(f"rltrain:{name}", {})


def assert_masked(text: str, secret: str) -> None:
    """No 5 consecutive characters of `secret` anywhere in `text`."""
    for i in range(len(secret) - 4):
        assert secret[i:i + 5] not in text, f"{secret[i:i + 5]!r} of a suspected value is printed: {text}"


_rng = random.Random(12)  # token-shaped values are made here, never committed as literals


def rand(n: int, alphabet: str = string.ascii_letters + string.digits) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


TOKENS = {
    "hugging face": "hf_" + rand(34),
    "github": "ghp_" + rand(36),
    "aws access key id": "AKIA" + rand(16, string.ascii_uppercase + string.digits),
    "aws secret access key": rand(18) + "/" + rand(21),
    "slack": "xoxb-" + rand(12, string.digits) + "-" + rand(13, string.digits) + "-" + rand(24),
    "openai": "sk-proj-" + rand(20) + "T3BlbkFJ" + rand(20),
    "weights and biases": rand(40, "0123456789abcdef"),
    "jwt": "eyJhbGciOiJIUzI1NiJ9." + "eyJ" + rand(30) + "." + rand(43, string.ascii_letters + string.digits + "_-"),
}


# ---------------------------------------------------------------------------------------------
# secrets by value


@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_token_under_a_harmless_env_name_is_refused_masked(kind, tmp_path):
    token = TOKENS[kind]
    p, text = problems(lambda c: section(c, "workloads").update(env={"MY_SETTING": token}), tmp_path)
    assert "looks like it holds a secret" in p["rltrain:workloads.env.MY_SETTING"], p
    assert_masked(text, token)


@pytest.mark.parametrize("key,value,secret", [
    ("mlflowTrackingUri", "https://mlflow:{pw}@mlflow.example.com", "{pw}"),
    ("mlflowTrackingUri", "postgresql://mlflow:{pw}@db.internal:5432/mlflow", "{pw}"),
    ("mlflowTrackingUri", "https://mlflow.example.com/?password={pw}", "{pw}"),
    ("modelPath", "/fsx/models/{hf}", "{hf}"),
    ("experimentName", "run-{gh}", "{gh}"),
    ("configName", "{aws}", "{aws}"),
])
def test_secret_in_a_free_text_key_is_refused_masked(key, value, secret, tmp_path):
    fill = {"pw": "Tr0ub4dor-" + rand(6), "hf": TOKENS["hugging face"], "gh": TOKENS["github"],
            "aws": TOKENS["aws access key id"]}
    value, secret = value.format(**fill), secret.format(**fill)
    p, text = problems(lambda c: section(c, "workloads").update({key: value}), tmp_path)
    assert "looks like it holds a secret" in p[f"rltrain:workloads.{key}"], p
    assert_masked(text, secret)


def test_secret_in_a_command_argument_names_the_item(tmp_path):
    token = TOKENS["weights and biases"]
    p, text = problems(lambda c: section(c, "workloads").update(command=["python", "train.py", "--key", token]),
                       tmp_path)
    assert "Hex High Entropy String" in p["rltrain:workloads.command[3]"]
    assert_masked(text, token)


def test_refusal_message_in_full(tmp_path):
    p, _ = problems(lambda c: section(c, "workloads").update(env={"MY_SETTING": TOKENS["github"]}), tmp_path)
    assert p["rltrain:workloads.env.MY_SETTING"] == (
        "looks like it holds a secret (GitHub Token: 'ghp_…'); a plain value ends up in the manifests, "
        "resources.json and CI logs: put the secret in secret config (pulumi config set --secret rltrain:NAME ...) "
        "and map it with rltrain:training.secretEnv")


def test_no_message_prints_the_env_values(tmp_path):
    """Before: a credential-like name printed the whole env mapping, values included."""
    token = TOKENS["hugging face"]
    env = {"HF_TOKEN": token, "1BAD": "x", "OTHER": "plain-value-1"}
    p, text = problems(lambda c: section(c, "workloads").update(env=env), tmp_path)
    assert p["rltrain:workloads.env.HF_TOKEN"].startswith("looks like")
    assert_masked(text, token)
    assert "plain-value-1" not in text
    assert p["rltrain:workloads.env"] == "'1BAD' is not an environment variable name"


@pytest.mark.parametrize("value", [
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf@sha256:" + "3f9a2b7c1d4e5f60" * 4,
    "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf:" + "3f9a2b7c1d4e5f60718293a4b5c6d7e8f9012345",
    "nvcr.io/nvidia/pytorch:24.01-py3",
])
def test_image_digests_and_tags_pass(value, tmp_path):
    doc = stack_doc("p5")
    section(doc["config"], "workloads")["image"] = value
    assert load_doc(doc, tmp_path).workloads.image == value


@pytest.mark.parametrize("value", [
    "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_AdministratorAccess_0a1b2c3d4e5f6789",
    "arn:aws:s3:::my-training-bucket/rltrain/run-2026-04-01",
    "s3://my-training-bucket/checkpoints/maniskill_openvla_oft_ppo/2026-04-01T08-55-49/",
    "cr-0123456789abcdef0",
    "550e8400-e29b-41d4-a716-446655440000",
    "https://mlflow.example.com:5000",
    "https://user:${MLFLOW_PASSWORD}@mlflow.example.com",
    "/fsx/checkpoints/maniskill_openvla_oft_ppo_experiment_2026_04_01/step_0001000",
    "expandable_segments:True",
])
def test_public_shapes_pass(value, tmp_path):
    doc = stack_doc("p5")
    section(doc["config"], "workloads")["env"] = {"SOME_VALUE": value}
    assert load_doc(doc, tmp_path).workloads.env["SOME_VALUE"] == value


def test_admin_role_arns_pass(tmp_path):
    arn = "arn:aws:iam::123456789012:role/aws-reserved/sso.amazonaws.com/AWSReservedSSO_AdministratorAccess_0a1b2c3d4e5f6789"
    doc = stack_doc("p5")
    section(doc["config"], "cluster")["adminRoleArns"] = [arn]
    assert load_doc(doc, tmp_path).cluster.admin_role_arns == (arn,)


@pytest.mark.parametrize("stack", stackfile.stack_names())
def test_committed_stack_files_pass_the_scanner(stack):
    values, _ = stackfile.read(ROOT / f"Pulumi.{stack}.yaml")
    data = {k[len("rltrain:"):]: validate.parse_value(v) for k, v in values.items() if k.startswith("rltrain:")}
    assert validate.secret_values({k: v for k, v in data.items() if k in config.SECTIONS}) == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_plain_env_value_of_the_render_passes(stack):
    """The env the pod builders produce (program constants too), every container of every object."""
    assert secrets_scan.plain_env(rendered(stack).manifests) == []


def test_plain_env_scan_sees_crd_pod_templates():
    token = TOKENS["github"]
    mpijob = {"kind": "MPIJob", "metadata": {"name": "x"}, "spec": {"mpiReplicaSpecs": {"Worker": {"template": {
        "spec": {"containers": [{"name": "worker", "env": [{"name": "A", "value": token}, {"name": "B", "value": "1"}]}]}}}}}}
    [(where, msg)] = secrets_scan.plain_env([mpijob])
    assert where == "MPIJob/x container worker env A"
    assert_masked(msg, token)


def test_mask_keeps_at_most_four_characters():
    assert secrets_scan.mask("hf_" + "a" * 34) == "hf_a…"
    assert secrets_scan.mask("hunter2") == "h…"
    assert secrets_scan.mask("abc") == "…"


# ---------------------------------------------------------------------------------------------
# every refusal, pinned to its message


def _cap_arn(c):
    section(c, "gpuNodes")["capacity"] = {
        "type": "odcr", "reservationId": "arn:aws:ec2:us-east-1:123456789012:capacity-reservation/cr-0123456789abcdef0"}


def _byo_aws_keys(c):
    section(c, "cluster").update(publicAccessCidrs=["203.0.113.0/24"], systemNodes={"count": 3})
    c["rltrain:network"] = {"vpcCidr": "10.1.0.0/16"}
    section(c, "gpuNodes")["capacity"] = {"type": "on-demand"}
    section(c, "storage")["fsx"] = {"storageCapacityGiB": 2400}
    section(c, "training")["s3"] = {"bucket": "my-bucket"}


def _existing_network(c):
    c["rltrain:network"] = {"availabilityZones": ["us-east-1a", "us-east-1b"], "existing": {
        "vpcId": "vpc-0a1b2c3d4e5f67890", "privateSubnetIds": ["subnet-0a1b2c3d4e5f67890", "subnet-1a1b2c3d4e5f67890"],
        "gpuSubnetId": "subnet-0a1b2c3d4e5f67890"}}


REFUSALS = [
    # words instead of pydantic's
    ("list, not tuple", "p5", lambda c: section(c, "cluster").update(publicAccessCidrs="198.51.100.0/24"),
     "rltrain:cluster.publicAccessCidrs", "should be a list (got '198.51.100.0/24')"),
    ("mapping", "p5", lambda c: section(c, "workloads").update(env=["A=1"]),
     "rltrain:workloads.env", "should be a mapping (NAME: value lines) (got a list of 1 item(s))"),
    ("empty section", "p5", lambda c: c.update({"rltrain:training": None}),
     "rltrain:training", "this section is empty: give it keys (namespace, serviceAccount, podSecurity, s3, secretEnv) "
                         "or remove it"),
    ("empty nested section", "p5", lambda c: section(c, "gpuNodes").update(capacity=None),
     "rltrain:gpuNodes.capacity", "this section is empty: give it keys (type, reservationId) or remove it"),
    ("whole number", "p5", lambda c: section(c, "gpuNodes").update(count="two"),
     "rltrain:gpuNodes.count", "should be a whole number (got 'two')"),
    ("at most 63 characters", "p5", lambda c: section(c, "training").update(namespace="Training"),
     "rltrain:training.namespace", "should be at most 63 characters: lowercase letters, digits and '-', starting "
                                   "and ending with a letter or digit (got 'Training')"),
    ("one of", "p5", lambda c: section(c, "workloads").setdefault("multiNode", {}).update(form="deployment"),
     "rltrain:workloads.multiNode.form", "should be one of: indexed-job, statefulset, rayjob (got 'deployment')"),
    ("version as a number", "p5", lambda c: section(c, "cluster").update(kubernetesVersion=1.35),
     "rltrain:cluster.kubernetesVersion", 'should be one of: 1.34, 1.35, 1.36 (got 1.35); write it in quotes: "1.35"'),
    ("at most", "p5", lambda c: section(c, "workloads").update(priority=2000000000),
     "rltrain:workloads.priority", "should be at most 1000000000 (got 2000000000)"),
    ("pasted ARN", "p5", _cap_arn,
     "rltrain:gpuNodes.capacity.reservationId",
     "is an ARN: use the cr-… id (cr-0123456789abcdef0), e.g. reservationId: cr-0123456789abcdef0"),
    # reserved names
    ("reserved namespace", "p5", lambda c: section(c, "training").update(namespace="kube-system"),
     "rltrain:training.namespace", "kube-system is reserved for Kubernetes itself: the stack would own it and delete "
                                   "it on destroy; use a namespace of its own (default: rltrain)"),
    ("default namespace", "p5", lambda c: section(c, "training").update(namespace="default"),
     "rltrain:training.namespace", "default is reserved for Kubernetes itself: the stack would own it and delete "
                                   "it on destroy; use a namespace of its own (default: rltrain)"),
    ("default service account", "p5", lambda c: section(c, "training").update(serviceAccount="default"),
     "rltrain:training.serviceAccount", "default is the service account Kubernetes creates in every namespace: the "
                                        "stack cannot create it; use a name of its own (default: training-sa)"),
    # system nodes
    ("GPU system nodes", "p5", lambda c: section(c, "cluster").update(systemNodes={"instanceType": "g6.12xlarge"}),
     "rltrain:cluster.systemNodes.instanceType",
     "g6.12xlarge is an accelerated (GPU/accelerator) type: the system nodes run operators and add-ons, not "
     "training; use a general-purpose type such as m6i.xlarge"),
    ("Arm system nodes", "p5", lambda c: section(c, "cluster").update(systemNodes={"instanceType": "m7g.large"}),
     "rltrain:cluster.systemNodes.instanceType",
     "m7g.large is an Arm (Graviton) type: the system node group uses the x86_64 EKS AMI; use an x86_64 type such "
     "as m6i.xlarge"),
    ("not a type", "p5", lambda c: section(c, "cluster").update(systemNodes={"instanceType": "large"}),
     "rltrain:cluster.systemNodes.instanceType", "'large' is not an EC2 instance type (FAMILY.SIZE, e.g. m6i.xlarge)"),
    # pod security
    ("restricted", "p5", lambda c: section(c, "training").update(podSecurity="restricted"),
     "rltrain:training.podSecurity",
     "restricted refuses pods that run as root, and these enabled workloads do: workloads.singleNode (the training "
     "pod runs the image as root); workloads.multiNode (the Ray pods run the image as root); workloads.ncclTest (the "
     "MPI launcher and workers run as root, the workers add capabilities for sshd); workloads.validation (the "
     "validation pod runs the image as root). Use baseline (restricted is always audited), or disable "
     "them"),
    # CIDRs
    ("internet in halves", "p5", lambda c: section(c, "cluster").update(publicAccessCidrs=["0.0.0.0/1", "128.0.0.0/1"]),
     "rltrain:cluster.publicAccessCidrs", "together these CIDRs open the API endpoint to the whole internet; list "
                                          "your office/VPN CIDRs, or set endpointPublicAccess: false"),
    # no effect on the stack kind
    ("AWS keys on byo", "byo", _byo_aws_keys, "rltrain:network.vpcCidr",
     "has no effect on a bring-your-own cluster (cluster.existing): nothing on AWS is created; remove it"),
    ("monitoring keys while it is off", "byo", lambda c: c.update({"rltrain:monitoring": {"retentionDays": 30}}),
     "rltrain:monitoring.retentionDays", "has no effect while monitoring is off (monitoring.enabled; off by default "
                                         "on a bring-your-own cluster): remove it, or set monitoring.enabled: true"),
    ("claim size on a created cluster", "p5", lambda c: section(c, "storage").update(claimSizeGiB=2400),
     "rltrain:storage.claimSizeGiB", "has no effect on a created cluster: the claim's size is the FSx file system's "
                                     "(storage.fsx.storageCapacityGiB); remove it"),
    ("claim expansion on a created cluster", "p5", lambda c: section(c, "storage").update(allowClaimExpansion=True),
     "rltrain:storage.allowClaimExpansion", "has no effect on a created cluster: the claim's size is the FSx file "
                                            "system's (storage.fsx.storageCapacityGiB); remove it"),
    ("AZs with an existing VPC", "p5", _existing_network, "rltrain:network.availabilityZones",
     "has no effect with network.existing (the VPC and its subnets exist; the GPU nodes and FSx go into "
     "gpuSubnetId); remove it"),
    # what the program's builders used to raise as a traceback
    ("shm too large", "p5", lambda c: section(c, "workloads").update(shmSizeGiB=900),
     "rltrain:workloads.shmSizeGiB", "900 GiB does not fit: /dev/shm is charged to the pod's memory limit and may "
                                     "take at most a quarter of it, 461 GiB on p5.48xlarge"),
    ("default shm on a small type", "byo", lambda c: section(c, "gpuNodes").update(instanceType="g5.xlarge", count=1),
     "rltrain:workloads.shmSizeGiB", "the default /dev/shm (8 GiB) does not fit g5.xlarge: it is charged to the "
                                     "pod's memory limit and may take at most a quarter of it; set shmSizeGiB to at "
                                     "most 3"),
    ("protected env", "p5", lambda c: section(c, "workloads").update(env={"NUM_GPUS": "4"}),
     "rltrain:workloads.env.NUM_GPUS", "is set by the program (the launcher and the validation script depend on it); "
                                       "remove it"),
    ("credential-like env name", "p5", lambda c: section(c, "workloads").update(env={"WANDB_API_KEY": "x"}),
     "rltrain:workloads.env.WANDB_API_KEY",
     "looks like a credential by its name: put the value in secret config and map it with rltrain:training.secretEnv "
     "(WANDB_API_KEY: KEY) instead of a plain env value"),
    ("secret env clashes", "p5", lambda c: section(c, "training").setdefault("secretEnv", {}).update(NCCL_DEBUG="hfToken"),
     "rltrain:training.secretEnv.NCCL_DEBUG", "is also a plain env var of the training pods (set by the program or by "
                                              "workloads.env): use another name, or remove it from workloads.env"),
    ("mlflow port", "p5", lambda c: section(c, "workloads").update(mlflowTrackingUri="http://mlflow:99999"),
     "rltrain:workloads.mlflowTrackingUri", "has a port out of range: ports are 1 to 65535"),
    ("exit code 0", "p5", lambda c: section(c, "workloads").update(failFastExitCodes=[0, 2]),
     "rltrain:workloads.failFastExitCodes[0]", "0 is success: it cannot fail a run; list exit codes 1 to 255"),
    ("exit code 300", "p5", lambda c: section(c, "workloads").update(failFastExitCodes=[300]),
     "rltrain:workloads.failFastExitCodes[0]", "300 is not an exit code a container can have: 1 to 255"),
    ("image reference", "p5", lambda c: section(c, "workloads").update(image="Repo/RL:v 1"),
     "rltrain:workloads.image", "is not an image reference: [REGISTRY[:PORT]/]REPOSITORY[:TAG][@sha256:DIGEST], the "
                                "repository in lowercase letters, digits and . _ - separated by /, a tag of at most "
                                "128 letters, digits, '_', '.' and '-' (got 'Repo/RL:v 1')"),
]


@pytest.mark.parametrize("label,stack,mutate,where,message", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_refusal_message(label, stack, mutate, where, message, tmp_path):
    p, _ = problems(mutate, tmp_path, stack)
    assert p.get(where) == message, p


def test_byo_lists_every_aws_only_key(tmp_path):
    p, _ = problems(_byo_aws_keys, tmp_path, "byo")
    assert {k for k, v in p.items() if v.startswith("has no effect on a bring-your-own")} == {
        "rltrain:cluster.publicAccessCidrs", "rltrain:cluster.systemNodes", "rltrain:network.vpcCidr",
        "rltrain:gpuNodes.capacity", "rltrain:storage.fsx", "rltrain:training.s3"}


def _bad_docs() -> list[tuple[str, str, Callable[[dict[str, Any]], Any], str]]:
    return [(label, stack, mutate, where) for label, stack, mutate, where, _ in REFUSALS] + [
        ("secret by value", "p5", lambda c: section(c, "workloads").update(env={"X": TOKENS["openai"]}),
         "rltrain:workloads.env.X"),
        ("wrong type everywhere", "p5", lambda c: c.update({"rltrain:gpuNodes": "p5.48xlarge"}), "rltrain:gpuNodes"),
        ("section empty in the file", "byo", lambda c: c.update({"rltrain:workloads": None}), "rltrain:workloads"),
    ]


@pytest.mark.parametrize("label,stack,mutate,where", _bad_docs(), ids=[d[0] for d in _bad_docs()])
def test_render_cli_refuses_without_traceback(label, stack, mutate, where, tmp_path):
    """Through the CLI: exit 2, the key path on stderr, nothing written, no exception."""
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("__main__.py", "Pulumi.yaml"):
        shutil.copy(ROOT / name, proj / name)
    (proj / "components").symlink_to(ROOT / "components")
    doc = stack_doc(stack)
    mutate(doc["config"])
    (proj / "Pulumi.bad.yaml").write_text(yaml.safe_dump(doc))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = render.main(["--stack", "bad", "--project-dir", str(proj), "--out", str(tmp_path / "out")])
    assert code == 2, err.getvalue()
    assert f"  {where}: " in err.getvalue()
    assert "Traceback" not in err.getvalue()
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------
# the words


def _patterns() -> set[str]:
    found = set()
    for obj in vars(config).values():
        if isinstance(obj, type) and issubclass(obj, BaseModel) and obj.__module__ == config.__name__:
            for field in obj.model_fields.values():
                for meta in field.metadata:
                    pattern = getattr(meta, "pattern", None)
                    if pattern:
                        found.add(pattern)
    return found


def test_every_pattern_of_the_config_has_words():
    patterns = _patterns()
    assert patterns, "the walk found no pattern at all"
    assert patterns <= set(validate.PATTERN_WORDS), patterns - set(validate.PATTERN_WORDS)


def test_no_pydantic_wording_reaches_the_user(tmp_path):
    docs = [lambda c: section(c, "cluster").update(publicAccessCidrs="x", adminRoleArns={"a": 1}),
            lambda c: section(c, "workloads").update(command="bash run.sh", retries="many", env=[1]),
            lambda c: section(c, "network").update(availabilityZones=["us-east-1a"])]
    for mutate in docs:
        _, text = problems(mutate, tmp_path)
        for word in ("tuple", "Input should", "valid dictionary", "String should match", "^", "got None"):
            assert word not in text, text


# ---------------------------------------------------------------------------------------------
# the checks agree with the program


@pytest.mark.parametrize("stack", STACKS)
def test_every_plain_env_name_of_the_pods_is_known_to_validation(stack):
    """secretEnv names are refused when they clash with these: none may be missing."""
    r = rendered(stack)
    names = set()
    # The runs built by the training pod builder (the NCCL test's MPI pods and the cluster's
    # DaemonSets set env of their own and never get secretEnv).
    # The checks' gate Job (workloads/gate.py) polls the API with env of its own and no secretEnv;
    # so does the export Job (workloads/export.py: offline, CPU only).
    runs = [d for d in r.manifests if d["kind"] in ("Job", "StatefulSet")
            and "rltrain/run" in (d["metadata"].get("labels") or {})
            and d["metadata"]["labels"].get("app.kubernetes.io/component") not in ("check-gate", "export")]
    assert runs
    for doc in runs:
        for _, container in secrets_scan._containers(doc, ""):
            names |= {v["name"] for v in container.get("env") or [] if "value" in v}
    cfg = r.cfg
    known = (labels.PROTECTED_ENV | validate.PROGRAM_ENV | set(cfg.workloads.env) | {"MLFLOW_TRACKING_URI"}
             | set(catalog.nccl_env(cfg.gpu_nodes.instance, cfg.gpu_nodes.efa_devices_per_node)))
    assert names - known == set()


def test_shm_limit_agrees_with_pod_sizing():
    from components.workloads import sizing
    for it in catalog.CATALOG.values():
        for efa in {0, it.efa_devices}:
            most = catalog.max_shm_gib(it, efa)
            assert sizing.fits(sizing.sizing_for(it, efa=efa, shm=most), it) or most < 1, (it.name, efa)
            assert not sizing.fits(sizing.sizing_for(it, efa=efa, shm=most + 1), it), (it.name, efa)


def _restricted_violations(spec: dict[str, Any]) -> list[str]:
    """Pod Security Standards, restricted profile (the checks beyond baseline)."""
    out = []
    pod = spec.get("securityContext") or {}
    allowed_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                       "projected", "secret", "name"}
    for vol in spec.get("volumes") or []:
        if set(vol) - allowed_volumes:
            out.append(f"volume {vol['name']}")
    if (pod.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
        out.append("seccomp")
    for c in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        sc = c.get("securityContext") or {}
        if not (sc.get("runAsNonRoot", pod.get("runAsNonRoot"))):
            out.append(f"{c['name']}: runAsNonRoot")
        if sc.get("runAsUser", pod.get("runAsUser")) == 0:
            out.append(f"{c['name']}: runAsUser 0")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{c['name']}: allowPrivilegeEscalation")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append(f"{c['name']}: capabilities")
    return out


def _pod_specs(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, dict):
        if "containers" in value:
            return [value]
        return [s for v in value.values() for s in _pod_specs(v)]
    if isinstance(value, list):
        return [s for v in value for s in _pod_specs(v)]
    return []


def test_restricted_refusal_names_exactly_the_workloads_whose_pods_fail_it():
    """The refusal is true: every workload it names renders pods that `restricted` refuses (p5 enables
    all four). When a workload is made to pass, this fails until it is taken off the list."""
    component = {"singleNode": "training", "multiNode": "multinode", "ncclTest": "nccl-test", "validation": "validation"}
    assert set(component) == set(validate.WORKLOAD_POD_SECURITY)
    r = rendered("p5")
    for key, comp in component.items():
        docs = [d for d in r.manifests if (d["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == comp
                and d["kind"] in ("Job", "StatefulSet", "MPIJob")]
        specs = [s for d in docs for s in _pod_specs(d.get("spec"))]
        assert specs, f"no pods of workloads.{key} in the p5 render"
        assert all(_restricted_violations(s) for s in specs), f"workloads.{key} has a pod restricted admits"


# ---------------------------------------------------------------------------------------------
# small units


@pytest.mark.parametrize("cidrs,covers", [
    (("0.0.0.0/1", "128.0.0.0/1"), True),
    (("0.0.0.0/2", "64.0.0.0/2", "128.0.0.0/2", "192.0.0.0/2"), True),
    (("1.0.0.0/8", "2.0.0.0/7", "4.0.0.0/6", "8.0.0.0/5", "16.0.0.0/4", "32.0.0.0/3", "64.0.0.0/2", "128.0.0.0/1"),
     True),  # everything but 0/8 and the private blocks is still the internet
    (("0.0.0.0/1", "203.0.113.0/24"), False),
    (("::/1", "8000::/1"), True),
    (("203.0.113.0/24", "198.51.100.0/24"), False),
])
def test_cidrs_that_cover_the_internet(cidrs, covers):
    assert validate.covers_internet(cidrs) is covers


@pytest.mark.parametrize("name,ok", [
    ("m6i.xlarge", True), ("c7i.2xlarge", True), ("m7i-flex.large", True), ("r6a.metal", True), ("t3.medium", True),
    ("p5.48xlarge", False), ("g6e.xlarge", False), ("trn1.32xlarge", False), ("inf2.xlarge", False),
    ("dl1.24xlarge", False), ("m7g.large", False), ("t4g.medium", False), ("M6I.XLARGE", False), ("m6i", False),
])
def test_system_node_types(name, ok, tmp_path):
    doc = stack_doc("p5")
    section(doc["config"], "cluster")["systemNodes"] = {"instanceType": name}
    if ok:
        assert load_doc(doc, tmp_path).cluster.system_nodes.instance_type == name
    else:
        with pytest.raises(validate.ConfigError) as e:
            load_doc(doc, tmp_path)
        assert "rltrain:cluster.systemNodes.instanceType" in dict(e.value.problems)


def test_error_text_is_json_safe_and_single_line_per_problem(tmp_path):
    _, text = problems(lambda c: section(c, "workloads").update(env={"X": TOKENS["slack"]}), tmp_path)
    json.dumps(text)
    assert all(re.match(r"^(invalid stack config|  rltrain:)", line) for line in text.splitlines())


def test_ray_token_secret_is_validated_before_the_program_runs(tmp_path):
    """Before: a rayAuthTokenSecret that was not set failed inside the program (require_secret)."""
    doc = stack_doc("p5")
    section(doc["config"], "workloads")["multiNode"] = {"enabled": True, "rayAuthTokenSecret": "rayToken"}
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text(yaml.safe_dump(doc))
    values, secret = stackfile.read(path)
    with pytest.raises(validate.ConfigError) as e:
        validate.load({k[len("rltrain:"):]: v for k, v in values.items() if k.startswith("rltrain:")},
                    secret_keys={k[len("rltrain:"):] for k in secret}, region="us-east-1")
    assert dict(e.value.problems)["rltrain:rayToken"] == (
        "is missing (named by workloads.multiNode.rayAuthTokenSecret): pulumi config set --secret rltrain:rayToken VALUE")
    # Offline, a secret not set is no error (components/offline/unset_secrets.py): the render goes through.
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("__main__.py", "Pulumi.yaml"):
        shutil.copy(ROOT / name, proj / name)
    (proj / "components").symlink_to(ROOT / "components")
    (proj / "Pulumi.bad.yaml").write_text(yaml.safe_dump(doc))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = render.main(["--stack", "bad", "--project-dir", str(proj), "--out", str(tmp_path / "out")])
    assert code == 0, err.getvalue()
