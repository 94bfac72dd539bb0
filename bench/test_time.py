"""Wall time of the test suite's default tier, measured in a fresh process (not a timed test).

    python bench/test_time.py                 # the default tier once: `python -m pytest -q`
    python bench/test_time.py --runs 3        # three runs, one after the other
    python bench/test_time.py --tier slow     # `python -m pytest -q -m slow`
    python bench/test_time.py --tier all      # every tier, as ci/test.sh runs it

Prints, per run, the wall time, the CPU time of every process the run started (pytest, its workers
and their subprocesses; divided by the core count it is the wall time an idle machine would need at
best), pytest's own summary line and the load average before and after (the machine may be shared:
a wall time means little without the load it was measured under).
Exit 1 when a run fails.
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import subprocess
import sys
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python bench/test_time.py", description=__doc__.split("\n")[0])
    ap.add_argument("--tier", choices=sorted(TIERS), default="default")
    ap.add_argument("--runs", type=int, default=1)
    args = ap.parse_args(argv)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TIERS[args.tier]]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    print(f"command: {' '.join(command[1:])} (tier {args.tier}, in {ROOT})")
    failed = False
    times = []
    for n in range(1, args.runs + 1):
        before = load()
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        res = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
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
        failed |= res.returncode != 0
    if args.runs > 1:
        print(f"best {min(times):.1f} s, median {sorted(times)[len(times) // 2]:.1f} s, worst {max(times):.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
