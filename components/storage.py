"""FsxLustreVolume: the shared /fsx volume for checkpoints, models and data.

A PERSISTENT_2 FSx for Lustre file system in the GPU subnet, encrypted with its own key, backed up,
protected against deletion and replacement, and exposed in the training namespace as a static
PersistentVolume (reclaim Retain) with a ReadWriteMany claim. A dynamically provisioned volume would
default to reclaim Delete: deleting the claim would delete the file system (KNOWN-FAILURES F17).
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict

from .namespace import MANAGED_BY

CSI_DRIVER = "fsx.csi.aws.com"
# Lustre: TCP 988 for clients, 1018-1023 between clients and servers (FACTS.md; F9).
LUSTRE_PORTS = ((988, 988), (1018, 1023))


class FsxArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    storage_capacity_gib: int
    per_unit_storage_throughput: int
    metadata_iops: Optional[int] = None
    backup_retention_days: int
    s3_bucket: Optional[str] = None
    s3_prefix: str = ""
    s3_file_system_path: str = "/checkpoints"


class ClaimArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    claim_name: str
    size_gib: int
    storage_class: Optional[str] = None  # bring-your-own: dynamic claim from this class


def metadata_configuration(a: FsxArgs) -> aws.fsx.LustreFileSystemMetadataConfigurationArgs:
    if a.metadata_iops is None:
        return aws.fsx.LustreFileSystemMetadataConfigurationArgs(mode="AUTOMATIC")
    return aws.fsx.LustreFileSystemMetadataConfigurationArgs(mode="USER_PROVISIONED", iops=a.metadata_iops)


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


class FsxLustreVolume(pulumi.ComponentResource):
    file_system_id: pulumi.Output[str]
    claim_name: str

    def __init__(self, name: str, fsx: FsxArgs, claim: ClaimArgs, *, vpc_id: pulumi.Input[str],
                 subnet_id: pulumi.Input[str], client_security_group_id: pulumi.Input[str],
                 k8s_opts: pulumi.ResourceOptions, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:index:FsxLustreVolume", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Stateful: replacing or deleting these loses the data. protect stops `pulumi destroy` and
        # any replacement; retain_on_delete keeps the cloud object if protection is lifted.
        keep = pulumi.ResourceOptions(parent=self, protect=True, retain_on_delete=True)
        key = aws.kms.Key(f"{name}-key", description=f"{fsx.name} FSx for Lustre", enable_key_rotation=True,
                          deletion_window_in_days=30, opts=keep)
        sg = aws.ec2.SecurityGroup(f"{name}-sg", vpc_id=vpc_id, description="FSx for Lustre: Lustre from GPU nodes",
                                   tags={"Name": f"{fsx.name}-fsx"}, opts=child)
        for lo, hi in LUSTRE_PORTS:
            for src_name, src in (("nodes", client_security_group_id), ("self", sg.id)):
                aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lustre-{lo}-{src_name}", security_group_id=sg.id, referenced_security_group_id=src,
                    ip_protocol="tcp", from_port=lo, to_port=hi, description=f"Lustre {lo}-{hi} from {src_name}",
                    opts=child)
        aws.vpc.SecurityGroupEgressRule(f"{name}-egress", security_group_id=sg.id, cidr_ipv4="0.0.0.0/0",
                                        ip_protocol="-1", description="replies, S3 data repository", opts=child)
        fs = aws.fsx.LustreFileSystem(
            f"{name}-fs",
            deployment_type="PERSISTENT_2",
            storage_type="SSD",
            storage_capacity=fsx.storage_capacity_gib,
            per_unit_storage_throughput=fsx.per_unit_storage_throughput,
            metadata_configuration=metadata_configuration(fsx),
            subnet_ids=subnet_id,  # one subnet (a string in pulumi-aws 7): the GPU nodes' subnet
            security_group_ids=[sg.id],
            kms_key_id=key.arn,
            data_compression_type="LZ4",
            automatic_backup_retention_days=fsx.backup_retention_days,
            copy_tags_to_backups=True,
            # pulumi-aws defaults skip_final_backup to true: a delete would leave no copy.
            skip_final_backup=False,
            tags={"Name": f"{fsx.name}-fsx"},
            opts=keep,
        )
        if fsx.s3_bucket:
            events = ["NEW", "CHANGED", "DELETED"]
            aws.fsx.DataRepositoryAssociation(
                f"{name}-s3",
                file_system_id=fs.id,
                file_system_path=fsx.s3_file_system_path,
                data_repository_path=f"s3://{fsx.s3_bucket}/{fsx.s3_prefix}",
                batch_import_meta_data_on_create=True,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=events),
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=events)),
                # Deleting the association must never delete checkpoints in the file system.
                delete_data_in_filesystem=False,
                opts=child,
            )
        k8s_child = pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(parent=self))
        pv = k8s.core.v1.PersistentVolume(f"{name}-pv", persistent_volume_args(claim, fs.id, fs.dns_name,
                                                                              fs.mount_name), k8s_child)
        k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim", claim_args(claim, f"{claim.namespace}-{claim.claim_name}"),
            pulumi.ResourceOptions.merge(k8s_child, pulumi.ResourceOptions(depends_on=[pv])))
        self.file_system_id = fs.id
        self.claim_name = claim.claim_name
        self.register_outputs({"fileSystemId": fs.id, "claimName": claim.claim_name})


class DynamicClaim(pulumi.ComponentResource):
    """Bring-your-own cluster: a ReadWriteMany claim from an existing storage class."""

    def __init__(self, name: str, claim: ClaimArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:index:DynamicClaim", name, None, opts)
        k8s.core.v1.PersistentVolumeClaim(f"{name}-claim", claim_args(claim, None),
                                          pulumi.ResourceOptions(parent=self))
        self.claim_name = claim.claim_name
        self.register_outputs({"claimName": claim.claim_name})
