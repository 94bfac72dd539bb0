"""Render benchmark: prints figures, asserts nothing (speed goals are not tests).

    python bench/render_bench.py [--repeat 3]

Measures, each in a fresh interpreter and as the best of --repeat runs:
- the import floor: importing the Pulumi SDK modules the program uses;
- `python -m components.offline.render --stack S` for every stack;
- the p5 stack at 2, 8, 32 and 64 GPU nodes.
Goals shown against: every stack within 2x the import floor; node count changes render time by
no more than 10 %.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from components.stack import stackfile  # noqa: E402

# The SDK modules the program touches (pulumi_aws and pulumi_kubernetes load submodules lazily).
IMPORTS = ("import pulumi, pulumi_eks, pydantic, yaml; import pulumi_aws.ec2, pulumi_aws.eks, pulumi_aws.fsx, "
           "pulumi_aws.iam, pulumi_aws.kms, pulumi_aws.vpc; import pulumi_kubernetes.core.v1, "
           "pulumi_kubernetes.helm.v3, pulumi_kubernetes.batch.v1, pulumi_kubernetes.apps.v1, "
           "pulumi_kubernetes.networking.v1, pulumi_kubernetes.policy.v1, pulumi_kubernetes.scheduling.v1, "
           "pulumi_kubernetes.apiextensions")


def best_of(cmd: list[str], repeat: int, cwd: Path = ROOT) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append(time.perf_counter() - start)
    return min(times)


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


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    py = sys.executable
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"{platform.platform()}")
    floor = best_of([py, "-c", IMPORTS], args.repeat)
    print(f"import floor: {floor:.2f} s  ({IMPORTS})")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        for stack in stackfile.stack_names():
            t = best_of([py, "-m", "components.offline.render", "--stack", stack, "--out", f"{tmp}/{stack}"], args.repeat)
            worst = max(worst, t / floor)
            print(f"render {stack:5s}: {t:.2f} s = {t / floor:.2f} x floor")
        print(f"goal every stack <= 2.00 x floor: {'met' if worst <= 2 else 'NOT met'} (worst {worst:.2f} x)")
        by_nodes = {}
        for nodes in (2, 8, 32, 64):
            proj = project_with_nodes(Path(tmp), nodes)
            by_nodes[nodes] = best_of([py, "-m", "components.offline.render", "--stack", "p5", "--out", f"{proj}/out",
                                       "--project-dir", str(proj)], args.repeat)
            print(f"render p5 at {nodes:2d} nodes: {by_nodes[nodes]:.2f} s")
        spread = (max(by_nodes.values()) - min(by_nodes.values())) / min(by_nodes.values())
        print(f"goal node count changes render time <= 10 %: {'met' if spread <= 0.10 else 'NOT met'} "
              f"(spread {spread * 100:.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
