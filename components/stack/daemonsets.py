"""The DaemonSets that run on every GPU node, with the requests their pinned charts set (each cited).

The fit report, the training pods' sizes and the Kueue quota keep this much of every GPU node free
(catalog.DAEMONSET_CPU_MILLI / DAEMONSET_MEMORY_MIB: the sum, worst case: every one present). A
figure comes from the chart's values.yaml at the version versions.py pins (a container without
requests reserves nothing: the scheduler counts requests only). The stack's own exporter
(rltrain-efa-metrics) is not listed: the schedule reads its requests from the rendered DaemonSet.

Read the real ones on a node with
`kubectl describe node <gpu node>` (Non-terminated Pods, CPU/Memory Requests).
"""

from __future__ import annotations

from dataclasses import dataclass

from components.stack import versions


@dataclass(frozen=True)
class DaemonSetReserve:
    name: str
    cpu_milli: int
    memory_mib: int
    # "always", "efa" (the EFA device plugin), "monitoring" (the stack's exporters).
    when: str
    source: str


GPU_NODE_DAEMONSETS: tuple[DaemonSetReserve, ...] = (
    DaemonSetReserve(
        "aws-node (VPC CNI)", 25, 0, "always",
        "aws/amazon-vpc-cni-k8s charts/aws-vpc-cni/values.yaml at v1.20.4, v1.21.1 and v1.22.4 (the pinned "
        "add-on builds' releases): resources.requests.cpu 25m; nodeAgent and init: resources {}"),
    DaemonSetReserve(
        "kube-proxy", 100, 0, "always",
        "EKS managed add-on, no public chart: 100m CPU, no memory request, as EKS's kube-proxy DaemonSet "
        "sets it (not verified from here: `kubectl -n kube-system get ds kube-proxy -o yaml`)"),
    DaemonSetReserve(
        "eks-pod-identity-agent", 0, 0, "always",
        "aws/eks-pod-identity-agent charts/eks-pod-identity-agent/values.yaml: resources {}"),
    DaemonSetReserve(
        "fsx-csi-node", 30, 104, "always",
        f"kubernetes-sigs/aws-fsx-csi-driver tag v1.9.0 (add-on {versions.FSX_CSI_ADDON} v1.9.0), "
        "charts/aws-fsx-csi-driver/values.yaml: node.resources.requests 10m/40Mi for fsx-plugin, and "
        "node-driver-registrar and liveness-probe 10m/32Mi each (sidecars.*.resources)"),
    DaemonSetReserve(
        "nvidia-device-plugin", 0, 0, "always",
        f"NVIDIA/k8s-device-plugin v{versions.NVIDIA_DEVICE_PLUGIN.version} "
        "deployments/helm/nvidia-device-plugin/values.yaml: resources {}"),
    DaemonSetReserve(
        "eks-node-monitoring-agent", 10, 30, "always",
        f"aws/eks-node-monitoring-agent charts/eks-node-monitoring-agent/values.yaml at tag v"
        f"{versions.NODE_MONITORING_AGENT_CHART} (add-on {versions.NODE_MONITORING_AGENT_ADDON}): "
        "nodeAgent.resources.requests cpu 10m, memory 30Mi"),
    DaemonSetReserve(
        "dcgm-server", 0, 0, "always",
        f"the same chart at v{versions.NODE_MONITORING_AGENT_CHART}, values.yaml dcgmAgent.resources {{}} "
        "(the agent's DCGM host engine, on GPU instance types)"),
    DaemonSetReserve(
        "aws-efa-k8s-device-plugin", 10, 20, "efa",
        f"aws/eks-charts stable/aws-efa-k8s-device-plugin/values.yaml at chart {versions.EFA_DEVICE_PLUGIN.version}: "
        "resources.requests cpu 10m, memory 20Mi"),
    DaemonSetReserve(
        "dcgm-exporter", 100, 128, "monitoring",
        f"NVIDIA/dcgm-exporter deployment/values.yaml at 4.5.3-{versions.DCGM_EXPORTER.version}: "
        "resources.requests cpu 100m, memory 128Mi"),
    DaemonSetReserve(
        "node-exporter", 0, 0, "monitoring",
        f"prometheus-community/helm-charts prometheus-node-exporter 4.56.1 (kube-prometheus-stack "
        f"{versions.KUBE_PROMETHEUS_STACK.version}) values.yaml: resources {{}}"),
)


def reserve(*, efa: bool = True, monitoring: bool = True) -> tuple[int, int]:
    """(millicores, MiB) the DaemonSets request on one GPU node."""
    on = {"always", *(("efa",) if efa else ()), *(("monitoring",) if monitoring else ())}
    chosen = [d for d in GPU_NODE_DAEMONSETS if d.when in on]
    return sum(d.cpu_milli for d in chosen), sum(d.memory_mib for d in chosen)
