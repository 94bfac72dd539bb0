#!/usr/bin/env python3
"""The training image's tag, derived from what the image is built from.

    python3 image_tag.py --revision <RLinf commit> --target <RLinf BUILD_TARGET> [--dir DIR]

prints `<target>-<first 12 of the revision>-<first 12 of a SHA-256>`; the hash covers the revision,
the target and every file of the build definition (DIR, default this file's directory: the overlay
Dockerfile, the build and install scripts, the pinned versions, this program). Same inputs give the
same tag, so an image that exists in the repository is never built again; any changed input is a
new tag (ECR refuses to overwrite one: the repository's tags are immutable).

Run twice with the same text: by the stack when it renders or deploys (components/aws/image.py,
which also uploads exactly `build_files()` as the build's source), and by the build itself
(build.sh), which refuses to push under a tag its own inputs do not give. Standard library only:
it runs in CodeBuild's image as well as on the deploying machine.

Exit codes: 0 the tag printed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# What is never part of the build definition: Python's package marker and byte-code caches.
IGNORED_NAMES = {"__init__.py", "__pycache__"}
REVISION = re.compile(r"[0-9a-f]{40}")
# RLinf docker/Dockerfile's targets are `FROM ${BUILD_TARGET}-image`: lowercase words, - and _.
TARGET = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# The hash's own version: a change of the scheme must not reuse an old tag for other content.
SCHEME = "rltrain-image-tag/1"


def build_files(directory: Path = HERE) -> list[Path]:
    """Every file of the build definition, sorted by its path relative to `directory`."""
    out = []
    for path in sorted(directory.rglob("*")):
        rel = path.relative_to(directory)
        if path.is_file() and not (set(rel.parts) & IGNORED_NAMES) and path.suffix != ".pyc":
            out.append(path)
    return sorted(out, key=lambda p: p.relative_to(directory).as_posix())


def pins(directory: Path = HERE) -> dict[str, str]:
    """pins.env's KEY=VALUE lines (what build.sh sources), comments and blank lines left out."""
    out = {}
    for line in (directory / "pins.env").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out[key] = value
    return out


def files_digest(directory: Path = HERE) -> str:
    """SHA-256 over every build file's relative path and content."""
    h = hashlib.sha256()
    for path in build_files(directory):
        h.update(path.relative_to(directory).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).hexdigest().encode() + b"\n")
    return h.hexdigest()


def image_tag(revision: str, target: str, directory: Path = HERE) -> str:
    if not REVISION.fullmatch(revision):
        raise ValueError(f"revision must be a full 40-character commit id, got {revision!r}")
    if not TARGET.fullmatch(target):
        raise ValueError(f"target must be one of RLinf's BUILD_TARGET names (lowercase, - and _), got {target!r}")
    h = hashlib.sha256("\n".join((SCHEME, revision, target, files_digest(directory))).encode()).hexdigest()
    return f"{target}-{revision[:12]}-{h[:12]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--revision", required=True, help="the RLinf commit the image is built from")
    parser.add_argument("--target", required=True, help="RLinf docker/Dockerfile BUILD_TARGET")
    parser.add_argument("--dir", type=Path, default=HERE, help="the build definition (default: this directory)")
    parser.add_argument("--files", action="store_true", help="list the build files instead of the tag")
    args = parser.parse_args(argv)
    if not args.dir.is_dir():
        print(f"image_tag: {args.dir} is not a directory", file=sys.stderr)
        return 2
    try:
        tag = image_tag(args.revision, args.target, args.dir)
    except ValueError as exc:
        print(f"image_tag: {exc}", file=sys.stderr)
        return 2
    if args.files:
        for path in build_files(args.dir):
            print(path.relative_to(args.dir).as_posix())
    else:
        print(tag)
    return 0


if __name__ == "__main__":
    sys.exit(main())
