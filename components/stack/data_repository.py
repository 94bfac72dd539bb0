"""Config of what the FSx file system keeps in S3 (`rltrain:storage.fsx.s3`), fed to
components/aws/storage.py: the exports by default, the runs' directories (their checkpoints) on opt-in.

Two data repository associations at most, on two sibling directories of the file system, so that no
change of the runs ever changes them:

- `/exports` (the pods' `/fsx/exports`, where the export Job writes the served step's Hugging Face
  directory: components/workloads/export.py) -> `s3://<bucket>/<prefix>exports/`, whenever a bucket
  is set;
- `/runs` (the pods' `/fsx/runs`, every run's directory: components/workloads/env.py) ->
  `s3://<bucket>/<prefix>runs/`, only with `checkpoints: true` (every run's kept checkpoints, a few
  to tens of GiB each, as the retention pass keeps them: its deletions are mirrored).

Why two fixed paths and not one per run: an FSx for Lustre file system holds at most 8 associations,
and no two may have overlapping file system paths ("if a data repository is associated with file
system path /ns1/, then you cannot link another data repository with file system path /ns1/ns2";
each association "must have a unique Amazon FSx file system directory and a unique S3 bucket or
prefix": FSx API reference, CreateDataRepositoryAssociation and DataRepositoryAssociation
FileSystemPath; Lustre guide, create-dra-linked-data-repo). A run's directory changes with its
overrides, and `file_system_path` / `data_repository_path` are ForceNew (hashicorp/terraform-provider-aws
internal/service/fsx/data_repository_association.go, which pulumi-aws bridges): one association per
run would be replaced at every new hyperparameter, and an export inside a run's directory would
overlap an association of that directory. An association is its own resource: creating, replacing or
deleting one never touches the file system (whose own import/export paths, which would replace it,
the program never sets: FACTS "FSx for Lustre").

Pure data (no Pulumi). Where each run's files land is printed by the render
(components/offline/runs_summary.py s3_lines).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field

from components.stack.model_base import _Model

# The pods mount the file system's root at /fsx (components/workloads/volumes.py FSX_PATH).
FSX_MOUNT = "/fsx"
RUNS_PATH = "/runs"        # every run's directory (checkpoints, TensorBoard files): /fsx/runs
EXPORTS_PATH = "/exports"  # the export Job's Hugging Face directories: /fsx/exports
# FSx for Lustre: "You can have a maximum of 8 data repository associations on a file system"
# (API reference, CreateDataRepositoryAssociation). The program creates at most two.
MAX_ASSOCIATIONS = 8
# Automatic export and import of new, changed and deleted files (API reference, AutoExportPolicy /
# AutoImportPolicy Events: NEW, CHANGED, DELETED).
EVENTS = ("NEW", "CHANGED", "DELETED")


class FsxS3(_Model):
    """An S3 bucket the file system exports to (and imports from) through data repository associations: the served step's export always, every run's checkpoints on opt-in."""

    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    """the S3 bucket"""
    prefix: str = "rltrain/"
    """the prefix in the bucket: `/fsx/exports/X` is exported to `s3://<bucket>/<prefix>exports/X`, `/fsx/runs/X` (with `checkpoints`) to `s3://<bucket>/<prefix>runs/X`"""
    checkpoints: bool = False
    """also export every run's directory (`/fsx/runs`: its kept checkpoints, TensorBoard files; the retention pass's deletions mirrored): S3 then holds `checkpoints.keep` + 1 checkpoints per run; `false` = checkpoints stay on the volume only"""


@dataclass(frozen=True)
class Association:
    """One data repository association: a directory of the file system <-> an S3 prefix."""

    key: str                   # "exports" or "runs"
    file_system_path: str      # on the file system (the pods see it under /fsx)
    data_repository_path: str  # s3://bucket/prefix/...

    @property
    def mount_path(self) -> str:
        """The directory as the pods see it."""
        return FSX_MOUNT + self.file_system_path


def base_url(s3: FsxS3) -> str:
    """`s3://<bucket>/<prefix>/`, the prefix ending in one `/` (or none when empty)."""
    prefix = s3.prefix.strip("/")
    return f"s3://{s3.bucket}/" + (f"{prefix}/" if prefix else "")


def associations(s3: FsxS3) -> tuple[Association, ...]:
    """The stack's associations, the exports' first (components/aws/storage.py creates the others
    after it)."""
    url = base_url(s3)
    out = [Association("exports", EXPORTS_PATH, f"{url}{EXPORTS_PATH.strip('/')}/")]
    if s3.checkpoints:
        out.append(Association("runs", RUNS_PATH, f"{url}{RUNS_PATH.strip('/')}/"))
    return tuple(out)


def s3_path(a: Association, mount_path: str) -> str:
    """Where a file or directory under `a` (as the pods see it) lands in S3."""
    rel = mount_path[len(a.mount_path):].strip("/")
    return a.data_repository_path + (f"{rel}/" if rel else "")


def covers(a: Association, mount_path: str) -> bool:
    return mount_path == a.mount_path or mount_path.startswith(a.mount_path + "/")
