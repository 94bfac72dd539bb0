"""The programs of components/scripts as the pods get them: file name, text, content digest and the
name of the immutable ConfigMap that carries each (scripts_configmap.py creates them).

A program too long to read as one file keeps its parts in a package beside it, named after it with a
leading underscore (`ray_launcher.py` and `_ray_launcher/`): the package travels in the program's own
ConfigMap, one key per file, and is mounted as a directory beside it under /scripts, so the pod runs
the same command and a change to any part restarts exactly the runs that run the program.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Sequence

from pydantic import BaseModel, ConfigDict, model_validator

SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "scripts"
# What the values of one ConfigMap's data may total: the API server refuses more
# (kubernetes pkg/apis/core/validation/validation.go, ValidateConfigMap: core.MaxSecretSize, 1 MiB).
CONFIGMAP_MAX_BYTES = 1024 * 1024


class Script(BaseModel):
    """One mounted program: its file name under /scripts, its ConfigMap and its content digest."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    file: str
    text: str
    parts: tuple[tuple[str, str], ...] = ()
    """The program's package: (path under /scripts, text) of each file, e.g. `_ray_launcher/config.py`."""

    @model_validator(mode="after")
    def _fits_one_configmap(self) -> "Script":
        size = sum(len(text.encode()) for text in self.files.values())
        if size > CONFIGMAP_MAX_BYTES:
            raise ValueError(f"{self.file} and its parts are {size} bytes; one ConfigMap holds at most "
                             f"{CONFIGMAP_MAX_BYTES} (Kubernetes ValidateConfigMap)")
        return self

    @property
    def files(self) -> dict[str, str]:
        """Path under /scripts -> text: the program, then its parts."""
        return {self.file: self.text, **dict(self.parts)}

    @property
    def digest(self) -> str:
        # A program without parts: the sha256 of its text, as before parts existed.
        h = hashlib.sha256(self.text.encode())
        for path, text in self.parts:
            h.update(b"\0" + path.encode() + b"\0" + text.encode())
        return h.hexdigest()

    @property
    def configmap(self) -> str:
        stem = self.file.rsplit(".", 1)[0].replace("_", "-").lower()
        return f"rltrain-script-{stem}-{self.digest[:10]}"


def configmap_key(path: str) -> str:
    """A ConfigMap key for a file under /scripts: keys hold no `/` (only `-._a-zA-Z0-9`), so a part
    `_ray_launcher/config.py` is the key `_ray_launcher.config.py` (the volume maps it back)."""
    return path.replace("/", ".")


def _parts(directory: Path, program: Path) -> tuple[tuple[str, str], ...]:
    package = directory / f"_{program.stem}"
    if not package.is_dir():
        return ()
    return tuple((p.relative_to(directory).as_posix(), p.read_text(encoding="utf-8"))
                 for p in sorted(package.rglob("*.py")) if p.is_file())


def read_scripts(directory: Path = SCRIPTS_DIR) -> dict[str, Script]:
    """File name -> Script for every `*.py` in `directory` (with its package `_<name>/`, if any),
    sorted by name."""
    files = sorted(p for p in directory.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no scripts in {directory}")
    return {p.name: Script(file=p.name, text=p.read_text(encoding="utf-8"), parts=_parts(directory, p))
            for p in files}


def scripts_digest(scripts: Sequence[Script]) -> str:
    """sha256 over the names and contents of exactly these scripts (a pod template carries it)."""
    h = hashlib.sha256()
    for s in sorted(scripts, key=lambda s: s.file):
        for path, text in s.files.items():
            h.update(path.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()
