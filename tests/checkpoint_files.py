"""Checkpoint files as a trainer writes them, without torch: what the tests of the programs that pick
a complete step (resume wrapper, export, retention, embodied evaluation) put on disk.

- `*.pt`: a zip archive in torch.save's layout (`<name>/data.pkl`, `<name>/version`), the central
  directory last (torch/serialization.py `_open_zipfile_writer_file`, `write_end_of_file`).
- `.metadata`: a pickle, as DCP's FileSystemWriter writes it.
- anything else: the bytes given.
`tear` cuts a file in the middle, as a node lost mid-write leaves it.
"""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path
from typing import Iterable


def torch_save_bytes(value: object = 0, size: int = 4096) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps(value))
        z.writestr("archive/data/0", os.urandom(size))
        z.writestr("archive/version", "3\n")
    return buf.getvalue()


def write_mark(path: Path, value: object = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith((".pt", ".pth")):
        path.write_bytes(torch_save_bytes(value))
    elif path.name == ".metadata":
        path.write_bytes(pickle.dumps({"value": value}))
    else:
        path.write_bytes(b"m")
    return path


def write_step(step_dir: Path, marks: Iterable[str], value: object = 0) -> Path:
    for mark in marks:
        write_mark(step_dir / mark, value)
    return step_dir


def tear(path: Path) -> Path:
    """Keep the first half of the file: a write cut short."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    return path
