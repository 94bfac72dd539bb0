#!/usr/bin/env python3
"""Stage models and task assets on the shared volume: skip what is complete, redo what is not.

Usage (the staging Job's command): python3 /scripts/stage_assets.py

Environment:

    STAGE_ITEMS   required: JSON list of {"name", "source", "dest"}. Sources:
                    hf:<repo>            a model repository of the Hugging Face hub
                    hf-dataset:<repo>    a dataset repository of the hub
                    s3://bucket/prefix/  every object under the prefix (boto3, the pod's AWS role)
                    file:///path         a directory (another volume, or a test)
    HF_TOKEN      optional: the hub token (from the training Secret), for gated repositories.

An item is complete when `<dest>/.rltrain-staged` exists and names the same source: it is
skipped. Anything else at `dest` (an interrupted download, another source) is fetched again into
the same directory (the hub client and the S3 copy overwrite and resume per file), then the mark
is written, last and atomically (a temporary file renamed). Items run in order; the first
failure stops the script with exit 1 and a line naming the item, its source and the error.

Exit codes: 0 all items complete, 1 an item failed (named), 2 STAGE_ITEMS missing or invalid.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from typing import Mapping, Optional

MARK = ".rltrain-staged"
EXIT_FAILED = 1
EXIT_USAGE = 2
PREFIX = "[stage-assets]"


def say(message: str) -> None:
    print(f"{PREFIX} {message}", flush=True)


def complete(dest: str, source: str) -> bool:
    try:
        with open(os.path.join(dest, MARK), encoding="utf-8") as f:
            return json.load(f).get("source") == source
    except (OSError, ValueError):
        return False


def mark(dest: str, source: str) -> None:
    tmp = os.path.join(dest, f"{MARK}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"source": source}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, os.path.join(dest, MARK))


def fetch_file(path: str, dest: str) -> None:
    if not os.path.isdir(path):
        raise FileNotFoundError(f"{path} is not a directory")
    shutil.copytree(path, dest, dirs_exist_ok=True)


def fetch_hub(repo: str, dest: str, repo_type: str, env: Mapping[str, str]) -> None:
    # RLinf depends on huggingface_hub (RLinf/RLinf@050543189957 pyproject.toml), so every venv has it.
    from huggingface_hub import snapshot_download

    snapshot_download(repo_id=repo, repo_type=repo_type, local_dir=dest, token=env.get("HF_TOKEN") or None)


def fetch_s3(url: str, dest: str) -> None:
    try:
        import boto3
    except ImportError as exc:  # not a dependency of RLinf: the image may not have it
        raise RuntimeError(f"s3:// sources need boto3 in {sys.executable}'s environment ({exc})") from None

    bucket, _, prefix = url[len("s3://"):].partition("/")
    s3 = boto3.client("s3")
    found = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(prefix):].lstrip("/")
            if not rel or rel.endswith("/"):
                continue
            target = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            s3.download_file(bucket, obj["Key"], target)
            found += 1
    if not found:
        raise FileNotFoundError(f"no objects under {url}")


def fetch(source: str, dest: str, env: Mapping[str, str]) -> None:
    if source.startswith("file://"):
        fetch_file(source[len("file://"):], dest)
    elif source.startswith("hf-dataset:"):
        fetch_hub(source[len("hf-dataset:"):], dest, "dataset", env)
    elif source.startswith("hf:"):
        fetch_hub(source[len("hf:"):], dest, "model", env)
    elif source.startswith("s3://"):
        fetch_s3(source, dest)
    else:
        raise ValueError(f"unknown source scheme (hf:, hf-dataset:, s3://, file://): {source}")


def load_items(env: Mapping[str, str]) -> list[dict]:
    raw = env.get("STAGE_ITEMS")
    if not raw:
        raise ValueError("STAGE_ITEMS is not set")
    items = json.loads(raw)
    if not isinstance(items, list) or not all(
            isinstance(i, dict) and all(isinstance(i.get(k), str) and i.get(k) for k in ("name", "source", "dest"))
            for i in items):
        raise ValueError("STAGE_ITEMS must be a JSON list of {name, source, dest} strings")
    for i in items:
        if not os.path.isabs(i["dest"]):
            raise ValueError(f"item {i['name']}: dest {i['dest']!r} is not an absolute path")
    return items


def main(env: Optional[Mapping[str, str]] = None) -> int:
    env = os.environ if env is None else env
    try:
        items = load_items(env)
    except ValueError as exc:
        say(f"error: {exc}")
        return EXIT_USAGE
    for item in items:
        name, source, dest = item["name"], item["source"], item["dest"]
        if complete(dest, source):
            say(f"{name}: complete at {dest}, skipped")
            continue
        state = "partial or from another source, fetching again" if os.path.exists(dest) else "fetching"
        say(f"{name}: {state}: {source} -> {dest}")
        try:
            os.makedirs(dest, exist_ok=True)
            fetch(source, dest, env)
            mark(dest, source)
        except Exception as exc:  # every backend raises its own types
            say(f"error: staging {name} from {source} to {dest} failed: {type(exc).__name__}: {exc}")
            return EXIT_FAILED
        say(f"{name}: complete at {dest}")
    say(f"all {len(items)} item(s) complete")
    return 0


if __name__ == "__main__":
    sys.exit(main())
