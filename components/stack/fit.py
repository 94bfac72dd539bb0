"""Does it fit on the GPU nodes: one first-fit placement of pods onto nodes, pure.

`first_fit` puts pods one after another on the first node with room for each (every request at
most what the node has free), the rule the render's schedule follows for every pod set
(components/offline/schedule.py, which adds what only it knows: order over time, the queue's quota)
and the one serving's replicas are placed by: `serving_replicas` for the rollout choice
(components/workloads/serving.py: does a surge replica fit beside what runs) and for the
`workloads.serving.replicas` check (components/stack/validate.py). The scheduler itself scores
nodes rather than taking the first one; serving's pod affinity packs replicas the same way
(serving.affinity), and the simulated cluster's real scheduler proves the rest.
"""

from __future__ import annotations

from typing import Iterable, Mapping

from components.stack.config import StackConfig
from components.stack.labels import GPU

# Requests and free room are floats (cores, bytes, devices): equal within this is equal.
EPS = 1e-9


def fits(requests: Mapping[str, float], free: Mapping[str, float]) -> bool:
    """Every positive request is at most what `free` has of it."""
    return all(v <= free.get(r, 0.0) + EPS for r, v in requests.items() if v > 0)


def first_fit(requests: Mapping[str, float], count: int, free: list[dict[str, float]], *,
              one_per_node: bool = False, taken: Iterable[int] = ()) -> list[int]:
    """The nodes `count` pods asking `requests` go to, in turn, each on the first node of `free`
    with room for it; with `one_per_node`, never on a node in `taken` nor on one another of these
    pods took. Each pod's requests are taken out of `free` (which changes). Stops at the first pod
    that does not fit: fewer than `count` nodes back means the pods do not fit whole."""
    blocked = set(taken)
    nodes: list[int] = []
    for _ in range(count):
        node = next((i for i, room in enumerate(free)
                     if not (one_per_node and i in blocked) and fits(requests, room)), None)
        if node is None:
            break
        blocked.add(node)
        nodes.append(node)
        for r, v in requests.items():
            free[node][r] = free[node].get(r, 0.0) - v
    return nodes


# --- serving's replicas --------------------------------------------------------------------------


def one_replica_per_node(cfg: StackConfig) -> bool:
    """A node holds one serving replica only (more GPUs than half a node)."""
    return 2 * cfg.workloads.serving.gpus_per_replica > cfg.gpu_nodes.instance.gpu_count


def serving_replicas(cfg: StackConfig, whole_nodes_held: int = 0) -> tuple[list[dict[str, float]], list[int]]:
    """(GPUs free per node, the node of each replica placed) with the first `whole_nodes_held` GPU
    nodes taken whole (a training run) and the replicas placed first fit on the rest; fewer nodes
    than `workloads.serving.replicas` when they do not all fit. GPUs only: the GPU is what a replica
    takes a share of a node by."""
    sv, it = cfg.workloads.serving, cfg.gpu_nodes.instance
    free = [{GPU: float(0 if i < whole_nodes_held else it.gpu_count)} for i in range(cfg.gpu_nodes.count)]
    placed = first_fit({GPU: float(sv.gpus_per_replica)}, sv.replicas, free, one_per_node=one_replica_per_node(cfg))
    return free, placed
