"""cluster/preview_compare.py: the simulated-cluster preview's real operations beside the offline
impact, per resource, on the committed sim record and a recorded-shape preview (the `ops` of
`python -m cluster.deploy preview --json`): agreement said once, a disagreement named, a refusal
of the impact guard shown as such, a failed real preview said first."""

from __future__ import annotations

import copy
import json

from cluster import preview_compare
from components.offline import unset_secrets
from components.offline.mock_engine import ROOT

BEFORE = json.loads((ROOT / "rendered" / "sim" / "resources.json").read_text())
CFG = unset_secrets.load_stack("sim", ROOT)[2]
URN = "urn:pulumi:sim::rltrain::rltrain:index:Workloads$kubernetes:batch/v1:Job::{}"


def with_image(rows: list[dict], tag: str) -> list[dict]:
    """The record after an image change: every Job of the training image gets the new tag."""
    out = copy.deepcopy(rows)
    for r in out:
        if r["type"] == "kubernetes:batch/v1:Job":
            for c in r["inputs"]["spec"]["template"]["spec"]["containers"]:
                if "/rlinf:" in c["image"]:
                    c["image"] = c["image"].rsplit(":", 1)[0] + ":" + tag
    return out


def preview(ops: dict[str, list[str]], ok: bool = True) -> dict:
    return {"ok": ok, "error": "" if ok else "error: the API server refused", "summary": {},
            "ops": {URN.format(name): {"type": "kubernetes:batch/v1:Job", "ops": o} for name, o in ops.items()}}


JOBS = ("workloads-multi-node-job", "workloads-single-node-job", "workloads-staging-job", "workloads-validation-job")


def test_an_image_change_agrees_with_the_engines_replacements():
    after = with_image(BEFORE, "20261202-000000")
    real = preview({n: ["create-replacement", "replace", "delete-replaced"] for n in JOBS}
                   | {"workloads-nccl-test-gate-job": ["same"]})
    rows = preview_compare.compare(BEFORE, after, CFG, real)
    assert {r[0] for r in rows} == set(JOBS) and all(r[4] for r in rows), rows
    md = preview_compare.markdown(rows, real, "Real preview of `sim`")
    assert "| `workloads-single-node-job` | **" not in md  # kinds are plain words in this table
    assert "| `workloads-single-node-job` | run restart | replace |  |" in md
    assert "The offline impact and the real engine agree on every resource." in md


def test_a_disagreement_is_named():
    after = with_image(BEFORE, "20261202-000000")
    real = preview({n: ["update"] if n == "workloads-staging-job" else ["replace"] for n in JOBS})
    md = preview_compare.markdown(preview_compare.compare(BEFORE, after, CFG, real), real, "t")
    assert "| `workloads-staging-job` | " in md and "| update | **disagree** |" in md
    assert "disagree on 1 resource(s)**: `workloads-staging-job` (offline replace, real update)" in md


def test_no_change_and_a_failed_preview():
    real = preview({}, ok=False)
    md = preview_compare.markdown(preview_compare.compare(BEFORE, BEFORE, CFG, real), real, "t")
    assert md.index("**The real preview failed**") < md.index("No change, offline and in the real preview.")
    assert "error: the API server refused" in md
