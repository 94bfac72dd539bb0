"""Stack files carry no fake ciphertext; a secret not set yet renders offline as not set, with the
command that sets it, and a real preview refuses with that same command before any resource."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
import yaml

from components.offline import mock_engine, render, unset_secrets
from components.offline.mock_engine import ROOT, SECRET, run_program
from components.stack import stackfile, validate

from support import STACKS, obj, rendered, stack_copy

# What a real ciphertext looks like in a stack file: Pulumi Cloud's (base64 of the service's
# envelope), or `v1:<nonce>:<ciphertext>` of the passphrase or a KMS provider, whose salt or data
# key is then in the same file (`encryptionsalt:` / `encryptedkey:`).
SERVICE_CIPHERTEXT = re.compile(r"^[A-Za-z0-9+/]{16,}={0,2}$")
PROVIDER_CIPHERTEXT = re.compile(r"^v1:[A-Za-z0-9+/]+={0,2}:[A-Za-z0-9+/]+={0,2}$")


def _secure_values(doc: dict) -> dict[str, object]:
    return {k: v["secure"] for k, v in (doc.get("config") or {}).items() if isinstance(v, dict) and "secure" in v}


@pytest.mark.parametrize("stack", STACKS)
def test_no_stack_file_holds_a_fake_ciphertext(stack):
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    has_key_material = bool(doc.get("encryptionsalt") or doc.get("encryptedkey"))
    fake = {k: v for k, v in _secure_values(doc).items()
            if not isinstance(v, str) or "REPLACE" in v.upper()
            or not (SERVICE_CIPHERTEXT.match(v) or (PROVIDER_CIPHERTEXT.match(v) and has_key_material))}
    assert not fake, (f"Pulumi.{stack}.yaml: {sorted(fake)} hold no ciphertext of any secrets provider: every real "
                      "preview fails to decrypt them. Remove them; each deployer sets its own with "
                      "`pulumi config set --secret KEY VALUE` (docs/running-for-real.md).")


def test_the_committed_stack_files_hold_no_secret_at_all():
    """Today's stack files are shapes to deploy, not anyone's deployment: no secret is set in them."""
    held = {s: sorted(_secure_values(yaml.safe_load((ROOT / f"Pulumi.{s}.yaml").read_text()))) for s in STACKS}
    assert held == {s: [] for s in STACKS}


# The secrets each committed stack needs (what `pulumi config set --secret` docs/running-for-real.md lists).
NEEDED = {
    "byo": {"rltrain:kubeconfig"},
    "dev": {"rltrain:grafanaAdminPassword"},
    "dev-reasoning": {"rltrain:grafanaAdminPassword"},
    "p4de": {"rltrain:hfToken", "rltrain:grafanaAdminPassword"},
    "p5": {"rltrain:hfToken", "rltrain:grafanaAdminPassword"},
    "p5-elastic": {"rltrain:hfToken", "rltrain:grafanaAdminPassword"},
    "sim": {"rltrain:kubeconfig", "rltrain:hfToken"},
}


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_renders_offline_with_its_secrets_shown_not_set(stack):
    r = rendered(stack)
    assert set(r.not_set) == NEEDED[stack]
    record = str(r.resources)
    for key, cmd in r.not_set.items():
        assert cmd.startswith(f"pulumi config set --secret {key} "), cmd
        # The record shows the value as not set, with the command, wherever the program uses it.
        assert unset_secrets.not_set(cmd) in record or unset_secrets.not_set(cmd).replace('"', '\\"') in record, key
    assert "REPLACE" not in record
    text = render.summary(r)
    assert "secrets not set" in text and all(cmd in text for cmd in r.not_set.values())
    md = render.summary_markdown(r)
    assert all(f"`{key}`: `{cmd}`" in md for key, cmd in r.not_set.items())


def test_training_secret_shows_the_command_not_a_value():
    secret = obj(rendered("p5"), "Secret", "training-secrets")
    assert secret["stringData"] == {"hfToken": "[secret not set: pulumi config set --secret rltrain:hfToken VALUE]"}


@pytest.mark.parametrize("stack", STACKS)
def test_a_real_preview_refuses_with_the_same_command_before_any_resource(stack, monkeypatch):
    """What the engine hands the program when the stack file holds no secret: the program's first
    line (config validation) refuses, naming every missing secret with the command the render shows."""
    values, secret = stackfile.read(ROOT / f"Pulumi.{stack}.yaml")
    created = []
    real_new = mock_engine.RecordingMocks.new_resource
    monkeypatch.setattr(mock_engine.RecordingMocks, "new_resource",
                        lambda self, args: created.append(args.name) or real_new(self, args))
    with pytest.raises(validate.ConfigError) as err:
        run_program(stack=stack, config=values, secret_keys=secret)
    assert created == []
    assert unset_secrets.named_by(err.value, values) == rendered(stack).not_set
    assert {where for where, _ in err.value.problems} == set(rendered(stack).not_set)


def test_a_secret_that_is_set_stays_hidden(tmp_path):
    proj = stack_copy(tmp_path, "p5",
                      lambda doc: doc["config"].update({"rltrain:hfToken": {"secure": "v1:bm9uY2U=:Y2lwaGVydGV4dA=="}}))
    r = render.render_stack("p5", proj)
    assert set(r.not_set) == {"rltrain:grafanaAdminPassword"}
    assert obj(r, "Secret", "training-secrets")["stringData"] == {"hfToken": SECRET}


def test_a_secret_given_in_plain_text_is_still_refused(tmp_path):
    path = tmp_path / "Pulumi.p5.yaml"
    doc = yaml.safe_load((ROOT / "Pulumi.p5.yaml").read_text())
    doc["config"]["rltrain:hfToken"] = "hf_plain"
    path.write_text(yaml.safe_dump(doc))
    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    with pytest.raises(validate.ConfigError) as err:
        unset_secrets.load_stack("p5", tmp_path)
    assert [w for w, _ in err.value.problems] == ["rltrain:hfToken"]
    assert "is not secret" in err.value.problems[0][1]


def test_other_problems_are_reported_beside_unset_secrets(tmp_path):
    doc = yaml.safe_load((ROOT / "Pulumi.p5.yaml").read_text())
    doc["config"]["rltrain:gpuNodes"]["count"] = 0
    (tmp_path / "Pulumi.p5.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(validate.ConfigError) as err:
        unset_secrets.load_stack("p5", tmp_path)
    assert [w for w, _ in err.value.problems] == ["rltrain:gpuNodes.count"]


def test_cli_lists_each_secret_not_set():
    res = subprocess.run([sys.executable, "-m", "components.offline.unset_secrets", "p5"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    lines = dict(line.split("\t") for line in res.stdout.splitlines())
    assert lines == rendered("p5").not_set
