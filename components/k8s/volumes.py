"""Volumes in the training namespace: the FSx claim every workload mounts at /fsx.

For the stack's own FSx file system, a static PersistentVolume (reclaim Retain) bound to a
ReadWriteMany claim; on a bring-your-own cluster, a claim from an existing storage class, or an
existing claim named in config. A dynamically provisioned volume defaults to reclaim Delete:
deleting the claim would delete the data (KNOWN-FAILURES F17), hence the static PV for FSx.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict

from components.stack.config import StackConfig
from components.stack.labels import MANAGED_BY

CSI_DRIVER = "fsx.csi.aws.com"


class ClaimArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    claim_name: str
    size_gib: int
    storage_class: Optional[str] = None  # bring-your-own: dynamic claim from this class


def persistent_volume_args(c: ClaimArgs, fs_id: pulumi.Input[str], dns: pulumi.Input[str],
                           mount: pulumi.Input[str]) -> k8s.core.v1.PersistentVolumeInitArgs:
    return k8s.core.v1.PersistentVolumeInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=f"{c.namespace}-{c.claim_name}", labels=MANAGED_BY),
        spec=k8s.core.v1.PersistentVolumeSpecArgs(
            capacity={"storage": f"{c.size_gib}Gi"},
            volume_mode="Filesystem",
            access_modes=["ReadWriteMany"],
            persistent_volume_reclaim_policy="Retain",
            storage_class_name="",
            mount_options=["flock"],
            claim_ref=k8s.core.v1.ObjectReferenceArgs(namespace=c.namespace, name=c.claim_name),
            csi=k8s.core.v1.CSIPersistentVolumeSourceArgs(
                driver=CSI_DRIVER, volume_handle=fs_id,
                volume_attributes={"dnsname": dns, "mountname": mount}),
        ),
    )


def claim_args(c: ClaimArgs, volume_name: Optional[str]) -> k8s.core.v1.PersistentVolumeClaimInitArgs:
    return k8s.core.v1.PersistentVolumeClaimInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=c.claim_name, namespace=c.namespace, labels=MANAGED_BY),
        spec=k8s.core.v1.PersistentVolumeClaimSpecArgs(
            access_modes=["ReadWriteMany"],
            storage_class_name=c.storage_class if c.storage_class else "",
            volume_name=volume_name,
            resources=k8s.core.v1.VolumeResourceRequirementsArgs(requests={"storage": f"{c.size_gib}Gi"}),
        ),
    )


def storage_claim_args(cfg: StackConfig) -> ClaimArgs:
    s = cfg.storage
    size = s.fsx.storage_capacity_gib if (s.fsx and not cfg.byo_cluster) else s.claim_size_gib
    return ClaimArgs(namespace=cfg.training.namespace, claim_name=s.existing_claim or s.claim_name,
                     size_gib=size, storage_class=s.storage_class)


class DynamicClaim(pulumi.ComponentResource):
    """Bring-your-own cluster: a ReadWriteMany claim from an existing storage class."""

    def __init__(self, name: str, claim: ClaimArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:index:DynamicClaim", name, None, opts)
        k8s.core.v1.PersistentVolumeClaim(f"{name}-claim", claim_args(claim, None),
                                          pulumi.ResourceOptions(parent=self))
        self.claim_name = claim.claim_name
        self.register_outputs({"claimName": claim.claim_name})
