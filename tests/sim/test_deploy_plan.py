"""The deploy on merge's contract on the real engine (docs/pr-review.md "Deploy on merge"): an update
plan saved by a refreshed preview (`--save-plan`, what the pull request's preview job does) is applied
by `up --plan`; a plan that no longer describes what the program does (main moved after the review) or
what is live (drift after the review) makes `up --plan` fail, and what the plan did not allow is not
applied. The `sim` stack on the simulated p5 cluster, through python -m cluster.deploy (the real CLI,
engine, file backend and Kubernetes provider; the program inline: docs/simulated-cluster.md).

Run 2026-12-02 (issue 32): passed in about 140 s (up 20 s; the two refused `up --plan` 3 s and 19 s).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import ENABLE, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from simdeploy import NAMESPACE, STACK, Pulumi, project  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]
JOB = "rltrain-training"


def set_tag(workdir: Path, tag: str) -> None:
    path = workdir / "project" / f"Pulumi.{STACK}.yaml"
    doc = yaml.safe_load(path.read_text())
    workloads = doc["config"]["rltrain:workloads"]
    workloads["image"] = workloads["image"].rsplit(":", 1)[0] + ":" + tag
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def image(cluster) -> str:
    job = cluster.get("batch/v1", "Job", JOB, NAMESPACE)
    return job["spec"]["template"]["spec"]["containers"][0]["image"] if job else ""


def test_a_saved_plan_is_applied_and_a_stale_or_drifted_one_is_refused(cluster, tmp_path, request):
    workdir = project(tmp_path, {"rltrain:workloads.allowRunRestart": True})
    cluster.reset_storage()
    pulumi = Pulumi(workdir, cluster.kubeconfig, request)
    pulumi("up")
    try:
        # Reviewed and merged unchanged: the plan applies.
        set_tag(workdir, "20261202-000001")
        reviewed = workdir / "plan-reviewed.json"
        pulumi("preview", "--refresh", "--save-plan", str(reviewed))
        assert reviewed.is_file() and reviewed.stat().st_size > 0
        up = pulumi("up", "--refresh", "--plan", str(reviewed))
        assert up["ok"] and image(cluster).endswith(":20261202-000001")

        # Main moved after the review: the program now wants another image than the plan allows.
        set_tag(workdir, "20261202-000002")
        stale = workdir / "plan-stale.json"
        pulumi("preview", "--refresh", "--save-plan", str(stale))
        set_tag(workdir, "20261202-000003")
        up = pulumi("up", "--refresh", "--plan", str(stale), check=False)
        assert not up["ok"], up["summary"]
        assert image(cluster).endswith(":20261202-000001")  # neither the planned nor the unplanned image

        # Drift after the review: the live Job is deleted by hand; the refreshed `up` must create it,
        # which the plan (made while it existed) does not allow.
        drifted = workdir / "plan-drifted.json"
        pulumi("preview", "--refresh", "--save-plan", str(drifted))
        cluster.api(f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{JOB}?propagationPolicy=Background",
                    method="DELETE")
        up = pulumi("up", "--refresh", "--plan", str(drifted), check=False)
        assert not up["ok"], up["summary"]
    finally:
        pulumi("destroy")
