"""Day two on the real engine (issue 18): changes the impact table predicts, applied for real to the
`sim` stack on the simulated p5 cluster, each compared resource by resource with the real preview.

One deployment for the module, changed step by step (the order of the tests is the order of the
days). For each change: the offline impact (the render of the changed copy classified against the
render before it, `components/offline/impact.py`) and the real `pulumi preview` (each resource's
operation from the engine's events) are printed side by side and must agree; then `up`, and the
cluster is checked (which runs kept their uid, which were recreated, no AlreadyExists).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from conftest import ENABLE, log, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from simdeploy import (NAMESPACE, ROOT, RUNS_TIMEOUT, STACK, Pulumi, engine_warnings, job_complete,  # noqa: E402
                       mpijob_succeeded, project, wait)

from components.offline import impact, render  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

RUNS = ("rltrain-validation", "rltrain-training", "rltrain-multinode")
# What an offline impact kind means for the engine's plan of that resource.
OFFLINE_OP = {impact.CREATE: "create", impact.DELETE: "delete", impact.IN_PLACE: "update",
              impact.SERVING_RESTART: "update", impact.REPLACE: "replace", impact.DATA_LOSS: "replace",
              impact.RUN_RESTART: "replace", impact.CHECK_RERUN: "replace", impact.NEVER_FINISHES: "replace"}


def real_op(ops: list[str]) -> str:
    """One word per resource from the engine's step events (a replacement is reported as
    create-replacement / replace / delete-replaced; refresh and read steps are not changes)."""
    ops = [o for o in ops if o not in ("refresh", "read")]
    for word, found in (("replace", {"replace", "create-replacement", "delete-replaced"}), ("create", {"create"}),
                        ("delete", {"delete"}), ("update", {"update"})):
        if found & set(ops):
            return word
    return "same"


class Live:
    """The deployment under test: its program copy, the real CLI, the last offline record."""

    def __init__(self, cluster, workdir: Path, request):
        self.cluster = cluster
        self.workdir = workdir
        self.project = workdir / "project"
        self.request = request
        self.pulumi = Pulumi(workdir, cluster.kubeconfig, request)
        self.rows = self.offline()
        self.step = 0

    def offline(self) -> list[dict[str, Any]]:
        """The render of the program copy as it is now, run from the copy (its edited scripts)."""
        self.step = getattr(self, "step", 0) + 1
        out, base = self.workdir / f"render-{self.step}", self.workdir / "no-base"
        base.mkdir(exist_ok=True)
        r = subprocess.run([sys.executable, "-m", "components.offline.render", "--stack", STACK, "--project-dir", ".",
                            "--out", str(out), "--base", str(base)], cwd=self.project, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return json.loads((out / "resources.json").read_text())

    def uids(self) -> dict[str, str]:
        out = {}
        for name in RUNS:
            job = self.cluster.get("batch/v1", "Job", name, NAMESPACE)
            out[name] = job["metadata"]["uid"] if job else ""
        mpi = self.cluster.get("kubeflow.org/v2beta1", "MPIJob", "rltrain-nccl-test", NAMESPACE)
        out["rltrain-nccl-test"] = mpi["metadata"]["uid"] if mpi else ""
        return out

    def runs_done(self) -> None:
        wait("every run finished", lambda: all(job_complete(self.cluster, j) for j in RUNS)
             and mpijob_succeeded(self.cluster, "rltrain-nccl-test"), RUNS_TIMEOUT,
             lambda: str({j: (self.cluster.get("batch/v1", "Job", j, NAMESPACE) or {}).get("status") for j in RUNS}))

    def edit_stack(self, edit: Callable[[dict[str, Any]], None]) -> None:
        path = self.project / f"Pulumi.{STACK}.yaml"
        doc = yaml.safe_load(path.read_text())
        edit(doc["config"])
        path.write_text(yaml.safe_dump(doc, sort_keys=False))

    def compare(self, what: str, preview: dict[str, Any]) -> dict[str, str]:
        """The offline impact of the change against the real preview, per Kubernetes resource.
        Returns the agreed operation per resource name; fails on any disagreement."""
        after = self.offline()
        cfg = render.load_stack(STACK, self.project)[2]
        compared = ("kubernetes:", "pulumi:providers:")  # not the components, not the stack
        predicted = {i.name: OFFLINE_OP.get(i.kind, i.kind) for i in impact.classify(self.rows, after, cfg)
                     if i.type.startswith(compared)}
        real = {urn.split("::")[-1]: real_op(e["ops"]) for urn, e in preview["ops"].items()
                if e["type"].startswith(compared)}
        names = sorted(set(real) | set(predicted))
        width = max(len(n) for n in names)
        lines = [f"{what}: {'resource':<{width}}  offline  real preview"]
        bad = []
        for n in names:
            off, got = predicted.get(n, "same"), real.get(n, "same")
            if off == got == "same":
                continue
            mark = "" if off == got else "   <-- DISAGREE"
            lines.append(f"  {n:<{width}}  {off:<8} {got}{mark}")
            if off != got:
                bad.append(n)
        log(self.request, "\n".join(lines))
        assert not bad, "\n".join(lines)
        self.rows = after
        return {n: real.get(n, "same") for n in names}


@pytest.fixture(scope="module")
def live(cluster, tmp_path_factory, request):
    tmp = tmp_path_factory.mktemp("day-two")
    # The changes below restart runs: the stack accepts that, as a stack under test would.
    workdir = project(tmp, {"rltrain:workloads.allowRunRestart": True})
    cluster.reset_storage()
    lv = Live(cluster, workdir, request)
    up = lv.pulumi("up")
    assert not engine_warnings(up), engine_warnings(up)
    lv.runs_done()
    # The base record as deployed: `up` set the secrets in the copy's stack file, which the render
    # reads (set or not set changes the recorded secret inputs).
    lv.rows = lv.offline()
    yield lv
    lv.pulumi("destroy")


def _apply(lv: Live, what: str) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Preview (compared with the offline impact), up, and every run finished again; returns the
    agreed operations and the run uids before and after."""
    before = lv.uids()
    preview = lv.pulumi("preview")
    assert not engine_warnings(preview), engine_warnings(preview)
    ops = lv.compare(what, preview)
    up = lv.pulumi("up")
    assert not engine_warnings(up), engine_warnings(up)
    assert not up["failed"], up["failed"]
    lv.runs_done()
    return ops, before, lv.uids()


def _restarted(before: dict[str, str], after: dict[str, str]) -> set[str]:
    return {name for name in before if before[name] != after[name]}


def test_1_a_script_edit_restarts_only_the_runs_that_mount_it(live):
    script = live.project / "components" / "scripts" / "resume_wrapper.py"
    script.write_text(script.read_text() + "\n# day two: an edit of the resume wrapper\n")
    ops, before, after = _apply(live, "resume_wrapper.py edited")
    # The training runs mount it; validation and the NCCL test do not, and keep their uid.
    assert _restarted(before, after) == {"rltrain-training", "rltrain-multinode"}
    assert ops["workloads-single-node-job"] == ops["workloads-multi-node-job"] == "replace"


def test_2_an_image_tag_restarts_every_run_of_that_image_and_nothing_else(live):
    live.edit_stack(lambda c: c["rltrain:workloads"].update(
        image=c["rltrain:workloads"]["image"].rsplit(":", 1)[0] + ":20260402-000000"))
    ops, before, after = _apply(live, "image tag changed")
    # The NCCL test runs its own image (workloads.ncclTest.image): it keeps its uid.
    assert _restarted(before, after) == {"rltrain-validation", "rltrain-training", "rltrain-multinode"}
    assert {n for n, op in ops.items() if op not in ("same", "replace")} == set(), ops


def test_3_the_nccl_message_size_replaces_only_the_mpijob(live):
    live.edit_stack(lambda c: c["rltrain:workloads"].setdefault("ncclTest", {}).update(messageSizeBytes=1 << 30))
    ops, before, after = _apply(live, "NCCL message size changed")
    assert _restarted(before, after) == {"rltrain-nccl-test"}


def test_6_a_finished_run_refresh_then_up_recreates_nothing(live):
    before = live.uids()
    refreshed = live.pulumi("refresh")
    assert not engine_warnings(refreshed), engine_warnings(refreshed)
    preview = live.pulumi("preview")
    changed = {urn: e["ops"] for urn, e in preview["ops"].items() if real_op(e["ops"]) != "same"}
    assert not changed, changed
    up = live.pulumi("up")
    assert not {u: e["ops"] for u, e in up["ops"].items() if real_op(e["ops"]) != "same"}
    assert live.uids() == before


def test_7_a_run_deleted_by_hand_comes_back_with_up_refresh(live):
    job = live.cluster.resource_path("batch/v1", "Job", "rltrain-training", NAMESPACE)
    live.cluster.api(job + "?propagationPolicy=Background", "DELETE")
    wait("Job rltrain-training deleted", lambda: live.cluster.get("batch/v1", "Job", "rltrain-training", NAMESPACE)
         is None, 60)
    # A plain preview reads the state, not the cluster: nothing to do.
    plain = live.pulumi("preview")
    assert all(real_op(e["ops"]) == "same" for e in plain["ops"].values()), plain["ops"]
    # --refresh reads the cluster first: the Job is gone, so it is created again.
    refreshed = live.pulumi("preview", "--refresh")
    ops = {urn.split("::")[-1]: real_op(e["ops"]) for urn, e in refreshed["ops"].items()}
    assert ops["workloads-single-node-job"] == "create", ops
    assert {n for n, op in ops.items() if op != "same"} == {"workloads-single-node-job"}, ops
    live.pulumi("up", "--refresh")
    wait("the recreated run finished", lambda: job_complete(live.cluster, "rltrain-training"), RUNS_TIMEOUT)
    # Every object of the copy's render (its edited script's ConfigMap included) exists again.
    expected = {(r["inputs"]["apiVersion"], r["inputs"]["kind"], r["inputs"]["metadata"].get("namespace"),
                 r["inputs"]["metadata"]["name"]) for r in live.rows
                if r["type"].startswith("kubernetes:") and "kind" in r["inputs"]}
    missing = [o for o in sorted(expected, key=str) if live.cluster.get(o[0], o[1], o[3], o[2]) is None]
    assert not missing, missing


# (file, text, replaced by, the rule that must refuse it, words of its message)
BROKEN = (
    # A label change replaces the run; in the preview of that replacement the engine hands the
    # policy the new object under a suffixed name (seen: Job/rltrain-training22th9), so the words
    # matched are the rule's own.
    ("components/workloads/job.py", "{**obj_labels, **kueue.queue_labels(cfg)}", "obj_labels", "gpu-runs-queued",
     "requests GPUs without the label kueue.x-k8s.io/queue-name while the stack queues on LocalQueue training"),
    ("components/workloads/pod.py", "            tolerations=gpu_tolerations(),", "            tolerations=[],",
     "schedules-on-gpu-nodes", "does not tolerate taint nvidia.com/gpu"),
)


def test_8_the_policy_pack_in_a_real_preview(live):
    """The pack through the real CLI (`--policy-pack`, as a binary analyzer: cluster/deploy.py), on
    what the engine really sends (a deployed stack's outputs): the stack passes; a GPU run without
    the queue label, and runs without the GPU toleration, fail with the rule's message."""
    pack = str(ROOT / "policy")
    ok = live.pulumi("preview", "--policy-pack", pack)
    assert not [p for p in ok["policy"] if p["level"] == "mandatory"], ok["policy"]
    for rel, old, new, rule, words in BROKEN:
        path = live.project / rel
        text = path.read_text()
        assert text.count(old) == 1, (rel, old)
        path.write_text(text.replace(old, new))
        try:
            res = live.pulumi("preview", "--policy-pack", pack, check=False)
        finally:
            path.write_text(text)
        hits = [p for p in res["policy"] if p["policy"] == rule]
        log(live.request, f"broken ({rel}): {rule}: {[p['message'][:160] for p in hits]}")
        assert not res["ok"] and any(words in p["message"] for p in hits), res["policy"]
        assert all(p["level"] == "mandatory" for p in hits)
