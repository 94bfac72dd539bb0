"""Node health: the EKS node monitoring agent that tells EKS a GPU is broken, and who runs DCGM.

Without the agent, EKS node repair reacts only to a node going NotReady: an XID, a GPU fallen off
the bus or an EFA device down leaves the node Ready and the run's GPUs idle. The agent reads the
node's logs and DCGM and sets the conditions repair acts on (`AcceleratedHardwareReady`,
`NetworkingReady`, `KernelReady`, `StorageReady`, `ContainerRuntimeReady`; EKS user guide,
node-health-nma and node-repair). Repair acts per reason: `AcceleratedHardwareReady=False` after
10 minutes, by a **reboot** for most H100 XIDs (13, 31, 48, 63, 64, 94, 95: the Node keeps its name)
and by a replacement for others (74, 79, 119, 120, 121, 140); the other conditions after 30 minutes,
by a replacement. The DCGM reasons (`DCGMError`: the connection to the host engine lost;
`DCGMDiagnosticFailure`; `DCGMHealthCode<N>`) set the condition too, but their documented repair
action is None: the guide has nothing reboot or replace the node for them. Users have reported
nodes replaced on `DCGMError` all the same (aws/containers-roadmap#2555, a managed group, 2025;
#2763: Karpenter's node repair acts on the condition whatever its reason), and at agent v1.7.0 a
`DCGMError` condition stays False after DCGM recovers, until the agent's pod restarts
(aws/eks-node-monitoring-agent#266, fix proposed in #275). The Ray launcher's head reads the same
conditions to tell a node fault from a trainer failure, and skips the DCGM reasons: no repair is
due for them, and a sticky one would hold a run for ever
(components/scripts/_ray_launcher/node_health.py); the periods: components/stack/node_repair.py.

Installed as the EKS add-on `eks-node-monitoring-agent` on a created cluster only (a
bring-your-own cluster's node health is its owners'; docs/gpu-failure-runbook.md says what the
stack expects there). Version pinned per Kubernetes minor in versions.py.

One DCGM host engine per GPU node. The add-on's chart at v1.7.0 always runs its `dcgm-server`
DaemonSet (`nv-hostengine` on hostPort 5555) on NVIDIA instance types; its schema has no key to
turn it off (charts/configuration.schema.json: dcgmAgent takes affinity, annotations, labels,
nodeSelector, priorityClassName, resources, resizePolicy, tolerations). The DCGM exporter, left
alone, starts a host engine embedded in its own process (NVIDIA dcgm-exporter: without
`-r/--remote-hostengine-info` it initialises one through libdcgm). Two engines on one node contend
for the profiling module, which one engine per GPU can use (DCGM_FI_PROF_*; aws/eks-node-monitoring-
agent#256), and an agent beside another DCGM installation has reported AcceleratedHardwareReady=False
on healthy GPUs (aws/containers-roadmap#2763, #2555): a DCGM reason, documented as repaired by
nothing (above) yet reported to get nodes replaced, and a node that reads as broken
(RltrainGpuNodeUnhealthy, the Node health panels) while its GPUs work. So the exporter connects
to the agent's engine: `-r $(NODE_IP):5555` (the chart's `arguments`, dcgm-exporter chart 4.8.2
values.yaml: "Use -r <HOST>:<PORT> to connect to an already running hostengine"), NODE_IP from the
pod's `status.hostIP` (the hostPort answers on the node's address: the VPC CNI's chained portmap
plugin serves hostPorts, not verified from here). That keeps the agent's health
checks (which are what repair reads) and the exporter's metrics (what the dashboards read) on the
same engine; the other way round (the agent's DCGM part off) is not possible at this version.

The dcgm-server's default tolerations are empty, and the GPU nodes carry the `nvidia.com/gpu`
NoSchedule taint: without the toleration set here no host engine runs on them, the agent's GPU
checks fail and (with the exporter pointed at it) so do the GPU metrics. The node agent itself
tolerates every taint by default (values.yaml nodeAgent.tolerations: operator Exists).
"""

from __future__ import annotations

import json
from typing import Any

from components.stack import versions
from components.stack.labels import GPU_TAINT_KEY

GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
# The environment variable the DCGM exporter's pod gets the node's address in (downward API).
NODE_IP_ENV = "NODE_IP"
# The dcgm-exporter chart's default `arguments` (values.yaml at 4.8.2): its counter file, which the
# chart fills from `customMetrics`.
EXPORTER_COUNTERS_ARGS = ("-f", "/etc/dcgm-exporter/default-counters.csv")
REMOTE_HOSTENGINE_FLAG = "-r"


def agent_configuration() -> dict[str, Any]:
    """The add-on's configuration values (a subset of charts/configuration.schema.json at v1.7.0;
    tests check every key against the key paths recorded from it)."""
    return {"dcgmAgent": {"tolerations": [GPU_TOLERATION]}}


def agent_configuration_json() -> str:
    return json.dumps(agent_configuration(), sort_keys=True)


def hostengine_address() -> str:
    """The agent's host engine as the exporter's pod reaches it: the node's address, the hostPort."""
    return f"$({NODE_IP_ENV}):{versions.NODE_MONITORING_AGENT_DCGM_PORT}"


def exporter_hostengine_values(shared: bool) -> dict[str, Any]:
    """dcgm-exporter chart values that decide which host engine it uses: the agent's (`shared`) or
    its own embedded one (the chart's default arguments, nothing added)."""
    if not shared:
        return {}
    return {
        "arguments": [*EXPORTER_COUNTERS_ARGS, REMOTE_HOSTENGINE_FLAG, hostengine_address()],
        "extraEnv": [{"name": NODE_IP_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.hostIP"}}}],
    }
