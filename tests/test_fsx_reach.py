"""Every pod that mounts FSx can reach it (issue 44 item 1 and "the class, not only the instances").

The deploy model derives the Lustre flows from the render itself: for every pod template that
mounts a claim bound to the FSx volume, the node groups (and Karpenter NodePools) it can land on by
its node selector, required node affinity and tolerations, and so the security groups that must
admit Lustre both ways. Likewise every Service a pod calls, between the groups of its clients and
its backends. The simulated cluster has no security groups: this is where it is checked.
"""

from __future__ import annotations

import copy

import pytest
from support import rendered

from components.offline import deploy_model as dm
from components.offline import policy, render
from components.offline.resources import Violation

LUSTRE = ("988-988", "1018-1023")


def record(stack: str = "p5") -> list[dict]:
    return copy.deepcopy(rendered(stack).resources)


def flows(rows) -> dict[str, dm.FlowResult]:
    return {r.flow.name: r for r in dm.evaluate_flows(rows)}


def violations(rows) -> list[Violation]:
    return list(policy.evaluate(rows, rules=["network-flows"]))


def test_the_retention_cronjob_on_the_system_nodes_reaches_fsx():
    """Item 1: the retention CronJob (no GPU placement: the system nodes) mounts the claim, and FSx
    admitted Lustre from the GPU nodes' group only: its mount hung, checkpoints were never pruned."""
    clients = dm.fsx_clients(record())
    # ... and the curves (TensorBoard) Deployment, which reads every run's event files from the volume.
    assert clients[("system nodes", "cluster-system")] == ["CronJob/rltrain-checkpoint-retention",
                                                          "Deployment/rltrain-curves"]
    assert set(clients[("GPU nodes", "gpu-nodes")]) == {"Job/rltrain-training", "Job/rltrain-multinode",
                                                        "Job/rltrain-staging", "Job/rltrain-validation"}
    found = flows(record())
    for ports in LUSTRE:
        for name in (f"system nodes -> FSx Lustre {ports}", f"FSx -> system nodes Lustre {ports}"):
            assert found[name].ok, found[name].via
    assert "storage-lustre-988-cluster" in found["system nodes -> FSx Lustre 988-988"].via
    assert "storage-lustre-988-to-cluster" in found["FSx -> system nodes Lustre 988-988"].via


@pytest.mark.parametrize("rule", ["storage-lustre-988-cluster", "storage-lustre-988-to-cluster"])
def test_a_record_without_the_new_rule_is_refused_naming_the_pod(rule):
    """Mutant: the rule that admits the system nodes (or the one that lets FSx call them back)
    dropped: the render refuses, naming the flow and the pod behind it."""
    rows = [r for r in record() if r["name"] != rule]
    vs = violations(rows)
    assert [v.resource for v in vs] == [("flow system nodes -> FSx Lustre 988-988" if rule.endswith("-cluster")
                                         and "-to-" not in rule else "flow FSx -> system nodes Lustre 988-988")]
    assert ("CronJob/rltrain-checkpoint-retention, Deployment/rltrain-curves mount FSx and can land on system "
            "nodes (cluster-system)") in vs[0].message


def test_helpers_on_the_system_nodes_of_every_created_stack_reach_fsx():
    """dev-reasoning's evaluation CronJob and eval-metrics Deployment too (no GPU placement)."""
    clients = dm.fsx_clients(record("dev-reasoning"))
    assert set(clients[("system nodes", "cluster-system")]) == {
        "CronJob/rltrain-checkpoint-retention", "CronJob/rltrain-evaluation", "Deployment/rltrain-eval-metrics",
        "Deployment/rltrain-curves"}
    for stack in ("p5", "p4de", "dev", "dev-reasoning", "p5-elastic"):
        assert violations(record(stack)) == [], stack


def test_a_pod_moved_onto_the_gpu_nodes_needs_no_system_node_flow():
    """The flows follow where the pods can land: the retention and curves pods given the GPU placement
    leave the system nodes without an FSx client, and their Lustre flows are no longer required."""
    rows = record()
    job = next(r for r in rows if r["name"] == "workloads-single-node-job")["inputs"]["spec"]["template"]["spec"]
    cron = next(r for r in rows if r["inputs"].get("kind") == "CronJob")
    curves = next(r for r in rows if r["name"] == "workloads-curves-deployment")
    for spec in (cron["inputs"]["spec"]["jobTemplate"]["spec"]["template"]["spec"],
                 curves["inputs"]["spec"]["template"]["spec"]):
        spec["tolerations"], spec["affinity"] = job["tolerations"], {"nodeAffinity": job["affinity"]["nodeAffinity"]}
    clients = dm.fsx_clients(rows)
    assert ("system nodes", "cluster-system") not in clients
    assert "CronJob/rltrain-checkpoint-retention" in clients[("GPU nodes", "gpu-nodes")]
    assert not any(name.startswith("system nodes -> FSx") for name in flows(rows))


def _ep(labels=None, taints=()):
    """(labels, taints) of a node group; the Endpoint is built in the test (collection stays light)."""
    return ({"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64", **(labels or {})}, tuple(taints))


GPU_TAINT = ("nvidia.com/gpu", "true", "NoSchedule")


@pytest.mark.parametrize("spec,ep,lands", [
    ({}, _ep({"role": "system"}), True),
    ({}, _ep({"role": "gpu-training"}, [GPU_TAINT]), False),  # the taint keeps an untolerating pod off
    ({"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
     _ep({"role": "gpu-training"}, [GPU_TAINT]), True),
    ({"tolerations": [{"operator": "Exists"}]}, _ep({}, [GPU_TAINT]), True),  # tolerates everything
    ({"tolerations": [{"key": "nvidia.com/gpu", "value": "false", "effect": "NoSchedule"}]},
     _ep({}, [GPU_TAINT]), False),  # Equal with another value
    ({"nodeSelector": {"role": "system"}}, _ep({"role": "gpu-training"}), False),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "role", "operator": "In", "values": ["gpu-training"]}]},
        {"matchExpressions": [{"key": "role", "operator": "In", "values": ["system"]}]}]}}}},
     _ep({"role": "system"}), True),  # terms are ORed
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]}}}},
     _ep({"karpenter.sh/nodepool": "rltrain-cpu"}), False),
    ({"nodeSelector": {"kubernetes.io/os": "linux"}}, _ep(), True),  # what every node carries
])
def test_lands_on(spec, ep, lands):
    labels, taints = ep
    assert dm.lands_on(spec, dm.Endpoint("g", ["sg"], labels=labels, taints=taints)) is lands


def test_service_flows_follow_clients_and_backends():
    """dev-reasoning: the evaluation CronJob (system nodes) calls the vLLM Service, whose pods are on
    the GPU nodes: that flow is derived, on the Service's named target port resolved to 8000."""
    found = flows(record("dev-reasoning"))
    f = found["Service rltrain-serving: system nodes -> GPU nodes (tcp 8000)"]
    assert f.ok and f.flow.ports == (8000, 8000)
    assert "CronJob/rltrain-evaluation call Service rltrain-serving" in f.flow.why
    # p5: the multi-node run's headless Service, its own pods by name under it.
    assert flows(record())["Service rltrain-multinode-svc: GPU nodes -> GPU nodes (tcp 6379)"].ok


def test_elastic_stack_checks_its_nodepools_flows_too():
    """An elastic stack had no flow checked but the system nodes' (no managed GPU group): the
    NodePools' nodes are endpoints now, by their EC2NodeClass's security groups."""
    found = flows(record("p5-elastic"))
    assert found["GPU node <-> GPU node, all traffic (EFA, NCCL)"].ok
    assert found["GPU nodes -> FSx Lustre 988-988"].ok and found["system nodes -> FSx Lustre 988-988"].ok
    clients = dm.fsx_clients(record("p5-elastic"))
    assert ("GPU nodes", "NodePool rltrain-gpu") in clients


def test_render_prints_the_derived_flows_and_the_fsx_clients_by_node_group():
    text = render.summary(rendered("p5"))
    assert "ok  system nodes -> FSx Lustre 988-988" in text
    assert "FSx clients (pods mounting an FSx claim) by the node groups they can land on:" in text
    assert "system nodes (cluster-system): CronJob/rltrain-checkpoint-retention" in text
    assert ("GPU nodes (gpu-nodes): Job/rltrain-multinode, Job/rltrain-staging, Job/rltrain-training, "
            "Job/rltrain-validation") in text


def test_the_file_system_does_not_wait_for_the_cluster():
    """The new rules sit on (or reference) the group EKS creates with the cluster: the file system
    is not ordered after them, or its creation would wait for the cluster's and `destroy
    --exclude-protected` would keep the cluster (what a protected resource depends on is kept)."""
    rows = record()
    fs = next(r for r in rows if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem")
    assert not dm.Graph(rows).reaches(dm.ref(fs), {"eks:index:Cluster::cluster-eks"})
    _, kept = dm.destroy_plan(rows)
    assert "eks:index:Cluster::cluster-eks" not in kept
    assert not [r for r in rows if r["name"].endswith("-cluster") and dm.ref(r) in kept]
