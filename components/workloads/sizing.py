"""Sizing: the whole node for one training pod, derived from `components.stack.catalog` (D9/D10).

GPUs and EFA devices: all the node has (`gpu_count`; `efa_devices_per_node`, 0 when EFA is off,
and then the key is omitted). Extended resources: limits == requests.

CPU request = floor((allocatable_cpu - DAEMONSET_CPU_MILLI - 2 % x allocatable_cpu) / 1000) cores.
    p4de.24xlarge: allocatable 95 690m -> 93 cores;  p5.48xlarge: 191 450m -> 187 cores;
    g6.12xlarge: 47 810m -> 46 cores. No CPU limit (CFS quotas throttle data loaders and NCCL
    proxy threads; the request already reserves nearly the whole node).

Memory request = limit = floor((allocatable.memory_mib_conservative - DAEMONSET_MEMORY_MIB
    - 2 % x memory_mib_conservative) / 1024) GiB, where on EFA nodes allocatable is net of the
    driver's pre-allocated huge pages (catalog.EFA_HUGEPAGES_2MI x 2 MiB = 10 256 MiB).
    p4de: 1 072 456 MiB conservative -> 1026 GiB;  p5: 1 928 154 MiB -> 1845 GiB;
    g6: 168 677 MiB -> 161 GiB.
EFA pods also request `hugepages-2Mi` (catalog.EFA_POD_HUGEPAGES_MIB, 5120 MiB) from that pool
for libfabric, as requests == limits beside GPUs and EFA devices.
The memory-backed /dev/shm emptyDir is charged to the same pod memory cgroup (FACTS.md), i.e. it
lives *inside* this limit, not beside it: pages the trainer writes to /dev/shm plus its own RSS
must stay below the limit. `fits()` therefore checks (a) the whole limit plus the DaemonSets fits
the conservative allocatable, (b) /dev/shm takes at most a quarter of the limit, which leaves
p5 1845 - 128 = 1717 GiB and p4de 1026 - 72 = 954 GiB for the processes, and (c) the huge pages
fit the node's pool.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import pulumi_kubernetes as k8s

from components.stack import catalog
from components.stack.catalog import SHM_MAX_SHARE
from components.stack.node_efa import interfaces as efa_interfaces
from components.stack.config import StackConfig

from components.stack.labels import EFA, GPU, HUGEPAGES

CPU_HEADROOM = 0.02
# The memory headroom and /dev/shm's share of the memory limit: catalog.MEMORY_HEADROOM,
# catalog.SHM_MAX_SHARE (the config checks size the same pod).


@dataclass(frozen=True)
class PodSizing:
    """What one pod requests on one GPU node (`pod_sizing` for training; validation makes its own)."""

    cpu: int  # whole cores, request only
    memory_mib: int  # request == limit; /dev/shm is inside it
    shm_gib: int
    gpus: int
    efa: int
    # Training: False (no CPU limit, see the module docstring). Small helper pods (validation) set a
    # CPU limit equal to the request.
    cpu_limit: bool = False
    # The node has EFA on (its driver pre-allocates huge pages, which allocatable memory is net of),
    # whether or not this pod requests EFA devices. None = the pod's own EFA request decides.
    node_efa: Optional[bool] = None

    @property
    def on_efa_node(self) -> bool:
        return self.efa > 0 if self.node_efa is None else self.node_efa

    @property
    def hugepages_mib(self) -> int:
        """EFA pods request huge pages for libfabric (catalog.EFA_POD_HUGEPAGES_MIB) rather than
        switching them off (FI_EFA_USE_HUGE_PAGE=0): the driver pre-allocates them on every EFA
        node whether used or not, one GPU pod runs per node, and the reference NCCL job does so."""
        return catalog.EFA_POD_HUGEPAGES_MIB if self.efa > 0 else 0

    @property
    def memory_gib(self) -> int:
        return self.memory_mib // catalog.GIB_IN_MIB

    @staticmethod
    def quantity_mib(mib: int) -> str:
        """A size in MiB as the API server writes it back: the largest binary unit that holds it
        exactly (5120Mi is stored as 5Gi). Written any other way, the live MPIJob differs from
        the program's input and its replace-on-change spec replaced the NCCL test on every
        `up` (seen on the simulated cluster: hugepages-2Mi "5Gi" => "5120Mi")."""
        return f"{mib // catalog.GIB_IN_MIB}Gi" if mib % catalog.GIB_IN_MIB == 0 else f"{mib}Mi"

    def extended(self) -> dict[str, str]:
        """GPU, EFA and the EFA huge pages, requests == limits; EFA and huge pages omitted when 0."""
        out = {GPU: str(self.gpus)}
        if self.efa > 0:
            out[EFA] = str(self.efa)
            out[HUGEPAGES] = self.quantity_mib(self.hugepages_mib)
        return out

    def resources(self) -> k8s.core.v1.ResourceRequirementsArgs:
        memory = self.quantity_mib(self.memory_mib)
        cpu = {"cpu": str(self.cpu)}
        return k8s.core.v1.ResourceRequirementsArgs(
            requests={**cpu, "memory": memory, **self.extended()},
            limits={**(cpu if self.cpu_limit else {}), "memory": memory, **self.extended()},
        )


def shm_gib(cfg: StackConfig) -> int:
    return cfg.workloads.shm_size_gib or catalog.shm_default_gib(cfg.gpu_nodes.instance)


def sizing_for(it: catalog.InstanceType, *, efa: int, shm: int, node_efa: Optional[bool] = None) -> PodSizing:
    on_efa_node = efa > 0 if node_efa is None else node_efa
    alloc = it.allocatable(efa=on_efa_node)
    cpu_milli = alloc.cpu_milli - catalog.DAEMONSET_CPU_MILLI - math.ceil(alloc.cpu_milli * CPU_HEADROOM)
    return PodSizing(cpu=cpu_milli // 1000, memory_mib=catalog.pod_memory_mib(it, efa=on_efa_node),
                     shm_gib=shm, gpus=it.gpu_count, efa=efa, node_efa=node_efa)


def fits(sizing: PodSizing, instance: catalog.InstanceType) -> bool:
    """True when the pod plus the GPU node's DaemonSets fit what the kubelet offers."""
    alloc = instance.allocatable(efa=sizing.on_efa_node)
    return (
        sizing.cpu * 1000 + catalog.DAEMONSET_CPU_MILLI <= alloc.cpu_milli
        and sizing.hugepages_mib <= alloc.hugepages_2mi_mib
        and sizing.memory_mib + catalog.DAEMONSET_MEMORY_MIB <= alloc.memory_mib_conservative
        and sizing.shm_gib * catalog.GIB_IN_MIB <= sizing.memory_mib * SHM_MAX_SHARE
        and 0 < sizing.gpus <= instance.gpu_count
        and 0 <= sizing.efa <= instance.efa_devices
    )


def pod_sizing(cfg: StackConfig, *, efa: bool = True) -> PodSizing:
    """The whole-node training pod; `efa` False: no EFA devices or huge pages requested (a run
    that does not use EFA), the node's allocatable still net of its EFA huge pages."""
    it = cfg.gpu_nodes.instance
    # The node's huge pages follow its EFA interfaces, not whether this pod uses EFA (stack/node_efa.py).
    sizing = sizing_for(it, efa=cfg.gpu_nodes.efa_devices_per_node if efa else 0, shm=shm_gib(cfg),
                        node_efa=efa_interfaces(cfg.gpu_nodes))
    if not fits(sizing, it):
        raise ValueError(
            f"training pod {sizing} does not fit {it.name} (allocatable {it.allocatable(efa=sizing.on_efa_node)}); "
            f"/dev/shm ({sizing.shm_gib} GiB) may use at most {SHM_MAX_SHARE:.0%} of the memory limit: "
            "lower rltrain:workloads.shmSizeGiB"
        )
    return sizing
