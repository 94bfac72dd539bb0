"""The programs of components/scripts as the pods get them: file name, text, content digest and the
name of the immutable ConfigMap that carries each (scripts_configmap.py creates them)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ConfigDict

SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "scripts"


class Script(BaseModel):
    """One mounted program: its file name under /scripts, its ConfigMap and its content digest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    file: str
    text: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def configmap(self) -> str:
        stem = self.file.rsplit(".", 1)[0].replace("_", "-").lower()
        return f"rltrain-script-{stem}-{self.digest[:10]}"


def read_scripts(directory: Path = SCRIPTS_DIR) -> dict[str, Script]:
    """File name -> Script for every `*.py` in `directory`, sorted by name."""
    files = sorted(p for p in directory.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no scripts in {directory}")
    return {p.name: Script(file=p.name, text=p.read_text(encoding="utf-8")) for p in files}


def scripts_digest(scripts: Sequence[Script]) -> str:
    """sha256 over the names and contents of exactly these scripts (a pod template carries it)."""
    h = hashlib.sha256()
    for s in sorted(scripts, key=lambda s: s.file):
        h.update(s.file.encode() + b"\0" + s.text.encode() + b"\0")
    return h.hexdigest()
