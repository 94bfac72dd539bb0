"""Deploy a bring-your-own stack onto the simulated cluster with the real Pulumi CLI and provider.

    python -m cluster.deploy up --stack sim          # after: python -m cluster.sim start --stack p5
    python -m cluster.deploy preview --stack sim
    python -m cluster.deploy destroy --stack sim

Why not plain `pulumi up`: the Go module proxy serves no Python language host of this Pulumi
release (docs/simulated-cluster.md "Building"), so the program runs as an Automation API *inline*
program: this Python process is the engine's language runtime (`pulumi up --client=...`), and the
CLI, the engine, the state backend and the Kubernetes provider are the real ones. A person with a
Pulumi install from pulumi.com can run `pulumi up -s sim` instead (docs/simulated-cluster.md).

Each deployment lives in a work directory (default: `<cluster state>/pulumi/<stack>`): a copy of
the program, refreshed from the repository on every run (the repository is never written:
`pulumi config set` writes into the copy's stack file), a local file backend, a PULUMI_HOME of its
own, and a fixed passphrase for this throwaway local state. The
Kubernetes provider is the one cluster/build.sh built, named as a project plugin in the copy's
Pulumi.yaml (`plugins.providers`), so the engine neither downloads nor warns about it. Nothing is
fetched from the network: no plugin acquisition, no update check, no Helm chart.

`--json FILE` writes what happened for the tests: each resource's operation (same, create, update,
replace, delete ...), the engine's warnings and errors, and the summary.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import runpy
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent
# What a deployment of the program needs (the copy's Pulumi.yaml is rewritten: see prepare()).
PROGRAM = ("__main__.py", "components", "requirements.txt")
# A throwaway local backend: the passphrase only guards the state of a simulated cluster.
PASSPHRASE = "rltrain-simulated-cluster"
PLACEHOLDER_SECRET = "not-a-real-secret"
OPERATIONS = ("preview", "up", "refresh", "destroy")


class DeployError(RuntimeError):
    pass


def _set(doc: dict[str, Any], key: str, value: Any) -> None:
    """`rltrain:workloads.multiNode.form` -> doc["config"]["rltrain:workloads"]["multiNode"]["form"]."""
    top, _, rest = key.partition(".")
    if not rest:
        doc["config"][top] = value
        return
    node = doc["config"].setdefault(top, {})
    parts = rest.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def _copy_program(source: Path, project: Path) -> None:
    for name in PROGRAM:
        src, dst = source / name, project / name
        if dst.is_dir():
            shutil.rmtree(dst)
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(src, dst)


def prepare(workdir: Path, stack: str, provider_dir: Path, source: Path = ROOT,
            overrides: Optional[dict[str, Any]] = None, sync: bool = True) -> Path:
    """The deployment's copy of the program in workdir/project. With `sync` (what a person wants:
    deploy what the repository holds now) the program and the stack file are copied afresh on
    every run, keeping what `pulumi config set` wrote into the copy (the passphrase salt, secure
    values); without it (the tests, which edit the copy) an existing copy is left as it is.
    `overrides` edit the copy's stack file (dotted keys, as in `pulumi config set --path`)."""
    project = workdir / "project"
    stack_file = project / f"Pulumi.{stack}.yaml"
    fresh = not project.exists()
    if fresh or sync:
        project.mkdir(parents=True, exist_ok=True)
        _copy_program(source, project)
        old = yaml.safe_load(stack_file.read_text()) if stack_file.exists() else {}
        doc = yaml.safe_load((source / f"Pulumi.{stack}.yaml").read_text())
        doc.setdefault("config", {})
        if old.get("encryptionsalt"):
            doc["encryptionsalt"] = old["encryptionsalt"]
        for key, value in (old.get("config") or {}).items():
            if isinstance(value, dict) and "secure" in value and key not in doc["config"]:
                doc["config"][key] = value
        stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    meta = yaml.safe_load((source / "Pulumi.yaml").read_text())
    # The inline program runs in this interpreter: no virtualenv for a language host to make.
    meta["runtime"] = {"name": "python"}
    # The provider cluster/build.sh built, used whatever version the SDK asks for and without the
    # "using ... from $PATH" warning (sdk/v3 go/common/workspace/plugins.go getPluginInfoAndPath:
    # project plugins come first).
    meta["plugins"] = {"providers": [{"name": "kubernetes", "path": str(provider_dir)}]}
    (project / "Pulumi.yaml").write_text(yaml.safe_dump(meta, sort_keys=False))
    if overrides:
        doc = yaml.safe_load(stack_file.read_text())
        for key, value in overrides.items():
            _set(doc, key, value)
        stack_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    return project


def _env(workdir: Path, bin_dir: Path) -> dict[str, str]:
    (workdir / "backend").mkdir(parents=True, exist_ok=True)
    (workdir / "home").mkdir(parents=True, exist_ok=True)
    return {
        "PULUMI_HOME": str(workdir / "home"),
        "PULUMI_BACKEND_URL": f"file://{workdir / 'backend'}",
        "PULUMI_CONFIG_PASSPHRASE": PASSPHRASE,
        "PULUMI_SKIP_UPDATE_CHECK": "true",
        "PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
        "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK": "true",
        "PULUMI_SKIP_CONFIRMATIONS": "true",
        # The CLI and the provider of the build, ahead of anything installed on the machine.
        "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
        "NO_COLOR": "1",
    }


class Recorder:
    """Collects the engine events the tests read."""

    def __init__(self) -> None:
        self.ops: dict[str, dict[str, Any]] = {}
        self.diagnostics: list[dict[str, str]] = []
        self.failed: list[str] = []
        self.policy: list[dict[str, Any]] = []
        self.t0 = time.monotonic()
        self.started: dict[str, float] = {}
        self.took: dict[str, float] = {}

    def __call__(self, event: Any) -> None:
        pre = getattr(event, "resource_pre_event", None)
        if pre is not None:
            m = pre.metadata
            op = getattr(m.op, "value", m.op)
            entry = self.ops.setdefault(m.urn, {"type": m.type, "ops": []})
            entry["ops"].append(op)
            if m.diffs:
                entry["diffs"] = sorted(set(entry.get("diffs", [])) | set(m.diffs))
            self.started.setdefault(m.urn, time.monotonic())
        out = getattr(event, "res_outputs_event", None)
        if out is not None and out.metadata.urn in self.started:
            # How long the step took (the provider's await included): where an operation's time goes.
            self.took[out.metadata.urn] = round(time.monotonic() - self.started[out.metadata.urn], 1)
        d = getattr(event, "diagnostic_event", None)
        if d is not None and d.severity in ("warning", "error"):
            # ephemeral: a status line of the progress display (a provider's await reporting what it
            # waits for), which the CLI does not repeat among the update's diagnostics.
            self.diagnostics.append({"severity": d.severity, "urn": d.urn or "", "message": d.message.strip(),
                                     "ephemeral": bool(getattr(d, "ephemeral", False))})
        f = getattr(event, "res_op_failed_event", None)
        if f is not None:
            self.failed.append(f.metadata.urn)
        p = getattr(event, "policy_event", None)
        if p is not None:
            self.policy.append({"policy": p.policy_name, "pack": p.policy_pack_name, "level": p.enforcement_level,
                                "urn": p.resource_urn or "", "message": p.message.strip()})

    def result(self) -> dict[str, Any]:
        slowest = sorted(self.took.items(), key=lambda kv: -kv[1])[:5]
        return {"ops": self.ops, "diagnostics": self.diagnostics, "failed": self.failed, "policy": self.policy,
                "slowest": [{"resource": urn.split("::")[-1], "seconds": t} for urn, t in slowest]}


def run(operation: str, workdir: Path, stack: str, kubeconfig: Path, *, refresh: bool = False,
        policy_packs: tuple[str, ...] = (), secrets: Optional[dict[str, str]] = None,
        echo: bool = True, save_plan: Optional[Path] = None, plan: Optional[Path] = None) -> dict[str, Any]:
    """One Pulumi operation on the deployment in workdir; returns what the engine reported.
    save_plan (preview): write the update plan there (`pulumi preview --save-plan`); plan (up): apply
    only that plan (`pulumi up --plan`), failing at the first step it does not allow: the deploy on
    merge (ci/deploy.sh, docs/pr-review.md "Deploy on merge")."""
    from pulumi import automation as auto  # the CLI's Python side; imported late: `--help` stays fast

    from cluster.binaries import toolset

    tools = toolset()
    cli = Path(tools.require("pulumi"))
    provider = Path(tools.require("pulumi-resource-kubernetes"))
    project = workdir / "project"
    if not project.exists():
        raise DeployError(f"{workdir} has no program copy: prepare() it first")

    def program() -> None:
        # The copy's program, not the repository's: this process imported the repository's
        # `components` for itself (cluster.sim), and the copy may be edited (the day-two tests).
        for name in [m for m in sys.modules if m == "components" or m.startswith("components.")]:
            del sys.modules[name]
        sys.path.insert(0, str(project))
        try:
            runpy.run_path(str(project / "__main__.py"), run_name="__main__")
        finally:
            sys.path.remove(str(project))

    opts = auto.LocalWorkspaceOptions(
        work_dir=str(project), pulumi_home=str(workdir / "home"), env_vars=_env(workdir, cli.parent),
        pulumi_command=auto.PulumiCommand(root=str(cli.parent.parent), skip_version_check=True))
    if cli.parent.name != "bin":  # PulumiCommand wants <root>/bin/pulumi
        raise DeployError(f"the Pulumi CLI must sit in a bin/ directory: {cli}")
    stack_obj = auto.create_or_select_stack(stack_name=stack, project_name="rltrain", program=program, opts=opts)
    _set_config_once(stack_obj, workdir, project / f"Pulumi.{stack}.yaml", kubeconfig, secrets or {})

    rec = Recorder()
    out = (lambda line: print(line, flush=True)) if echo else (lambda line: None)
    t0 = time.monotonic()
    kw: dict[str, Any] = {"on_output": out, "on_event": rec, "color": "never"}
    try:
        if operation == "preview":
            r = stack_obj.preview(diff=True, refresh=refresh or None, policy_packs=list(policy_packs) or None,
                                  plan=str(save_plan) if save_plan else None, **kw)
            summary = {k.value if hasattr(k, "value") else k: v for k, v in r.change_summary.items()}
        elif operation == "up":
            r = stack_obj.up(diff=True, refresh=refresh or None, policy_packs=list(policy_packs) or None,
                             plan=str(plan) if plan else None, **kw)
            summary = dict(r.summary.resource_changes or {})
        elif operation == "refresh":
            r = stack_obj.refresh(**kw)
            summary = dict(r.summary.resource_changes or {})
        elif operation == "destroy":
            r = stack_obj.destroy(**kw)
            summary = dict(r.summary.resource_changes or {})
        else:
            raise DeployError(f"unknown operation {operation!r}: one of {', '.join(OPERATIONS)}")
        ok, error = True, ""
    except auto.CommandError as e:
        ok, error, summary = False, str(e)[-8000:], {}
    res = rec.result()
    res.update({"operation": operation, "ok": ok, "error": error, "summary": summary,
                "seconds": round(time.monotonic() - t0, 1),
                "versions": {"pulumi": stack_obj.workspace.pulumi_version, "provider": provider_version(provider)}})
    return res


def _secure_keys(stack_file: Path) -> set[str]:
    doc = yaml.safe_load(stack_file.read_text()) if stack_file.exists() else {}
    return {k for k, v in ((doc or {}).get("config") or {}).items() if isinstance(v, dict) and "secure" in v}


def _set_config_once(stack_obj: Any, workdir: Path, stack_file: Path, kubeconfig: Path,
                     secrets: dict[str, str]) -> None:
    """`pulumi config set --secret` for the kubeconfig and the placeholder secrets, once per work
    directory: each is a CLI process of its own, and every operation of a test's deployment would
    set the same values again. Set again when the kubeconfig changed (another cluster: the hash in
    workdir/config-set.json) or the stack file lost one of them (a test wrote the file anew)."""
    from pulumi import automation as auto

    marker = workdir / "config-set.json"
    want = {"kubeconfig": hashlib.sha256(kubeconfig.read_bytes()).hexdigest(), "secrets": sorted(secrets)}
    needed = {"rltrain:kubeconfig", *secrets}
    if marker.exists() and json.loads(marker.read_text()) == want and needed <= _secure_keys(stack_file):
        return
    have = _secure_keys(stack_file)
    stack_obj.set_config("rltrain:kubeconfig", auto.ConfigValue(kubeconfig.read_text(), secret=True))
    for key, value in secrets.items():
        if key not in have:
            stack_obj.set_config(key, auto.ConfigValue(value, secret=True))
    marker.write_text(json.dumps(want))


def analyzer(workdir: Path, pack: Path) -> Path:
    """An executable that serves a Python policy pack, for `--policy-pack`. The engine runs a pack
    directory through the language host's RunPlugin, which no served Pulumi module provides (and
    an inline program's runtime does not implement); an executable path it launches directly as
    an analyzer plugin (pkg/v3 v3.274.0 resource/plugin/analyzer_plugin.go NewPolicyAnalyzer),
    and pulumi-policy's PolicyPack serves the analyzer protocol as soon as it is built."""
    pack = pack.resolve()
    if not (pack / "PulumiPolicy.yaml").exists() or not (pack / "__main__.py").exists():
        raise DeployError(f"{pack} is not a Python policy pack (PulumiPolicy.yaml and __main__.py)")
    shim = workdir / "analyzers" / pack.name / "analyzer"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(f'#!/bin/sh\ncd "{pack}" && exec "{sys.executable}" "{pack / "__main__.py"}" "$@"\n')
    shim.chmod(0o755)
    return shim


def provider_version(provider: Path) -> str:
    """`provider -version`, asked once per provider build (the answer is kept in the build cache's
    `provider-versions/`, keyed by the binary's inode, size and time): a process of its own, and the
    tests ask at every operation."""
    import subprocess

    from cluster.binaries import cache_root

    st = provider.stat()
    kept = cache_root() / "provider-versions" / f"{st.st_ino}-{st.st_size}-{st.st_mtime_ns}"
    try:
        return kept.read_text()
    except OSError:
        pass
    r = subprocess.run([str(provider), "-version"], capture_output=True, text=True, timeout=30)
    version = (r.stdout or r.stderr).strip()
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(version)
    except OSError:
        pass  # not writable: ask again next time
    return version


def default_secrets(project: Path, stack: str) -> dict[str, str]:
    """A placeholder for every secret the stack's `training.secretEnv` names (a simulated cluster
    runs no container: nothing reads them)."""
    doc = yaml.safe_load((project / f"Pulumi.{stack}.yaml").read_text())
    env = ((doc.get("config") or {}).get("rltrain:training") or {}).get("secretEnv") or {}
    return {f"rltrain:{key}": PLACEHOLDER_SECRET for key in env.values()}


def main(argv: Optional[list[str]] = None) -> int:
    from cluster import sim
    from cluster.binaries import toolset

    ap = argparse.ArgumentParser(prog="python -m cluster.deploy", description=__doc__.split("\n\n")[0])
    ap.add_argument("operation", choices=OPERATIONS)
    ap.add_argument("--stack", default=sim.DEFAULT_DEPLOY_STACK, help="the bring-your-own stack (default sim)")
    ap.add_argument("--cluster", default="p5", help="the stack the simulated cluster was started for (default p5)")
    ap.add_argument("--workdir", type=Path, help="the deployment's directory (default <cluster state>/pulumi/<stack>)")
    ap.add_argument("--kubeconfig", type=Path, help="default: the simulated cluster's")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="edit the copy's stack file before the first run, e.g. rltrain:workloads.multiNode.form=rayjob")
    ap.add_argument("--refresh", action="store_true", help="refresh the state first (preview/up)")
    ap.add_argument("--policy-pack", action="append", default=[],
                    help="run this Python policy pack directory, e.g. policy (preview/up)")
    ap.add_argument("--save-plan", type=Path, help="preview: save the update plan to this file")
    ap.add_argument("--plan", type=Path, help="up: apply only this saved update plan")
    ap.add_argument("--json", type=Path, help="write the operations, diagnostics and summary here")
    ap.add_argument("--quiet", action="store_true", help="do not echo the engine's output")
    ap.add_argument("--no-sync", action="store_true",
                    help="deploy the work directory's copy as it is (default: copy the repository's program and "
                         "stack file afresh first)")
    args = ap.parse_args(argv)
    if (args.save_plan and args.operation != "preview") or (args.plan and args.operation != "up"):
        print("error: --save-plan goes with preview, --plan with up", file=sys.stderr)
        return 2
    kubeconfig = args.kubeconfig or sim.state_dir(args.cluster) / "kubeconfig"
    if not kubeconfig.exists():
        print(f"error: no kubeconfig at {kubeconfig}: python -m cluster.sim start --stack {args.cluster}", file=sys.stderr)
        return 1
    workdir = args.workdir or sim.state_dir(args.cluster) / "pulumi" / args.stack
    overrides = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --set {item!r}: want KEY=VALUE", file=sys.stderr)
            return 2
        overrides[key] = yaml.safe_load(value)
    try:
        provider_dir = Path(toolset().require("pulumi-resource-kubernetes")).parent
        project = prepare(workdir, args.stack, provider_dir, overrides=overrides, sync=not args.no_sync)
        packs = tuple(str(analyzer(workdir, Path(p))) for p in args.policy_pack)
        res = run(args.operation, workdir, args.stack, kubeconfig, refresh=args.refresh,
                  policy_packs=packs, secrets=default_secrets(project, args.stack),
                  echo=not args.quiet, save_plan=args.save_plan, plan=args.plan)
    except (DeployError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    if args.json:
        args.json.write_text(json.dumps(res, indent=1))
    print(f"{args.operation}: {'ok' if res['ok'] else 'FAILED'} in {res['seconds']}s; "
          f"Pulumi CLI {res['versions']['pulumi']}, Kubernetes provider {res['versions']['provider']}")
    if not res["ok"]:
        print(res["error"], file=sys.stderr)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
