"""The simulated cluster's nodes and volume (cluster/nodes.py): derived from the catalog and the
stack, and matching what the rendered `sim` stack selects, tolerates, requests and claims.
Plain and fast: no cluster is started."""

from __future__ import annotations

import pytest
import yaml

from cluster import nodes
from cluster.stacks import stack_config
from components.offline.render import ROOT
from components.stack import catalog
from components.stack.labels import GPU_TAINT_KEY

SIM = ROOT / "rendered" / "sim" / "manifests.yaml"


@pytest.fixture(scope="module")
def p5():
    return stack_config("p5")[0]


@pytest.fixture(scope="module")
def sim():
    return stack_config("sim")[0]


@pytest.fixture(scope="module")
def rendered_sim() -> list[dict]:
    return [d for d in yaml.safe_load_all(SIM.read_text()) if d]


def _gpu_nodes(cfg):
    return [n for n in nodes.nodes(cfg, stack="p5") if n["metadata"]["labels"].get("role") == "gpu-training"]


def _pod_specs(docs):
    """(kind/name, pod spec) of every pod template in the render."""
    for d in docs:
        spec = d.get("spec") or {}
        if d["kind"] == "Job":
            yield f"Job/{d['metadata']['name']}", spec["template"]["spec"]
        elif d["kind"] == "MPIJob":
            for role, rs in spec["mpiReplicaSpecs"].items():
                yield f"MPIJob/{d['metadata']['name']}/{role}", rs["template"]["spec"]


def test_sim_stack_copies_the_p5_gpu_node_group(p5, sim):
    # The pods of `sim` are sized for the nodes the starter makes from `p5`.
    assert sim.gpu_nodes.model_dump() == p5.gpu_nodes.model_dump()
    assert sim.byo_cluster and not sim.kueue_install and sim.kueue_enabled


def test_gpu_nodes_are_shaped_by_the_catalog(p5):
    it = catalog.get("p5.48xlarge")
    alloc = it.allocatable(efa=True)
    gpu = _gpu_nodes(p5)
    assert [n["metadata"]["name"] for n in gpu] == ["gpu-p5-48xlarge-0", "gpu-p5-48xlarge-1"]
    for n in gpu:
        a, c = n["status"]["allocatable"], n["status"]["capacity"]
        assert a["cpu"] == "191450m" == f"{alloc.cpu_milli}m"
        assert c["cpu"] == "192000m"
        assert a["memory"] == f"{alloc.memory_mib_conservative}Mi"
        assert a["nvidia.com/gpu"] == c["nvidia.com/gpu"] == "8"
        assert a["vpc.amazonaws.com/efa"] == "32"
        assert a["hugepages-2Mi"] == "10256Mi" == f"{catalog.EFA_HUGEPAGES_2MI * 2}Mi"
        assert a["pods"] == "100"
        assert n["spec"]["taints"] == [{"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
        assert n["metadata"]["annotations"] == {"kwok.x-k8s.io/node": "fake"}
        labels = n["metadata"]["labels"]
        assert labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"
        assert labels["kubernetes.io/hostname"] == n["metadata"]["name"]
        assert labels["topology.kubernetes.io/zone"] == "us-east-1a"
    # One switch for both nodes, on every layer.
    layers = [{k: v for k, v in n["metadata"]["labels"].items() if k.startswith("topology.k8s.aws/")} for n in gpu]
    assert len(layers[0]) == 3 and layers[0] == layers[1]


def test_no_efa_no_huge_pages():
    cfg = stack_config("dev")[0]
    for n in nodes.nodes(cfg, stack="dev"):
        if n["metadata"]["labels"]["role"] == "gpu-training" and not cfg.gpu_nodes.efa_enabled:
            assert "vpc.amazonaws.com/efa" not in n["status"]["allocatable"]
            assert "hugepages-2Mi" not in n["status"]["allocatable"]


def test_system_nodes_have_no_taint(p5):
    system = [n for n in nodes.nodes(p5) if n["metadata"]["labels"]["role"] == "system"]
    assert len(system) == p5.cluster.system_nodes.count == 2
    assert all("taints" not in n["spec"] for n in system)
    assert system[0]["status"]["allocatable"]["cpu"] == f"{4000 - catalog.kube_reserved_cpu_milli(4)}m"


def _q(v: str) -> float:
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for u in sorted(units, key=len, reverse=True):
        if v.endswith(u):
            return float(v[:-len(u)]) * units[u]
    return float(v)


def test_every_rendered_pod_selects_tolerates_and_fits_a_node(p5, rendered_sim):
    all_nodes = nodes.nodes(p5, stack="p5")
    specs = list(_pod_specs(rendered_sim))
    assert {s for s, _ in specs} >= {"Job/rltrain-validation", "Job/rltrain-training", "Job/rltrain-multinode",
                                     "MPIJob/rltrain-nccl-test/Launcher", "MPIJob/rltrain-nccl-test/Worker"}
    for what, spec in specs:
        selector = spec.get("nodeSelector") or {}
        tolerated = {t["key"] for t in spec.get("tolerations") or []}
        fits = []
        for n in all_nodes:
            if any(n["metadata"]["labels"].get(k) != v for k, v in selector.items()):
                continue
            if any(t["key"] not in tolerated for t in n["spec"].get("taints", [])):
                continue
            req: dict[str, float] = {}
            for c in spec["containers"]:
                for r, v in ((c.get("resources") or {}).get("requests") or {}).items():
                    req[r] = req.get(r, 0) + _q(str(v))
            alloc = n["status"]["allocatable"]
            if all(r in alloc and _q(alloc[r]) >= v for r, v in req.items()):
                fits.append(n["metadata"]["name"])
        assert fits, f"{what}: no simulated node selects, tolerates and fits it"
        if "GPU" in what or selector:
            assert all(f.startswith("gpu-") for f in fits), what


def test_the_resource_flavor_and_topology_match_the_gpu_nodes(p5, rendered_sim):
    gpu = _gpu_nodes(p5)
    flavor = next(d for d in rendered_sim if d["kind"] == "ResourceFlavor")
    topology = next(d for d in rendered_sim if d["kind"] == "Topology")
    for n in gpu:
        labels = n["metadata"]["labels"]
        assert flavor["spec"]["nodeLabels"].items() <= labels.items()
        assert all(level["nodeLabel"] in labels for level in topology["spec"]["levels"])


def test_the_volume_binds_the_claim_of_the_sim_stack(sim, rendered_sim):
    claim = next(d for d in rendered_sim if d["kind"] == "PersistentVolumeClaim")
    sc, pv = nodes.storage(sim)
    assert sc["metadata"]["name"] == claim["spec"]["storageClassName"] == pv["spec"]["storageClassName"]
    assert pv["spec"]["claimRef"] == {"namespace": claim["metadata"]["namespace"], "name": claim["metadata"]["name"]}
    assert _q(pv["spec"]["capacity"]["storage"]) >= _q(claim["spec"]["resources"]["requests"]["storage"])
    assert set(claim["spec"]["accessModes"]) <= set(pv["spec"]["accessModes"])
    assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
