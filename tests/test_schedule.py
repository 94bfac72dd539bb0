"""Scheduling in the render (components/offline/schedule.py): every enabled GPU workload placed whole
onto the node group in the queue's order; never-fitting runs refused with the resource named; an
unqueued stack that cannot run everything at once flagged."""

from __future__ import annotations

import copy

import pytest
from support import STACKS, rendered
from test_kueue_support import variant

from components.offline import policy, render, schedule
from components.stack import catalog

P5_ORDER = ["rltrain-validation", "rltrain-nccl-test", "rltrain-multinode", "rltrain-training"]


def outcomes(rows):
    s = schedule.simulate(rows)
    return [(o.workload.name, o.status, o.behind.name if o.behind else None) for o in s.outcomes]


def record(stack="p5"):
    return copy.deepcopy(rendered(stack).resources)


def row(rows, kind, name):
    [r] = [r for r in rows if r["inputs"].get("kind") == kind and r["inputs"]["metadata"]["name"] == name]
    return r


def trainer(r):
    return r["inputs"]["spec"]["template"]["spec"]["containers"][0]


# --- done when: the p5 order ---------------------------------------------------------------------


def test_p5_runs_validation_then_nccl_then_training_each_whole():
    assert outcomes(rendered("p5").resources) == [
        ("rltrain-validation", schedule.RUNS_NOW, None),
        ("rltrain-nccl-test", schedule.QUEUED, "rltrain-validation"),
        ("rltrain-multinode", schedule.QUEUED, "rltrain-nccl-test"),
        ("rltrain-training", schedule.QUEUED, "rltrain-multinode"),
    ]
    s = schedule.simulate(rendered("p5").resources)
    assert s.queued and not s.partial_admission
    assert s.queue.cluster_queue == "rltrain" and s.queue.strategy == "StrictFIFO"
    # Whole: the MPIJob is placed with its launcher (on a GPU node: Kueue adds the flavor's labels).
    nccl = s.outcome("rltrain-nccl-test").workload
    assert nccl.pods == 3 and all(ps.gpu_nodes for ps in nccl.pod_sets)


def test_p5_schedule_is_printed():
    text = render.summary(rendered("p5"))
    assert "schedule: whole workloads on 2 x p5.48xlarge" in text
    lines = [line.strip() for line in text.splitlines()]
    assert "1. Job/rltrain-validation    priority    1000200  2 pods: runs now" in lines
    assert "2. MPIJob/rltrain-nccl-test  priority    1000100  3 pods: queued behind Job/rltrain-validation" in lines
    # Equal priorities are listed by name (Kueue takes the older; one `up` creates both).
    assert "3. Job/rltrain-multinode     priority    1000000  2 pods: queued behind MPIJob/rltrain-nccl-test" in lines
    assert "4. Job/rltrain-training      priority    1000000  1 pod: queued behind Job/rltrain-multinode" in lines


def test_runs_created_together_are_flagged_where_priority_cannot_order_them():
    # p5: one `up` creates validation and the NCCL test together (no gate), so Kueue may admit the
    # NCCL test first (seen on the simulated cluster). Training waits for the staging Job, which the
    # provider awaits until done: by then validation's Workload is queued, priority orders them.
    s = schedule.simulate(rendered("p5").resources)
    assert s.races == {"Job/rltrain-validation": ("MPIJob/rltrain-nccl-test",)}
    assert ("created together with Job/rltrain-validation by one `up`: MPIJob/rltrain-nccl-test may be admitted "
            "first") in render.summary(rendered("p5"))
    # sim gates training on the checks, and the NCCL test on validation: one order, no race.
    assert schedule.simulate(rendered("sim").resources).races == {}


def test_swapping_two_priorities_swaps_the_order():
    r = variant("p5", {"rltrain:workloads": {"validation": {"enabled": True, "priority": 1000100},
                                             "ncclTest": {"enabled": True, "priority": 1000200}}})
    assert [name for name, _, _ in outcomes(r.resources)][:2] == ["rltrain-nccl-test", "rltrain-validation"]
    assert outcomes(r.resources)[1] == ("rltrain-validation", schedule.QUEUED, "rltrain-nccl-test")
    # Training first, when its class outranks the checks.
    r = variant("p5", {"rltrain:workloads": {"priority": 2000000}})
    assert [name for name, _, _ in outcomes(r.resources)] == [
        "rltrain-multinode", "rltrain-training", "rltrain-validation", "rltrain-nccl-test"]


def test_p5_without_kueue_is_flagged_partial_admission_possible():
    r = variant("p5", {"rltrain:kueue": {"enabled": False}})
    s = schedule.simulate(r.resources)
    assert not s.queued and s.partial_admission
    text = "\n".join(schedule.report(r.resources))
    assert "not queued (no Kueue)" in text and "PARTIAL ADMISSION POSSIBLE" in text
    assert "waits for Job/rltrain-validation, pod by pod" in text
    # A flag, not a refusal: the stack still renders.
    assert policy.evaluate(r.resources, rules=["schedule-fits"]) == []


def test_byo_is_flagged_and_a_stack_that_fits_at_once_is_not():
    assert schedule.simulate(rendered("byo").resources).partial_admission
    one = variant("byo", {"rltrain:workloads": {"validation": {"enabled": False}}})
    s = schedule.simulate(one.resources)
    assert [o.status for o in s.outcomes] == [schedule.RUNS_NOW] and not s.partial_admission
    assert "PARTIAL" not in "\n".join(schedule.report(one.resources))


@pytest.mark.parametrize("stack", STACKS)
def test_every_committed_shape_fits(stack):
    s = schedule.simulate(rendered(stack).resources)
    assert s is not None and s.outcomes
    assert all(o.status != schedule.NEVER for o in s.outcomes)


# --- done when: refusals name the workload and the resource -------------------------------------


def test_multi_node_run_wider_than_the_node_group_is_refused():
    rows = record()
    job = row(rows, "Job", "rltrain-multinode")["inputs"]["spec"]
    job["parallelism"] = job["completions"] = 3
    [v] = policy.evaluate(rows, rules=["schedule-fits"])
    assert v.resource == "Job/rltrain-multinode" and v.pulumi_name == "workloads-multi-node-job"
    assert "never fits (nodes)" in v.message and "3 pods, one per node" in v.message and "has 2 node(s)" in v.message
    # The render refuses it (exit 1) with this message.
    assert str(v).startswith("[schedule-fits] Job/rltrain-multinode: never fits (nodes)")


def test_config_refuses_a_multi_node_run_wider_than_the_node_group_first():
    from components.stack import validate
    from test_kueue_support import load_variant
    with pytest.raises(validate.ConfigError) as e:
        load_variant("p5", {"rltrain:workloads": {"multiNode": {"enabled": True, "nodes": 3}}})
    assert any(p == "rltrain:workloads.multiNode.nodes" for p, _ in e.value.problems)


def test_a_resource_no_node_offers_is_refused():
    rows = record()
    limits = trainer(row(rows, "Job", "rltrain-training"))["resources"]["limits"]
    limits["example.com/fpga"] = "1"
    found = policy.evaluate(rows, rules=["schedule-fits", "kueue-queue"])
    by_rule = {v.rule: v for v in found}
    assert by_rule["schedule-fits"].resource == "Job/rltrain-training"
    assert "example.com/fpga" in by_rule["schedule-fits"].message
    # Kueue would never admit it either: the ClusterQueue does not cover it.
    assert "requests example.com/fpga, which ClusterQueue rltrain does not cover" in by_rule["kueue-queue"].message


def test_a_resource_no_node_offers_without_kueue():
    rows = copy.deepcopy(variant("p5", {"rltrain:kueue": {"enabled": False}}).resources)
    trainer(row(rows, "Job", "rltrain-training"))["resources"]["requests"]["hugepages-1Gi"] = "4Gi"
    [v] = policy.evaluate(rows, rules=["schedule-fits"])
    assert v.resource == "Job/rltrain-training"
    assert "never fits (hugepages-1Gi)" in v.message and "no node of the group offers hugepages-1Gi" in v.message


def test_more_memory_than_a_node_offers_is_refused_naming_memory():
    rows = record()
    res = trainer(row(rows, "Job", "rltrain-training"))["resources"]
    res["requests"]["memory"] = res["limits"]["memory"] = "1900Gi"
    [v] = policy.evaluate(rows, rules=["schedule-fits"])
    assert v.resource == "Job/rltrain-training" and "never fits (memory)" in v.message
    assert "1900.0 GiB memory per pod, a p5.48xlarge node offers" in v.message


def test_daemonsets_on_the_gpu_nodes_take_their_share():
    rows = record()
    alloc = catalog.get("p5.48xlarge").allocatable(efa=True)
    spare = alloc.cpu - catalog.DAEMONSET_CPU_MILLI / 1000 - 187  # what the trainer leaves on a node
    ds = {"type": "kubernetes:apps/v1:DaemonSet", "name": "extra-agent", "parent": None, "custom": True,
          "dependsOn": [], "provider": None, "options": {},
          "inputs": {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "extra-agent"},
                     "spec": {"template": {"spec": {
                         "tolerations": [{"operator": "Exists"}],
                         "containers": [{"name": "a", "resources": {"requests": {"cpu": str(spare + 1)}}}]}}}}}
    rows.append(ds)
    assert "extra-agent" in schedule.node_group(rows).daemonsets
    found = {v.resource: v for v in policy.evaluate(rows, rules=["schedule-fits"])}
    assert "never fits (cpu)" in found["Job/rltrain-training"].message
    # A DaemonSet that does not tolerate the GPU taint stays off the GPU nodes.
    ds["inputs"]["spec"]["template"]["spec"]["tolerations"] = []
    assert "extra-agent" not in schedule.node_group(rows).daemonsets


def test_quota_smaller_than_a_run_is_refused_naming_the_resource():
    rows = record()
    cq = next(r for r in rows if r["inputs"].get("kind") == "ClusterQueue")
    for res in cq["inputs"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"]:
        if res["name"] == "vpc.amazonaws.com/efa":
            res["nominalQuota"] = "32"
    found = {v.resource: v for v in policy.evaluate(rows, rules=["schedule-fits"])}
    assert set(found) == {"Job/rltrain-validation", "MPIJob/rltrain-nccl-test", "Job/rltrain-multinode"}
    assert "never fits (vpc.amazonaws.com/efa)" in found["Job/rltrain-validation"].message
    assert "nominal quota of 32 vpc.amazonaws.com/efa" in found["Job/rltrain-validation"].message


# --- what Kueue needs of a queued run ------------------------------------------------------------


def test_a_queued_run_that_sets_suspend_is_refused():
    rows = record()
    row(rows, "Job", "rltrain-training")["inputs"]["spec"]["suspend"] = True
    [v] = policy.evaluate(rows, rules=["kueue-queue"])
    assert v.resource == "Job/rltrain-training" and "sets spec.suspend" in v.message


def test_a_queued_run_must_come_after_its_queue_and_kueue():
    rows = record()
    r = row(rows, "Job", "rltrain-training")
    # Cut every path: no dependencies, no parent.
    r["dependsOn"], r["parent"] = [], None
    found = [v.message for v in policy.evaluate(rows, rules=["kueue-queue"])]
    assert any("not ordered after LocalQueue training" in m for m in found)
    assert any("not ordered after the Kueue installation" in m for m in found)


def test_a_gpu_run_without_the_queue_label_is_refused_when_the_stack_queues():
    rows = record()
    labels = row(rows, "Job", "rltrain-training")["inputs"]["metadata"]["labels"]
    del labels["kueue.x-k8s.io/queue-name"]
    [v] = policy.evaluate(rows, rules=["gpu-runs-queued"])
    assert v.resource == "Job/rltrain-training" and v.pulumi_name == "workloads-single-node-job"
    assert "without the label kueue.x-k8s.io/queue-name while the stack queues on LocalQueue training" in v.message
    # Without Kueue (no LocalQueue: byo) nothing is queued and the rule has nothing to say.
    assert policy.evaluate(rendered("byo").resources, rules=["gpu-runs-queued"]) == []


def test_a_queue_the_stack_does_not_create_is_refused():
    rows = [r for r in record() if r["inputs"].get("kind") != "LocalQueue"]
    found = {v.resource for v in policy.evaluate(rows, rules=["kueue-queue"])}
    assert found == {"Job/rltrain-validation", "MPIJob/rltrain-nccl-test", "Job/rltrain-training",
                     "Job/rltrain-multinode"}


def test_rules_run_in_the_policy_pack_without_pulumi_kubernetes():
    import ast
    tree = ast.parse(open(schedule.__file__).read())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names} | {
        n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not [m for m in imported if m and (m.startswith("pulumi") or m.startswith("components.k8s")
                                              or m.startswith("components.workloads"))]
    assert {"schedule-fits", "kueue-queue"} <= set(policy.RULES)


def test_p5_order_constant():
    assert [o.workload.name for o in schedule.simulate(rendered("p5").resources).outcomes] == P5_ORDER
