"""ClusterAddons: device plugins and the FSx CSI driver, versions pinned in `versions.py`.

Helm releases register their chart, version, repository and values, so all of it is reviewable in
the render. Workloads depend on this component, so `pulumi up` creates the plugins first.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict

from components.aws import iam

from components.stack import versions
from components.stack.labels import GPU_TAINT_KEY, ROLE_LABEL

GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
FSX_POLICY = "arn:aws:iam::aws:policy/AmazonFSxFullAccess"


class ClusterAddonsArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    instance_type: str
    efa: bool
    # None for a bring-your-own cluster: no AWS resources (the CSI driver is then the cluster's).
    cluster_name: Optional[str] = None


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
    def __init__(self, name: str, args: ClusterAddonsArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:index:ClusterAddons", name, None, opts)
        self.nvidia = _release("nvidia-device-plugin", versions.NVIDIA_DEVICE_PLUGIN, nvidia_plugin_values(args), self)
        self.efa = None
        if args.efa:
            if not efa_plugin_knows(args.instance_type):
                raise ValueError(f"EFA device plugin {versions.EFA_DEVICE_PLUGIN.version} does not list "
                                 f"{args.instance_type}; pin a release that does (components/stack/versions.py)")
            self.efa = _release("aws-efa-k8s-device-plugin", versions.EFA_DEVICE_PLUGIN, efa_plugin_values(args), self)
        self.fsx_csi = None
        if args.cluster_name:
            role = iam.pod_identity_role(f"{name}-fsx-csi-role", [FSX_POLICY], self)
            self.fsx_csi = aws.eks.Addon(
                f"{name}-fsx-csi", cluster_name=args.cluster_name, addon_name=versions.FSX_CSI_ADDON,
                pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(
                    role_arn=role.arn, service_account=versions.FSX_CSI_SERVICE_ACCOUNT)],
                # The node DaemonSet must run on the tainted GPU nodes; the add-on's defaults
                # tolerate all taints. No configuration_values: a key the add-on schema does not
                # know would fail only at `pulumi up`.
                opts=pulumi.ResourceOptions(parent=self))
        self.register_outputs({})
