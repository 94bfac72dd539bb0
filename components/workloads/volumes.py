"""Volumes every GPU pod mounts: the FSx claim at /fsx, a memory-backed /dev/shm, and the scripts it runs.
"""

from __future__ import annotations


from typing import Sequence

import pulumi_kubernetes as k8s

from components.workloads.script_files import Script, configmap_key, scripts_digest



SCRIPTS_PATH = "/scripts"

SCRIPTS_MODE = 0o755

FSX_PATH = "/fsx"

SHM_PATH = "/dev/shm"

# Scratch space of a pod whose root filesystem is read-only (disk-backed, small).
TMP_PATH = "/tmp"

TMP_SIZE = "64Mi"


def scripts_volume(scripts: Sequence[Script]) -> k8s.core.v1.VolumeArgs:
    """/scripts: exactly the given scripts (each with its parts, if any), each from its own ConfigMap,
    mode 0755."""
    return k8s.core.v1.VolumeArgs(name="scripts", projected=k8s.core.v1.ProjectedVolumeSourceArgs(
        default_mode=SCRIPTS_MODE,
        sources=[k8s.core.v1.VolumeProjectionArgs(config_map=k8s.core.v1.ConfigMapProjectionArgs(
            name=s.configmap, items=[k8s.core.v1.KeyToPathArgs(key=configmap_key(path), path=path)
                                     for path in s.files]))
            for s in sorted(scripts, key=lambda s: s.file)]))


def scripts_mount() -> k8s.core.v1.VolumeMountArgs:
    return k8s.core.v1.VolumeMountArgs(name="scripts", mount_path=SCRIPTS_PATH, read_only=True)


def volumes(claim_name: str, shm: int, *, scripts: Sequence[Script] = (), tmp: bool = False
            ) -> list[k8s.core.v1.VolumeArgs]:
    return [
        k8s.core.v1.VolumeArgs(name="fsx", persistent_volume_claim=k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(
            claim_name=claim_name)),
        # Memory-backed: charged to the pod memory limit (see the module docstring).
        k8s.core.v1.VolumeArgs(name="dshm", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
            medium="Memory", size_limit=f"{shm}Gi")),
    ] + ([scripts_volume(scripts)] if scripts else []) + (
        [k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit=TMP_SIZE))]
        if tmp else [])


def volume_mounts(*, scripts: bool = False, tmp: bool = False) -> list[k8s.core.v1.VolumeMountArgs]:
    return [
        k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=FSX_PATH),
        k8s.core.v1.VolumeMountArgs(name="dshm", mount_path=SHM_PATH),
    ] + ([scripts_mount()] if scripts else []) + (
        [k8s.core.v1.VolumeMountArgs(name="tmp", mount_path=TMP_PATH)] if tmp else [])


def scripts_annotation(scripts: Sequence[Script]) -> dict[str, str]:
    """The digest of exactly the scripts a pod runs: editing another script leaves it unchanged."""
    return {"rltrain/scripts-sha256": scripts_digest(scripts)} if scripts else {}
