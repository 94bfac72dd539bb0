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
# Kueue (FACTS.md "Kueue"; components/k8s/kueue.py): the chart from the OCI registry of the
# kubernetes-sigs/kueue release v0.19.2 (charts/kueue/Chart.yaml version and appVersion 0.19.2 /
# v0.19.2; the release build pins the controller image registry.k8s.io/kueue/kueue:v0.19.2,
# hack/helm-chart-package.sh). Installed in its own namespace, kueue-system. helm.v3.Release takes an
# `oci://` chart reference with no repository (pulumi-kubernetes provider/pkg/provider/helm_release.go,
# resolveChartName; OCI support since pulumi-kubernetes 3.16, #1892).
KUEUE = Chart("kueue", "0.19.2", "oci://registry.k8s.io/kueue/charts")
KUEUE_CHART_REF = f"{KUEUE.repo}/{KUEUE.chart}"
# The API version of Kueue's objects (ClusterQueue, LocalQueue, ResourceFlavor, Topology) that v0.19.2
# serves and stores (apis/kueue/v1beta2).
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
KUEUE_NAMESPACE = "kueue-system"
# KubeRay (FACTS.md "KubeRay"; components/k8s/kuberay.py): chart kuberay-operator 1.6.2 from the
# project's Helm repository (ray-project/kuberay tag v1.6.2: helm-chart/kuberay-operator/Chart.yaml
# version 1.6.2, values.yaml image quay.io/kuberay/operator:v1.6.2; the chart's crds/ hold the ray.io/v1
# CRDs). 1.7.0 exists (2026-08-19); Kueue 0.19.2 builds against ray-operator v1.6.2 (its go.mod).
# Installed in its own namespace; Helm installs the CRDs on the first install and never upgrades them.
KUBERAY_OPERATOR = Chart("kuberay-operator", "1.6.2", "https://ray-project.github.io/kuberay-helm/")
KUBERAY_NAMESPACE = "kuberay-system"
# Karpenter (elastic GPU capacity, components/aws/karpenter.py): the controller and its CRDs as the
# two charts of aws/karpenter-provider-aws v1.14.0 (charts/karpenter, charts/karpenter-crd), from
# the project's public ECR OCI registry (website/content/en/v1.14/getting-started/
# getting-started-with-karpenter/scripts/step08-apply-helm-chart.sh installs
# oci://public.ecr.aws/karpenter/karpenter --version "${KARPENTER_VERSION}"). The tag's own
# Chart.yaml still reads 1.13.0: the release job sets the published chart's version to the tag.
# The same version as the controller the simulated cluster builds (cluster/build.sh KARPENTER_VERSION).
# The CRDs come from karpenter-crd, not the controller chart's crds/ directory: Helm installs a
# chart's crds/ on the first install only and never upgrades them (Helm docs, chart best practices:
# custom resource definitions); karpenter-crd templates them, so an upgrade updates them.
KARPENTER = Chart("karpenter", "1.14.0", "oci://public.ecr.aws/karpenter")
KARPENTER_CRD = Chart("karpenter-crd", "1.14.0", "oci://public.ecr.aws/karpenter")
# kube-system, beside the other node-level controllers; the chart gives its pods the
# system-cluster-critical priority class (charts/karpenter/values.yaml priorityClassName).
KARPENTER_NAMESPACE = "kube-system"
KARPENTER_SERVICE_ACCOUNT = "karpenter"
FSX_CSI_ADDON = "aws-fsx-csi-driver"
POD_IDENTITY_ADDON = "eks-pod-identity-agent"
VPC_CNI_ADDON = "vpc-cni"
KUBE_PROXY_ADDON = "kube-proxy"
COREDNS_ADDON = "coredns"
EBS_CSI_ADDON = "aws-ebs-csi-driver"
# The EKS node monitoring agent (components/k8s/node_health.py): the add-on's chart is
# aws/eks-node-monitoring-agent charts/eks-node-monitoring-agent at tag v1.7.0 (Chart.yaml version
# and appVersion 1.7.0, values.yaml nodeAgent.image.tag v1.7.0-eksbuild.1); EKS accepts the subset
# of its values that charts/configuration.schema.json at that tag lists (EKS user guide,
# node-monitoring-agent-configure).
NODE_MONITORING_AGENT_ADDON = "eks-node-monitoring-agent"
NODE_MONITORING_AGENT_CHART = "1.7.0"
# Its dcgm-server DaemonSet runs `nv-hostengine -n -b ALL` with containerPort/hostPort 5555 on the
# NVIDIA instance types its default affinity lists (templates/dcgm-daemonset.yaml and values.yaml
# dcgmAgent.affinity at v1.7.0; every GPU type of catalog.py is in that list, tests check the ones
# recorded here). The agent itself (hostNetwork) talks to it on localhost:5555 (chart README, "DCGM
# host engine").
NODE_MONITORING_AGENT_DCGM_PORT = 5555
NODE_MONITORING_AGENT_DCGM_TYPES = ("p4d.24xlarge", "p4de.24xlarge", "p5.48xlarge", "p5e.48xlarge",
                                    "p5en.48xlarge", "g5.xlarge", "g5.12xlarge", "g6.12xlarge")
# The controller's service account in the add-on (the Pod Identity association names it).
EBS_CSI_SERVICE_ACCOUNT = "ebs-csi-controller-sa"

# Monitoring (FACTS.md "Monitoring"; components/k8s/monitoring.py).
# kube-prometheus-stack 88.5.3 (prometheus-community/helm-charts charts/kube-prometheus-stack/Chart.yaml,
# 2026-08-21): prometheus-operator v0.93.1, Prometheus v3.14.0, Alertmanager v0.34.0, subcharts
# kube-state-metrics 8.4.0 (app 2.20.0), prometheus-node-exporter 4.56.1 (app 1.12.1), grafana
# 12.11.1 (grafana-community/helm-charts, app 13.2.0). Neither it nor its subcharts ship a
# values.schema.json at these versions.
KUBE_PROMETHEUS_STACK = Chart("kube-prometheus-stack", "88.5.3", "https://prometheus-community.github.io/helm-charts")
KUBE_STATE_METRICS_APP = "2.20.0"
# dcgm-exporter chart 4.8.2 (NVIDIA/dcgm-exporter deployment/Chart.yaml at tag 4.5.3-4.8.2, image
# nvcr.io/nvidia/k8s/dcgm-exporter:4.5.3-4.8.2-distroless); no values.schema.json.
DCGM_EXPORTER = Chart("dcgm-exporter", "4.8.2", "https://nvidia.github.io/dcgm-exporter/helm-charts")
# The EFA textfile exporter (components/scripts/efa_metrics.py, standard library only) runs in the
# Docker official Python image, pinned by digest (the digest of 3.12.7-slim-bookworm as pinned in
# nalabelle/build images/digests.Dockerfile; not pulled from here).
EFA_EXPORTER_IMAGE = ("docker.io/library/python:3.12.7-slim-bookworm"
                      "@sha256:032c52613401895aa3d418a4c563d2d05f993bc3ecc065c8f4e2280978acd249")

# EKS managed add-on versions, per Kubernetes minor. Every add-on the stack creates (the ones
# pulumi-eks creates for it included) takes its version from here: an unpinned add-on resolves
# the newest build on every `up` and can roll aws-node across busy GPU nodes.
EKS_ADDON_VERSIONS: dict[str, dict[str, str]] = {
    # AWS EKS user guide add-on tables (managing-vpc-cni, -kube-proxy, -coredns), 1.34 rows.
    "1.34": {VPC_CNI_ADDON: "v1.20.4-eksbuild.1", KUBE_PROXY_ADDON: "v1.34.1-eksbuild.2",
             COREDNS_ADDON: "v1.12.4-eksbuild.1", POD_IDENTITY_ADDON: "v1.3.10-eksbuild.2",
             FSX_CSI_ADDON: "v1.9.0-eksbuild.1", EBS_CSI_ADDON: "v1.56.0-eksbuild.1",
             NODE_MONITORING_AGENT_ADDON: "v1.7.0-eksbuild.1"},
    # awslabs/cdk-eks-blueprints lib/addons/*/index.ts version maps (2026-04-08).
    "1.35": {VPC_CNI_ADDON: "v1.21.1-eksbuild.1", KUBE_PROXY_ADDON: "v1.35.0-eksbuild.2",
             COREDNS_ADDON: "v1.13.2-eksbuild.3", POD_IDENTITY_ADDON: "v1.3.10-eksbuild.2",
             FSX_CSI_ADDON: "v1.9.0-eksbuild.1", EBS_CSI_ADDON: "v1.57.1-eksbuild.1",
             NODE_MONITORING_AGENT_ADDON: "v1.7.0-eksbuild.1"},
    # The defaults a 1.36 cluster picked in a recorded deploy (2026-09-16); no AWS table seen.
    "1.36": {VPC_CNI_ADDON: "v1.22.4-eksbuild.3", KUBE_PROXY_ADDON: "v1.36.0-eksbuild.21",
             COREDNS_ADDON: "v1.14.3-eksbuild.16", POD_IDENTITY_ADDON: "v1.3.10-eksbuild.3",
             FSX_CSI_ADDON: "v1.9.0-eksbuild.1", EBS_CSI_ADDON: "v1.57.1-eksbuild.1",
             NODE_MONITORING_AGENT_ADDON: "v1.7.0-eksbuild.1"},
}
# Not verified against the EKS API from here (no AWS account): the FSx CSI build is the one seen
# pinned for 1.35 (driver appVersion 1.9.0) and assumed for 1.34/1.36. The EBS CSI builds for
# 1.34 and 1.35 are cdk-eks-blueprints' (lib/addons/ebs-csi-driver/index.ts, 2026-04-08); no 1.36
# figure was found, the 1.35 build is assumed for it. The node monitoring agent's build is the
# image tag its chart pins at v1.7.0 (values.yaml nodeAgent.image.tag v1.7.0-eksbuild.1; the add-on
# version names the same build); that EKS offers it for each minor listed is not verified from
# here. Before the first `up` of
# a new minor, compare with `aws eks describe-addon-versions --kubernetes-version 1.35
# --addon-name <name>`; a wrong build fails at `up`, a floating one rolls nodes unasked.


def eks_addons(kubernetes_version: str) -> dict[str, str]:
    """The pinned add-on versions for a Kubernetes minor (config allows only the minors listed)."""
    return EKS_ADDON_VERSIONS[kubernetes_version]

# vLLM OpenAI-compatible server (components/workloads/serving.py): the project's image on Docker Hub,
# tag v0.11.0 (vllm-project/vllm release v0.11.0). Its entry point runs the server module
# `vllm.entrypoints.openai.api_server`; the program names the module itself so the pod does not
# depend on the image's ENTRYPOINT. Metric names read by the dashboard: monitoring_metrics.py.
VLLM_OPENAI_IMAGE = "docker.io/vllm/vllm-openai:v0.11.0"
# TensorBoard for the runs' curves (components/workloads/curves.py): TensorFlow's CPU image, whose
# tensorflow 2.20.0 pip package requires tensorboard~=2.20 (tensorflow/tools/pip_package/setup.py at
# v2.20.0, REQUIRED_PACKAGES). Pinned by tag only: not pulled from here, check `docker run --rm IMAGE
# tensorboard --version` before the first `up`. The RLinf training image also carries tensorboard
# (RLinf pyproject.toml at 0505431 lists it) but is 15-20 GB, too large for the system nodes.
TENSORBOARD_IMAGE = "docker.io/tensorflow/tensorflow:2.20.0"
# The evaluation CronJob's script uses the standard library only: the same pinned Python image as
# the EFA exporter.
EVALUATION_IMAGE = EFA_EXPORTER_IMAGE
