"""Wall and CPU time of the test suite, per tier and per module, measured in a fresh process (not a
timed test).

    python bench/test_time.py                 # the default tier once: `python -m pytest -q`
    python bench/test_time.py --runs 3        # three runs, one after the other (best, median, worst)
    python bench/test_time.py --tier slow     # `python -m pytest -q -m slow`
    python bench/test_time.py --tier all      # every tier, as ci/test.sh runs it
    python bench/test_time.py --tier all --modules 0 -- tests/sim   # extra pytest arguments after --

Prints, per run, the wall time, the CPU time of every process the run started (pytest, its workers
and their subprocesses; divided by the core count it is the wall time an idle machine would need at
best), pytest's own summary line and the load average before and after (the machine may be shared:
a wall time means little without the load it was measured under). Then, from the per-test lines the
suite writes when RLTRAIN_TEST_TIMES names a file (tests/conftest.py), the wall and CPU per tier
(default, slow, sim) and the modules that took longest (`--modules N`, 0 for all): wall is the sum
of the module's tests' setup, call and teardown on their worker, CPU that worker's plus the
children it reaped meanwhile.
Exit 1 when a run fails.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIERS = {
    "default": [],
    "slow": ["-m", "slow"],
    "all": ["-m", "slow or not slow"],
}


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def table(lines: list[dict], top: int) -> list[str]:
    """Per tier, then per module (longest wall first): tests, wall, CPU."""
    out = []
    tiers: dict[str, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0.0])
    mods: dict[str, list] = collections.defaultdict(lambda: [0, 0.0, 0.0, ""])
    for t in lines:
        for acc in (tiers[t["tier"]], mods[t["module"]]):
            acc[0] += 1
            acc[1] += t["wall"]
            acc[2] += t["cpu"]
        mods[t["module"]][3] = t["tier"] if mods[t["module"]][3] in ("", t["tier"]) else "mixed"
    out.append(f"{'tier':<10} {'tests':>6} {'wall s':>9} {'CPU s':>9}   (sums over the workers)")
    for name in ("default", "slow", "sim"):
        if name in tiers:
            n, wall, cpu = tiers[name]
            out.append(f"{name:<10} {n:>6} {wall:>9.1f} {cpu:>9.1f}")
    ranked = sorted(mods.items(), key=lambda kv: -kv[1][1])
    if top:
        ranked = ranked[:top]
    width = max((len(m) for m, _ in ranked), default=10)
    out.append(f"{'module':<{width}} {'tier':<8} {'tests':>6} {'wall s':>8} {'CPU s':>8}")
    for mod, (n, wall, cpu, tier) in ranked:
        out.append(f"{mod:<{width}} {tier:<8} {n:>6} {wall:>8.1f} {cpu:>8.1f}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/test_time.py", description=__doc__.split("\n")[0])
    ap.add_argument("--tier", choices=sorted(TIERS), default="default")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--modules", type=int, default=15, help="how many modules to list, longest first (0: all)")
    ap.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = ap.parse_args(argv)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIERS[args.tier], *args.pytest_args]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"command: {' '.join(command[1:])} (tier {args.tier}, in {ROOT})")
    failed = False
    times = []
    for n in range(1, args.runs + 1):
        before = load()
        fd, times_file = tempfile.mkstemp(prefix="rltrain-test-times-", suffix=".jsonl")
        os.close(fd)
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        res = subprocess.run(command, cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "RLTRAIN_TEST_TIMES": times_file})
        wall = time.perf_counter() - start
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (usage.ru_utime - cpu_before.ru_utime) + (usage.ru_stime - cpu_before.ru_stime)
        times.append(wall)
        lines = res.stdout.strip().splitlines()
        summary = lines[-1] if lines else res.stderr.strip()[-200:]
        print(f"run {n}: {wall:6.1f} s wall, {cpu:6.1f} s CPU (all processes; / {os.cpu_count()} cores = "
              f"{cpu / (os.cpu_count() or 1):.1f} s)  exit {res.returncode}  load before {before}, after {load()}"
              f"  | {summary}")
        for line in lines:
            if line.startswith(("FAILED ", "ERROR ")):
                print(f"  {line}")
        per_test = [json.loads(x) for x in Path(times_file).read_text().splitlines() if x.strip()]
        os.unlink(times_file)
        for row in table(per_test, args.modules):
            print(f"  {row}")
        failed |= res.returncode != 0
    if args.runs > 1:
        print(f"best {min(times):.1f} s, median {sorted(times)[len(times) // 2]:.1f} s, worst {max(times):.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
