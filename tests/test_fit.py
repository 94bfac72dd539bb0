"""components/stack/fit.py: the one first-fit placement serving, the schedule rule and the replicas
check share (plain pytest: pure functions)."""

from __future__ import annotations

from test_config import load, problems

from components.stack import fit
from components.stack.labels import GPU


def nodes(*gpus: float) -> list[dict[str, float]]:
    return [{GPU: g, "cpu": 100.0} for g in gpus]


def test_each_pod_goes_to_the_first_node_with_room_and_its_requests_are_taken_out():
    free = nodes(8, 8)
    assert fit.first_fit({GPU: 3, "cpu": 10}, 3, free) == [0, 0, 1]
    assert free == [{GPU: 2, "cpu": 80}, {GPU: 5, "cpu": 90}]


def test_one_per_node_skips_the_nodes_taken_and_the_ones_its_own_pods_took():
    assert fit.first_fit({GPU: 1}, 2, nodes(8, 8, 8), one_per_node=True, taken={0}) == [1, 2]
    # Without one per node, `taken` does not keep a pod off a node.
    assert fit.first_fit({GPU: 1}, 2, nodes(8, 8, 8), taken={0}) == [0, 0]


def test_it_stops_at_the_first_pod_that_does_not_fit():
    free = nodes(4, 2)
    assert fit.first_fit({GPU: 3}, 2, free) == [0]  # fewer nodes than pods: not whole
    assert free[0][GPU] == 1 and free[1][GPU] == 2
    # A request of a resource no node has never fits; a zero request always does.
    assert fit.first_fit({"vpc.amazonaws.com/efa": 1}, 1, nodes(8)) == []
    assert fit.first_fit({"vpc.amazonaws.com/efa": 0, GPU: 8}, 1, nodes(8)) == [0]
    assert fit.fits({GPU: 8.0 + fit.EPS / 2}, {GPU: 8.0})


def _serving(replicas: int, gpus: int, count: int = 3, instance: str = "p5.48xlarge") -> dict:
    return {"gpuNodes": {"instanceType": instance, "count": count},
            "workloads": {"image": "repo/rl:1.0", "validation": {"enabled": False},
                          "serving": {"enabled": True, "replicas": replicas, "gpusPerReplica": gpus,
                                      "model": {"path": "/fsx/models/m"}}}}


def test_serving_replicas_pack_beside_the_nodes_a_run_holds_whole():
    # p5.48xlarge: 8 GPUs a node.
    free, placed = fit.serving_replicas(load(_serving(replicas=3, gpus=4)), whole_nodes_held=1)
    assert placed == [1, 1, 2] and [n[GPU] for n in free] == [0, 0, 4]
    # More than half a node: one replica per node.
    cfg = load(_serving(replicas=2, gpus=8))
    assert fit.one_replica_per_node(cfg)
    free, placed = fit.serving_replicas(cfg, whole_nodes_held=1)
    assert placed == [1, 2] and [n[GPU] for n in free] == [0, 0, 0]


def test_the_replicas_check_counts_what_first_fit_places():
    found = problems(overrides=_serving(replicas=7, gpus=4))
    assert found["rltrain:workloads.serving.replicas"] == (
        "7 replicas of 4 GPU(s) need more than the 3 GPU node(s) hold (2 per node)")
    assert load(_serving(replicas=6, gpus=4)).workloads.serving.replicas == 6
    # A replica larger than a node is said once, by gpusPerReplica (g6.12xlarge: 4 GPUs).
    found = problems(overrides=_serving(replicas=1, gpus=8, instance="g6.12xlarge"))
    assert "rltrain:workloads.serving.gpusPerReplica" in found and "rltrain:workloads.serving.replicas" not in found
