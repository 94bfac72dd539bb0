"""Whether the GPU nodes carry EFA interfaces: a property of the node, independent of the node count.

`gpuNodes.efa` (config.GpuNodes.efa_enabled) says whether the *pods* use EFA: unset, only with two
or more nodes (one node has no peer to talk to over EFA). The nodes' interfaces follow the instance
type instead: an EFA interface costs nothing (EC2 user guide, efa: "no additional cost"), and a
launch template that dropped them at one node and added them at two was a new template version, so
scaling 1 -> 2 (and back) replaced the running node (issue 44 item 8). With the interfaces present
the EFA driver pre-allocates its huge pages whatever the pods request (catalog.EFA_HUGEPAGES_2MI:
"on every EFA-enabled instance"), so the memory the pods are sized against follows this too.

Pure; `gpuNodes.efa: false` still removes them (the stack's explicit choice).
"""

from __future__ import annotations

from typing import Any


def interfaces(gpu_nodes: Any) -> bool:
    """EFA interfaces on every GPU node: the instance type has EFA and `gpuNodes.efa` is not false."""
    return gpu_nodes.instance.has_efa and gpu_nodes.efa is not False


def devices(gpu_nodes: Any) -> int:
    """EFA devices each GPU node carries (what the launch template or EC2NodeClass attaches)."""
    return gpu_nodes.instance.efa_devices if interfaces(gpu_nodes) else 0
