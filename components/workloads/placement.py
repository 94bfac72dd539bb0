"""Where GPU pods run: the GPU node group's label and taint, one pod per node, co-location by network topology.

The GPU node group is required through node affinity, never through `nodeSelector`: Kueue owns a
queued run's `nodeSelector`. On admission it merges the ResourceFlavor's nodeLabels into every pod
set's template and writes the object back, and on eviction it restores the original (Kueue v0.19.2
pkg/podset/podset.go `Merge`, `RestorePodSpec`; pkg/controller/jobframework/reconciler.go
`startJob`). `PodSpec.nodeSelector` is an atomic map (k8s.io/api core/v1 types.go
`+mapType=atomic`), so that write makes the `kueue` field manager the owner of the whole map, and
the next server-side apply of a template that sets it conflicts (seen on the simulated cluster:
`conflict with "kueue" using batch/v1: .spec.template.spec.nodeSelector`). Kueue never writes
`affinity`, so the program's requirement and the queue's selector live side by side; the
scheduler needs both to hold. The tolerations stay in the template: they equal the flavor's
(components/k8s/kueue.py), and Kueue's merge adds only tolerations a template lacks, so the list it
writes back is unchanged and stays the program's.
"""

from __future__ import annotations

from typing import Optional

import pulumi_kubernetes as k8s

from components.k8s import cpu_nodes
from components.stack.config import StackConfig
from components.stack.labels import GPU_TAINT_KEY, ROLE_LABEL
from components.workloads.runs import selector_labels

GPU_NODE_SELECTOR = dict(ROLE_LABEL)


def gpu_node_affinity() -> k8s.core.v1.NodeAffinityArgs:
    """Required: a node of the GPU node group (its role label), the same as a nodeSelector on it."""
    return k8s.core.v1.NodeAffinityArgs(
        required_during_scheduling_ignored_during_execution=k8s.core.v1.NodeSelectorArgs(node_selector_terms=[
            k8s.core.v1.NodeSelectorTermArgs(match_expressions=[
                k8s.core.v1.NodeSelectorRequirementArgs(key=key, operator="In", values=[value])
                for key, value in sorted(GPU_NODE_SELECTOR.items())])]))


def gpu_affinity(*, pod_affinity: k8s.core.v1.PodAffinityArgs | None = None,
                 pod_anti_affinity: k8s.core.v1.PodAntiAffinityArgs | None = None) -> k8s.core.v1.AffinityArgs:
    """The GPU node requirement plus a pod's own (anti-)affinity: what every GPU pod template sets."""
    return k8s.core.v1.AffinityArgs(node_affinity=gpu_node_affinity(), pod_affinity=pod_affinity,
                                    pod_anti_affinity=pod_anti_affinity)


def gpu_tolerations() -> list[k8s.core.v1.TolerationArgs]:
    return [k8s.core.v1.TolerationArgs(key=GPU_TAINT_KEY, operator="Exists", effect="NoSchedule")]


def one_pod_per_node(run: str) -> k8s.core.v1.PodAntiAffinityArgs:
    return k8s.core.v1.PodAntiAffinityArgs(required_during_scheduling_ignored_during_execution=[
        k8s.core.v1.PodAffinityTermArgs(
            topology_key="kubernetes.io/hostname",
            label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector_labels(run)),
        )
    ])

# EC2 instance topology labels: layer 3 is the switch closest to the instance.
TOPOLOGY_WEIGHTS = (("topology.k8s.aws/network-node-layer-3", 100), ("topology.k8s.aws/network-node-layer-2", 50))


def co_locate(run: str) -> k8s.core.v1.PodAffinityArgs:
    """Prefer the switch the run's other pods are on (affinity, not spread: D8).

    Preferred, not required: a node group without the labels, or a run larger than one switch,
    still schedules.
    """
    return k8s.core.v1.PodAffinityArgs(preferred_during_scheduling_ignored_during_execution=[
        k8s.core.v1.WeightedPodAffinityTermArgs(weight=weight, pod_affinity_term=k8s.core.v1.PodAffinityTermArgs(
            topology_key=key,
            label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector_labels(run)),
        ))
        for key, weight in TOPOLOGY_WEIGHTS
    ])


def run_affinity(run: str, *, co_located: bool = True) -> k8s.core.v1.AffinityArgs:
    return gpu_affinity(pod_anti_affinity=one_pod_per_node(run), pod_affinity=co_locate(run) if co_located else None)


def cpu_helper_placement(cfg: StackConfig) -> tuple[Optional[list[k8s.core.v1.TolerationArgs]],
                                                    Optional[k8s.core.v1.AffinityArgs]]:
    """(tolerations, affinity) of a CPU-only pod that runs the training image on /fsx (the staging
    Job). A fixed stack: the GPU nodes, which exist whatever runs, and the image it pulls there is
    the one training runs next. An elastic stack the program creates: its CPU NodePool
    (components/k8s/cpu_nodes.py), never a GPU launch outside the queue (issue 44 item 2). An
    elastic bring-your-own cluster: no requirement, the cluster's own untainted nodes."""
    if not cfg.gpu_nodes.elastic.enabled:
        return gpu_tolerations(), gpu_affinity()
    if not cpu_nodes.used(cfg):
        return None, None
    terms = cpu_nodes.node_affinity_terms()
    return ([k8s.core.v1.TolerationArgs(**t) for t in cpu_nodes.tolerations()],
            k8s.core.v1.AffinityArgs(node_affinity=k8s.core.v1.NodeAffinityArgs(
                required_during_scheduling_ignored_during_execution=k8s.core.v1.NodeSelectorArgs(node_selector_terms=[
                    k8s.core.v1.NodeSelectorTermArgs(match_expressions=[
                        k8s.core.v1.NodeSelectorRequirementArgs(**e) for e in term["matchExpressions"]])
                    for term in terms]))))
