"""FsxLustreVolume: the shared /fsx volume for checkpoints, models and data.

A PERSISTENT_2 FSx for Lustre file system in the GPU subnet, encrypted with its own key, backed up,
protected against deletion and replacement, and exposed in the training namespace as a static
PersistentVolume (reclaim Retain) with a ReadWriteMany claim. A dynamically provisioned volume would
default to reclaim Delete: deleting the claim would delete the file system (KNOWN-FAILURES F17).
"""

from __future__ import annotations

from typing import Collection, Mapping, Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict

from components.k8s.volumes import ClaimArgs, claim_args, persistent_volume_args
from components.stack import data_repository
from components.stack.data_repository import Association

# Lustre: TCP 988 for clients, 1018-1023 between clients and servers (FACTS.md; F9).
LUSTRE_PORTS = ((988, 988), (1018, 1023))


class FsxArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    storage_capacity_gib: int
    per_unit_storage_throughput: int
    metadata_iops: Optional[int] = None
    backup_retention_days: int
    # The data repository associations (components/stack/data_repository.py): the exports' first.
    s3_associations: tuple[Association, ...] = ()


def metadata_configuration(a: FsxArgs) -> aws.fsx.LustreFileSystemMetadataConfigurationArgs:
    if a.metadata_iops is None:
        return aws.fsx.LustreFileSystemMetadataConfigurationArgs(mode="AUTOMATIC")
    return aws.fsx.LustreFileSystemMetadataConfigurationArgs(mode="USER_PROVISIONED", iops=a.metadata_iops)


class FsxLustreVolume(pulumi.ComponentResource):
    file_system_id: pulumi.Output[str]
    claim_name: str

    def __init__(self, name: str, fsx: FsxArgs, claim: ClaimArgs, *, vpc_id: pulumi.Input[str],
                 subnet_id: pulumi.Input[str], client_security_group_ids: Mapping[str, pulumi.Input[str]],
                 k8s_opts: pulumi.ResourceOptions, after_cluster: Collection[str] = (),
                 opts: Optional[pulumi.ResourceOptions] = None):
        """`client_security_group_ids`: {rule name part: group} of every node group a pod that
        mounts the claim can land on (platform.attach_fsx; the deploy model derives the same set
        from the render and fails the render when one is missing). `after_cluster`: those of them
        the cluster creates (EKS's cluster group), whose rules the file system does not wait for."""
        super().__init__("rltrain:index:FsxLustreVolume", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        # Stateful: replacing or deleting these loses the data. protect stops `pulumi destroy` and
        # any replacement; retain_on_delete keeps the cloud object if protection is lifted.
        keep = pulumi.ResourceOptions(parent=self, protect=True, retain_on_delete=True)
        key = aws.kms.Key(f"{name}-key", description=f"{fsx.name} FSx for Lustre", enable_key_rotation=True,
                          deletion_window_in_days=30, opts=keep)
        # The description is ForceNew on a security group, and a new group replaces the file system
        # (its securityGroupIds are ForceNew): it keeps the words it was created with, although
        # since issue 44 the system nodes are clients too.
        sg = aws.ec2.SecurityGroup(f"{name}-sg", vpc_id=vpc_id, description="FSx for Lustre: Lustre from GPU nodes",
                                   tags={"Name": f"{fsx.name}-fsx"}, opts=child)
        # Lustre needs both directions: clients reach the servers, and the servers call back to
        # the clients on the same ports. So the file system's group admits the clients (and
        # itself), and the clients' groups admit the file system (FSx for Lustre guide, "limit
        # access with security groups": inbound TCP 988 and 1018-1023 from the clients' group and
        # from the file system's own; FACTS "Deploy semantics"). Every client group: a pod that
        # mounts the claim from a node group the file system does not admit hangs in
        # ContainerCreating until its deadline (KNOWN-FAILURES F19; issue 44 item 1).
        lustre_rules: list[pulumi.Resource] = []  # what the file system is created after
        for lo, hi in LUSTRE_PORTS:
            sources = [*client_security_group_ids.items(), ("self", sg.id)]
            for src_name, src in sources:
                rule = aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lustre-{lo}-{src_name}", security_group_id=sg.id, referenced_security_group_id=src,
                    ip_protocol="tcp", from_port=lo, to_port=hi, description=f"Lustre {lo}-{hi} from {src_name}",
                    opts=child)
                if src_name not in after_cluster:
                    lustre_rules.append(rule)
            for dst_name, dst in client_security_group_ids.items():
                rule = aws.vpc.SecurityGroupIngressRule(
                    f"{name}-lustre-{lo}-to-{dst_name}", security_group_id=dst,
                    referenced_security_group_id=sg.id, ip_protocol="tcp", from_port=lo, to_port=hi,
                    description=f"Lustre {lo}-{hi} from the FSx file system", opts=child)
                if dst_name not in after_cluster:
                    lustre_rules.append(rule)
        lustre_rules.append(aws.vpc.SecurityGroupEgressRule(f"{name}-egress", security_group_id=sg.id, cidr_ipv4="0.0.0.0/0",
                                        ip_protocol="-1", description="replies, S3 data repository", opts=child))
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
            # CreateFileSystem checks the security groups when it is called and fails with
            # InvalidNetworkSettings ("do not permit Lustre LNET network traffic on port 988") if
            # the rules are not there yet (FSx for Lustre guide, "cannot create a file system";
            # aws-parallelcluster#6181 fixed the same race with a DependsOn; FACTS "AWS: first up
            # and day two"). The group id alone orders the file system after the group, not after
            # its rules: wait for the Lustre rules of its own group and of the GPU nodes' group
            # (deploy model rule `create-time-validation`). Not for the rules of the cluster's
            # group: EKS creates it with the cluster, so waiting would start the file system's
            # creation (tens of minutes) only after the cluster's, and `destroy --exclude-protected`
            # keeps whatever the protected file system depends on: the cluster too. What AWS
            # validates is the file system's own group admitting itself (aws-parallelcluster PR
            # #1198: the race was the rule "to allow access within the security group").
            opts=pulumi.ResourceOptions.merge(keep, pulumi.ResourceOptions(depends_on=lustre_rules)),
        )
        first: Optional[pulumi.Resource] = None
        for assoc in fsx.s3_associations:
            # The first keeps the name the stack's only association always had, so that a deployed one
            # (before issue 43: `/checkpoints` or `/runs`) is replaced, not deleted at the end of the
            # update: AWS refuses two associations with overlapping paths, so each is deleted before
            # its replacement is created, and the others are created after the first (a deployed
            # `/runs` is gone before the new `/runs` or `/exports` exists). Replacing or deleting an
            # association keeps every file on the volume (delete_data_in_filesystem false) and every
            # object in S3; it never touches the file system (components/stack/data_repository.py).
            events = list(data_repository.EVENTS)
            res = aws.fsx.DataRepositoryAssociation(
                f"{name}-s3" if first is None else f"{name}-s3-{assoc.key}",
                file_system_id=fs.id,
                file_system_path=assoc.file_system_path,
                data_repository_path=assoc.data_repository_path,
                batch_import_meta_data_on_create=True,
                s3=aws.fsx.DataRepositoryAssociationS3Args(
                    auto_import_policy=aws.fsx.DataRepositoryAssociationS3AutoImportPolicyArgs(events=events),
                    auto_export_policy=aws.fsx.DataRepositoryAssociationS3AutoExportPolicyArgs(events=events)),
                # Deleting the association must never delete checkpoints in the file system.
                delete_data_in_filesystem=False,
                opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True,
                                            depends_on=[first] if first is not None else None),
            )
            first = first or res
        k8s_child = pulumi.ResourceOptions.merge(k8s_opts, pulumi.ResourceOptions(parent=self))
        pv = k8s.core.v1.PersistentVolume(f"{name}-pv", persistent_volume_args(claim, fs.id, fs.dns_name,
                                                                              fs.mount_name), k8s_child)
        # The claim keeps the size it was created with: a statically bound claim cannot be resized
        # (the API server: "only dynamically provisioned pvc can be resized"), and pulumi-kubernetes
        # would patch spec.resources in place, so `up` would fail after FSx has grown (FACTS "AWS:
        # first up and day two"). The file system's size shows on the PersistentVolume; a Lustre
        # mount is never limited by the claim's request. The impact model refuses a claim resize
        # that is not ignored (impact.py, PersistentVolumeClaim).
        k8s.core.v1.PersistentVolumeClaim(
            f"{name}-claim", claim_args(claim, f"{claim.namespace}-{claim.claim_name}"),
            pulumi.ResourceOptions.merge(k8s_child, pulumi.ResourceOptions(
                depends_on=[pv], ignore_changes=["spec.resources"])))
        self.file_system_id = fs.id
        self.claim_name = claim.claim_name
        self.register_outputs({"fileSystemId": fs.id, "claimName": claim.claim_name})
