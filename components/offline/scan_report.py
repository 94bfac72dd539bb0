"""checkov over the renders, with and without the skips, and the report of it in docs/security.md.

    python -m components.offline.scan_report            # print the report (Markdown)
    python -m components.offline.scan_report --readme   # rewrite its block in docs/security.md

What checkov (`--framework kubernetes`) is given, per render (every stack, and p5 in the multi-node
forms no stack file uses, `FORM_VARIANTS`):
- the render's objects as written (`NAME.yaml`);
- the pod templates inside custom resources (MPIJob replicas, RayJob head and worker groups), which
  checkov's kubernetes framework does not look into, each as a standalone Pod with the template's
  labels and the custom resource's skips for that pod set (`crd_pods`), appended to the same file;
- the same documents with every skip annotation removed (`NAME.noskip.yaml`), so the count of
  failures without the skips is checkov's own, not an estimate.
Each render's namespaces are renamed apart (`<render>--<namespace>`) in these copies: checkov's graph
checks join objects across files (a NetworkPolicy selects pods by namespace and labels), and one
stack's policy must not stand in for another's. One checkov process scans everything: its start-up
dominates its run time. tests/test_checkov.py runs the same scan (adding the secrets framework),
asserts 0 failed with the skips and that each object skips exactly what it fails without them, and
compares the block of docs/security.md with `markdown`. checkov: $RLTRAIN_CHECKOV, else .venv-scan/bin/checkov,
else `checkov` on PATH (requirements-scan.txt).
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Optional, Sequence


from components.offline import render, unset_secrets
from components.offline.mock_engine import ROOT, run_program
from components.stack import config as config_mod
from components.stack import stackfile
from components.k8s import security

# The annotation prefixes checkov honours as skips (checkov.kubernetes.kubernetes_utils).
SKIP_PREFIXES = ("checkov.io/skip", "bridgecrew.io/skip", "cortex.io/skip")
# Kinds whose pods checkov's kubernetes checks scan (base_container_check / base_root_container_check).
POD_KINDS = ("Pod", "Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "ReplicationController", "Job", "CronJob")
# On a Pod extracted from a custom resource: which template of which object it is.
SOURCE_ANNOTATION = "scan.rltrain.dev/pod-template-of"
# Every stack file (the tests scan the same: tests/support.py STACKS).
STACKS = tuple(stackfile.stack_names(ROOT))
# p5 in the multi-node forms no stack file uses: (workloads.multiNode, other top-level keys).
# The StatefulSet form cannot be queued whole (config refuses it while Kueue is on).
FORM_VARIANTS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    "p5-statefulset": ({"enabled": True, "form": "statefulset"}, {"kueue": {"enabled": False}}),
    "p5-rayjob": ({"enabled": True, "form": "rayjob", "rayVersion": "2.60.0"}, {}),
}
README = ROOT / "docs" / "security.md"  # the page that holds the report block
BEGIN = "<!-- scan-report: begin (python -m components.offline.scan_report --readme) -->"
END = "<!-- scan-report: end -->"


def checkov_executable(root: Path = ROOT) -> Optional[str]:
    explicit = os.environ.get("RLTRAIN_CHECKOV")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    local = root / ".venv-scan" / "bin" / "checkov"
    if local.is_file():
        return str(local)
    return shutil.which("checkov")


# ---------------------------------------------------------------------------------------------
# what checkov is given


def forms() -> tuple[str, ...]:
    """The multi-node forms config accepts."""
    return typing.get_args(config_mod.MultiNode.model_fields["form"].annotation)


def variants() -> list[str]:
    """The form variants this tree can render (a form config does not know yet is left out)."""
    return [name for name, (mn, _) in FORM_VARIANTS.items() if mn["form"] in forms()]


def render_variant(name: str) -> list[dict[str, Any]]:
    """p5's objects with one multi-node form (the full program, as the render runs it)."""
    multi_node, other = FORM_VARIANTS[name]
    values, secret_keys, _ = unset_secrets.load_stack("p5")
    values = dict(values)
    workloads = json.loads(values["rltrain:workloads"])
    workloads["multiNode"] = multi_node
    values["rltrain:workloads"] = json.dumps(workloads)
    for key, value in other.items():
        values[f"rltrain:{key}"] = json.dumps(value)
    return render.manifests(run_program(stack="p5", config=values, secret_keys=secret_keys, project_dir=ROOT))


def render_all() -> dict[str, list[dict[str, Any]]]:
    out = {stack: render.render_stack(stack).manifests for stack in STACKS}
    out.update({name: render_variant(name) for name in variants()})
    return out


def pod_templates(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """(path, template) of every pod template (a `template` holding a pod spec) under `value`."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "template" and isinstance(item, dict) and isinstance((item.get("spec") or {}).get("containers"),
                                                                           list):
                yield path + (key,), item
            else:
                yield from pod_templates(item, path + (key,))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from pod_templates(item, path + (i,))


def pod_set_of(doc: dict[str, Any], path: tuple[Any, ...]) -> str:
    """The pod set a template path names: an MPIJob replica type, a Ray group (`headGroupSpec` ->
    head, a `workerGroupSpecs` item -> its groupName)."""
    parent = path[-2]
    if isinstance(parent, int):
        item: Any = doc
        for key in path[:-1]:
            item = item[key]
        return str(item.get("groupName") or item.get("name") or parent)
    return str(parent).removesuffix("GroupSpec")


def dotted(path: Sequence[Any]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")


def crd_pods(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod templates inside a custom resource, each as a Pod checkov scans, named `<object>-<pod
    set>`: the template's labels (graph checks select by them) and annotations, and the custom
    resource's skips for that pod set (security.pod_set_skips)."""
    if doc.get("kind") in POD_KINDS:
        return []
    meta = doc.get("metadata") or {}
    pods = []
    for path, template in pod_templates(doc.get("spec"), ("spec",)):
        t_meta = template.get("metadata") or {}
        pod_set = pod_set_of(doc, path)
        pod_meta: dict[str, Any] = {"name": f"{meta['name']}-{pod_set.lower()}"}
        if meta.get("namespace"):
            pod_meta["namespace"] = meta["namespace"]
        if t_meta.get("labels"):
            pod_meta["labels"] = dict(t_meta["labels"])
        own = {k: v for k, v in (t_meta.get("annotations") or {}).items() if not k.startswith(SKIP_PREFIXES)}
        skips = security.annotations(list(security.pod_set_skips(meta.get("annotations"), pod_set).items()))
        pod_meta["annotations"] = {**skips, **own, SOURCE_ANNOTATION: f"{doc['kind']}/{meta['name']} {dotted(path)}"}
        pods.append({"apiVersion": "v1", "kind": "Pod", "metadata": pod_meta, "spec": copy.deepcopy(template["spec"])})
    return pods


def scanned(docs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The render's objects and the Pods of its custom resources' templates."""
    return [*docs, *(pod for doc in docs for pod in crd_pods(doc))]


def strip_skips(value: Any) -> Any:
    """A copy without any skip annotation (at every level: objects and pod templates)."""
    if isinstance(value, dict):
        return {k: ({a: b for a, b in v.items() if not a.startswith(SKIP_PREFIXES)}
                    if k == "annotations" and isinstance(v, dict) else strip_skips(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [strip_skips(v) for v in value]
    return value


def isolate(docs: Sequence[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    """Copies with the render's namespaces renamed `<name>--<namespace>` (see the module docstring)."""
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        meta = doc.setdefault("metadata", {})
        if doc.get("kind") == "Namespace":
            meta["name"] = f"{name}--{meta['name']}"
        elif meta.get("namespace"):
            meta["namespace"] = f"{name}--{meta['namespace']}"
        out.append(doc)
    return out


def write_inputs(directory: Path, renders: Mapping[str, Sequence[dict[str, Any]]]) -> None:
    for name, docs in renders.items():
        docs = isolate(scanned(docs), name)
        (directory / f"{name}.yaml").write_text(render.manifests_yaml(docs))
        (directory / f"{name}.noskip.yaml").write_text(render.manifests_yaml(strip_skips(docs)))


def run_checkov(exe: str, directory: Path, frameworks: Sequence[str] = ("kubernetes",)) -> dict[str, dict[str, Any]]:
    """checkov's reports over `directory`, by check type. `--skip-download`: no Prisma Cloud API call."""
    proc = subprocess.run([exe, "--framework", *frameworks, "-d", str(directory), "-o", "json", "--compact",
                           "--skip-download"], capture_output=True, text=True, timeout=900, check=False)
    # Exit 1 means failed checks; anything else is checkov itself failing.
    if proc.returncode not in (0, 1) or not proc.stdout.strip():
        raise RuntimeError(f"{exe} exited {proc.returncode}\nstdout: {proc.stdout[-2000:]}\n"
                           f"stderr: {proc.stderr[-4000:]}")
    data = json.loads(proc.stdout)
    reports = data if isinstance(data, list) else [data]  # one framework gives one object
    out = {r.get("check_type"): r for r in reports}
    missing = set(frameworks) - set(out)
    if missing:
        raise RuntimeError(f"no {', '.join(sorted(missing))} report in checkov's output: {proc.stdout[:500]}")
    return out


# ---------------------------------------------------------------------------------------------
# what it found


def results_of(report: dict[str, Any], file_name: str, outcome: str) -> list[dict[str, Any]]:
    """checkov's `outcome` (passed / failed / skipped) check results of one input file."""
    return [c for c in report["results"].get(f"{outcome}_checks", []) if Path(c["file_path"]).name == file_name]


@dataclass(frozen=True)
class Counts:
    resources: int
    failed: int
    skipped: int
    failed_without_skips: int


def counts(report: dict[str, Any], name: str) -> Counts:
    file, noskip = f"{name}.yaml", f"{name}.noskip.yaml"
    resources = {c["resource"] for outcome in ("passed", "failed", "skipped") for c in results_of(report, file, outcome)}
    return Counts(len(resources), len(results_of(report, file, "failed")), len(results_of(report, file, "skipped")),
                  len(results_of(report, noskip, "failed")))


def described(doc: dict[str, Any]) -> str:
    """How the report names a scanned object: `Kind/name`, or for a template's Pod its owner and pod set."""
    source = ((doc.get("metadata") or {}).get("annotations") or {}).get(SOURCE_ANNOTATION)
    if source:
        owner, path = source.split(" ", 1)
        return f"{owner} `{path}`"
    return f"{doc['kind']}/{doc['metadata']['name']}"


def skip_rows(renders: Mapping[str, Sequence[dict[str, Any]]]) -> list[tuple[str, str, str, list[str]]]:
    """(object, check, reason, renders) of every skip checkov honours, grouped across renders."""
    where: dict[tuple[str, str, str], list[str]] = collections.defaultdict(list)
    for name, docs in renders.items():
        for doc in scanned(docs):
            if doc.get("kind") not in POD_KINDS:
                continue  # a custom resource's own skips are its templates', scanned as Pods
            for check, reason in security.parse((doc.get("metadata") or {}).get("annotations")).items():
                where[(described(doc), check, reason)].append(name)
    return [(obj, check, reason, names) for (obj, check, reason), names in
            sorted(where.items(), key=lambda kv: (kv[0][0], int(kv[0][1].rsplit("_", 1)[1]), kv[0][2]))]


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown(renders: Mapping[str, Sequence[dict[str, Any]]], report: dict[str, Any]) -> str:
    version = report["summary"].get("checkov_version", "?")
    lines = [
        f"checkov {version} (`--framework kubernetes`) on each render's objects and on the pod templates of its "
        "custom resources (as Pods), once as rendered and once with every skip annotation removed:",
        "",
        "| Render | Objects scanned | Failed | Skipped | Failed without the skips |",
        "|---|--:|--:|--:|--:|",
    ]
    for name in renders:
        c = counts(report, name)
        lines.append(f"| {name} | {c.resources} | {c.failed} | {c.skipped} | {c.failed_without_skips} |")
    lines += [
        "",
        "The skips, each generated from the pod it is for (`what the pod does: why`, "
        "components/k8s/security.py):",
        "",
        "| Object | Check | Reason | Renders |",
        "|---|---|---|---|",
    ]
    for obj, check, reason, names in skip_rows(renders):
        lines.append(f"| {obj} | {check} | {_cell(reason)} | {', '.join(names)} |")
    return "\n".join(lines) + "\n"


def readme_block(text: str) -> Optional[str]:
    """The report block of README text (between the markers), or None."""
    if BEGIN not in text or END not in text:
        return None
    return text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n") + "\n"


def with_block(text: str, block: str) -> str:
    if readme_block(text) is None:
        raise ValueError(f"{README.name} has no block between {BEGIN!r} and {END!r}")
    head, rest = text.split(BEGIN, 1)
    return f"{head}{BEGIN}\n{block}{END}{rest.split(END, 1)[1]}"


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m components.offline.scan_report", description=__doc__.split("\n")[0])
    ap.add_argument("--readme", action="store_true", help=f"rewrite the report block of {README.name}")
    args = ap.parse_args(argv)
    exe = checkov_executable()
    if exe is None:
        print("checkov not found: python3 -m venv .venv-scan && .venv-scan/bin/pip install -r requirements-scan.txt "
              "(or set RLTRAIN_CHECKOV)", file=sys.stderr)
        return 2
    renders = render_all()
    with tempfile.TemporaryDirectory() as tmp:
        write_inputs(Path(tmp), renders)
        report = run_checkov(exe, Path(tmp))["kubernetes"]
    text = markdown(renders, report)
    if args.readme:
        README.write_text(with_block(README.read_text(), text))
        print(f"wrote the scan report into {README}")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
