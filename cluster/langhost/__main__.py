"""Put the test harness's language host where the Pulumi CLI finds it.

    python -m cluster.langhost install DIR [--python PYTHON]

Writes DIR/pulumi-language-python, a two-line shell script that runs cluster/langhost/host.py with
PYTHON (default: this interpreter, which must have `pulumi` and `grpcio`). With DIR on PATH the CLI
starts it for every Python program and policy pack (sdk/go/common/workspace/plugins.go
`getPluginInfoAndPath`: ambient plugins on $PATH, with a warning naming the path); or name DIR in
Pulumi.yaml's `plugins.languages` (no warning). What it is and how it differs from Pulumi's own host:
cluster/langhost/__init__.py.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Optional

HOST = Path(__file__).resolve().with_name("host.py")
NAME = "pulumi-language-python"


def install(directory: Path, python: str = sys.executable) -> Path:
    """DIR/pulumi-language-python; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / NAME
    path.write_text(f"#!/bin/sh\nexec {shlex.quote(python)} {shlex.quote(str(HOST))} \"$@\"\n")
    path.chmod(0o755)
    return path


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cluster.langhost", description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    inst = sub.add_parser("install", help="write DIR/pulumi-language-python")
    inst.add_argument("dir", type=Path)
    inst.add_argument("--python", default=sys.executable, help="the interpreter that runs the host")
    args = ap.parse_args(argv)
    print(install(args.dir, args.python))
    return 0


if __name__ == "__main__":
    sys.exit(main())
