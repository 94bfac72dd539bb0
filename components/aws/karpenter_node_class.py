"""Pure builder of the EC2NodeClass Karpenter launches the GPU nodes of an elastic stack from.

The same node as the managed GPU group's launch template (components/aws/gpu_nodes.py): the
AL2023 NVIDIA AMI, its nodeadm user data (RAID0, SOCI, kubelet CPU / Topology Manager policies),
EFA on every network card, the cluster placement group on On-Demand capacity, the reservation on
a Capacity Block / ODCR, the GPU subnet, the GPU and cluster security groups, the gp3 root volume
and IMDSv2 with hop limit 1.

Every field is read at aws/karpenter-provider-aws v1.14.0: pkg/apis/v1/ec2nodeclass.go and its CRD
pkg/apis/crds/karpenter.k8s.aws_ec2nodeclasses.yaml (tests/test_karpenter_crds.py validates the
render against that CRD). Plain values only: the Pulumi outputs are resolved by the caller.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

API_VERSION = "karpenter.k8s.aws/v1"
KIND = "EC2NodeClass"
# The NodePool's nodeClassRef group (pkg/apis/v1/doc.go: +groupName=karpenter.k8s.aws).
GROUP = "karpenter.k8s.aws"
# AL2023 by alias: Karpenter resolves the alias per instance type through the EKS SSM parameters,
# the NVIDIA variant for an instance type with GPUs (pkg/providers/amifamily/al2023.go
# DescribeImageQuery over the standard / nvidia / neuron variants; types.go Variant.Requirements:
# nvidia where karpenter.k8s.aws/instance-gpu-count exists), the AMI the managed group's
# AL2023_x86_64_NVIDIA type names. `latest`: a new AMI release drifts the nodes, and drift never
# disrupts a node whose pods carry karpenter.sh/do-not-disrupt (every GPU pod of an elastic stack,
# components/stack/elastic.py); an empty node is consolidated anyway.
AMI_ALIAS = "al2023@latest"
ROOT_DEVICE = "/dev/xvda"
# pkg/apis/v1/ec2nodeclass.go InstanceStorePolicy, enum {RAID0}.
INSTANCE_STORE_RAID0 = "RAID0"


class NodeClassArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    role: str
    """the node role's name (Karpenter creates the instance profile: ec2nodeclass.go Role)"""
    subnet_id: str
    security_group_ids: tuple[str, ...] = Field(min_length=1)
    network_cards: int = Field(ge=1)
    efa_devices: int = Field(ge=0)
    """EFA devices per node; 0: no networkInterfaces (Karpenter's default single interface)"""
    capacity_type: Literal["on-demand", "capacity-block", "odcr"] = "on-demand"
    reservation_id: Optional[str] = None
    placement_group: Optional[str] = None
    root_volume_gib: int
    root_volume_throughput: int
    root_volume_iops: int
    user_data: Optional[str] = None
    """the nodeadm MIME document (gpu_nodes.user_data_mime), not base64: Karpenter merges its own
    NodeConfig part into it (pkg/providers/amifamily/bootstrap/nodeadm.go)"""
    instance_store_raid0: bool = False
    """the local NVMe disks as one RAID0 array for containerd and the kubelet (instanceStorePolicy)"""


def network_interfaces(network_cards: int, efa_devices: int) -> list[dict[str, Any]]:
    """EFA on every network card, as `efa-only` interfaces, plus the primary ENA interface.

    The CRD allows `interface` and `efa-only` only (ec2nodeclass.go InterfaceType enum; no `efa`,
    the EFA-with-ENA type the managed group's card 0 uses) and needs a primary `interface` on card
    0 device 0 (its XValidation). Karpenter counts a node's `vpc.amazonaws.com/efa` capacity as the
    number of `efa-only` entries when the field is set (pkg/providers/instancetype/types.go efas),
    so card 0 carries a second, efa-only device (index 1) beside the primary: without it a p5 would
    offer 31 EFA devices to a pod that requests 32 and Karpenter would launch nothing. Every other
    card: device 1, efa-only (the EC2 guide's layout, gpu_nodes.network_interfaces), no VPC address.
    The efa-only interface on card 0 takes one of its ENIs from the VPC CNI (types.go
    ENILimitedPods): max pods drops by one ENI's addresses, far above what a GPU node runs."""
    if efa_devices == 0:
        return []
    if efa_devices > network_cards:
        raise ValueError(f"{efa_devices} EFA devices on {network_cards} network cards: at most one efa-only "
                         "interface per card (the EC2NodeClass CRD's networkInterfaces rule)")
    out = [{"networkCardIndex": 0, "deviceIndex": 0, "interfaceType": "interface"}]
    out += [{"networkCardIndex": card, "deviceIndex": 1, "interfaceType": "efa-only"} for card in range(efa_devices)]
    return out


def node_class(a: NodeClassArgs) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "amiSelectorTerms": [{"alias": AMI_ALIAS}],
        "role": a.role,
        # One subnet, one AZ: EFA needs it, and so does the FSx file system's locality.
        "subnetSelectorTerms": [{"id": a.subnet_id}],
        # The GPU group's own (EFA self rules) and the cluster security group: Karpenter puts the
        # selected groups on every interface (pkg/providers/launchtemplate/launchtemplate.go
        # generateNetworkInterfaces), as the managed group's launch template does.
        "securityGroupSelectorTerms": [{"id": sg} for sg in a.security_group_ids],
        # The managed group's root volume (platform.gpu_root_volume); encrypted, deleted with the node.
        "blockDeviceMappings": [{
            "deviceName": ROOT_DEVICE, "rootVolume": True,
            "ebs": {"volumeSize": f"{a.root_volume_gib}Gi", "volumeType": "gp3", "iops": a.root_volume_iops,
                    "throughput": a.root_volume_throughput, "encrypted": True, "deleteOnTermination": True},
        }],
        # IMDSv2 only, hop limit 1: pods get AWS credentials through Pod Identity, never the node
        # role (the managed group's launch template; also the CRD's defaults, set explicitly here).
        "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                            "httpPutResponseHopLimit": 1, "httpTokens": "required"},
    }
    nics = network_interfaces(a.network_cards, a.efa_devices)
    if nics:
        spec["networkInterfaces"] = nics
    if a.placement_group:
        # ec2nodeclass.go PlacementGroupSelector: by name or id, one group.
        spec["placementGroupSelector"] = {"name": a.placement_group}
    if a.capacity_type != "on-demand":
        if not a.reservation_id:
            raise ValueError(f"capacity type {a.capacity_type} needs the reservation id "
                             "(rltrain:gpuNodes.capacity.reservationId)")
        # ec2nodeclass.go CapacityReservationSelectorTerm: `id` alone. Karpenter reads the
        # reservation's type (a Capacity Block or a default ODCR) from DescribeCapacityReservations
        # (pkg/providers/instancetype/offering/base_resolver.go ReservationType).
        spec["capacityReservationSelectorTerms"] = [{"id": a.reservation_id}]
    if a.instance_store_raid0:
        # Karpenter sizes a node's ephemeral-storage from the root volume unless the class says
        # RAID0, then from the instance's NVMe disks (v1.14.0 pkg/providers/instancetype/types.go
        # ephemeralStorage); with it, its own NodeConfig part sets localStorage RAID0
        # (pkg/providers/amifamily/bootstrap/nodeadm.go). Done in our user data instead, Karpenter
        # offered the ~100 GiB root volume: a pod asking for more ephemeral storage got no node.
        spec["instanceStorePolicy"] = INSTANCE_STORE_RAID0
    if a.user_data:
        spec["userData"] = a.user_data
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": a.name}, "spec": spec}


def node_class_ref(name: str) -> dict[str, str]:
    """The NodePool's reference to this node class (karpenter_nodes.NodePoolArgs.node_class_ref)."""
    return {"group": GROUP, "kind": KIND, "name": name}
