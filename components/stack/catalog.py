"""Instance catalog: the one place where hardware numbers are typed.

Everything else (GPU and EFA requests, CPU/memory sizing, NVMe layout, NCCL settings, cost) is
derived from these entries, so a stack that switches from p4de to p5 cannot keep a stale
"4 EFA devices" from a copied manifest (SEED-DEFECTS D9).

Sources (see ../shared/FACTS.md):
- vCPU, memory, GPUs, NVMe: AWS instance type pages, skypilot catalog `catalogs/v8/aws/vms.csv`.
- EFA devices / network cards: awsome-distributed-training `2.gpu-cluster-healthcheck` instance
  profiles; terraform-aws-eks `modules/eks-managed-node-group` (one interface per network card).
- max pods: amazon-eks-ami nodeadm `internal/kubelet` defaults.
- NCCL bus bandwidth (2 nodes, all_reduce_perf): awsome-distributed-training
  `micro-benchmarks/nccl-tests/README.md` (EKS section for p5, Slurm table for p4de).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Optional

from components.stack import daemonsets

GIB_IN_MIB = 1024

# AL2023 nodeadm kubelet defaults (FACTS.md "Node allocatable").
_EVICTION_HARD_MIB = 100
_KUBE_RESERVED_MIB_PER_POD = 11
_KUBE_RESERVED_MIB_BASE = 255
# Memory the hypervisor and kernel keep: Karpenter assumes 7.5 %; used for the conservative figure.
VM_MEMORY_OVERHEAD = 0.075

# Huge pages the EFA driver pre-allocates on every EFA-enabled instance: "5128 2MiB Huge Pages"
# (EKS user guide, ml/node-efa). The kubelet takes huge-page reservations out of allocatable
# memory. The exact count on an AL2023 p5/p4de node is unverified (the EFA configuration sizes it
# per vCPU): read `status.allocatable.hugepages-2Mi` on a real node and correct this figure.
EFA_HUGEPAGES_2MI = 5128
HUGEPAGE_MIB = 2
# What one EFA pod requests of them: the reference Kubernetes NCCL job's worker figure
# (awsome-distributed-training micro-benchmarks/nccl-tests/kubernetes/nccl-tests.yaml). The EFA
# provider (libfabric) uses huge pages for its bounce buffers; one such pod runs per node.
EFA_POD_HUGEPAGES_MIB = 5120

# DaemonSets on every GPU node (aws-node, kube-proxy, Pod Identity agent, FSx CSI node, NVIDIA and
# EFA plugins, dcgm-exporter, node-exporter): the pinned charts' requests summed, each cited in
# daemonsets.py (worst case: every one present).
DAEMONSET_CPU_MILLI, DAEMONSET_MEMORY_MIB = daemonsets.reserve()


@dataclass(frozen=True)
class Price:
    usd_per_hour: float
    date: str
    source: str


@dataclass(frozen=True)
class NcclReference:
    """A published NCCL all_reduce_perf bus bandwidth for 2 nodes (16 GPUs), and where it holds.

    Compare like with like: the size it was published at, and whether it was measured on EKS or
    under Slurm (another software stack and launcher; FACTS "Network performance anchors").
    """

    busbw_gbps: float
    size_bytes: int
    platform: str  # "EKS" or "Slurm"
    source: str

    @property
    def label(self) -> str:
        size = f"{self.size_bytes >> 30} GiB" if self.size_bytes % (1 << 30) == 0 else f"{self.size_bytes} B"
        return f"{self.busbw_gbps:g} GB/s at {size}, {self.platform} figure, {self.source}"


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpu: int
    memory_gib: int
    gpu_model: str
    gpu_count: int
    gpu_memory_gib: int
    efa_devices: int
    network_cards: int
    network_gbps: int
    nvme_disks: int
    nvme_disk_gib: int
    max_pods: int
    # GPUDirect RDMA over EFA (p4d and newer); g5/g6 EFA carries host-staged traffic only.
    gpudirect_rdma: bool
    price: Optional[Price]
    # Published NCCL all_reduce_perf bus bandwidth for 2 nodes, with its size, platform and source.
    nccl_reference: Optional[NcclReference] = None
    notes: tuple[str, ...] = field(default=())

    @property
    def family(self) -> str:
        return self.name.split(".")[0]

    @property
    def has_efa(self) -> bool:
        return self.efa_devices > 0

    @property
    def has_nvme(self) -> bool:
        return self.nvme_disks > 0

    @property
    def nvme_total_gib(self) -> int:
        return self.nvme_disks * self.nvme_disk_gib

    def allocatable(self, *, efa: bool = False) -> "Allocatable":
        """What the kubelet offers; `efa`: the EFA driver is installed (its huge pages come out)."""
        return node_allocatable(self, efa=efa)


@dataclass(frozen=True)
class Allocatable:
    """What the kubelet offers to pods on one node."""

    cpu_milli: int
    # Nominal: capacity minus kube-reserved and eviction threshold.
    memory_mib: int
    # Conservative: as above, after the VM overhead the instance never exposes.
    memory_mib_conservative: int
    # Pre-allocated 2 MiB huge pages (EFA), already taken out of both memory figures.
    hugepages_2mi_mib: int = 0

    @property
    def cpu(self) -> float:
        return self.cpu_milli / 1000

    @property
    def memory_gib(self) -> float:
        return self.memory_mib / GIB_IN_MIB

    @property
    def memory_gib_conservative(self) -> float:
        return self.memory_mib_conservative / GIB_IN_MIB


def kube_reserved_cpu_milli(vcpu: int) -> int:
    """nodeadm: 6 % of core 1, 1 % of core 2, 0.5 % of cores 3-4, 0.25 % of every further core.

    Computed in tenths of a millicore so the sum is exact.
    """
    tenths = 0
    for core in range(1, vcpu + 1):
        if core == 1:
            tenths += 600
        elif core == 2:
            tenths += 100
        elif core <= 4:
            tenths += 50
        else:
            tenths += 25
    return math.ceil(tenths / 10)


def kube_reserved_memory_mib(max_pods: int) -> int:
    return _KUBE_RESERVED_MIB_PER_POD * max_pods + _KUBE_RESERVED_MIB_BASE


def node_allocatable(it: InstanceType, *, efa: bool = False) -> Allocatable:
    cpu = it.vcpu * 1000 - kube_reserved_cpu_milli(it.vcpu)
    hugepages = EFA_HUGEPAGES_2MI * HUGEPAGE_MIB if efa and it.has_efa else 0
    reserved = kube_reserved_memory_mib(it.max_pods) + _EVICTION_HARD_MIB + hugepages
    capacity_mib = it.memory_gib * GIB_IN_MIB
    nominal = capacity_mib - reserved
    conservative = math.floor(capacity_mib * (1 - VM_MEMORY_OVERHEAD)) - reserved
    return Allocatable(cpu_milli=cpu, memory_mib=nominal, memory_mib_conservative=conservative,
                       hugepages_2mi_mib=hugepages)


_SKY = "skypilot catalog catalogs/v8/aws/vms.csv, us-east-1 on-demand"
_NCCL_SRC = "awsome-distributed-training micro-benchmarks/nccl-tests/README.md"
# p5 on EKS, 2023 stack (EFA installer 1.28, aws-ofi-nccl 1.7.3, NCCL 2.18.5): 313.3 GB/s at
# 1 GiB, 437.8 GB/s at 2 GiB. The 2 GiB row is the one near the Slurm plateau (437-444 GB/s).
_P5_EKS = NcclReference(437.8, 2 << 30, "EKS", f"{_NCCL_SRC}, Kubernetes section (2023 stack)")
# p4de has no published EKS figure: the Slurm table's 1 GiB row, labelled as such.
_P4DE_SLURM = NcclReference(76.8, 1 << 30, "Slurm", f"{_NCCL_SRC}, Slurm table (no EKS figure published)")

_TYPES = (
    InstanceType(
        name="p4d.24xlarge", vcpu=96, memory_gib=1152, gpu_model="A100-SXM4-40GB", gpu_count=8,
        gpu_memory_gib=40, efa_devices=4, network_cards=4, network_gbps=400, nvme_disks=8,
        nvme_disk_gib=1000, max_pods=737, gpudirect_rdma=True,
        # The mid-2025 price cut lowered P4 prices; only the older list price was seen for p4d.
        price=Price(32.77, "2023-06", "AWS list price before the 2025-06 P4/P5 cut: re-check"),
        nccl_reference=dataclasses.replace(_P4DE_SLURM, source=_P4DE_SLURM.source + "; p4de figure, same network"),
    ),
    InstanceType(
        name="p4de.24xlarge", vcpu=96, memory_gib=1152, gpu_model="A100-SXM4-80GB", gpu_count=8,
        gpu_memory_gib=80, efa_devices=4, network_cards=4, network_gbps=400, nvme_disks=8,
        nvme_disk_gib=1000, max_pods=737, gpudirect_rdma=True,
        price=Price(27.45, "2025-06", _SKY),
        nccl_reference=_P4DE_SLURM,
    ),
    InstanceType(
        name="p5.48xlarge", vcpu=192, memory_gib=2048, gpu_model="H100-SXM5-80GB", gpu_count=8,
        gpu_memory_gib=80, efa_devices=32, network_cards=32, network_gbps=3200, nvme_disks=8,
        nvme_disk_gib=3840, max_pods=100, gpudirect_rdma=True,
        price=Price(55.04, "2025-06", _SKY),
        nccl_reference=_P5_EKS,
    ),
    InstanceType(
        name="p5e.48xlarge", vcpu=192, memory_gib=2048, gpu_model="H200-141GB", gpu_count=8,
        gpu_memory_gib=141, efa_devices=32, network_cards=32, network_gbps=3200, nvme_disks=8,
        nvme_disk_gib=3840, max_pods=100, gpudirect_rdma=True,
        # Sold through Capacity Blocks only: no on-demand price to quote.
        price=None,
        nccl_reference=dataclasses.replace(_P5_EKS, source=_P5_EKS.source + "; p5 figure, same network"),
        notes=("capacity blocks only; no on-demand price",),
    ),
    InstanceType(
        name="p5en.48xlarge", vcpu=192, memory_gib=2048, gpu_model="H200-141GB", gpu_count=8,
        gpu_memory_gib=141, efa_devices=16, network_cards=16, network_gbps=3200, nvme_disks=8,
        nvme_disk_gib=3840, max_pods=198, gpudirect_rdma=True,
        price=Price(63.30, "2025-06", _SKY),
        nccl_reference=dataclasses.replace(_P5_EKS, source=_P5_EKS.source + "; p5 figure, same bandwidth"),
    ),
    InstanceType(
        name="g6.12xlarge", vcpu=48, memory_gib=192, gpu_model="L4-24GB", gpu_count=4,
        gpu_memory_gib=24, efa_devices=1, network_cards=1, network_gbps=40, nvme_disks=4,
        nvme_disk_gib=940, max_pods=234, gpudirect_rdma=False,
        price=Price(4.60, "2025-06", _SKY),
    ),
    InstanceType(
        # No EFA: the smallest GPU type, for single-GPU smoke tests.
        name="g5.xlarge", vcpu=4, memory_gib=16, gpu_model="A10G-24GB", gpu_count=1,
        gpu_memory_gib=24, efa_devices=0, network_cards=1, network_gbps=10, nvme_disks=1,
        nvme_disk_gib=250, max_pods=58, gpudirect_rdma=False,
        price=Price(1.006, "2025-06", _SKY),
    ),
    InstanceType(
        name="g5.12xlarge", vcpu=48, memory_gib=192, gpu_model="A10G-24GB", gpu_count=4,
        gpu_memory_gib=24, efa_devices=1, network_cards=1, network_gbps=40, nvme_disks=1,
        nvme_disk_gib=3800, max_pods=737, gpudirect_rdma=False,
        price=Price(5.67, "2025-06", _SKY),
    ),
)

CATALOG: dict[str, InstanceType] = {t.name: t for t in _TYPES}
INSTANCE_TYPES: tuple[str, ...] = tuple(CATALOG)


def get(name: str) -> InstanceType:
    try:
        return CATALOG[name]
    except KeyError:
        raise KeyError(f"unknown instance type {name!r}; known: {', '.join(INSTANCE_TYPES)}") from None


def nccl_env(it: InstanceType, efa_devices_requested: int) -> dict[str, str]:
    """NCCL/libfabric settings for a container on `it` that requests `efa_devices_requested`.

    Set only when EFA devices are requested: EFA variables without the devices make NCCL fall back
    to TCP silently (~3 GB/s instead of ~440 on p5; KNOWN-FAILURES F5).
    """
    env = {"NCCL_DEBUG": "WARN"}
    if efa_devices_requested <= 0:
        return env
    env.update({"FI_PROVIDER": "efa", "FI_EFA_FORK_SAFE": "1"})
    if it.gpudirect_rdma:
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    return env


# FSx for Lustre PERSISTENT_2 SSD, USD per GB-month by per-unit throughput (MB/s/TiB), us-east-1.
FSX_PERSISTENT_2_USD_PER_GB_MONTH = {125: 0.145, 250: 0.210, 500: 0.340, 1000: 0.600}
FSX_PRICE = Price(0.0, "2025-06", "AWS FSx for Lustre pricing page, us-east-1, PERSISTENT_2 SSD")
HOURS_PER_MONTH = 730


def fsx_usd_per_hour(capacity_gib: int, throughput: int) -> float:
    return capacity_gib * FSX_PERSISTENT_2_USD_PER_GB_MONTH[throughput] / HOURS_PER_MONTH


def shm_default_gib(it: InstanceType) -> int:
    """/dev/shm size when not configured: 1/16 of node memory, 8-256 GiB.

    It counts against the pod's memory limit (FACTS.md), so it is kept to a small share of the
    node; the reference's 64 GiB sits between the p4de (72) and p5 (128) figures this gives.
    """
    return max(8, min(256, math.floor(it.memory_gib / 16)))


# The whole-node training pod (components/workloads/sizing.py builds it; the config checks,
# components/stack/validate.py, refuse a /dev/shm it cannot hold): its memory request and limit
# leave this share of the conservative allocatable free besides the DaemonSets, and the
# memory-backed /dev/shm, charged to that limit (FACTS.md), may take at most SHM_MAX_SHARE of it.
MEMORY_HEADROOM = 0.02
SHM_MAX_SHARE = 0.25


def pod_memory_mib(it: InstanceType, *, efa: bool) -> int:
    """The whole-node pod's memory request and limit in MiB, whole GiB: the conservative allocatable
    (net of the EFA huge pages on an EFA node) less the DaemonSets and MEMORY_HEADROOM."""
    alloc = it.allocatable(efa=efa)
    mib = (alloc.memory_mib_conservative - DAEMONSET_MEMORY_MIB
           - math.ceil(alloc.memory_mib_conservative * MEMORY_HEADROOM))
    return (mib // GIB_IN_MIB) * GIB_IN_MIB


def max_shm_gib(it: InstanceType, efa: int) -> int:
    """The largest /dev/shm (GiB) the training pod can have on `it` with `efa` EFA devices: SHM_MAX_SHARE
    of its memory limit."""
    return math.floor(pod_memory_mib(it, efa=efa > 0) * SHM_MAX_SHARE / GIB_IN_MIB)
