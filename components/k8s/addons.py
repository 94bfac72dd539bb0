"""ClusterAddons: device plugins, the FSx CSI driver and the EKS node monitoring agent, versions
pinned in `versions.py`.

Helm releases register their chart, version, repository and values, so all of it is reviewable in
the render. Workloads depend on this component, so `pulumi up` creates the plugins first.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict


from components.k8s import node_health
from components.stack import versions
from components.stack.labels import GPU_TAINT_KEY, ROLE_LABEL

GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


class ClusterAddonsArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_type: str
    efa: bool
    # The cluster-wide rule (StackConfig.installs): on a bring-your-own cluster only when opted in.
    device_plugins: bool = True
    # None for a bring-your-own cluster: no AWS resources (the CSI driver is then the cluster's).
    kubernetes_version: Optional[str] = None


def nvidia_plugin_values(a: ClusterAddonsArgs) -> dict:
    return {"nodeSelector": dict(ROLE_LABEL), "tolerations": [GPU_TOLERATION]}


def efa_plugin_values(a: ClusterAddonsArgs) -> dict:
    # Only on this stack's GPU nodes, which all have EFA: the plugin crash-loops elsewhere (F2).
    return {
        "nodeSelector": {**ROLE_LABEL, "node.kubernetes.io/instance-type": a.instance_type},
        "tolerations": [GPU_TOLERATION],
    }


def efa_plugin_knows(instance_type: str) -> bool:
    return instance_type in versions.EFA_PLUGIN_KNOWN_TYPES


def _release(name: str, chart: versions.Chart, values: dict, parent: pulumi.Resource) -> k8s.helm.v3.Release:
    return k8s.helm.v3.Release(
        name, name=name, chart=chart.chart, version=chart.version, namespace="kube-system",
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo), values=values,
        opts=pulumi.ResourceOptions(parent=parent))


class ClusterAddons(pulumi.ComponentResource):
    def __init__(self, name: str, args: ClusterAddonsArgs, *, cluster: Optional[pulumi.Input[str]] = None,
                 after: tuple[pulumi.Resource, ...] = (), opts: Optional[pulumi.ResourceOptions] = None):
        """`cluster`: the created cluster's name as an output of the cluster (None on a
        bring-your-own cluster); `after`: what the EKS add-on needs first (the Pod Identity agent)."""
        super().__init__("rltrain:index:ClusterAddons", name, None, opts)
        self.nvidia = self.efa = None
        if args.device_plugins:
            self.nvidia = _release("nvidia-device-plugin", versions.NVIDIA_DEVICE_PLUGIN, nvidia_plugin_values(args),
                                   self)
        if args.efa and args.device_plugins:
            if not efa_plugin_knows(args.instance_type):
                raise ValueError(f"EFA device plugin {versions.EFA_DEVICE_PLUGIN.version} does not list "
                                 f"{args.instance_type}; pin a release that does (components/stack/versions.py)")
            self.efa = _release("aws-efa-k8s-device-plugin", versions.EFA_DEVICE_PLUGIN, efa_plugin_values(args), self)
        outer = list(opts.depends_on) if opts and isinstance(opts.depends_on, (list, tuple)) else []
        self.fsx_csi = self.node_monitoring_agent = None
        if args.kubernetes_version and cluster is not None:
            # No IAM role: a statically provisioned volume (the stack's FSx PV) needs no AWS API.
            # The node plugin mounts with the Lustre client; only the controller's
            # Create/Delete/ExpandVolume call FSx (kubernetes-sigs/aws-fsx-csi-driver pkg/driver/,
            # FACTS "Deploy semantics"). The add-on's docs ask for the Pod Identity agent first.
            # Its node DaemonSet tolerates all taints by default (node.tolerateAllTaints), so it
            # runs on the GPU nodes; no configuration_values (an unknown key fails only at `up`).
            self.fsx_csi = aws.eks.Addon(
                f"{name}-fsx-csi", cluster_name=cluster, addon_name=versions.FSX_CSI_ADDON,
                addon_version=versions.eks_addons(args.kubernetes_version)[versions.FSX_CSI_ADDON],
                # Every EKS add-on resolves conflicts the same way (deploy model `addon-conflicts`).
                resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE",
                opts=pulumi.ResourceOptions(parent=self, depends_on=list(after)))
            # What tells EKS node repair that a GPU or an EFA device is broken (node_health.py),
            # with its DCGM host engine on the GPU nodes (their taint tolerated); the DCGM
            # exporter connects to that engine instead of starting its own. No IAM role: the
            # chart grants Kubernetes RBAC only (templates/clusterrole.yaml at v1.7.0).
            self.node_monitoring_agent = aws.eks.Addon(
                f"{name}-node-monitoring-agent", cluster_name=cluster,
                addon_name=versions.NODE_MONITORING_AGENT_ADDON,
                addon_version=versions.eks_addons(args.kubernetes_version)[versions.NODE_MONITORING_AGENT_ADDON],
                configuration_values=node_health.agent_configuration_json(),
                resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE",
                # After the node groups the component waits for (stated again here: a parent's
                # dependsOn is not its children's), so the dcgm-server has GPU nodes to run on.
                opts=pulumi.ResourceOptions(parent=self, depends_on=outer))
        self.register_outputs({})
