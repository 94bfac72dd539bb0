"""Scratch-project renders of stack variants for the Kueue and schedule tests (not a test module)."""

from __future__ import annotations

import functools
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import yaml

from components.offline import render, unset_secrets
from components.offline.mock_engine import ROOT

_DIR = Path(tempfile.mkdtemp(prefix="rltrain-kueue-"))


def _project() -> Path:
    proj = _DIR / "proj"
    if not proj.exists():
        proj.mkdir()
        for p in ROOT.glob("Pulumi.*.yaml"):
            shutil.copy(p, proj / p.name)
        for name in ("__main__.py", "Pulumi.yaml"):
            shutil.copy(ROOT / name, proj / name)
        (proj / "components").symlink_to(ROOT / "components")
    return proj


def write_variant(base: str, name: str, edits: dict) -> Path:
    """Pulumi.<name>.yaml: the base stack with `edits` ({"rltrain:section": {key: value}}) merged in."""
    proj = _project()
    doc = yaml.safe_load((ROOT / f"Pulumi.{base}.yaml").read_text())
    for key, values in edits.items():
        section = doc["config"].setdefault(key, {})
        for k, v in values.items():
            if isinstance(v, dict) and isinstance(section.get(k), dict):
                section[k] = {**section[k], **v}
            else:
                section[k] = v
    (proj / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return proj


def _digits(text: str) -> str:
    """Eight digits of a hash of `text`, the same in every process (str's hash() is salted per
    process): a variant keeps its name from run to run, so its render is found in the cache
    (tests/render_cache.py)."""
    return str(int(hashlib.sha256(text.encode()).hexdigest()[:12], 16) % 10**8)


@functools.lru_cache(maxsize=None)
def _variant(base: str, edits_json: str) -> render.Rendered:
    edits = json.loads(edits_json)
    name = f"{base}-v{_digits(edits_json)}"
    proj = write_variant(base, name, edits)
    return render.render_stack(name, proj)


def variant(base: str, edits: dict) -> render.Rendered:
    return _variant(base, json.dumps(edits, sort_keys=True))


def load_variant(base: str, edits: dict):
    """Only the validated config of a variant (raises ConfigError)."""
    name = f"{base}-c{_digits(json.dumps(edits, sort_keys=True))}"
    proj = write_variant(base, name, edits)
    return unset_secrets.load_stack(name, proj)[2]
