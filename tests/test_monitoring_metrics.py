"""Every metric a dashboard or a rule names is one an exporter of the stack emits.

The lists are pinned per exporter version with their source (components/k8s/monitoring_metrics.py);
the EFA list is checked against what efa_metrics.py really writes for a fake 32-device node.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from components.k8s import dashboards, monitoring, monitoring_rules
from components.k8s import monitoring_metrics as mm
from components.scripts import efa_metrics

SPEC = monitoring_rules.rules_spec(monitoring_rules.RulesArgs(training_namespace="rltrain", queued_alert_minutes=30,
                                                             cluster_queue="rltrain"))
RECORDED = {r["record"] for g in SPEC["groups"] for r in g["rules"] if "record" in r}


def emitted_names() -> dict[str, str]:
    """metric name -> the exporter that emits it."""
    return {name: exporter for exporter, (_, names) in mm.EMITTED.items() for name in names}


# The Serving board and its evaluation row; the GPU board's Training runs row (workloads.curves).
BOARDS = dashboards.all_dashboards("rltrain", serving=True, evaluation=True, curves=True)


def _named() -> list[tuple[str, str, str]]:
    """(where, expr, metric) for every metric named by a rule or a dashboard query."""
    out = []
    for rule, expr in monitoring_rules.expressions(SPEC):
        out += [(f"rule {rule}", expr, m) for m in mm.metric_names(expr)]
    for b in BOARDS:
        for expr in b.queries():
            out += [(f"dashboard {b.uid}", expr, m) for m in mm.metric_names(expr)]
    return out


def unknown_metrics(named: list[tuple[str, str, str]]) -> list[str]:
    emitted = emitted_names()
    return [f"{where}: {metric} (in {expr!r})" for where, expr, metric in named
            if metric not in emitted and metric not in RECORDED]


def test_every_named_metric_is_emitted():
    named = _named()
    assert len(named) > 50  # the check looked at the real queries
    assert unknown_metrics(named) == []
    used = {m for _, _, m in named}
    # Every exporter of the stack feeds something.
    for exporter, (_, names) in mm.EMITTED.items():
        assert used & set(names), f"no dashboard or rule uses {exporter}"


def test_a_metric_nobody_emits_fails_the_check():
    named = [("dashboard x", "rate(DCGM_FI_DEV_SM_ACTIVE[5m])", "DCGM_FI_DEV_SM_ACTIVE")]
    # DCGM_FI_PROF_SM_ACTIVE is commented out in the chart's default counters: not emitted.
    assert mm.metric_names("avg(DCGM_FI_PROF_SM_ACTIVE)") == {"DCGM_FI_PROF_SM_ACTIVE"}
    assert unknown_metrics(named) and "DCGM_FI_PROF_SM_ACTIVE" not in emitted_names()


@pytest.mark.parametrize("expr,names", [
    ('sum by (node, gpu) (rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{node=~"$node"}[$__rate_interval]))',
     {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"}),
    ('max by (node) (kube_pod_info{namespace="rltrain"} * on (namespace, pod) group_left () '
     'kube_pod_status_phase{namespace="rltrain", phase="Running"}) > 0', {"kube_pod_info", "kube_pod_status_phase"}),
    ('count(DCGM_FI_DEV_XID_ERRORS > 0) or vector(0)', {"DCGM_FI_DEV_XID_ERRORS"}),
    ("sum_over_time(rltrain:gpu_nodes_cost_usd_per_hour[$__range]) / 60 offset 5m",
     {"rltrain:gpu_nodes_cost_usd_per_hour"}),
    ('label_replace(kube_node_labels{label_role="gpu-training"}, "instance_type", "$1", "x", "(.+)") * 1e6',
     {"kube_node_labels"}),
])
def test_metric_name_extraction(expr, names):
    assert mm.metric_names(expr) == names


def test_lists_are_pinned_to_the_versions_of_the_stack():
    assert "4.5.3-4.8.2" in mm.DCGM_SOURCE and monitoring.versions.DCGM_EXPORTER.version == "4.8.2"
    assert mm.KSM_SOURCE.endswith("v2.20.0")
    assert "ray 2.60.0" in mm.RAY_SOURCE
    with open(os.path.join(os.path.dirname(__file__), "..", "requirements-dev.txt")) as f:
        assert "ray==2.60.0" in f.read().split()  # the Ray the launcher is tested against
    assert len(set(mm.DCGM_DEFAULT_COUNTERS)) == len(mm.DCGM_DEFAULT_COUNTERS) == 24


def test_efa_list_is_what_the_script_writes(tmp_path):
    """Run efa_metrics.py --once on a fake node with 32 devices and every known counter: the
    metric names it writes are exactly the pinned EFA list, and every EFA metric a dashboard or rule
    names is among them."""
    root = tmp_path / "root"
    for i in range(32):
        hw = root / "sys" / "class" / "infiniband" / f"rdmap{i}s0" / "ports" / "1" / "hw_counters"
        hw.mkdir(parents=True)
        for counter in efa_metrics.KNOWN_PORT_COUNTERS:
            (hw / counter).write_text(f"{i + 1}\n")
        (hw / "lifespan").write_text("10\n")
    out = tmp_path / "textfile"
    out.mkdir()
    env = {**os.environ, "SYSFS_ROOT": str(root), "TEXTFILE_DIR": str(out), "NODE_NAME": "gpu-a"}
    subprocess.run([sys.executable, str(monitoring.EFA_SCRIPT), "--once"], env=env, check=True, timeout=60)
    text = (out / "efa.prom").read_text()
    written = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert written == set(mm.EFA_METRICS)
    assert "efa_devices{node=\"gpu-a\"} 32" in text
    efa_used = {m for _, _, m in _named() if m.startswith("efa_")}
    assert efa_used and efa_used <= written
