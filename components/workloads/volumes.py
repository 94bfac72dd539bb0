"""Volumes every GPU pod mounts: the FSx claim at /fsx, a memory-backed /dev/shm, the scripts ConfigMap.
"""

from __future__ import annotations


import pulumi_kubernetes as k8s



SCRIPTS_CONFIGMAP = "rltrain-scripts"


SCRIPTS_PATH = "/scripts"


SCRIPTS_MODE = 0o755


FSX_PATH = "/fsx"


SHM_PATH = "/dev/shm"


# Scratch space of a pod whose root filesystem is read-only (disk-backed, small).
TMP_PATH = "/tmp"


TMP_SIZE = "64Mi"


def volumes(claim_name: str, shm: int, *, tmp: bool = False) -> list[k8s.core.v1.VolumeArgs]:
    return [
        k8s.core.v1.VolumeArgs(name="fsx", persistent_volume_claim=k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(
            claim_name=claim_name)),
        # Memory-backed: charged to the pod memory limit (see the module docstring).
        k8s.core.v1.VolumeArgs(name="dshm", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
            medium="Memory", size_limit=f"{shm}Gi")),
        k8s.core.v1.VolumeArgs(name="scripts", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
            name=SCRIPTS_CONFIGMAP, default_mode=SCRIPTS_MODE)),
    ] + ([k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit=TMP_SIZE))]
         if tmp else [])


def volume_mounts(*, tmp: bool = False) -> list[k8s.core.v1.VolumeMountArgs]:
    return [
        k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=FSX_PATH),
        k8s.core.v1.VolumeMountArgs(name="dshm", mount_path=SHM_PATH),
        k8s.core.v1.VolumeMountArgs(name="scripts", mount_path=SCRIPTS_PATH, read_only=True),
    ] + ([k8s.core.v1.VolumeMountArgs(name="tmp", mount_path=TMP_PATH)] if tmp else [])


def scripts_annotation(digest: str) -> dict[str, str]:
    return {"rltrain/scripts-sha256": digest} if digest else {}
