"""Where GPU pods run: the GPU node group's selector and taint, one pod per node, co-location by network topology.
"""

from __future__ import annotations


import pulumi_kubernetes as k8s

from components.stack.labels import GPU_TAINT_KEY, ROLE_LABEL
from components.workloads.runs import selector_labels

GPU_NODE_SELECTOR = dict(ROLE_LABEL)


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
    return k8s.core.v1.AffinityArgs(pod_anti_affinity=one_pod_per_node(run),
                                    pod_affinity=co_locate(run) if co_located else None)
