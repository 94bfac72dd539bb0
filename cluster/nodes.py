"""The simulated cluster's nodes and volume, derived from a stack's config and the catalog.

Pure functions returning Kubernetes objects as dicts; `cluster/sim.py` creates them. Nothing is
typed here that the catalog or the program already knows:

- GPU nodes: one per `gpuNodes.count`, shaped as the program sizes its pods for
  (`catalog.InstanceType.allocatable`: CPU after the nodeadm kube-reserved formula; memory after
  kube-reserved, the eviction threshold, the VM overhead the catalog's conservative figure assumes
  and, with EFA, the EFA driver's 2 MiB huge pages), GPUs and EFA devices as the device plugins
  advertise them, `max_pods`; labelled and tainted as the GPU node group is (`stack/labels.py`,
  `aws/gpu_nodes.py`), with the EKS network topology labels where the AWS cloud controller sets
  them (`k8s/kueue.has_network_topology`). The nodes of one stack share one switch (layers 1-3).
- System nodes (`cluster.systemNodes`): where the pods that select no GPU node run (an MPIJob's
  launcher). Their instance type is not a GPU type, so not in the catalog: `SYSTEM_TYPES` below.
- A storage class and a static volume for the claim a bring-your-own stack makes from
  `storage.storageClass` (`k8s/volumes.py` DynamicClaim): the PV controller binds the claim to it.
- What the class's CSI driver would do, as a reconcile step (`provision`): a volume for every
  Pending claim of the class, with the class's reclaim policy, and the deletion of a Released one
  whose policy is Delete. Run in a loop by the harness, any claim of the class binds (a moved
  namespace, a renamed claim) and a test sees the old claim's volume deleted (issue 44 item 10).

The DaemonSets of a real GPU node (catalog.DAEMONSET_*) do not run here: the simulated nodes have
that much more room, which the program's fit checks already keep free.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from components.k8s.kueue import (HOSTNAME_LABEL, INSTANCE_TYPE_LABEL, NETWORK_LAYERS,
                                  has_network_topology)
from components.stack import catalog, node_efa
from components.stack.config import StackConfig
from components.stack.labels import EFA, GPU, GPU_TAINT_KEY, HUGEPAGES, ROLE_LABEL

# kwok manages the nodes carrying this annotation (kwok --manage-nodes-with-annotation-selector).
KWOK_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
# The taint's value on the GPU node group (components/aws/gpu_nodes.py: NodeGroupTaintArgs value "true").
GPU_TAINT = {"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
# The system node group's label (components/aws/cluster.py: labels={"role": "system"}).
SYSTEM_LABEL = {"role": "system"}
# The CSI driver of the stack's own FSx volume (k8s/volumes.py); nothing runs it here, which is
# fine: no kubelet mounts anything on a kwok node.
FSX_CSI_DRIVER = "fsx.csi.aws.com"

# The system node group's default type (config.SystemNodes) is no GPU type, so not in the catalog:
# m6i.xlarge, 4 vCPU, 16 GiB (AWS instance type page, general purpose M6i); max pods 58
# (amazon-eks-ami nodeadm eni-max-pods: 4 interfaces x 15 addresses - 1, + 2).
SYSTEM_TYPES = {
    "m6i.xlarge": catalog.InstanceType(
        name="m6i.xlarge", vcpu=4, memory_gib=16, gpu_model="", gpu_count=0, gpu_memory_gib=0,
        efa_devices=0, network_cards=1, network_gbps=12, nvme_disks=0, nvme_disk_gib=0, max_pods=58,
        gpudirect_rdma=False, price=None),
}


def _quantities(cpu_milli: int, memory_mib: int, pods: int, ephemeral_gib: int) -> dict[str, str]:
    return {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi", "pods": str(pods),
            "ephemeral-storage": f"{ephemeral_gib}Gi"}


def capacity_memory_mib(it: catalog.InstanceType) -> int:
    """What the VM exposes: the instance's memory less the overhead the catalog's conservative
    allocatable assumes (catalog.VM_MEMORY_OVERHEAD)."""
    return math.floor(it.memory_gib * catalog.GIB_IN_MIB * (1 - catalog.VM_MEMORY_OVERHEAD))


def _network_node(stack: str, layer: int) -> str:
    # EKS values look like nn-<17 hex digits>; stable per stack so a restart keeps the same switch.
    return "nn-" + hashlib.sha256(f"{stack}/{layer}".encode()).hexdigest()[:17]


def gpu_node_name(cfg: StackConfig, index: int) -> str:
    return f"gpu-{cfg.gpu_nodes.instance_type.replace('.', '-')}-{index}"


def gpu_node(cfg: StackConfig, index: int, *, stack: str = "sim", zone: str | None = None,
             region: str = "us-east-1") -> dict[str, Any]:
    g = cfg.gpu_nodes
    it = g.instance
    # Huge pages wherever the node has EFA interfaces (components/stack/node_efa.py).
    alloc = it.allocatable(efa=node_efa.interfaces(g))
    name = gpu_node_name(cfg, index)
    capacity = _quantities(it.vcpu * 1000, capacity_memory_mib(it), it.max_pods, g.root_volume.size_gib)
    allocatable = _quantities(alloc.cpu_milli, alloc.memory_mib_conservative, it.max_pods, g.root_volume.size_gib)
    devices = {GPU: str(it.gpu_count)}
    if g.efa_devices_per_node:
        devices[EFA] = str(g.efa_devices_per_node)
        devices[HUGEPAGES] = f"{alloc.hugepages_2mi_mib}Mi"
    capacity.update(devices)
    allocatable.update(devices)
    labels = {
        **ROLE_LABEL,
        INSTANCE_TYPE_LABEL: it.name,
        "beta.kubernetes.io/instance-type": it.name,
        HOSTNAME_LABEL: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone or cfg.network.gpu_az,
        "node.kubernetes.io/exclude-from-external-load-balancers": "true",
    }
    if has_network_topology(it):
        labels.update({label: _network_node(stack, i) for i, label in enumerate(NETWORK_LAYERS, 1)})
    return _node(name, labels, [dict(GPU_TAINT)], capacity, allocatable)


def system_node(cfg: StackConfig, index: int, *, zone: str | None = None,
                region: str = "us-east-1") -> dict[str, Any]:
    s = cfg.cluster.system_nodes
    try:
        it = SYSTEM_TYPES[s.instance_type]
    except KeyError:
        raise ValueError(f"rltrain:cluster.systemNodes.instanceType {s.instance_type!r}: the simulated cluster "
                         f"knows {', '.join(SYSTEM_TYPES)} (cluster/nodes.py SYSTEM_TYPES)") from None
    alloc = it.allocatable()
    name = f"system-{it.name.replace('.', '-')}-{index}"
    labels = {**SYSTEM_LABEL, INSTANCE_TYPE_LABEL: it.name, "beta.kubernetes.io/instance-type": it.name,
              HOSTNAME_LABEL: name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
              "topology.kubernetes.io/region": region,
              "topology.kubernetes.io/zone": zone or cfg.network.availability_zones[index % len(cfg.network.availability_zones)]}
    return _node(name, labels, [],
                 _quantities(it.vcpu * 1000, capacity_memory_mib(it), it.max_pods, 80),
                 _quantities(alloc.cpu_milli, alloc.memory_mib_conservative, it.max_pods, 80))


def _node(name: str, labels: dict[str, str], taints: list[dict[str, str]], capacity: dict[str, str],
          allocatable: dict[str, str]) -> dict[str, Any]:
    spec: dict[str, Any] = {"providerID": f"kwok://{name}"}
    if taints:
        spec["taints"] = taints
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": dict(KWOK_ANNOTATION)},
        "spec": spec,
        # kwok's node-initialize stage keeps capacity/allocatable as created and adds conditions.
        "status": {"capacity": capacity, "allocatable": allocatable,
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                                "kubeletVersion": "fake", "kubeProxyVersion": "fake"}},
    }


def nodes(cfg: StackConfig, *, stack: str = "sim", region: str = "us-east-1", gpu: bool = True) -> list[dict[str, Any]]:
    """System nodes, then the GPU nodes of `gpuNodes` (none with `gpu` False: elastic mode, where
    Karpenter launches them, cluster/karpenter.py)."""
    return ([system_node(cfg, i, region=region) for i in range(cfg.cluster.system_nodes.count)]
            + [gpu_node(cfg, i, stack=stack, region=region) for i in range(cfg.gpu_nodes.count if gpu else 0)])


# A dynamically provisioned volume takes its class's reclaim policy, Delete when the class sets
# none (k8s.io/api storage/v1 StorageClass.ReclaimPolicy; Kubernetes docs, storage classes): what a
# bring-your-own cluster's FSx class most likely has, and what makes a claim replacement lose data.
CLASS_RECLAIM_POLICY = "Delete"
# What kubernetes-csi/external-provisioner writes on a volume it made (controller.go annDynamicallyProvisioned).
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"


def storage_class(deploy: StackConfig) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": deploy.storage.storage_class},
            "provisioner": FSX_CSI_DRIVER, "reclaimPolicy": CLASS_RECLAIM_POLICY, "volumeBindingMode": "Immediate"}


def storage(deploy: StackConfig) -> list[dict[str, Any]]:
    """The storage class a bring-your-own stack claims from, and one volume bound to its claim.

    The volume: reclaim Retain as for the stack's own FSx volume (KNOWN-FAILURES F17), reserved for
    the claim (claimRef namespace/name) so no other claim takes it. The class: a CSI class's default
    reclaim policy, Delete, which any volume `provision` makes for another claim of it takes.
    """
    s = deploy.storage
    if not s.storage_class or s.existing_claim:
        return []
    ns, claim = deploy.training.namespace, s.claim_name
    return [
        storage_class(deploy),
        {"apiVersion": "v1", "kind": "PersistentVolume",
         "metadata": {"name": volume_name(deploy)},
         "spec": {"capacity": {"storage": f"{s.claim_size_gib}Gi"}, "accessModes": ["ReadWriteMany"],
                  "volumeMode": "Filesystem", "persistentVolumeReclaimPolicy": "Retain",
                  "storageClassName": s.storage_class,
                  "claimRef": {"namespace": ns, "name": claim},
                  "csi": {"driver": FSX_CSI_DRIVER, "volumeHandle": f"fs-sim-{ns}-{claim}"}}},
    ]


def volume_name(deploy: StackConfig) -> str:
    return f"sim-{deploy.training.namespace}-{deploy.storage.claim_name}"


def provisioned_volume(claim: dict[str, Any], storage_class: dict[str, Any]) -> dict[str, Any]:
    """The volume an external provisioner creates for a Pending claim of its class: named after the
    claim's uid (kubernetes-csi/external-provisioner: "pvc-" + uid), bound to it by claimRef with the
    uid, the claim's access modes and request, the class's reclaim policy (Delete when unset)."""
    meta, spec = claim["metadata"], claim.get("spec") or {}
    return {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta['uid']}", "annotations": {PROVISIONED_BY: storage_class["provisioner"]}},
        "spec": {"capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")},
                 "accessModes": list(spec.get("accessModes") or ["ReadWriteMany"]), "volumeMode": "Filesystem",
                 "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or CLASS_RECLAIM_POLICY,
                 "storageClassName": storage_class["metadata"]["name"],
                 "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                              "name": meta["name"], "uid": meta["uid"]},
                 "csi": {"driver": storage_class["provisioner"],
                         "volumeHandle": f"fs-sim-{meta['namespace']}-{meta['name']}-{meta['uid'][:8]}"}},
    }


def provision(claims: list[dict[str, Any]], volumes: list[dict[str, Any]], classes: list[dict[str, Any]],
              driver: str = FSX_CSI_DRIVER) -> tuple[list[dict[str, Any]], list[str]]:
    """One reconcile pass of `driver`'s provisioner over the cluster's claims, volumes and classes:
    (volumes to create, names of volumes to delete).

    - a claim of a class of `driver`, Pending, that no volume names (claimRef uid): a volume for it;
    - a volume this provisioner made (PROVISIONED_BY), Released (its claim is gone) with reclaim
      Delete: deleted, as the driver deletes the backing volume and then the object
      (external-provisioner, controller shouldDelete / deleteVolumeOperation). Retain: kept,
      Released, as a real one is."""
    ours = {c["metadata"]["name"]: c for c in classes if c.get("provisioner") == driver}
    refs = [((v.get("spec") or {}).get("claimRef") or {}) for v in volumes]
    claimed = {r["uid"] for r in refs if r.get("uid")}
    # A volume reserved for a claim by name (no uid yet: storage()'s static one) is that claim's too.
    reserved = {(r.get("namespace"), r.get("name")) for r in refs if r.get("name") and not r.get("uid")}
    create = []
    for c in claims:
        spec, status, meta = c.get("spec") or {}, c.get("status") or {}, c["metadata"]
        cls = ours.get(spec.get("storageClassName") or "")
        if cls and status.get("phase", "Pending") == "Pending" and not spec.get("volumeName") \
                and meta.get("uid") not in claimed and (meta.get("namespace"), meta.get("name")) not in reserved:
            create.append(provisioned_volume(c, cls))
    delete = sorted(v["metadata"]["name"] for v in volumes
                    if ((v["metadata"].get("annotations") or {}).get(PROVISIONED_BY) == driver
                        and (v.get("status") or {}).get("phase") == "Released"
                        and (v.get("spec") or {}).get("persistentVolumeReclaimPolicy") == "Delete"))
    return create, delete
