"""checkov (`--framework kubernetes`) reports no failed check on any stack's rendered objects.

A finding is either fixed in the builders or skipped on the object itself with a
`checkov.io/skip<N>: CKV_K8S_XX=reason` annotation (components/workloads/pod.py `checkov_skips`); checkov
reads it from the metadata of the object it scans (for a Job: the Job's, not its pod template's).

checkov lives in its own virtual environment because its dependency pins clash with the project's
(requirements-scan.txt). The executable: $RLTRAIN_CHECKOV, else `.venv-scan/bin/checkov` under the repo
root, else `checkov` on PATH. Without one the checkov test is skipped, except under CI (env CI set),
where it fails.

checkov's start-up (~5 s of imports) dominates its run time, so it runs once, over a directory holding
all four stacks' manifests and records, with two frameworks: `kubernetes` on the manifests and
`secrets` (checkov's own secret detectors) on every file, manifests and `resources.json` alike. Each
stack's tests read their own files' results. The secrets scan has no skip and no baseline file: it
must report 0 on every render. Two canary files with a generated AWS key id (YAML and JSON) are
scanned beside them and must be reported, so a secrets run that scans nothing cannot pass.
`--skip-download`: no call to the Prisma Cloud API (the run is offline).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import string
import subprocess
from pathlib import Path
from typing import Any, Iterator, Optional

import pytest
from support import STACKS, rendered

from components.offline import render
ROOT = Path(__file__).resolve().parent.parent
# The annotation prefixes checkov honours as skips (checkov.kubernetes.kubernetes_utils).
SKIP_PREFIXES = ("checkov.io/skip", "bridgecrew.io/skip", "cortex.io/skip")
# checkov splits the value on "=": exactly one, a check id before it and a reason after it.
SKIP_VALUE = re.compile(r"^(CKV2?_K8S_\d+)=([^=]*\S[^=]*)$")


def checkov_executable() -> Optional[str]:
    explicit = os.environ.get("RLTRAIN_CHECKOV")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    local = ROOT / ".venv-scan" / "bin" / "checkov"
    if local.is_file():
        return str(local)
    return shutil.which("checkov")


def _report(output: str, check_type: str) -> dict[str, Any]:
    data = json.loads(output)
    # One framework gives one report object; several give a list of them.
    reports = data if isinstance(data, list) else [data]
    found = [r for r in reports if r.get("check_type") == check_type]
    assert len(found) == 1, f"no {check_type} report in checkov's output: {output[:500]}"
    return found[0]


CANARIES = ("canary.yaml", "canary.json")


def _write_canaries(directory: Path) -> None:
    rng = random.Random(7)  # generated, so no key-shaped literal sits in the repository
    key = "AKIA" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))
    (directory / "canary.yaml").write_text(f"# positive control for the secrets scan\naws_access_key_id: {key}\n")
    (directory / "canary.json").write_text(json.dumps({"inputs": {"AWS_ACCESS_KEY_ID": key}}) + "\n")


@pytest.fixture(scope="module")
def checkov_report(tmp_path_factory) -> dict[str, Any]:
    exe = checkov_executable()
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("checkov not found: .ci/run installs it from requirements-scan.txt into .venv-scan "
                        "(or set RLTRAIN_CHECKOV to the executable)")
        pytest.skip("checkov not installed: python3 -m venv .venv-scan && "
                    ".venv-scan/bin/pip install -r requirements-scan.txt (or set RLTRAIN_CHECKOV)")
    directory = tmp_path_factory.mktemp("checkov")
    for stack in STACKS:
        (directory / f"{stack}.yaml").write_text(render.manifests_yaml(rendered(stack).manifests))
        (directory / f"{stack}.resources.json").write_text(render.resources_json(rendered(stack).result))
    _write_canaries(directory)
    proc = subprocess.run(
        [exe, "--framework", "kubernetes", "secrets", "-d", str(directory), "-o", "json", "--compact",
         "--skip-download"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    # Exit 1 means failed checks (asserted per stack below); anything else is checkov itself failing.
    assert proc.returncode in (0, 1) and proc.stdout.strip(), (
        f"{exe} exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\nstderr: {proc.stderr[-4000:]}")
    report = _report(proc.stdout, "kubernetes")
    assert report["summary"]["parsing_errors"] == 0, report["summary"]
    report["secrets"] = _report(proc.stdout, "secrets")
    return report


def _of_stack(checks: list[dict[str, Any]], stack: str) -> list[dict[str, Any]]:
    return [c for c in checks if Path(c["file_path"]).name == f"{stack}.yaml"]


@pytest.mark.parametrize("stack", STACKS)
def test_checkov_finds_nothing(checkov_report, stack):
    results = checkov_report["results"]
    version = checkov_report["summary"].get("checkov_version")
    # The file was scanned at all (a file checkov does not recognise would pass vacuously).
    assert _of_stack(results.get("passed_checks", []), stack), f"checkov {version} scanned nothing in {stack}"
    failed = _of_stack(results.get("failed_checks", []), stack)
    assert not failed, f"checkov {version}, stack {stack}: {len(failed)} failed:\n" + "\n".join(
        sorted(f"  {c['check_id']} {c['check_name']!r} on {c['resource']}" for c in failed))
    unexplained = [c for c in _of_stack(results.get("skipped_checks", []), stack)
                   if (c["check_result"].get("suppress_comment") or "No comment provided") == "No comment provided"]
    assert not unexplained, [(c["check_id"], c["resource"]) for c in unexplained]


def _metadata(value: Any) -> Iterator[dict[str, Any]]:
    """Every `metadata` mapping in a manifest: the object's and its pod templates' (Jobs, MPIJob replicas)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "metadata" and isinstance(item, dict):
                yield item
            yield from _metadata(item)
    elif isinstance(value, list):
        for item in value:
            yield from _metadata(item)


@pytest.mark.parametrize("stack", STACKS)
def test_every_checkov_skip_has_a_reason(stack):
    bad, seen = [], 0
    for doc in rendered(stack).manifests:
        where = f"{doc['kind']}/{doc['metadata']['name']}"
        for meta in _metadata(doc):
            for key, value in (meta.get("annotations") or {}).items():
                if any(key.startswith(p) for p in SKIP_PREFIXES):
                    seen += 1
                    if not SKIP_VALUE.match(str(value)):
                        bad.append(f"{where}: {key}: {value!r}")
    assert seen, f"{stack}: no checkov skip annotation at all (the test would pass vacuously)"
    assert not bad, "checkov skips need 'CKV_K8S_NN=reason' (one '=', a non-blank reason):\n" + "\n".join(bad)



@pytest.mark.parametrize("stack", STACKS)
def test_checkov_secrets_finds_nothing(checkov_report, stack):
    """checkov's secrets framework on the manifests and the resource record: 0, no skip, no baseline."""
    secrets = checkov_report["secrets"]
    files = {f"{stack}.yaml", f"{stack}.resources.json"}
    results = secrets["results"]
    failed = [c for c in results.get("failed_checks", []) if Path(c["file_path"]).name in files]
    assert not failed, "\n".join(sorted(f"  {c['check_id']} {c['check_name']!r} in {c['file_path']} "
                                        f"line {c.get('file_line_range')}" for c in failed))
    assert not results.get("skipped_checks"), results.get("skipped_checks")
    assert not (ROOT / ".checkov.baseline").exists()


def test_checkov_secrets_scans_yaml_and_json(checkov_report):
    """The positive control: the generated key is reported in both canary files."""
    failed = checkov_report["secrets"]["results"].get("failed_checks", [])
    assert set(CANARIES) <= {Path(c["file_path"]).name for c in failed}, failed
