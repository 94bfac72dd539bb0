"""The stack's alert and recording rules: `promtool check rules`, and `promtool test rules` with
synthetic series (each alert fires on the series it is for and stays quiet otherwise).

promtool comes from Debian's `prometheus` package (.ci/run installs it). Without it the tests are
skipped, except under CI (env CI set), where they fail.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import obj, rendered

from components.k8s import monitoring_rules as mr
from components.stack import catalog

ARGS = mr.RulesArgs(training_namespace="rltrain", queued_alert_minutes=30, cluster_queue="rltrain",
                    gpu_node_count=2)
SPEC = mr.rules_spec(ARGS)
RULES = {r.get("alert") or r["record"]: r for g in SPEC["groups"] for r in g["rules"]}


@pytest.fixture(scope="module")
def promtool() -> str:
    exe = shutil.which("promtool")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("promtool not found: .ci/run installs Debian's prometheus package")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return exe


@pytest.fixture(scope="module")
def rules_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rules") / "rltrain.rules.yaml"
    path.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    return path


def _run(promtool: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], capture_output=True, text=True, timeout=120, check=False)


def test_promtool_check_rules(promtool, rules_file):
    proc = _run(promtool, "check", "rules", str(rules_file))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(RULES) + len(mr.price_rules()) - 1} rules found" in proc.stdout


@pytest.mark.parametrize("stack", ["dev", "p4de", "p5"])
def test_rendered_prometheus_rule_is_the_tested_one(stack):
    r = rendered(stack)
    rule = obj(r, "PrometheusRule", "rltrain")
    m = r.cfg.monitoring
    assert rule["spec"] == mr.rules_spec(mr.RulesArgs(training_namespace=r.cfg.training.namespace,
                                                      queued_alert_minutes=m.queued_alert_minutes,
                                                      cluster_queue=r.cfg.training.namespace,
                                                      gpu_node_count=r.cfg.gpu_nodes.count))
    assert rule["metadata"]["namespace"] == m.namespace
    # The stack installs Kueue on these stacks: its queue alerts are in, for the stack's ClusterQueue.
    assert "rltrain.queue" in [g["name"] for g in rule["spec"]["groups"]]


def test_no_queue_alerts_without_the_stacks_kueue():
    spec = mr.rules_spec(mr.RulesArgs(training_namespace="rltrain", queued_alert_minutes=30))
    assert "rltrain.queue" not in [g["name"] for g in spec["groups"]]


def test_cost_rules_follow_the_catalog():
    prices = {r["labels"]["instance_type"]: r["expr"] for r in mr.price_rules()}
    assert prices == {n: f"vector({it.price.usd_per_hour})" for n, it in catalog.CATALOG.items() if it.price}


# --- promtool test rules ------------------------------------------------------------------------------

_TEMPLATE = re.compile(r"\{\{\s*\$(labels\.(\w+)|value)(\s*\|\s*humanizePercentage)?\s*\}\}")


def annotations(alert: str, labels: dict[str, str], value: str) -> dict[str, str]:
    """The rule's annotations with its templates filled the way Prometheus fills these ones."""
    def fill(text: str) -> str:
        def sub(m: re.Match) -> str:
            if m.group(2):
                return labels[m.group(2)]
            return f"{float(value) * 100:g}%" if m.group(3) else value
        return _TEMPLATE.sub(sub, text)
    return {k: fill(v) for k, v in RULES[alert]["annotations"].items()}


def fires(alert: str, labels: dict[str, str], value: str) -> dict[str, Any]:
    return {"exp_labels": {**labels, **RULES[alert]["labels"]},
            "exp_annotations": annotations(alert, labels, value)}


GPU_NODE = {"label_role": "gpu-training", "label_node_kubernetes_io_instance_type": "p5.48xlarge"}


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def unit_tests() -> dict[str, Any]:
    xid = {"node": "busy", "gpu": "3", "UUID": "GPU-3", "xid": "79"}
    gpu_series = [
        _series("DCGM_FI_DEV_GPU_UTIL", {"node": "busy", "gpu": "0"}, "0x40"),  # idle, a run on the node
        _series("DCGM_FI_DEV_GPU_UTIL", {"node": "busy", "gpu": "1"}, "95x40"),  # busy
        _series("DCGM_FI_DEV_GPU_UTIL", {"node": "empty", "gpu": "0"}, "0x40"),  # idle, no run on the node
        _series("kube_pod_info", {"namespace": "rltrain", "pod": "run-0", "node": "busy"}, "1x40"),
        _series("kube_pod_status_phase", {"namespace": "rltrain", "pod": "run-0", "phase": "Running"}, "1x40"),
        _series("kube_pod_info", {"namespace": "other", "pod": "web", "node": "empty"}, "1x40"),
        _series("kube_pod_status_phase", {"namespace": "other", "pod": "web", "phase": "Running"}, "1x40"),
        # The exporter's windowed XID count (dcgm-exporter expcollector.go): one series per XID class
        # while the class is in the window, a 0 series without `xid` otherwise. A burst of XID 79 on
        # GPU 3 from minute 3 to minute 8 (in the window until ~minute 13), then nothing.
        _series("DCGM_EXP_XID_ERRORS_COUNT", xid, "_ _ _ 1 2 2 2 2 2 2 2 2 2 1 _x26"),
        _series("DCGM_EXP_XID_ERRORS_COUNT", {"node": "busy", "gpu": "3", "UUID": "GPU-3"}, "0 0 0 _x10 0x27"),
        _series("DCGM_EXP_XID_ERRORS_COUNT", {"node": "busy", "gpu": "0", "UUID": "GPU-0"}, "0x40"),
        # The sticky last-XID gauge stays at 79 for ever: the alert must not read it.
        _series("DCGM_FI_DEV_XID_ERRORS", {"node": "busy", "gpu": "3", "UUID": "GPU-3"}, "0 0 0 79x37"),
    ]
    node_series = [
        _series("kube_node_labels", {"node": "gpu-a", **GPU_NODE}, "1x40"),
        _series("kube_node_labels", {"node": "gpu-b", **GPU_NODE}, "1x40"),
        _series("kube_node_labels", {"node": "sys-a", "label_role": "system"}, "1x40"),
        _series("kube_node_status_condition", {"node": "gpu-a", "condition": "Ready", "status": "true"}, "1x40"),
        _series("kube_node_status_condition", {"node": "gpu-b", "condition": "Ready", "status": "true"}, "1 1 0x38"),
        _series("kube_node_status_condition", {"node": "sys-a", "condition": "Ready", "status": "true"}, "0x40"),
    ]
    # 10,000 packets/s sent; one device retransmits 2 %, the other 0.1 %.
    efa_series = [
        _series("efa_tx_pkts_total", {"node": "gpu-a", "device": "rdmap0s0", "port": "1"}, "0+600000x40"),
        _series("efa_retrans_pkts_total", {"node": "gpu-a", "device": "rdmap0s0", "port": "1"}, "0+12000x40"),
        _series("efa_tx_pkts_total", {"node": "gpu-a", "device": "rdmap1s0", "port": "1"}, "0+600000x40"),
        _series("efa_retrans_pkts_total", {"node": "gpu-a", "device": "rdmap1s0", "port": "1"}, "0+600x40"),
    ]
    run_series = [
        _series("kube_job_failed", {"namespace": "rltrain", "job_name": "rltrain-training", "condition": "true"},
                "0 0 1x98"),
        _series("kube_job_failed", {"namespace": "rltrain", "job_name": "rltrain-validation", "condition": "true"},
                "0x40"),
        _series("kube_pod_status_phase", {"namespace": "rltrain", "pod": "queued-0", "phase": "Pending"}, "1x40"),
        _series("kube_pod_status_phase", {"namespace": "rltrain", "pod": "pulled-0", "phase": "Pending"},
                "1x10 0x30"),
    ]
    cq = {"cluster_queue": "rltrain"}
    other = {"cluster_queue": "team-b"}
    gpu = {"cohort": "", "flavor": "rltrain-gpu-0123abcd", "resource": "nvidia.com/gpu"}
    queue_series = [
        # rltrain: one workload pending from minute 0, a second from 10, a third from 20; no GPU
        # reserved until minute 40, when the head is admitted.
        _series("kueue_pending_workloads", {**cq, "status": "active"}, "1x9 2x10 3x20 2x20"),
        _series("kueue_pending_workloads", {**cq, "status": "inadmissible"}, "0x60"),
        _series("kueue_cluster_queue_resource_reservation", {**cq, **gpu}, "0x39 16x21"),
        # team-b (another stack's queue on the cluster): piling up too, never alerted on here.
        _series("kueue_pending_workloads", {**other, "status": "active"}, "1+1x60"),
        # Evictions: a PodsReady timeout at minute 5, then the requeue limit deactivates it at 20.
        _series("kueue_evicted_workloads_total", {**cq, "reason": "PodsReadyTimeout", "underlying_cause": "",
                                                  "priority_class": "rltrain-training", "replica_role": "standalone"},
                "0x5 1x55"),
        _series("kueue_evicted_workloads_total", {**cq, "reason": "Deactivated",
                                                  "underlying_cause": "RequeuingLimitExceeded",
                                                  "priority_class": "rltrain-training", "replica_role": "standalone"},
                "_x20 1x40"),
    ]
    # Node repair: gpu-b's agent turns AcceleratedHardwareReady False at minute 5; EKS deletes the
    # node at minute 15 (its series end) and its replacement gpu-c joins at minute 25. The system
    # node's KernelReady=False is not a GPU node's.
    repair_series = [
        _series("kube_node_labels", {"node": "gpu-a", **GPU_NODE}, "1x40"),
        _series("kube_node_labels", {"node": "gpu-b", **GPU_NODE}, "1x15"),
        _series("kube_node_labels", {"node": "gpu-c", **GPU_NODE}, "_x25 1x15"),
        _series("kube_node_labels", {"node": "sys-a", "label_role": "system"}, "1x40"),
        _series("kube_node_status_condition", {"node": "gpu-b", "condition": "AcceleratedHardwareReady",
                                               "status": "false"}, "0x4 1x11"),
        _series("kube_node_status_condition", {"node": "gpu-a", "condition": "AcceleratedHardwareReady",
                                               "status": "false"}, "0x40"),
        _series("kube_node_status_condition", {"node": "sys-a", "condition": "KernelReady",
                                               "status": "false"}, "1x40"),
        # The run's pods: worker 1 lost with gpu-b at minute 15, its replacement from minute 16.
        _series("kube_pod_labels", {"namespace": "rltrain", "pod": "rltrain-multinode-0-aaaaa",
                                    "label_rltrain_run": "rltrain-multinode"}, "1x100"),
        _series("kube_pod_labels", {"namespace": "rltrain", "pod": "rltrain-multinode-1-bbbbb",
                                    "label_rltrain_run": "rltrain-multinode"}, "1x15"),
        _series("kube_pod_labels", {"namespace": "rltrain", "pod": "rltrain-multinode-1-ccccc",
                                    "label_rltrain_run": "rltrain-multinode"}, "_x16 1x84"),
        _series("kube_pod_labels", {"namespace": "rltrain", "pod": "rltrain-training-ddddd",
                                    "label_rltrain_run": "rltrain-training"}, "1x100"),
    ]
    # A reboot repair (EKS node repair reboots for most H100 XIDs): gpu-r, created long ago, gets the
    # agent's condition at minute 5, is rebooted at 15 (NotReady to 24), Ready again under its name at
    # 25 with the condition cleared. gpu-n, a replacement created at minute 20, registers NotReady for
    # 2 minutes; gpu-k goes NotReady without any agent condition (a kubelet stall, not a repair).
    reboot_series = [
        _series("kube_node_labels", {"node": "gpu-r", **GPU_NODE}, "1x110"),
        _series("kube_node_labels", {"node": "gpu-n", **GPU_NODE}, "_x20 1x80"),
        _series("kube_node_labels", {"node": "gpu-k", **GPU_NODE}, "1x110"),
        _series("kube_node_created", {"node": "gpu-r"}, "0x110"),
        _series("kube_node_created", {"node": "gpu-n"}, "_x20 1200x80"),
        _series("kube_node_created", {"node": "gpu-k"}, "0x110"),
        _series("kube_node_status_condition", {"node": "gpu-r", "condition": "AcceleratedHardwareReady",
                                               "status": "false"}, "0x4 1x20 0x75"),
        _series("kube_node_status_condition", {"node": "gpu-r", "condition": "Ready", "status": "true"},
                "1x14 0x10 1x85"),
        _series("kube_node_status_condition", {"node": "gpu-n", "condition": "Ready", "status": "true"},
                "_x20 0 0 1x78"),
        _series("kube_node_status_condition", {"node": "gpu-k", "condition": "AcceleratedHardwareReady",
                                               "status": "false"}, "0x100"),
        _series("kube_node_status_condition", {"node": "gpu-k", "condition": "Ready", "status": "true"},
                "1x39 0x5 1x65"),
    ]
    ready = {"condition": "Ready", "status": "true"}
    run = {"namespace": "rltrain", "label_rltrain_run": "rltrain-multinode"}
    p5 = catalog.get("p5.48xlarge").price.usd_per_hour
    return {
        "rule_files": ["rltrain.rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": gpu_series, "alert_rule_test": [
                # XID: quiet before the burst, firing at once in it, for that GPU and class only...
                {"eval_time": "2m", "alertname": "RltrainGpuXidError", "exp_alerts": []},
                {"eval_time": "5m", "alertname": "RltrainGpuXidError", "exp_alerts": [
                    fires("RltrainGpuXidError", xid, "2")]},
                {"eval_time": "20m", "alertname": "RltrainGpuXidError", "exp_alerts": [
                    fires("RltrainGpuXidError", xid, "2")]},
                # ...and resolved once the burst left the window, although the last-XID gauge still says 79.
                {"eval_time": "25m", "alertname": "RltrainGpuXidError", "exp_alerts": []},
                {"eval_time": "39m", "alertname": "RltrainGpuXidError", "exp_alerts": []},
                # Idle GPU: only on the node that runs a run pod, only the idle GPU, only after 15 min.
                {"eval_time": "10m", "alertname": "RltrainGpuIdleOnBusyNode", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "RltrainGpuIdleOnBusyNode", "exp_alerts": [
                    fires("RltrainGpuIdleOnBusyNode", {"node": "busy", "gpu": "0"}, "0")]},
            ]},
            {"interval": "1m", "input_series": node_series, "alert_rule_test": [
                {"eval_time": "4m", "alertname": "RltrainGpuNodeNotReady", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "RltrainGpuNodeNotReady", "exp_alerts": [
                    fires("RltrainGpuNodeNotReady", {"node": "gpu-b", "condition": "Ready", "status": "true"}, "0")]},
            ], "promql_expr_test": [
                {"expr": "rltrain:gpu_nodes:count", "eval_time": "5m",
                 "exp_samples": [{"labels": 'rltrain:gpu_nodes:count{instance_type="p5.48xlarge"}', "value": 2}]},
                {"expr": "rltrain:gpu_nodes_cost_usd_per_hour", "eval_time": "5m",
                 "exp_samples": [{"labels": "rltrain:gpu_nodes_cost_usd_per_hour", "value": 2 * p5}]},
            ]},
            {"interval": "1m", "input_series": reboot_series, "alert_rule_test": [
                # The reboot itself: NotReady a minute after the agent's condition, gpu-r only (not the
                # replacement registering, not a node NotReady without a fault), until Ready again.
                {"eval_time": "14m", "alertname": "RltrainGpuNodeRebootRepairInProgress", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "RltrainGpuNodeRebootRepairInProgress", "exp_alerts": [
                    fires("RltrainGpuNodeRebootRepairInProgress", {"node": "gpu-r", **ready}, "0")]},
                {"eval_time": "22m", "alertname": "RltrainGpuNodeRebootRepairInProgress", "exp_alerts": [
                    fires("RltrainGpuNodeRebootRepairInProgress", {"node": "gpu-r", **ready}, "0")]},
                {"eval_time": "27m", "alertname": "RltrainGpuNodeRebootRepairInProgress", "exp_alerts": []},
                {"eval_time": "43m", "alertname": "RltrainGpuNodeRebootRepairInProgress", "exp_alerts": []},
                # Back under the same name: gpu-r, and gpu-k whose kubelet stalled; never the replacement.
                {"eval_time": "70m", "alertname": "RltrainGpuNodeRebooted", "exp_alerts": [
                    fires("RltrainGpuNodeRebooted", {"node": "gpu-k", **ready}, "1"),
                    fires("RltrainGpuNodeRebooted", {"node": "gpu-r", **ready}, "1")]},
                {"eval_time": "90m", "alertname": "RltrainGpuNodeRebooted", "exp_alerts": [
                    fires("RltrainGpuNodeRebooted", {"node": "gpu-k", **ready}, "1")]},
                {"eval_time": "106m", "alertname": "RltrainGpuNodeRebooted", "exp_alerts": []},
                # No node of the group went missing: the count-based alert stays quiet through it.
                {"eval_time": "20m", "alertname": "RltrainGpuNodeRepairInProgress", "exp_alerts": []},
            ]},
            {"interval": "1m", "input_series": repair_series, "alert_rule_test": [
                # The agent's condition: fires a minute after it turns False, for the GPU node only;
                # resolves once the node is gone.
                {"eval_time": "4m", "alertname": "RltrainGpuNodeUnhealthy", "exp_alerts": []},
                {"eval_time": "7m", "alertname": "RltrainGpuNodeUnhealthy", "exp_alerts": [
                    fires("RltrainGpuNodeUnhealthy", {"node": "gpu-b", "condition": "AcceleratedHardwareReady"},
                          "1")]},
                {"eval_time": "22m", "alertname": "RltrainGpuNodeUnhealthy", "exp_alerts": []},
                # 1 of 2 GPU nodes from minute 16 (the deleted node's series go stale after 5 minutes)
                # until the replacement joins at 25.
                {"eval_time": "12m", "alertname": "RltrainGpuNodeRepairInProgress", "exp_alerts": []},
                {"eval_time": "24m", "alertname": "RltrainGpuNodeRepairInProgress", "exp_alerts": [
                    fires("RltrainGpuNodeRepairInProgress", {}, "1")]},
                {"eval_time": "30m", "alertname": "RltrainGpuNodeRepairInProgress", "exp_alerts": []},
                # The run's lost worker replaced: one replaced pod for the hour after, then quiet; the
                # single-node run, untouched, never.
                {"eval_time": "10m", "alertname": "RltrainRunPodsReplaced", "exp_alerts": []},
                {"eval_time": "30m", "alertname": "RltrainRunPodsReplaced", "exp_alerts": [
                    fires("RltrainRunPodsReplaced", run, "1")]},
                {"eval_time": "90m", "alertname": "RltrainRunPodsReplaced", "exp_alerts": []},
            ]},
            {"interval": "1m", "input_series": efa_series, "alert_rule_test": [
                {"eval_time": "8m", "alertname": "RltrainEfaRetransmitSpike", "exp_alerts": []},
                {"eval_time": "30m", "alertname": "RltrainEfaRetransmitSpike", "exp_alerts": [
                    fires("RltrainEfaRetransmitSpike", {"node": "gpu-a", "device": "rdmap0s0"}, "0.02")]},
            ]},
            {"interval": "1m", "input_series": run_series, "alert_rule_test": [
                {"eval_time": "1m", "alertname": "RltrainRunFailed", "exp_alerts": []},
                {"eval_time": "3m", "alertname": "RltrainRunFailed", "exp_alerts": [
                    fires("RltrainRunFailed", {"namespace": "rltrain", "job_name": "rltrain-training"}, "1")]},
                {"eval_time": "60m", "alertname": "RltrainRunFailed", "exp_alerts": [
                    fires("RltrainRunFailed", {"namespace": "rltrain", "job_name": "rltrain-training"}, "1")]},
                # The transition, not the state: resolved an hour after the failure, the Job still Failed.
                {"eval_time": "63m", "alertname": "RltrainRunFailed", "exp_alerts": []},
                {"eval_time": "95m", "alertname": "RltrainRunFailed", "exp_alerts": []},
                {"eval_time": "20m", "alertname": "RltrainRunQueuedTooLong", "exp_alerts": []},
                # Pending for 30 minutes: the queued pod; the one that started after 10 stays quiet.
                {"eval_time": "35m", "alertname": "RltrainRunQueuedTooLong", "exp_alerts": [
                    fires("RltrainRunQueuedTooLong", {"namespace": "rltrain", "pod": "queued-0"}, "1")]},
            ]},
            {"interval": "1m", "input_series": queue_series, "alert_rule_test": [
                # Pending for 30 minutes (queuedAlertMinutes) without a break: fires; resolved when
                # nothing is pending is covered by the `for` (a gap restarts it).
                {"eval_time": "25m", "alertname": "RltrainWorkloadPendingTooLong", "exp_alerts": []},
                {"eval_time": "35m", "alertname": "RltrainWorkloadPendingTooLong", "exp_alerts": [
                    fires("RltrainWorkloadPendingTooLong", cq, "3")]},
                # Evicted at minute 5: alerts for the window, then resolves.
                {"eval_time": "4m", "alertname": "RltrainWorkloadEvicted", "exp_alerts": []},
                {"eval_time": "10m", "alertname": "RltrainWorkloadEvicted", "exp_alerts": [
                    fires("RltrainWorkloadEvicted", {**cq, "reason": "PodsReadyTimeout"}, "1")]},
                {"eval_time": "40m", "alertname": "RltrainWorkloadEvicted", "exp_alerts": []},
                # Deactivated at minute 20 (the requeue limit): no pod, no failed Job, but this fires.
                {"eval_time": "19m", "alertname": "RltrainWorkloadDeactivated", "exp_alerts": []},
                {"eval_time": "25m", "alertname": "RltrainWorkloadDeactivated", "exp_alerts": [
                    fires("RltrainWorkloadDeactivated", {**cq, "underlying_cause": "RequeuingLimitExceeded"}, "1")]},
                # Pending grew 1 -> 2 -> 3 while no GPU was reserved: stuck (the count is higher than 15
                # minutes before from minute 15, for 5 minutes by 20). Quiet before, and once a GPU is
                # reserved (minute 40).
                {"eval_time": "5m", "alertname": "RltrainQueueStuckGpusIdle", "exp_alerts": []},
                {"eval_time": "18m", "alertname": "RltrainQueueStuckGpusIdle", "exp_alerts": []},
                {"eval_time": "22m", "alertname": "RltrainQueueStuckGpusIdle", "exp_alerts": [
                    fires("RltrainQueueStuckGpusIdle", cq, "3")]},
                {"eval_time": "45m", "alertname": "RltrainQueueStuckGpusIdle", "exp_alerts": []},
            ]},
        ],
    }


def test_promtool_unit_tests(promtool, rules_file):
    tests = rules_file.parent / "rltrain.test.yaml"
    tests.write_text(yaml.safe_dump(unit_tests(), sort_keys=False))
    proc = _run(promtool, "test", "rules", str(tests))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_promtool_unit_tests_would_catch_a_quiet_alert(promtool, rules_file, tmp_path):
    """The harness itself: an alert expected on series that do not trigger it fails the run."""
    doc = unit_tests()
    doc["rule_files"] = [str(rules_file)]
    doc["tests"][0]["alert_rule_test"][0]["exp_alerts"] = [fires("RltrainGpuXidError",
                                                                 {"node": "busy", "gpu": "3", "UUID": "GPU-3",
                                                                  "xid": "79"}, "2")]
    path = tmp_path / "wrong.test.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = _run(promtool, "test", "rules", str(path))
    assert proc.returncode != 0 and "RltrainGpuXidError" in proc.stdout + proc.stderr
