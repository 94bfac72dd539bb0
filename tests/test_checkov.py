"""checkov (`--framework kubernetes`) reports no failed check on any render, custom resources' pods included,
and every skip annotation is true of the object it sits on.

What is scanned (components/offline/scan_report.py): each stack's objects, and p5 in the multi-node forms
no stack file uses (FORM_VARIANTS); the pod templates inside custom resources (MPIJob replicas, RayJob
groups), which checkov's kubernetes framework does not look into, as standalone Pods carrying the
template's labels and the custom resource's skips for that pod set; and copies of all of it with every
skip annotation removed.
The skips are generated from the pod they sit on (components/k8s/security.py). Held here:
- with the skips: 0 failed, on every render;
- without them: each object fails exactly the checks it skips (no skip for a check it passes, or for a
  check checkov does not run on its kind, and no failure hidden by anything but its own skip);
- each reason is `<what the pod does>: <why>`: the first part is recomputed here from the rendered pod
  (independently of security.py) and must match; the second is its workload's documented reason for
  that check (REASONS);
- the skips sit on the object checkov scans, never on a pod template; a custom resource's are split by
  pod set onto its templates' Pods;
- the report block of docs/security.md is what components.offline.scan_report prints for these renders.

checkov lives in its own virtual environment because its dependency pins clash with the project's
(requirements-scan.txt). The executable: $RLTRAIN_CHECKOV, else `.venv-scan/bin/checkov` under the repo
root, else `checkov` on PATH. Without one the checkov tests are skipped, except under CI (env CI set),
where they fail.

checkov's start-up (~5 s of imports) dominates its run time, so it runs once, over a directory holding
every render's files, with two frameworks: `kubernetes` on the manifests and `secrets` (checkov's own
secret detectors) on every file, manifests and `resources.json` alike. The secrets scan has no skip and
no baseline file: it must report 0 on every render. Two canary files with a generated AWS key id (YAML
and JSON) are scanned beside them and must be reported, so a secrets run that scans nothing cannot pass.
`--skip-download`: no call to the Prisma Cloud API (the run is offline).
"""

from __future__ import annotations

import collections
import copy
import functools
import importlib
import json
import os
import random
import re
import string
from pathlib import Path
from typing import Any, Optional

import pytest
from support import STACKS, rendered

from components.k8s import monitoring
from components.offline import render, scan_report
from components.k8s import security
from components.workloads import gate, multinode, nccl, node_health_access, staging, validation

ROOT = Path(__file__).resolve().parent.parent
SKIP_PREFIXES = scan_report.SKIP_PREFIXES
# checkov splits the value on "=": exactly one, a check id before it and a reason after it.
SKIP_VALUE = re.compile(r"^(CKV2?_K8S_\d+)=([^=]*\S[^=]*)$")
VARIANTS = tuple(scan_report.variants())
RENDERS = (*STACKS, *VARIANTS)
REGENERATE = ".venv/bin/python -m components.offline.scan_report --readme"

# Each skip-bearing object's documented reasons (the *why* of its skips): a reason copied from another
# workload fails here. Keys: `Kind/name`, or for a custom resource's pod template its owner and path.
REASONS = {
    "Job/rltrain-training": security.TRAINING,
    "Job/rltrain-multinode": security.TRAINING,
    # dev-reasoning's named runs (workloads.runs): the training pod's reasons
    "Job/rltrain-run-lr-2e-6": security.TRAINING,
    "Job/rltrain-run-lr-5e-7": security.TRAINING,
    "Deployment/rltrain-curves": "components.workloads.curves:SKIP_REASONS",
    "StatefulSet/rltrain-multinode": multinode.STATEFULSET_SKIP_REASONS,
    "Job/rltrain-validation": validation.SKIP_REASONS,
    "Job/rltrain-staging": staging.SKIP_REASONS,
    # the trained policy's life (every stack with a resume mapping; dev-reasoning serves)
    "CronJob/rltrain-checkpoint-retention": "components.workloads.retention:SKIP_REASONS",
    "Job/rltrain-export-step-200": "components.workloads.export:SKIP_REASONS",
    "Deployment/rltrain-serving": "components.workloads.serving:SKIP_REASONS",
    "CronJob/rltrain-evaluation": "components.workloads.evaluation:SKIP_REASONS",
    "Deployment/rltrain-eval-metrics": "components.workloads.evaluation:METRICS_SKIP_REASONS",
    # the checks' gate (a stack with workloads.trainingAfterChecks: sim)
    "Job/rltrain-nccl-test-gate": gate.SKIP_REASONS,
    "DaemonSet/rltrain-efa-metrics": monitoring.EFA_SKIP_REASONS,
    "MPIJob/rltrain-nccl-test spec.mpiReplicaSpecs.Launcher.template": nccl.SKIP_REASONS["Launcher"],
    "MPIJob/rltrain-nccl-test spec.mpiReplicaSpecs.Worker.template": nccl.SKIP_REASONS["Worker"],
    # the RayJob form (p5-rayjob), named lazily: imported only where a render holds it
    "RayJob/rltrain-multinode spec.rayClusterSpec.headGroupSpec.template": "components.workloads.rayjob:SKIP_REASONS",
    "RayJob/rltrain-multinode spec.rayClusterSpec.workerGroupSpecs[0].template":
        "components.workloads.rayjob:SKIP_REASONS",
}


# Workloads that mount a service-account token (CKV_K8S_38) say why in a constant of their own, not a
# Reasons field: the gate, and the Ray launcher forms (the head reads its run's nodes).
TOKEN_SKIPS = {"Job/rltrain-nccl-test-gate": gate.TOKEN_SKIP, "Job/rltrain-multinode": node_health_access.TOKEN_SKIP,
               "StatefulSet/rltrain-multinode": node_health_access.TOKEN_SKIP}


def reasons_of(key: str) -> Optional[security.Reasons]:
    found = REASONS.get(key)
    if isinstance(found, str):
        module, attr = found.split(":")
        found = getattr(importlib.import_module(module), attr)
    return found


@functools.lru_cache(maxsize=None)
def renders() -> dict[str, list[dict[str, Any]]]:
    out = {stack: rendered(stack).manifests for stack in STACKS}
    out.update({name: scan_report.render_variant(name) for name in VARIANTS})
    return out


def _key(doc: dict[str, Any]) -> str:
    source = ((doc.get("metadata") or {}).get("annotations") or {}).get(scan_report.SOURCE_ANNOTATION)
    return source or f"{doc['kind']}/{doc['metadata']['name']}"


def _scanned_pod_kinds(render_name: str) -> list[dict[str, Any]]:
    """What checkov scans of a render with pod checks: built-in workloads and the CRD templates' Pods."""
    return [d for d in scan_report.scanned(renders()[render_name]) if d["kind"] in scan_report.POD_KINDS]


# ---------------------------------------------------------------------------------------------
# the claims of a skip reason, recomputed from the rendered pod (not with security.py's code)


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    if doc["kind"] == "Pod":
        return doc["spec"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return doc["spec"]["template"]["spec"]


def _sc(c: dict[str, Any]) -> dict[str, Any]:
    return c.get("securityContext") or {}


def _effective(spec: dict[str, Any], c: dict[str, Any], key: str) -> Any:
    own = _sc(c).get(key)
    return own if own is not None else (spec.get("securityContext") or {}).get(key)


def _secret_env(c: dict[str, Any]) -> list[str]:
    return sorted([e["name"] for e in c.get("env") or [] if "secretKeyRef" in (e.get("valueFrom") or {})]
                  + [f"envFrom[{i}]" for i, e in enumerate(c.get("envFrom") or []) if "secretRef" in e])


# checkov 3.3.x: does this container fail the check (its conditions, for the checks our pods fail)
FAILS = {
    "CKV_K8S_8": lambda spec, c: not c.get("livenessProbe"),
    "CKV_K8S_9": lambda spec, c: not c.get("readinessProbe"),
    "CKV_K8S_11": lambda spec, c: not ((c.get("resources") or {}).get("limits") or {}).get("cpu"),
    "CKV_K8S_15": lambda spec, c: "@" not in c["image"] and c.get("imagePullPolicy") != "Always",
    "CKV_K8S_22": lambda spec, c: not _sc(c).get("readOnlyRootFilesystem"),
    "CKV_K8S_23": lambda spec, c: (_effective(spec, c, "runAsNonRoot") is not True
                                   and not (_effective(spec, c, "runAsUser") or 0) >= 1),
    "CKV_K8S_25": lambda spec, c: bool((_sc(c).get("capabilities") or {}).get("add")),
    "CKV_K8S_35": lambda spec, c: bool(_secret_env(c)),
    "CKV_K8S_40": lambda spec, c: spec.get("hostUsers") is not False and not (_effective(spec, c, "runAsUser") or 0) >= 10000,
    "CKV_K8S_43": lambda spec, c: "@" not in c["image"],
    "CKV_K8S_38": lambda spec, c: spec.get("automountServiceAccountToken") is not False,
}


def _join(items) -> str:
    return ", ".join(sorted(items))


def _user_and_capabilities(spec: dict[str, Any], cs: list[dict[str, Any]]) -> str:
    uids = {"unset" if _effective(spec, c, "runAsUser") is None else str(_effective(spec, c, "runAsUser")) for c in cs}
    non_root = {"unset" if _effective(spec, c, "runAsNonRoot") is None else str(_effective(spec, c, "runAsNonRoot")).lower()
                for c in cs}
    user = ("no runAsUser or runAsNonRoot" if uids == non_root == {"unset"}
            else f"runAsUser {_join(uids)}, runAsNonRoot {_join(non_root)}")
    drops_all = all("ALL" in ((_sc(c).get("capabilities") or {}).get("drop") or []) for c in cs)
    added = {a for c in cs for a in ((_sc(c).get("capabilities") or {}).get("add") or [])}
    if drops_all:
        caps = f"every capability dropped but {_join(added)}" if added else "every capability dropped"
    else:
        caps = "capabilities not all dropped" + (f", adds {_join(added)}" if added else "")
    return f"{user}, {caps}"


FACTS = {
    "CKV_K8S_8": lambda spec, cs: "no liveness probe",
    "CKV_K8S_9": lambda spec, cs: "no readiness probe",
    "CKV_K8S_11": lambda spec, cs: "no CPU limit",
    "CKV_K8S_15": lambda spec, cs: f"imagePullPolicy {_join({c.get('imagePullPolicy') or 'unset' for c in cs})}, "
                                   "image by tag",
    "CKV_K8S_22": lambda spec, cs: "writable root filesystem",
    "CKV_K8S_23": _user_and_capabilities,
    "CKV_K8S_25": lambda spec, cs: "adds capabilities " + _join(
        {a for c in cs for a in _sc(c)["capabilities"]["add"]}),
    "CKV_K8S_35": lambda spec, cs: "Secret values in env " + _join({n for c in cs for n in _secret_env(c)}),
    "CKV_K8S_40": _user_and_capabilities,
    "CKV_K8S_43": lambda spec, cs: "image by tag, not digest",
    "CKV_K8S_38": lambda spec, cs: f"automountServiceAccountToken {str(spec.get('automountServiceAccountToken')).lower()}",
}


def claim_problems(doc: dict[str, Any], reasons: Optional[security.Reasons]) -> list[str]:
    """What is untrue in the skip reasons of a scanned object (empty: every claim holds)."""
    spec = _pod_spec(doc)
    containers = spec.get("containers") or []
    problems = []
    for check, reason in security.parse((doc.get("metadata") or {}).get("annotations")).items():
        fact, sep, why = reason.partition(": ")
        if not sep or not why.strip():
            problems.append(f"{check}: {reason!r} is not '<what the pod does>: <why>'")
            continue
        if check not in FAILS:
            problems.append(f"{check}: no check of its claims here (FAILS, FACTS): {reason!r}")
            continue
        if check in ("CKV_K8S_8", "CKV_K8S_9") and doc["kind"] in ("Job", "CronJob"):
            problems.append(f"{check}: checkov does not check probes in a {doc['kind']}")
        failing = [c for c in containers if FAILS[check](spec, c)]
        if not failing:
            problems.append(f"{check}: the pod passes it, yet the skip says {fact!r}")
            continue
        expected = FACTS[check](spec, failing)
        if len(failing) < len(containers):
            expected += f" (in containers {_join(c['name'] for c in failing)})"
        if fact != expected:
            problems.append(f"{check}: says {fact!r}, the pod shows {expected!r}")
        # A token skip is the workload's own constant (TOKEN_SKIPS), not a Reasons field.
        if reasons is None:
            continue
        documented = (getattr(reasons, security.FIELDS[check]) if check in security.FIELDS
                      else dict([TOKEN_SKIPS.get(_key(doc), gate.TOKEN_SKIP)]).get(check, "").partition(": ")[2])
        if why != documented:
            problems.append(f"{check}: the reason {why!r} is not the workload's ({documented!r})")
    return problems


@pytest.mark.parametrize("name", RENDERS)
def test_skip_reasons_are_true(name):
    problems = []
    for doc in _scanned_pod_kinds(name):
        if not security.parse(doc["metadata"].get("annotations")):
            continue
        if _key(doc) not in REASONS:
            problems.append(f"{_key(doc)}: skips, but REASONS (tests/test_checkov.py) does not name its workload's "
                            "documented reasons")
        problems += [f"{_key(doc)}: {p}" for p in claim_problems(doc, reasons_of(_key(doc)))]
    assert not problems, f"{name}:\n" + "\n".join(problems)


def _worker_doc() -> dict[str, Any]:
    return copy.deepcopy(next(d for d in _scanned_pod_kinds("p5")
                              if _key(d) == "MPIJob/rltrain-nccl-test spec.mpiReplicaSpecs.Worker.template"))


def _training_doc() -> dict[str, Any]:
    return copy.deepcopy(next(d for d in _scanned_pod_kinds("p5") if _key(d) == "Job/rltrain-training"))


def _set_skip(doc: dict[str, Any], check: str, reason: str) -> None:
    annotations = doc["metadata"]["annotations"]
    key = next((k for k, v in annotations.items() if k.startswith("checkov.io/skip") and v.startswith(check + "=")),
               f"checkov.io/skip{len(annotations) + 1}")
    annotations[key] = f"{check}={reason}"


def test_untrue_claims_are_caught():
    """The checker itself: the claims the old hand-written skips made, and others, on pods they do not fit."""
    assert claim_problems(_training_doc(), security.TRAINING) == []
    assert claim_problems(_worker_doc(), nccl.SKIP_REASONS["Worker"]) == []
    # "no CPU limit" on a pod that has one
    doc = _training_doc()
    doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "180"
    assert any("CKV_K8S_11: the pod passes it" in p for p in claim_problems(doc, None))
    # "every capability dropped" on a container that adds nine
    doc = _worker_doc()
    _set_skip(doc, "CKV_K8S_23", "no runAsUser or runAsNonRoot, every capability dropped: sshd")
    assert any(p.startswith("CKV_K8S_23: says") for p in claim_problems(doc, None))
    # the capabilities it adds, listed wrong
    _set_skip(doc, "CKV_K8S_25", "adds capabilities SETUID: sshd")
    assert any(p.startswith("CKV_K8S_25: says") for p in claim_problems(doc, None))
    # the trainer's reason on the NCCL worker
    doc = _worker_doc()
    _set_skip(doc, "CKV_K8S_11", "no CPU limit: " + security.TRAINING.no_cpu_limit)
    assert any("is not the workload's" in p for p in claim_problems(doc, nccl.SKIP_REASONS["Worker"]))
    # a skip of a check the object passes, and a probe skip on a Job
    doc = _training_doc()
    _set_skip(doc, "CKV_K8S_25", "adds capabilities NET_ADMIN: no")
    _set_skip(doc, "CKV_K8S_8", "no liveness probe: D3")
    problems = claim_problems(doc, None)
    assert any("CKV_K8S_25: the pod passes it" in p for p in problems)
    assert any("CKV_K8S_8: checkov does not check probes in a Job" in p for p in problems)
    # a secret env the pod does not have, and a reason without the fact
    _set_skip(doc, "CKV_K8S_35", "Secret values in env WANDB_API_KEY: tokens")
    _set_skip(doc, "CKV_K8S_22", "caches")
    problems = claim_problems(doc, None)
    assert any(p.startswith("CKV_K8S_35: says") for p in problems)
    assert any(p.startswith("CKV_K8S_22: 'caches' is not") for p in problems)


@pytest.mark.parametrize("name", RENDERS)
def test_every_checkov_skip_has_a_reason(name):
    bad, seen = [], 0
    for doc in scan_report.scanned(renders()[name]):
        for meta in _metadata(doc):
            for key, value in (meta.get("annotations") or {}).items():
                if any(key.startswith(p) for p in SKIP_PREFIXES):
                    seen += 1
                    if not key.startswith(security.SKIP_PREFIX) or not SKIP_VALUE.match(str(value)):
                        bad.append(f"{_key(doc)}: {key}: {value!r}")
    assert seen, f"{name}: no checkov skip annotation at all (the test would pass vacuously)"
    assert not bad, "checkov skips need 'checkov.io/skipN: CKV_K8S_NN=reason' (one '=', a non-blank reason):\n" + \
        "\n".join(bad)


def _metadata(value: Any):
    """Every `metadata` mapping in a manifest: the object's and its pod templates'."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "metadata" and isinstance(item, dict):
                yield item
            yield from _metadata(item)
    elif isinstance(value, list):
        for item in value:
            yield from _metadata(item)


@pytest.mark.parametrize("name", RENDERS)
def test_skips_sit_on_the_scanned_object(name):
    """On the object checkov scans, never on a pod template (a reason's wording must not restart a run);
    a custom resource's skips name only pod sets it has, and its templates' Pods get their part."""
    problems = []
    for doc in renders()[name]:
        for path, template in scan_report.pod_templates(doc.get("spec"), ("spec",)):
            if security.parse((template.get("metadata") or {}).get("annotations")):
                problems.append(f"{_key(doc)}: skip annotations on {scan_report.dotted(path)}")
        if doc["kind"] in scan_report.POD_KINDS:
            continue
        own = security.parse(doc["metadata"].get("annotations"))
        pods = {p["metadata"]["annotations"][scan_report.SOURCE_ANNOTATION]: p for p in scan_report.crd_pods(doc)}
        sets = {scan_report.pod_set_of(doc, path) for path, _ in scan_report.pod_templates(doc.get("spec"), ("spec",))}
        for check, reason in own.items():
            named = re.findall(r"(?:^|\| )\[([^\]]+)\] ", reason)
            if set(named) - sets:
                problems.append(f"{_key(doc)}: {check} names pod sets {sorted(set(named) - sets)}; it has {sorted(sets)}")
        carried = {c for p in pods.values() for c in security.parse(p["metadata"]["annotations"])}
        if carried != set(own):
            problems.append(f"{_key(doc)}: skips {sorted(own)}, its pods carry {sorted(carried)}")
    assert not problems, f"{name}:\n" + "\n".join(problems)


def test_crd_pod_templates_become_pods():
    """A RayJob's head and worker groups and an MPIJob's replicas, as checkov-scannable Pods."""
    def template(role):
        return {"metadata": {"labels": {"rltrain/run": "r"}, "annotations": {"role": role}},
                "spec": {"containers": [{"name": "ray", "image": "i:1"}]}}
    skips = {"checkov.io/skip1": "CKV_K8S_8=no liveness probe: k", "checkov.io/skip2": "CKV_K8S_11=[gpu] no CPU limit: c"}
    rayjob = {"apiVersion": "ray.io/v1", "kind": "RayJob",
              "metadata": {"name": "run", "namespace": "ns", "annotations": skips},
              "spec": {"entrypoint": "python x.py", "rayClusterSpec": {
                  "headGroupSpec": {"template": template("head")},
                  "workerGroupSpecs": [{"groupName": "gpu", "template": template("workers")}]}}}
    pods = scan_report.crd_pods(rayjob)
    assert [(p["kind"], p["metadata"]["name"], p["metadata"]["namespace"]) for p in pods] == [
        ("Pod", "run-head", "ns"), ("Pod", "run-gpu", "ns")]
    assert [p["metadata"]["annotations"][scan_report.SOURCE_ANNOTATION] for p in pods] == [
        "RayJob/run spec.rayClusterSpec.headGroupSpec.template",
        "RayJob/run spec.rayClusterSpec.workerGroupSpecs[0].template"]
    assert pods[1]["metadata"]["labels"] == {"rltrain/run": "r"} and pods[1]["metadata"]["annotations"]["role"] == "workers"
    # each Pod carries the RayJob's skips for its pod set
    assert security.parse(pods[0]["metadata"]["annotations"]) == {"CKV_K8S_8": "no liveness probe: k"}
    assert security.parse(pods[1]["metadata"]["annotations"]) == {"CKV_K8S_8": "no liveness probe: k",
                                                                  "CKV_K8S_11": "no CPU limit: c"}
    assert pods[0]["spec"] == template("head")["spec"]
    # every render's custom resources with pods: the MPIJob's two replica types
    p5 = {_key(p) for d in renders()["p5"] for p in scan_report.crd_pods(d)}
    assert p5 == {"MPIJob/rltrain-nccl-test spec.mpiReplicaSpecs.Launcher.template",
                  "MPIJob/rltrain-nccl-test spec.mpiReplicaSpecs.Worker.template"}
    # built-in kinds are scanned as they are
    assert all(scan_report.crd_pods(d) == [] for d in renders()["p5"] if d["kind"] in scan_report.POD_KINDS)
    # the stripped copy keeps everything but the skips
    stripped = scan_report.strip_skips(scan_report.scanned([rayjob]))
    assert not any(security.parse(d["metadata"]["annotations"]) for d in stripped)
    assert [d["metadata"]["annotations"].get("role") for d in stripped[1:]] == ["head", "workers"]


# ---------------------------------------------------------------------------------------------
# checkov itself


CANARIES = ("canary.yaml", "canary.json")


def _write_canaries(directory: Path) -> None:
    rng = random.Random(7)  # generated, so no key-shaped literal sits in the repository
    key = "AKIA" + "".join(rng.choice(string.ascii_uppercase + string.digits) for _ in range(16))
    (directory / "canary.yaml").write_text(f"# positive control for the secrets scan\naws_access_key_id: {key}\n")
    (directory / "canary.json").write_text(json.dumps({"inputs": {"AWS_ACCESS_KEY_ID": key}}) + "\n")


@pytest.fixture(scope="module")
def checkov_report(tmp_path_factory) -> dict[str, Any]:
    exe = scan_report.checkov_executable(ROOT)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("checkov not found: .ci/run installs it from requirements-scan.txt into .venv-scan "
                        "(or set RLTRAIN_CHECKOV to the executable)")
        pytest.skip("checkov not installed: python3 -m venv .venv-scan && "
                    ".venv-scan/bin/pip install -r requirements-scan.txt (or set RLTRAIN_CHECKOV)")
    directory = tmp_path_factory.mktemp("checkov")
    scan_report.write_inputs(directory, renders())
    for stack in STACKS:
        (directory / f"{stack}.resources.json").write_text(render.resources_json(rendered(stack).result))
    _write_canaries(directory)
    reports = scan_report.run_checkov(exe, directory, ("kubernetes", "secrets"))
    report = reports["kubernetes"]
    assert report["summary"]["parsing_errors"] == 0, report["summary"]
    report["secrets"] = reports["secrets"]
    return report


def _assert_nothing_failed(report: dict[str, Any], name: str) -> None:
    version = report["summary"].get("checkov_version")
    file = f"{name}.yaml"
    # The file was scanned at all (a file checkov does not recognise would pass vacuously).
    assert scan_report.results_of(report, file, "passed"), f"checkov {version} scanned nothing in {name}"
    failed = scan_report.results_of(report, file, "failed")
    assert not failed, f"checkov {version}, {name}: {len(failed)} failed:\n" + "\n".join(
        sorted(f"  {c['check_id']} {c['check_name']!r} on {c['resource']}" for c in failed)) + (
        "\nA pod of a custom resource (Pod.*) needs the skips security.annotate_pods writes on its template.")
    unexplained = [c for c in scan_report.results_of(report, file, "skipped")
                   if (c["check_result"].get("suppress_comment") or "No comment provided") == "No comment provided"]
    assert not unexplained, [(c["check_id"], c["resource"]) for c in unexplained]
    # the custom resources' pods were scanned too
    crd_pods = [p for d in renders()[name] for p in scan_report.crd_pods(d)]
    resources = {c["resource"] for o in ("passed", "skipped") for c in scan_report.results_of(report, file, o)}
    missing = [p["metadata"]["name"] for p in crd_pods if not any(r.endswith("." + p["metadata"]["name"])
                                                                   and r.startswith("Pod.") for r in resources)]
    assert not missing, f"{name}: the pods of custom resources were not scanned: {missing}"


@pytest.mark.slow  # runs checkov over every render
@pytest.mark.parametrize("stack", STACKS)
def test_checkov_finds_nothing(checkov_report, stack):
    _assert_nothing_failed(checkov_report, stack)


@pytest.mark.slow  # runs checkov over every render
@pytest.mark.parametrize("variant", VARIANTS)
def test_checkov_finds_nothing_in_form_variant(checkov_report, variant):
    _assert_nothing_failed(checkov_report, variant)


@pytest.mark.slow  # runs checkov over every render
@pytest.mark.parametrize("name", RENDERS)
def test_each_object_skips_exactly_what_it_fails(checkov_report, name):
    """Without the skips, checkov fails each object on exactly the checks it skips."""
    def by_resource(results):
        out = collections.defaultdict(set)
        for c in results:
            out[c["resource"]].add(c["check_id"])
        return out

    skipped = by_resource(scan_report.results_of(checkov_report, f"{name}.yaml", "skipped"))
    failed = by_resource(scan_report.results_of(checkov_report, f"{name}.noskip.yaml", "failed"))
    annotated = {}
    for doc in scan_report.isolate(scan_report.scanned(renders()[name]), name):
        if doc["kind"] in scan_report.POD_KINDS:
            checks = set(security.parse(doc["metadata"].get("annotations")))
            if checks:
                annotated[f"{doc['kind']}.{doc['metadata']['namespace']}.{doc['metadata']['name']}"] = checks
    assert failed, f"{name}: nothing fails without the skips (the stripped copy was not scanned?)"
    problems = [f"{r}: skip annotations {sorted(annotated.get(r, ()))}, checkov skipped {sorted(skipped.get(r, ()))}, "
                f"fails without them {sorted(failed.get(r, ()))}"
                for r in sorted(set(skipped) | set(failed) | set(annotated))
                if not annotated.get(r, set()) == skipped.get(r, set()) == failed.get(r, set())]
    assert not problems, f"{name}:\n" + "\n".join(problems)


@pytest.mark.slow  # runs checkov over every render
def test_security_page_reports_the_scan(checkov_report):
    block = scan_report.readme_block(scan_report.README.read_text())
    assert block is not None, f"docs/security.md has no scan report block: add the markers and run {REGENERATE}"
    expected = scan_report.markdown(renders(), checkov_report)
    assert block == expected, f"docs/security.md's scan report is stale: run {REGENERATE}"


@pytest.mark.slow  # runs checkov over every render
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


@pytest.mark.slow  # runs checkov over every render
def test_checkov_secrets_scans_yaml_and_json(checkov_report):
    """The positive control: the generated key is reported in both canary files."""
    failed = checkov_report["secrets"]["results"].get("failed_checks", [])
    assert set(CANARIES) <= {Path(c["file_path"]).name for c in failed}, failed
