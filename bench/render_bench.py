"""Render benchmark: prints figures, asserts nothing (speed goals are not tests).

    python bench/render_bench.py [--repeat 5]

One interleaved run: each round runs every stack's floor and render and p5 at 2, 8, 32 and 64 GPU
nodes once, each in a fresh interpreter, so that drift of the machine hits every figure alike; each
figure is the best of --repeat rounds.

The floor of a stack is what its render cannot go below: a fresh interpreter that loads exactly the
library modules that stack's render loads (found by running the render in-process first and reading
`sys.modules`), in the same order, and exits the way the render CLI does (garbage collection off,
`os._exit` after flushing). The SDKs load their sub-packages lazily (`import pulumi_aws.ec2` runs almost nothing),
so every module that the render executed is touched, which runs it; a module the render only
registered lazily is left lazy. Library modules are every module not of this project
(`components.*`): the Pulumi SDKs with grpc and protobuf, pydantic, PyYAML, detect-secrets, ....
The render figures are `python -m components.offline.render --stack S --out TMP --accept-impact`.

Every interpreter the benchmark starts (probe, floors, renders) reads its bytecode from one cache
directory of the run (PYTHONPYCACHEPREFIX), written by the probes, and ignores a
PYTHONDONTWRITEBYTECODE of the caller: floor and render then both run from bytecode, as they do for
anyone whose Python writes its cache (the default), instead of the render alone compiling the
project's ~90 modules from source on every run when the caller's environment forbids the cache.
Nothing is written into the repository.

Each figure is printed as wall-clock time and as CPU time (user + system of the process, from
wait4): on a machine shared with other work the wall clock also counts the time the process waited
for a core, the CPU time only the work it did.

Goals shown against: every stack within 1.3x its floor; node count changes render time by no more
than 10 %.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from components.stack import stackfile  # noqa: E402

GOAL_RATIO = 1.3
# Every check runs, the change-impact guard included (against the committed records); its refusals
# of a run restart are accepted so that a render is timed to the end, files written, also while the
# committed records are behind the code.
RENDER_FLAGS = ("--accept-impact",)
GOAL_NODE_SPREAD = 0.10
NODE_COUNTS = (2, 8, 32, 64)

# Runs one render in-process and prints, in load order, every module it executed that is not this
# project's own code.
PROBE = """
import json, sys
sys.path.insert(0, {root!r})
before = set(sys.modules)
from components.offline import render
code = render.main(["--stack", {stack!r}, "--out", {out!r}, "--accept-impact"])
own = ("components", "__main__")
mods = [n for n, m in list(sys.modules.items())
        if n not in before and type(m).__name__ != "_LazyModule" and n.split(".")[0] not in own]
print(json.dumps({{"code": code, "modules": mods}}))
"""

# The floor: the same modules, in the same order, then the render CLI's exit.
FLOOR = """
import gc
gc.disable()
import importlib, os, sys
for name in {modules!r}:
    module = importlib.import_module(name)
    # Touching an attribute runs a lazily imported sub-package, as the render's first use of one of
    # its classes does (the SDKs' lazy modules do not load on introspection attributes like __name__).
    hasattr(module, "_floor_touch")
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
"""


def child_env(pycache: Path) -> dict[str, str]:
    """The environment of every interpreter the benchmark starts: bytecode cached under `pycache`."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def render_modules(stack: str, tmp: Path, env: Optional[dict[str, str]] = None) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(root=str(ROOT), stack=stack, out=str(tmp / "probe"))],
                          cwd=ROOT, check=True, capture_output=True, text=True, env=env)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if result["code"] != 0:
        raise SystemExit(f"the probe render of {stack} exited {result['code']}:\n{proc.stderr[-2000:]}")
    return result["modules"]


def timed(cmd: list[str], cwd: Path = ROOT, env: Optional[dict[str, str]] = None) -> tuple[float, float]:
    """(wall-clock seconds, CPU seconds: user + system) of one run of `cmd`."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    # wait4 before communicate: the child's own resource use, reaped here (communicate would reap it).
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stderr.close()
    if proc.returncode != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd, stderr=err)
    return wall, usage.ru_utime + usage.ru_stime


def project_with_nodes(base: Path, nodes: int) -> Path:
    proj = base / f"p5-{nodes}"
    proj.mkdir()
    for name in ("__main__.py", "Pulumi.yaml"):
        shutil.copy(ROOT / name, proj / name)
    (proj / "components").symlink_to(ROOT / "components")
    doc = yaml.safe_load((ROOT / "Pulumi.p5.yaml").read_text())
    doc["config"]["rltrain:gpuNodes"]["count"] = nodes
    (proj / "Pulumi.p5.yaml").write_text(yaml.safe_dump(doc))
    return proj


def _origin(module: str) -> str:
    top = module.split(".")[0]
    if top.startswith("pulumi"):
        return "pulumi"
    return "stdlib" if top in sys.stdlib_module_names or top.startswith("_") else "other"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5, help="rounds; each figure is the best of them")
    args = ap.parse_args()
    py = sys.executable
    stacks = stackfile.stack_names()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.platform()}")
    composition = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        env = child_env(tmp / "pycache")
        commands: dict[str, tuple[list[str], Path]] = {}
        for stack in stacks:
            # Each stack's floor loads what its own render loads (byo loads no AWS sub-package).
            modules = render_modules(stack, tmp, env)
            composition[stack] = collections.Counter(_origin(m) for m in modules)
            floor_script = tmp / f"floor-{stack}.py"
            floor_script.write_text(FLOOR.format(modules=modules))
            commands[f"floor {stack}"] = ([py, str(floor_script)], ROOT)
            commands[stack] = ([py, "-m", "components.offline.render", "--stack", stack, "--out",
                                str(tmp / "out" / stack), *RENDER_FLAGS], ROOT)
        for nodes in NODE_COUNTS:
            proj = project_with_nodes(tmp, nodes)
            commands[f"p5@{nodes}"] = ([py, "-m", "components.offline.render", "--stack", "p5", "--out",
                                        str(proj / "out"), "--project-dir", str(proj), *RENDER_FLAGS], proj)
        best: dict[str, float] = {}
        cpu: dict[str, float] = {}
        for _ in range(args.repeat):  # interleaved: one of each per round
            for key, (cmd, cwd) in commands.items():
                t, c = timed(cmd, cwd, env)
                best[key] = min(best.get(key, t), t)
                cpu[key] = min(cpu.get(key, c), c)
    print("floor: a fresh interpreter that loads exactly the library modules the stack's render loads, "
          "then exits as the render does (gc off, os._exit)")
    for stack in stacks:
        c = composition[stack]
        print(f"  floor {stack:5s} loads {sum(c.values())} modules: {c['pulumi']} Pulumi SDK, {c['other']} other "
              f"third-party, {c['stdlib']} standard library")
    print("bytecode: every interpreter reads one cache of the run (PYTHONPYCACHEPREFIX), written by the probes")
    print("        wall clock                   CPU time (user + system)")
    print("stack   floor    render   ratio      floor    render   ratio")
    worst, worst_stack, worst_cpu, worst_cpu_stack = 0.0, "", 0.0, ""
    for stack in stacks:
        floor, t = best[f"floor {stack}"], best[stack]
        cfloor, c = cpu[f"floor {stack}"], cpu[stack]
        if t / floor > worst:
            worst, worst_stack = t / floor, stack
        if c / cfloor > worst_cpu:
            worst_cpu, worst_cpu_stack = c / cfloor, stack
        print(f"{stack:6s} {floor:5.2f} s  {t:5.2f} s  {t / floor:.2f} x     {cfloor:5.2f} s  {c:5.2f} s  {c / cfloor:.2f} x")
    print(f"goal every stack <= {GOAL_RATIO:.2f} x its floor: {'met' if worst <= GOAL_RATIO else 'NOT met'} "
          f"(worst {worst:.2f} x, {worst_stack}); in CPU time "
          f"{'met' if worst_cpu <= GOAL_RATIO else 'NOT met'} (worst {worst_cpu:.2f} x, {worst_cpu_stack})")
    by_nodes = {n: best[f"p5@{n}"] for n in NODE_COUNTS}
    for nodes, t in by_nodes.items():
        print(f"render p5 at {nodes:2d} nodes: {t:.2f} s")
    spread = (max(by_nodes.values()) - min(by_nodes.values())) / min(by_nodes.values())
    print(f"goal node count changes render time <= {GOAL_NODE_SPREAD * 100:.0f} %: "
          f"{'met' if spread <= GOAL_NODE_SPREAD else 'NOT met'} (spread {spread * 100:.1f} %)")
    print(f"best of {args.repeat} interleaved rounds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
