"""The KubeRay operator: the controller that runs the RayJob form of multi-node training.

Installed by the stack when `workloads.multiNode.form` is `rayjob` and the cluster-wide rule says so
(`workloads.multiNode.installKubeRay`; StackConfig.kuberay_operator: on a created cluster, opt-in on
a bring-your-own one, where the cluster's owners may already run KubeRay). It is the chart
`kuberay-operator` 1.6.2 (versions.KUBERAY_OPERATOR) as a `helm.v3.Release` in its own namespace,
with the chart's defaults: the ray.io/v1 CRDs (the chart's crds/), cluster roles, and one operator
pod on the system nodes (it tolerates no taint, so never a GPU node) watching every namespace.

The operator reaches each Ray head's dashboard (port 8265) over HTTP, in every submission mode: it
submits the job there in HTTPMode and polls the job's status there in all modes (ray-project/kuberay
v1.6.2 ray-operator/controllers/ray/rayjob_controller.go:300-316, GetJobInfo and SubmitJob; the
client is built in controllers/ray/utils/util.go:974-1000 and sends the cluster's auth token). The
run's NetworkPolicy admits exactly that flow: pods labelled like the chart's operator pod, from the
namespace the stack installs it in (or, when the cluster's own KubeRay is used, from any namespace).
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.stack import versions
from components.k8s.options import child_opts

RELEASE = "kuberay-operator"
# The operator pod's labels (chart templates/deployment.yaml: app.kubernetes.io/name is the chart
# name, nameOverride kuberay-operator in values.yaml; app.kubernetes.io/instance the release name).
OPERATOR_POD_LABELS = {"app.kubernetes.io/name": "kuberay-operator"}
# The head's dashboard port (KubeRay utils/constant.go DefaultDashboardPort): the Jobs API.
DASHBOARD_PORT = 8265


def release_values() -> dict:
    """The chart's defaults, written out where the RayJob form depends on them."""
    return {
        # Inject the wait-gcs-ready init container into worker pods (the chart's default): a worker
        # starts Ray only once the head's GCS answers (controllers/ray/common/pod.go:360-416).
        "env": [{"name": "ENABLE_INIT_CONTAINER_INJECTION", "value": "true"}],
        # Kueue, not KubeRay's batch-scheduler plugins, admits the RayJob (it suspends and resumes it).
        "batchScheduler": {"enabled": False},
    }


def operator_release(name: str, parent: pulumi.Resource,
                     opts: Optional[pulumi.ResourceOptions]) -> k8s.helm.v3.Release:
    """The operator, awaited (skip_await=False): a RayJob created before its CRD and controller
    exist is refused, or never reconciled."""
    return k8s.helm.v3.Release(
        name, name=RELEASE, chart=versions.KUBERAY_OPERATOR.chart, version=versions.KUBERAY_OPERATOR.version,
        namespace=versions.KUBERAY_NAMESPACE, create_namespace=True,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=versions.KUBERAY_OPERATOR.repo),
        values=release_values(), skip_await=False, timeout=600, opts=child_opts(parent, opts))


def operator_peer(installed: bool) -> k8s.networking.v1.NetworkPolicyPeerArgs:
    """The operator's pods as a NetworkPolicy peer: in the stack's KubeRay namespace when the stack
    installs it, otherwise in whichever namespace the cluster's owners installed the chart."""
    return k8s.networking.v1.NetworkPolicyPeerArgs(
        namespace_selector=k8s.meta.v1.LabelSelectorArgs(
            match_labels={"kubernetes.io/metadata.name": versions.KUBERAY_NAMESPACE} if installed else None),
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(OPERATOR_POD_LABELS)),
    )
