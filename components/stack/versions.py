"""Every pinned add-on version, in one place, each checked against its source (FACTS.md, 2026-11).

A wrong repository, chart name or version passes every offline test and fails only for a real
user: change these only from the source, never from memory.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chart:
    chart: str
    version: str
    repo: str


# Its default affinity wants node label nvidia.com/gpu.present=true, which the GPU node group sets.
NVIDIA_DEVICE_PLUGIN = Chart("nvidia-device-plugin", "0.20.0", "https://nvidia.github.io/k8s-device-plugin")
# Default tolerations do not include the GPU taint; the version carries its `v`.
EFA_DEVICE_PLUGIN = Chart("aws-efa-k8s-device-plugin", "v0.5.30", "https://aws.github.io/eks-charts")
# Instance types the pinned EFA plugin release knows (its supportedInstanceLabels default);
# an older release that does not know a newer type never advertises its devices (F3).
EFA_PLUGIN_KNOWN_TYPES = ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge", "p5en.48xlarge",
                          "g5.12xlarge", "g6.12xlarge")
FSX_CSI_ADDON = "aws-fsx-csi-driver"
FSX_CSI_SERVICE_ACCOUNT = "fsx-csi-controller-sa"
POD_IDENTITY_ADDON = "eks-pod-identity-agent"
