"""Offline render: run the real program against the recording engine and write what it creates.

    python -m components.offline.render --stack p5 [--out DIR]     # DIR defaults to rendered/p5
    python -m components.offline.render --all

Writes DIR/manifests.yaml (every Kubernetes object, one document each, sorted by kind, namespace,
name) and DIR/resources.json (every registered resource, components included). Secrets show as
`[secret]`, cloud-only values as `[known after deploy: ...]`. Needs no Pulumi CLI, credentials or
network. Exit 2 on invalid config, 1 on a policy violation (components/offline/policy.py) or any other
failure; in both cases nothing is written. The summary ends with the fit report of the GPU pods.
"""

from __future__ import annotations

if __name__ == "__main__":  # the CLI: a short-lived process, no cyclic garbage collection (exit: os._exit below)
    import gc
    gc.disable()

import argparse
import collections
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from components.stack import config as config_mod
from components.offline import deploy_model, policy, runs_summary
from components.offline import checkpoints, image_summary, impact, unset_secrets
from components.workloads import embodied_eval, export, serving
from components.stack import secrets_scan, stackfile, validate, volume_budget
from components.stack.outputs import usd_text
from components.offline.mock_engine import ROOT, Record, RunResult, run_program
from components.offline.resources import Violation

_K8S_OBJECT = re.compile(r"^kubernetes:(?!helm\.sh|yaml|kustomize)[^:]+:[A-Za-z][A-Za-z0-9]*$")
_HEAD_KEYS = ("apiVersion", "kind", "metadata")


class _Dumper(yaml.SafeDumper):
    """PyYAML's safe dumper, with the render's representer of strings (`_str`)."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def is_k8s_object(r: Record) -> bool:
    return r.custom and bool(_K8S_OBJECT.match(r.type)) and "kind" in r.inputs


def manifest_of(r: Record) -> dict[str, Any]:
    doc = {k: r.inputs[k] for k in _HEAD_KEYS if k in r.inputs}
    doc.update({k: v for k, v in sorted(r.inputs.items()) if k not in _HEAD_KEYS})
    return doc


def _sort_key(doc: dict[str, Any]) -> tuple[str, str, str]:
    meta = doc.get("metadata") or {}
    return (str(doc.get("kind", "")), str(meta.get("namespace", "")), str(meta.get("name", "")))


def manifests(result: RunResult) -> list[dict[str, Any]]:
    return sorted((manifest_of(r) for r in result.records if is_k8s_object(r)), key=_sort_key)


def manifests_yaml(docs: list[dict[str, Any]]) -> str:
    return yaml.dump_all(docs, Dumper=_Dumper, sort_keys=False, default_flow_style=False,
                         width=100, explicit_start=True)


def resources_json(result: RunResult) -> str:
    rows = sorted((r.as_json() for r in result.records), key=lambda r: (r["type"], r["name"]))
    return json.dumps(rows, indent=2, sort_keys=False) + "\n"


@dataclass
class Rendered:
    stack: str
    cfg: config_mod.StackConfig
    result: RunResult
    manifests: list[dict[str, Any]]
    # The base record the change is judged against (None: nothing to compare with).
    base: Optional[list[dict[str, Any]]] = None
    # The base's estimated cost (`--base DIR`: DIR/STACK/cost.json, the stack output of the base's own render).
    base_cost: Optional[dict[str, Any]] = None
    # Secrets the stack needs and its file does not hold yet: {full key: the command that sets it}.
    not_set: dict[str, str] = field(default_factory=dict)
    # Impacts written only because of --accept-impact (never data loss or what AWS refuses).
    accepted: list[impact.Impact] = field(default_factory=list)

    @property
    def resources(self) -> list[dict[str, Any]]:
        return [r.as_json() for r in self.result.records]

    def violations(self) -> list[Violation]:
        return policy.evaluate(self.resources)


# What `--accept-impact` may accept for a change of the program itself: runs restarted, nodes rolled.
# Data loss (the FSx file system or the cluster replaced: impact.py's DATA_LOSS) needs the stack's own
# opt-in whatever the flag says, and what AWS refuses cannot be accepted at all.
FLAG_ACCEPTS = (impact.NODE_ROLL, impact.RUN_RESTART, impact.SERVING_RESTART)
FLAG_NEVER = (impact.DATA_LOSS, impact.REFUSED, impact.NEVER_FINISHES)


def accepted_line(accepted: list[impact.Impact]) -> str:
    """What --accept-impact accepted, counted by kind; and what it never accepts."""
    counts = collections.Counter(i.kind for i in accepted)
    got = ", ".join(f"{counts[k]} {k}" for k in FLAG_ACCEPTS if counts[k]) or "nothing"
    return f"--accept-impact accepted {got}; it never accepts {' or '.join(FLAG_NEVER)}"


def render_stack(stack: str, root: Path = ROOT) -> Rendered:
    cfg_values, secret, cfg = unset_secrets.load_stack(stack, root)
    result = run_program(stack=stack, config=cfg_values, secret_keys=secret, project_dir=root)
    return Rendered(stack=stack, cfg=cfg, result=result, manifests=manifests(result),
                    not_set=unset_secrets.of(cfg_values))


def write(rendered: Rendered, out: Path) -> None:
    """Write both files, replacing the old ones only once both are complete."""
    out.mkdir(parents=True, exist_ok=True)
    files = {"manifests.yaml": manifests_yaml(rendered.manifests),
             "resources.json": resources_json(rendered.result)}
    tmp = {}
    for name, text in files.items():
        with tempfile.NamedTemporaryFile("w", dir=out, prefix=f".{name}.", delete=False) as f:
            f.write(text)
            tmp[name] = Path(f.name)
        # A temporary file is 0600; the render keeps the file's mode, 0644 for a new one.
        target = out / name
        os.chmod(f.name, target.stat().st_mode & 0o7777 if target.exists() else 0o644)
    for name, path in tmp.items():
        path.replace(out / name)


def summary_markdown(rendered: Rendered) -> str:
    """What a reviewer reads first in a pull request: impact against the base, cost, checks."""
    violations = rendered.violations()
    impacts = impact.classify(rendered.base, rendered.resources, rendered.cfg)
    order = impact.sequence(impacts, rendered.resources)
    lines = [f"### Stack `{rendered.stack}`", "", *_cost_markdown(rendered), "",
             *impact.table(impacts, markdown=True), "",
             *([f"**{order[0][:-1].capitalize()}**:", "", *[line.strip() for line in order[1:]], ""] if order else []),
             "Preflight: config valid; " + (
                 f"**{len(rendered.not_set)} secret(s) not set**: a real preview or `up` of `{rendered.stack}` "
                 "refuses until they are (the offline render shows each as not set)"
                 if rendered.not_set else "every secret it needs is set")]
    lines += [f"- `{key}`: `{cmd}`" for key, cmd in rendered.not_set.items()]
    if rendered.accepted:
        lines += ["", "Accepted by `--accept-impact` (a change of the program itself; reviewers accept it): "
                  + accepted_line(rendered.accepted).split("accepted ", 1)[1]]
        lines += [f"- {i.message()}" for i in rendered.accepted]
    lines += ["", f"Policy and deploy-model rules: {len(policy.RULES)} run, "
              + (f"**{len(violations)} violation(s)**" if violations else "all pass")]
    lines += [f"- `{v.rule}` {v.resource}: {v.message}" for v in violations]
    return "\n".join(lines) + "\n"


def _usd(cost: dict[str, Any]) -> str:
    return usd_text(cost)  # an elastic stack's range: at zero GPU nodes and at the maximum


def _cost_markdown(rendered: Rendered) -> list[str]:
    """The estimated cost; with the base's (`base_cost`), before and after."""
    after = rendered.result.stack_outputs.get("estimatedCostPerHour") or {}
    if rendered.base_cost is None:
        return [f"Estimated cost: {_usd(after)} ({after.get('breakdown') or after.get('note', '')})"]
    before = rendered.base_cost
    lines = ["| estimated cost | per hour | made of |", "|---|---:|---|",
             f"| before (base) | {_usd(before)} | {before.get('breakdown') or before.get('note', '')} |",
             f"| after | {_usd(after)} | {after.get('breakdown') or after.get('note', '')} |"]
    if before.get("usd") is not None and after.get("usd") is not None:
        delta = round(after["usd"] - before["usd"], 2)
        # An elastic side's `usd` is its maximum: the change compares ceilings, and says so.
        what = "change (at the maximum)" if "usdAtZero" in before or "usdAtZero" in after else "change"
        lines.append(f"| {what} | {'+' if delta > 0 else '−'}${abs(delta):,.2f}/h | |" if delta else f"| {what} | none | |")
    return lines


def summary(rendered: Rendered) -> str:
    cfg, result = rendered.cfg, rendered.result
    by_type = collections.Counter(r.type for r in result.records)
    g = cfg.gpu_nodes
    cost = result.stack_outputs.get("estimatedCostPerHour") or {}
    usd = cost.get("usd")
    lines = [
        f"stack {rendered.stack}: {len(result.records)} resources, "
        f"{len(rendered.manifests)} Kubernetes objects",
        f"  GPU nodes: {g.count} x {g.instance_type} = {g.total_gpus} GPUs "
        f"({g.instance.gpu_model}), EFA {'on, ' + str(g.efa_devices_per_node) + ' devices/node' if g.efa_enabled else 'off'}",
        "  estimated cost: " + (f"{usd_text(cost)} = {cost.get('breakdown')} (prices of {cost.get('priceDate')})"
                                if cost.get("priceDate") else
                                (f"${usd:,.0f}/h" if usd is not None else "unknown") + f" ({cost.get('note', '')})"),
    ]
    if rendered.not_set:
        lines.append("  secrets not set (a real preview or up refuses until they are):")
        lines += [f"    {key}: {cmd}" for key, cmd in rendered.not_set.items()]
    lines += ["  resources by type:"]
    lines += [f"    {n:3d}  {t}" for t, n in sorted(by_type.items())]
    impacts = impact.classify(rendered.base, rendered.resources, rendered.cfg)
    lines += ["  " + line for line in impact.table(impacts)]
    lines += ["  " + line for line in impact.sequence(impacts, rendered.resources)]
    if rendered.accepted:
        lines.append("  " + accepted_line(rendered.accepted))
    lines += ["  " + line for line in image_summary.lines(cfg, rendered.resources, rendered.manifests)]
    lines += ["  " + line for line in runs_summary.lines(cfg, rendered.resources, rendered.base)]
    ckpt = checkpoints.estimate(cfg)
    if ckpt:
        lines.append("  " + ckpt[2])
    lines += ["  " + line for line in export.summary(cfg)]  # the export Job of the served step
    lines += ["  " + line for line in embodied_eval.summary(cfg)]  # RLinf's evaluation in the simulator
    lines += ["  " + line for line in serving.summary(cfg)]  # the served model, rollout, startup budget
    lines += ["  " + line for line in deploy_model.cluster_wide(rendered.resources)]
    lines += ["  " + line for line in deploy_model.isolation_summary(rendered.resources)]
    lines += ["  " + line for line in deploy_model.flow_table(rendered.resources)]
    lines += ["  " + line for line in deploy_model.destroy_summary(rendered.resources)]
    lines += ["  " + line for line in policy.fit_report(rendered.resources)]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m components.offline.render", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=_epilog())
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--stack", help="stack name (reads Pulumi.STACK.yaml)")
    which.add_argument("--all", action="store_true", help="every Pulumi.*.yaml stack")
    ap.add_argument("--out", type=Path, help="output directory (default rendered/STACK); with --all, OUT/STACK "
                                             "for each stack")
    ap.add_argument("--project-dir", type=Path, default=ROOT,
                    help="directory holding Pulumi.yaml, __main__.py and the stack files (default: this repo)")
    ap.add_argument("--base", type=Path,
                    help="directory holding the base records STACK/resources.json the change is judged against "
                         "(default: PROJECT_DIR/rendered, the committed records; in a pull request, the base "
                         "branch's); a STACK/cost.json beside it (the base's estimatedCostPerHour) puts the cost "
                         "before and after in --summary-md")
    ap.add_argument("--accept-impact", action="store_true",
                    help="for a change of the program itself, whose impact the pull request shows and reviewers "
                         f"accept: write the render even when it means a {' or a '.join(FLAG_ACCEPTS)} the stack "
                         "does not opt in to. Never accepted by the flag: "
                         f"{' and '.join(FLAG_NEVER)} (an FSx file system or the cluster replaced) need the "
                         "stack's own opt-in (rltrain:storage.allowReplacement, rltrain:cluster.allowReplacement); "
                         "a stack change opts in with its allow* keys instead")
    ap.add_argument("--summary-md", type=Path,
                    help="also append a Markdown summary per stack (impact, cost, checks) to this file, e.g. "
                         "$GITHUB_STEP_SUMMARY")
    args = ap.parse_args(argv)
    root = args.project_dir.resolve()
    stacks = stackfile.stack_names(root) if args.all else [args.stack]

    # Validate every stack before rendering any: a bad config writes nothing at all.
    failed = False
    for stack in stacks:
        try:
            unset_secrets.load_stack(stack, root)
        except validate.ConfigError as e:
            print(f"Pulumi.{stack}.yaml: {e.render()}", file=sys.stderr)
            failed = True
        except stackfile.StackFileError as e:
            print(str(e), file=sys.stderr)
            failed = True
    if failed:
        return 2
    results = [render_stack(stack, root) for stack in stacks]
    # Secrets by value in the env the pod builders produced (validation scanned every config string).
    for rendered in results:
        for where, msg in secrets_scan.plain_env(rendered.manifests):
            print(f"Pulumi.{rendered.stack}.yaml: {where}: {msg}", file=sys.stderr)
            failed = True
    if failed:
        return 2
    # Policy rules (components/offline/policy.py, also in the CrossGuard pack): refuse before writing.
    for rendered in results:
        for v in rendered.violations():
            print(f"Pulumi.{rendered.stack}.yaml: policy {v}", file=sys.stderr)
            failed = True
    # Update impact (components/offline/impact.py): judged against the base record of each stack.
    base = (args.base or root / "rendered").resolve()
    for rendered in results:
        snapshot = base / rendered.stack / "resources.json"
        rendered.base = json.loads(snapshot.read_text()) if snapshot.exists() else None
        base_cost = base / rendered.stack / "cost.json"
        rendered.base_cost = json.loads(base_cost.read_text()) if base_cost.exists() else None
        verdict = impact.check(rendered.base, rendered.resources, rendered.cfg)
        for r in verdict.refused:
            if args.accept_impact and r.kind in FLAG_ACCEPTS:
                rendered.accepted.append(r)
                print(f"Pulumi.{rendered.stack}.yaml: accepted (--accept-impact): {r.message()}", file=sys.stderr)
                continue
            not_by_flag = (f" (--accept-impact never accepts {r.kind}: the stack's own opt-in does)"
                           if args.accept_impact and r.kind in FLAG_NEVER else "")
            print(f"Pulumi.{rendered.stack}.yaml: REFUSED: {r.message()}{not_by_flag}", file=sys.stderr)
            failed = True
        if args.accept_impact:
            print(f"Pulumi.{rendered.stack}.yaml: {accepted_line(rendered.accepted)}", file=sys.stderr)
        for r in verdict.allowed:
            print(f"Pulumi.{rendered.stack}.yaml: warning: {r.message()} (allowed)", file=sys.stderr)
    for rendered in results:
        for w in runs_summary.s3_export(rendered.cfg)[1]:
            print(f"Pulumi.{rendered.stack}.yaml: warning: {w}", file=sys.stderr)
        left = runs_summary.left_behind(rendered.cfg, rendered.base)
        b = volume_budget.budget(rendered.cfg, [d for _, d in left])
        if left and b is not None and not b.fits:
            print(f"Pulumi.{rendered.stack}.yaml: warning: the volume does not hold what the runs keep and what "
                  f"{len(left)} run(s) gone since the base record left ({b.total_gib:,.1f} GiB > "
                  f"{b.usable_gib:,.0f} GiB usable): delete {', '.join(d for _, d in left)} (rm -r from a pod "
                  "mounting /fsx) once nothing needs them", file=sys.stderr)
    for rendered in results:
        ckpt = checkpoints.estimate(rendered.cfg)
        if ckpt and ckpt[0] > ckpt[1]:
            print(f"Pulumi.{rendered.stack}.yaml: warning: {ckpt[2]}: raise "
                  "rltrain:workloads.terminationGracePeriodSeconds or the FSx throughput", file=sys.stderr)
    if args.summary_md:
        with args.summary_md.open("a", encoding="utf-8") as f:
            for rendered in results:
                f.write(summary_markdown(rendered) + "\n")
    if failed:
        return 1
    for rendered in results:
        out = (args.out / rendered.stack if args.all else args.out) if args.out else root / "rendered" / rendered.stack
        write(rendered, out)
        print(summary(rendered))
        print(f"  wrote {out}/manifests.yaml, {out}/resources.json")
    return 0


def _epilog() -> str:
    return (f"stacks: {', '.join(stackfile.stack_names(ROOT)) or 'none'} (Pulumi.STACK.yaml in the project directory)\n"
            "exit codes:\n"
            "  0  rendered and written\n"
            "  1  a policy rule, the deploy model or the change-impact guard refused the result; nothing written\n"
            "  2  invalid config or stack file (every problem with its key path); nothing written")


if __name__ == "__main__":
    code = main()
    # Leave without interpreter teardown (module and object finalisation is most of a second here):
    # everything is written and closed by now; flush what is printed, then exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
