"""The offline render contract (issue 2 §3) and the training namespace, through the mock engine."""

import json
import subprocess
import sys

import pytest
import yaml

from components.offline import render
from components.offline.mock_engine import ROOT, SECRET

from support import STACKS, obj, rendered


def run_render(*args):
    return subprocess.run([sys.executable, "-m", "components.offline.render", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def main_of_render(capsys, *args) -> subprocess.CompletedProcess:
    """The CLI's main() in this process (its SDKs are loaded already; a fresh interpreter spends ~2 s
    importing them). The CLI as a program: tests/test_render_cli.py and test_render_all_is_byte_identical_twice."""
    capsys.readouterr()
    code = render.main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["render.main", *args], code, out, err)


def test_namespace_in_every_stack(any_stack):
    ns = obj(any_stack, "Namespace", "rltrain")
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    # Warned at the enforced level (a warning on every up is noise), audited at restricted.
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    assert labels["pod-security.kubernetes.io/enforce-version"] == f"v{any_stack.cfg.cluster.kubernetes_version}"
    sa = obj(any_stack, "ServiceAccount", "training-sa")
    assert sa["metadata"]["namespace"] == "rltrain"
    assert sa["automountServiceAccountToken"] is False


@pytest.mark.parametrize("stack,gpus", [("dev", 8), ("p4de", 16), ("p5", 16)])
def test_gpu_quota_sized_from_node_group(stack, gpus):
    quota = obj(rendered(stack), "ResourceQuota", "gpu-quota")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": str(gpus)}


def test_secret_values_hidden_keys_shown(p5):
    secret = obj(p5, "Secret", "training-secrets")
    # Pulumi.p5.yaml holds no hfToken: it shows as not set, with the command that sets it; a set one
    # shows as SECRET (tests/test_unset_secrets.py).
    assert secret["stringData"] == {"hfToken": "[secret not set: pulumi config set --secret rltrain:hfToken VALUE]"}
    assert SECRET == "[secret]"
    text = json.dumps([r.as_json() for r in p5.result.records])
    assert "REPLACE-with" not in text


def test_components_parent_their_children(p5):
    by_name = {r.name: r for r in p5.result.records}
    ns = by_name["training-namespace"]
    assert ns.parent == "training"
    assert by_name["training"].type == "rltrain:index:TrainingNamespace"
    assert by_name["training"].parent is None
    # every resource but the top-level components and the stack-level provider has a parent
    orphans = [r.name for r in p5.result.records if r.parent is None
               and not r.type.startswith(("rltrain:", "pulumi:providers:"))]
    assert orphans == []


def test_resources_json_shape(p5):
    rows = json.loads(render.resources_json(p5.result))
    assert rows == sorted(rows, key=lambda r: (r["type"], r["name"]))
    for row in rows:
        assert set(row) - {"decoded"} == {"type", "name", "parent", "custom", "dependsOn", "provider", "options",
                                          "inputs"}
        assert set(row["options"]) - {"replaceOnChanges", "ignoreChanges"} == {"protect", "retainOnDelete",
                                                                                 "deleteBeforeReplace"}
    key = next(r for r in rows if r["type"] == "aws:kms/key:Key")
    assert key["options"]["protect"] is True and key["custom"] is True
    comp = next(r for r in rows if r["type"] == "rltrain:index:TrainingNamespace")
    assert comp["custom"] is False


def test_integers_stay_integers_and_unknowns_are_readable(p5):
    rows = json.loads(render.resources_json(p5.result))
    key = next(r for r in rows if r["type"] == "aws:kms/key:Key")
    assert key["inputs"]["deletionWindowInDays"] == 30 and isinstance(key["inputs"]["deletionWindowInDays"], int)
    cluster = next(r for r in rows if r["type"] == "eks:index:Cluster")
    assert cluster["inputs"]["encryptionConfigKeyArn"] == "[known after deploy: cluster-secrets-key.arn]"


def test_manifests_sorted_by_kind_namespace_name(any_stack):
    keys = [render._sort_key(m) for m in any_stack.manifests]
    assert keys == sorted(keys)
    assert all(m["apiVersion"] and m["kind"] for m in any_stack.manifests)


def test_stack_outputs(p5):
    out = p5.result.stack_outputs
    assert out["kubeconfig"] == SECRET
    fsx = 4800 * 0.340 / 730  # PERSISTENT_2 at 500 MB/s/TiB
    assert out["estimatedCostPerHour"]["usd"] == pytest.approx(2 * 55.04 + fsx, abs=0.01)
    assert out["gpuNodes"] == {"instanceType": "p5.48xlarge", "count": 2, "gpus": 16, "efaDevicesPerNode": 32}


@pytest.mark.slow  # every stack rendered twice, each in a fresh interpreter
def test_render_all_is_byte_identical_twice(tmp_path):
    # The committed rendered/p4de came from an earlier, separate process: a fresh run must match it
    # byte for byte (test_committed_render_is_current says how to refresh it when the program changes).
    first = run_render("--stack", "p4de", "--out", str(tmp_path / "a"))
    assert first.returncode == 0, first.stderr
    for name in ("manifests.yaml", "resources.json"):
        assert (tmp_path / "a" / name).read_bytes() == (ROOT / "rendered" / "p4de" / name).read_bytes()
    assert "GPU nodes: 2 x p4de.24xlarge = 16 GPUs" in first.stdout
    assert "estimated cost: $55.59/h = 2 x p4de.24xlarge at $27.45/h + FSx 2400 GiB" in first.stdout
    docs = list(yaml.safe_load_all((tmp_path / "a" / "manifests.yaml").read_text()))
    assert {d["kind"] for d in docs} >= {"Namespace", "ServiceAccount", "ResourceQuota"}


def _bad_stack(tmp_path, stack, mutate):
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    mutate(doc["config"])
    (tmp_path / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc))
    return doc


@pytest.mark.parametrize("mutate,needle", [
    (lambda c: c["rltrain:gpuNodes"].update(instanceType="p5.48xlarg"), "rltrain:gpuNodes.instanceType"),
    (lambda c: c["rltrain:gpuNodes"].update(cuont=2), "rltrain:gpuNodes.cuont"),
])
def test_invalid_config_exits_2_and_writes_nothing(tmp_path, capsys, mutate, needle):
    # Run the renderer on a copy of the project whose stack file is broken.
    proj = tmp_path / "proj"
    proj.mkdir()
    for f in ("__main__.py", "Pulumi.yaml"):
        (proj / f).write_text((ROOT / f).read_text())
    (proj / "components").symlink_to(ROOT / "components")
    _bad_stack(proj, "p5", mutate)
    out = tmp_path / "out"
    res = main_of_render(capsys, "--stack", "p5", "--out", str(out), "--project-dir", str(proj))
    assert res.returncode == 2
    assert needle in res.stderr
    if "instanceType" in needle:
        assert "p4de.24xlarge, p5.48xlarge" in res.stderr
    assert not out.exists()
    assert res.stdout == ""


def test_unknown_stack_exits_2(capsys):
    res = main_of_render(capsys, "--stack", "nope", "--out", "/nonexistent/x")
    assert res.returncode == 2 and "no stack file Pulumi.nope.yaml" in res.stderr


def test_all_stacks_listed():
    from components.stack import stackfile
    assert tuple(stackfile.stack_names()) == STACKS


def test_byo_cluster_creates_no_aws_resource():
    byo = rendered("byo")
    assert [r.type for r in byo.result.records if r.type.startswith(("aws:", "eks:"))] == []
    claim = obj(byo, "PersistentVolumeClaim", "fsx-claim")
    assert claim["spec"]["storageClassName"] == "fsx-sc"
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]


@pytest.mark.parametrize("stack", STACKS)
def test_committed_render_is_current(stack):
    """rendered/<stack>/ is the PR preview: it must match what the program renders now."""
    r = rendered(stack)
    fix = "stale: refresh with `python -m components.offline.render --all` and commit rendered/"
    committed = ROOT / "rendered" / stack
    assert (committed / "manifests.yaml").read_text() == render.manifests_yaml(r.manifests), fix
    assert (committed / "resources.json").read_text() == render.resources_json(r.result), fix
