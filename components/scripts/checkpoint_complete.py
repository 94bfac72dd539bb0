"""When a checkpoint step is complete: the one test every program that picks a step applies.

Imported (not run) by /scripts/resume_wrapper.py (the step a restart resumes from),
/scripts/export_hf.py (the step exported), /scripts/retention.py (the steps kept) and
/scripts/embodied_eval.py (the step evaluated); the pods that run them mount this file beside them.

A step directory `<steps dir>/<prefix><N>` is complete when every completion mark (the trainer
profile's `complete_marks`, relative to the step directory, components/stack/trainers.py) is a file
that loads, not merely one that exists:

- `*.pt` / `*.pth` (full_weights.pt, data.pt): a complete torch.save archive. torch.save writes the
  named file in place (torch/serialization.py `_open_zipfile_writer_file` hands the path to
  `PyTorchFileWriter`; checked at torch 2.6.0) and writes the zip's central directory and end
  record last, when the writer closes (`__exit__` calls `write_end_of_file`): a save cut short (a
  node lost mid-write) leaves a file that exists but has no end record. zipfile reads the end record
  and the central directory, and every member's data must lie inside the file. No torch, no data
  read: a 100 GB file is checked in milliseconds.
- `.metadata` (torch.distributed.checkpoint's, RLinf's `dcp_checkpoint/.metadata`): a complete pickle
  stream. DCP's FileSystemWriter.finish pickles the Metadata to `.metadata.tmp` and renames it
  (torch/distributed/checkpoint/filesystem.py, torch 2.6.0); readable = its opcodes parse to the
  STOP opcode (pickletools.genops: nothing is imported or executed).
- any other mark: a non-empty regular file.

A step that is not complete is skipped by every reader, with the reason (which mark, why): the
newest complete step before it is used. Standard library only.
"""

from __future__ import annotations

import os
import pickletools
import re
import zipfile
from typing import Optional, Sequence

TORCH_SAVE_SUFFIXES = (".pt", ".pth")
DCP_METADATA = ".metadata"


def _zip_problem(path: str, size: int) -> Optional[str]:
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        return (f"not a complete zip archive ({exc}): torch.save writes it in place and its directory "
                "last, so the write was cut short")
    if not members:
        return "a zip archive without members: not a torch.save archive"
    for m in members:
        if m.header_offset + m.compress_size > size:
            return f"member {m.filename} ends past the end of the file ({size} bytes): truncated"
    return None


def _pickle_problem(path: str) -> Optional[str]:
    try:
        with open(path, "rb") as f:
            for opcode, _, _ in pickletools.genops(f):
                if opcode.name == "STOP":
                    return None
    except (ValueError, EOFError, OSError) as exc:
        return f"not a complete pickle ({exc}): DCP's metadata does not parse to its end"
    return "not a complete pickle (no STOP opcode): DCP's metadata does not parse to its end"


def mark_problem(step_dir: str, mark: str) -> Optional[str]:
    """Why `mark` of `step_dir` does not load, or None when it does."""
    path = os.path.join(step_dir, mark)
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    if not os.path.isfile(path):
        return "not a regular file"
    if st.st_size == 0:
        return "empty"
    name = os.path.basename(mark)
    if name.endswith(TORCH_SAVE_SUFFIXES):
        return _zip_problem(path, st.st_size)
    if name == DCP_METADATA:
        return _pickle_problem(path)
    return None


def incomplete_reason(step_dir: str, marks: Sequence[str]) -> Optional[str]:
    """None when every mark loads; else the first mark that does not and why (`<mark>: <why>`)."""
    for mark in marks:
        problem = mark_problem(step_dir, mark)
        if problem is not None:
            return f"{mark}: {problem}"
    return None


def is_complete(step_dir: str, marks: Sequence[str]) -> bool:
    return incomplete_reason(step_dir, marks) is None


def numbered_steps(steps_dir: str, prefix: str) -> list[tuple[int, str]]:
    """(N, path) of every directory `<prefix><N>` under `steps_dir`, newest (largest N) first; none
    when the directory does not exist."""
    try:
        names = os.listdir(steps_dir)
    except FileNotFoundError:
        return []
    pattern = re.compile(re.escape(prefix) + r"(\d+)$")
    found = [(int(m.group(1)), os.path.join(steps_dir, n)) for n in names if (m := pattern.match(n))]
    return sorted(((n, p) for n, p in found if os.path.isdir(p)), reverse=True)


def newest_complete(steps_dir: str, prefix: str, marks: Sequence[str]
                    ) -> tuple[Optional[str], list[tuple[str, str]]]:
    """(the newest complete step directory or None, [(path, why)] of the incomplete steps newer than it)."""
    skipped = []
    for _, path in numbered_steps(steps_dir, prefix):
        reason = incomplete_reason(path, marks)
        if reason is None:
            return path, skipped
        skipped.append((path, reason))
    return None, skipped
