"""Elastic mode's Kubernetes side: the NodePool and NodeOverlay builders, Kueue's quota and topology,
the do-not-disrupt annotation on the GPU pods, and the simulated cluster's kwok instance type
(components/k8s/karpenter_nodes.py, components/k8s/kueue.py, cluster/karpenter.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from support import objects, rendered
from test_config import load
from test_kueue_support import variant

from cluster import karpenter as sim_karpenter
from cluster.binaries import toolset
from components.k8s import karpenter_nodes, kueue
from components.stack import elastic
from components.stack.labels import GPU_TAINT_KEY, ROLE_LABEL

ON = {"enabled": True, "maxNodes": 3, "idleMinutes": 15}
KWOK = sim_karpenter.NODE_CLASS


def p5(**e):
    return load(overrides={"gpuNodes": {"instanceType": "p5.48xlarge", "count": 2, "elastic": {**ON, **e}}})


def test_node_pool_is_the_gpu_group_sized_by_the_maximum():
    cfg = p5()
    np = karpenter_nodes.gpu_node_pool(cfg, KWOK)
    spec = np["spec"]
    tmpl = spec["template"]
    assert np["apiVersion"] == "karpenter.sh/v1" and np["metadata"]["name"] == "rltrain-gpu"
    assert tmpl["metadata"]["labels"] == {**ROLE_LABEL, "rltrain/instance-type": "p5.48xlarge", "nvidia.com/gpu.present": "true"}
    assert tmpl["spec"]["taints"] == [{"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    assert tmpl["spec"]["nodeClassRef"] == KWOK
    assert tmpl["spec"]["expireAfter"] == "Never"
    req = {r["key"]: r["values"] for r in tmpl["spec"]["requirements"]}
    assert req == {"node.kubernetes.io/instance-type": ["p5.48xlarge"],
                   "topology.kubernetes.io/zone": [cfg.network.gpu_az], "karpenter.sh/capacity-type": ["on-demand"]}
    assert spec["limits"] == {"nodes": "3", "nvidia.com/gpu": "24"}
    assert spec["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "15m",
                                  "budgets": [{"nodes": "1"}]}


def test_a_reservation_is_reserved_capacity():
    cfg = load(overrides={"gpuNodes": {"instanceType": "p5.48xlarge", "count": 2, "elastic": ON,
                                       "capacity": {"type": "odcr", "reservationId": "cr-0123456789abcdef0"}}})
    req = {r["key"]: r["values"] for r in karpenter_nodes.gpu_node_pool(cfg, KWOK)["spec"]["template"]["spec"]["requirements"]}
    assert req["karpenter.sh/capacity-type"] == ["reserved"]


def test_overlay_adds_the_huge_pages_the_runs_request():
    cfg = p5()
    ov = karpenter_nodes.gpu_node_overlay(cfg)
    mib = cfg.gpu_nodes.instance.allocatable(efa=True).hugepages_2mi_mib
    assert mib > 0
    assert ov["apiVersion"] == "karpenter.sh/v1alpha1" and ov["kind"] == "NodeOverlay"
    assert ov["spec"]["capacity"] == {"hugepages-2Mi": f"{mib}Mi"}
    assert {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["rltrain-gpu"]} in ov["spec"]["requirements"]
    # What a run's pod requests fits in what the overlay gives one node.
    pods = [t for t in objects(rendered("p5"), "Job") if t["metadata"]["name"] == "rltrain-multinode"]
    asked = pods[0]["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["hugepages-2Mi"]
    assert asked.endswith("Gi") and int(asked[:-2]) * 1024 <= mib


def test_kueue_quota_is_the_maximum_and_topology_is_off():
    fixed, on = load(overrides={"gpuNodes": {"instanceType": "p5.48xlarge", "count": 2}}), p5()
    assert kueue.nominal_quota(on)["nvidia.com/gpu"] == "24"
    assert kueue.nominal_quota(fixed)["nvidia.com/gpu"] == "16"
    assert kueue.topology_name(fixed) is not None and kueue.topology_name(on) is None
    assert kueue.podset_topology(on) == {}


def test_elastic_render_annotates_every_gpu_pod_and_queues_on_the_maximum():
    r = variant("sim", {"rltrain:gpuNodes": {"count": 2, "elastic": {"enabled": True, "maxNodes": 4,
                                                                     "existingKarpenter": True}}})
    gpu_templates = []
    for kind in ("Job", "MPIJob"):
        for o in objects(r, kind):
            tmpls = ([o["spec"]["template"]] if kind == "Job"
                     else [s["template"] for s in o["spec"]["mpiReplicaSpecs"].values()])
            for t in tmpls:
                if "nvidia.com/gpu" in str(t["spec"]["containers"][0].get("resources")):
                    gpu_templates.append((o["metadata"]["name"], t))
    assert len(gpu_templates) >= 3
    for name, t in gpu_templates:
        assert t["metadata"]["annotations"].get("karpenter.sh/do-not-disrupt") == "true", name
    cq = [o for o in objects(r, "ClusterQueue")][0]
    quota = {x["name"]: x["nominalQuota"] for x in cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    assert quota["nvidia.com/gpu"] == "32"
    assert not objects(r, "Topology")
    # Fixed stacks are untouched.
    assert "karpenter.sh/do-not-disrupt" not in str(rendered("sim").manifests)


def test_sim_instance_type_is_the_catalog_type_without_huge_pages():
    cfg = p5()
    (it,) = sim_karpenter.instance_types(cfg)
    alloc = cfg.gpu_nodes.instance.allocatable(efa=True)
    assert it["name"] == "p5.48xlarge"
    assert it["resources"]["nvidia.com/gpu"] == "8" and it["resources"]["vpc.amazonaws.com/efa"] == "32"
    assert "hugepages-2Mi" not in it["resources"]  # as the AWS provider computes it: the overlay adds them
    assert it["resources"]["cpu"] == f"{alloc.cpu_milli + 100}m"
    assert it["offerings"][0]["Requirements"][1]["values"] == [cfg.network.gpu_az]
    assert it["offerings"][0]["Price"] == cfg.gpu_nodes.instance.price.usd_per_hour


def _crd_schema(directory: Path, name: str) -> dict:
    doc = yaml.safe_load((directory / name).read_text())
    return next(v for v in doc["spec"]["versions"] if v.get("storage"))["schema"]["openAPIV3Schema"]


def _module(name: str) -> Path:
    tools = toolset()
    if name not in tools.modules:
        if os.environ.get("CI") == "1":
            pytest.fail(f"the {name} module tree is missing: cluster/build.sh downloads it")
        pytest.skip(f"the {name} module tree (Go module cache) is not here: run cluster/build.sh")
    return tools.modules[name]


def test_node_pool_overlay_and_kwok_class_validate_against_the_pinned_crds():
    jsonschema = pytest.importorskip("jsonschema")
    crds = _module("karpenter") / "pkg" / "apis" / "crds"
    kwok = _module("karpenter") / "kwok" / "apis" / "crds"
    docs = sim_karpenter.objects(p5(), boot_seconds=20)
    schemas = {"NodePool": _crd_schema(crds, "karpenter.sh_nodepools.yaml"),
               "NodeOverlay": _crd_schema(crds, "karpenter.sh_nodeoverlays.yaml"),
               "KWOKNodeClass": _crd_schema(kwok, "karpenter.kwok.sh_kwoknodeclasses.yaml")}
    assert sorted(d["kind"] for d in docs) == sorted(schemas)
    for d in docs:
        jsonschema.validate(d, schemas[d["kind"]])
    bad = karpenter_nodes.gpu_node_pool(p5(), KWOK)
    bad["spec"]["disruption"]["consolidationPolicy"] = "Sometimes"
    with pytest.raises(jsonschema.ValidationError, match="Sometimes"):
        jsonschema.validate(bad, schemas["NodePool"])


def test_fixed_mode_has_no_annotation():
    assert elastic.pod_annotations(load().gpu_nodes.elastic) == {}
