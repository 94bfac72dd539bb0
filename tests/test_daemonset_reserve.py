"""The DaemonSet reserve of a GPU node: the pinned charts' own requests, each cited (components/stack/daemonsets.py)."""

from __future__ import annotations

from components.stack import catalog, daemonsets, versions


def test_reserve_is_the_sum_of_the_cited_requests():
    by_name = {d.name: (d.cpu_milli, d.memory_mib) for d in daemonsets.GPU_NODE_DAEMONSETS}
    assert by_name == {
        "aws-node (VPC CNI)": (25, 0), "kube-proxy": (100, 0), "eks-pod-identity-agent": (0, 0),
        "fsx-csi-node": (30, 104), "nvidia-device-plugin": (0, 0), "aws-efa-k8s-device-plugin": (10, 20),
        "dcgm-exporter": (100, 128), "node-exporter": (0, 0),
        "eks-node-monitoring-agent": (10, 30), "dcgm-server": (0, 0)}
    assert (catalog.DAEMONSET_CPU_MILLI, catalog.DAEMONSET_MEMORY_MIB) == daemonsets.reserve() == (275, 282)
    # Without EFA and without the stack's monitoring: only what every node runs.
    assert daemonsets.reserve(efa=False, monitoring=False) == (165, 134)


def test_every_figure_names_its_source_at_the_pinned_version():
    pinned = {"aws-efa-k8s-device-plugin": versions.EFA_DEVICE_PLUGIN.version,
              "nvidia-device-plugin": versions.NVIDIA_DEVICE_PLUGIN.version,
              "dcgm-exporter": versions.DCGM_EXPORTER.version,
              "node-exporter": versions.KUBE_PROMETHEUS_STACK.version,
              "eks-node-monitoring-agent": versions.NODE_MONITORING_AGENT_CHART,
              "dcgm-server": versions.NODE_MONITORING_AGENT_CHART}
    for d in daemonsets.GPU_NODE_DAEMONSETS:
        assert "values.yaml" in d.source or "not verified" in d.source, d.name
        if d.name in pinned:
            assert pinned[d.name] in d.source, d.name
        assert d.when in ("always", "efa", "monitoring")
