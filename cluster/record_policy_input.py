"""Record what the engine hands a stack policy in a real preview of the `sim` stack, for the policy
pack's tests (tests/fixtures/policy/sim-preview.json).

    python -m cluster.sim start --stack p5           # a cluster with nothing of the stack on it
    python -m cluster.record_policy_input            # up, preview with the recorder, destroy

The stack is deployed into a fresh work directory, previewed with cluster/policy_recorder (a pack
that only writes the resources it is given: Kubernetes objects as the engine's outputs, with status,
managedFields and what controllers wrote), then destroyed. The run's own values (uids, times, the
field manager's suffix, the kubeconfig) are in the file as recorded.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "policy" / "sim-preview.json"


def _deploy(op: str, workdir: Path, *flags: str, env: dict[str, str] | None = None) -> None:
    r = subprocess.run([sys.executable, "-m", "cluster.deploy", op, "--quiet", "--workdir", str(workdir), *flags],
                       cwd=ROOT, env={**os.environ, **(env or {})}, capture_output=True, text=True)
    print(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else f"{op}: no output")
    if r.returncode:
        raise SystemExit(f"{op} failed:\n{r.stdout[-4000:]}\n{r.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cluster.record_policy_input", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=FIXTURE)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="rltrain-record-") as tmp:
        workdir = Path(tmp) / "deploy"
        try:
            _deploy("up", workdir)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            _deploy("preview", workdir, "--no-sync", "--policy-pack", str(ROOT / "cluster" / "policy_recorder"),
                    env={"RLTRAIN_POLICY_RECORD": str(args.out.resolve())})
        finally:
            _deploy("destroy", workdir, "--no-sync")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
