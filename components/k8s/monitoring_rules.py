"""Alert and recording rules of the stack, built in code (one PrometheusRule, `rules_spec()`).

Checked offline: `promtool check rules` on the rendered file, and `promtool test rules` with
synthetic series (tests/test_monitoring_rules.py); every metric they name is one an exporter of
the stack emits (components/k8s/monitoring_metrics.py).

Labels the expressions rely on:
- `node` on DCGM series: the dcgm-exporter ServiceMonitor copies the scraped pod's node name into
  it (monitoring.dcgm_values); the GPU's own `pod`/`namespace`/`container` come from the exporter
  (per-pod attribution).
- `node` on EFA series: written by efa_metrics.py itself (NODE_NAME).
- `label_role`, `label_node_kubernetes_io_instance_type` on kube_node_labels: allowed by
  kube-state-metrics' --metric-labels-allowlist (monitoring.KSM_LABELS_ALLOWLIST).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from components.stack import catalog
from components.stack.labels import ROLE_LABEL

# A GPU under this utilisation (percent, DCGM_FI_DEV_GPU_UTIL) for GPU_IDLE_MINUTES on a node where
# a run pod is Running is idle: a stalled collective, a data-loader bottleneck, a rank waiting for
# a dead peer. Rollout phases of RL alternate GPU-heavy and CPU-heavy work, but not for 15 minutes.
GPU_IDLE_PERCENT = 5
GPU_IDLE_MINUTES = 15
# EFA retransmitted packets as a share of sent packets (5-minute rates). SRD retransmits a little
# all the time; a sustained 1 % means a congested or failing path. A judgement, not a published
# figure: tune it from the EFA dashboard of a healthy run.
EFA_RETRANSMIT_RATIO = 0.01
EFA_RETRANSMIT_MIN_PKTS_PER_SECOND = 1000  # below this, ratios of a few packets are noise
NODE_NOT_READY_MINUTES = 5
CRASHLOOP_MINUTES = 5
RUNBOOK = "README.md#monitoring"

_GPU_ROLE_SELECTOR = ",".join(f'label_{k.replace(".", "_").replace("/", "_").replace("-", "_")}="{v}"'
                              for k, v in ROLE_LABEL.items())


class RulesArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    training_namespace: str
    queued_alert_minutes: int = Field(ge=1)


def _alert(name: str, expr: str, summary: str, description: str, *, severity: str,
           for_minutes: int = 0) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_minutes:
        rule["for"] = f"{for_minutes}m"
    rule["labels"] = {"severity": severity, "team": "rltrain"}
    rule["annotations"] = {"summary": summary, "description": description, "runbook_url": RUNBOOK}
    return rule


def price_rules() -> list[dict[str, Any]]:
    """One series per priced instance type of the catalog: its on-demand $/h, with the price date."""
    out = []
    for name, it in sorted(catalog.CATALOG.items()):
        if it.price is None:
            continue  # e.g. capacity-block-only types: no on-demand price to quote
        out.append({"record": "rltrain:instance_price_usd_per_hour", "expr": f"vector({it.price.usd_per_hour})",
                    "labels": {"instance_type": name, "price_date": it.price.date}})
    return out


def cost_rules() -> list[dict[str, Any]]:
    return price_rules() + [
        # GPU nodes registered in the cluster, per instance type (kube_node_labels carries the
        # instance-type label through the allowlist).
        {"record": "rltrain:gpu_nodes:count",
         "expr": f"count by (instance_type) (label_replace(kube_node_labels{{{_GPU_ROLE_SELECTOR}}}, "
                 '"instance_type", "$1", "label_node_kubernetes_io_instance_type", "(.+)"))'},
        # Running GPU nodes x the catalog's on-demand price. A type without a catalog price drops
        # out (and shows as a gap between the node count and the cost panels).
        {"record": "rltrain:gpu_nodes_cost_usd_per_hour",
         "expr": "sum(rltrain:gpu_nodes:count * on (instance_type) "
                 "rltrain:instance_price_usd_per_hour)"},
    ]


def gpu_alerts(a: RulesArgs) -> list[dict[str, Any]]:
    ns = a.training_namespace
    return [
        _alert("RltrainGpuXidError",
               "max by (node, gpu, UUID) (DCGM_FI_DEV_XID_ERRORS) > 0",
               "GPU {{ $labels.gpu }} on {{ $labels.node }} reported XID {{ $value }}",
               "DCGM_FI_DEV_XID_ERRORS holds the last XID the driver logged. 48/63/64/94/95 are ECC "
               "errors, 79 means the GPU fell off the bus, 13/31/43 are usually the application's "
               "fault. Check `kubectl describe node {{ $labels.node }}` and the run's logs; a "
               "hardware XID needs the node drained and replaced.",
               severity="critical"),
        _alert("RltrainGpuIdleOnBusyNode",
               f"max by (node, gpu) (DCGM_FI_DEV_GPU_UTIL) < {GPU_IDLE_PERCENT}\n"
               "and on (node)\n"
               # group_left keeps kube_pod_info's node label (one-to-one `on` keeps only the on-labels)
               f'max by (node) (kube_pod_info{{namespace="{ns}"}} * on (namespace, pod) group_left () '
               f'kube_pod_status_phase{{namespace="{ns}", phase="Running"}}) > 0',
               "GPU {{ $labels.gpu }} on {{ $labels.node }} idle while a run is on the node",
               f"Under {GPU_IDLE_PERCENT} % utilisation for {GPU_IDLE_MINUTES} minutes while a pod of "
               f"namespace {ns} runs on the node: a hung collective, a data-loader stall or a rank "
               "waiting for a dead peer. The run keeps paying for the node.",
               severity="warning", for_minutes=GPU_IDLE_MINUTES),
        _alert("RltrainGpuNodeNotReady",
               'kube_node_status_condition{condition="Ready", status="true"} == 0\n'
               f"and on (node) kube_node_labels{{{_GPU_ROLE_SELECTOR}}}",
               "GPU node {{ $labels.node }} is not Ready",
               "Its pods are evicted after the toleration timeout and a multi-node run loses a rank. "
               "EKS node auto-repair replaces a node that stays unhealthy.",
               severity="critical", for_minutes=NODE_NOT_READY_MINUTES),
    ]


def efa_alerts() -> list[dict[str, Any]]:
    return [
        _alert("RltrainEfaRetransmitSpike",
               "(\n  sum by (node, device) (rate(efa_retrans_pkts_total[5m]))\n"
               "  / sum by (node, device) (rate(efa_tx_pkts_total[5m]))\n"
               f") > {EFA_RETRANSMIT_RATIO}\n"
               f"and sum by (node, device) (rate(efa_tx_pkts_total[5m])) > {EFA_RETRANSMIT_MIN_PKTS_PER_SECOND}",
               "EFA device {{ $labels.device }} on {{ $labels.node }} retransmits "
               "{{ $value | humanizePercentage }} of its packets",
               "Sustained SRD retransmits slow every collective of the run. Compare with the other "
               "devices and nodes on the EFA dashboard; a single device points at its link.",
               severity="warning", for_minutes=10),
        _alert("RltrainEfaMetricsFailing",
               "max by (node) (efa_metrics_scrape_error) == 1",
               "The EFA exporter on {{ $labels.node }} skips counters",
               "efa_metrics.py could not read some hw_counters files; its log names them "
               "(`kubectl logs -n <monitoring namespace> -l app.kubernetes.io/name=rltrain-efa-metrics`).",
               severity="warning", for_minutes=15),
    ]


def run_alerts(a: RulesArgs) -> list[dict[str, Any]]:
    ns = a.training_namespace
    return [
        _alert("RltrainRunFailed",
               f'max by (namespace, job_name) (kube_job_failed{{namespace="{ns}", condition="true"}}) == 1',
               "Run {{ $labels.job_name }} has failed",
               "The Job reached its failure condition (retries exhausted, a fail-fast exit code or "
               "its deadline). `kubectl describe job {{ $labels.job_name }} -n {{ $labels.namespace }}`.",
               severity="critical"),
        _alert("RltrainRunCrashLooping",
               f'max by (namespace, pod, container) (kube_pod_container_status_waiting_reason{{namespace="{ns}", '
               'reason="CrashLoopBackOff"}) == 1',
               "{{ $labels.pod }} is crash-looping",
               "A run pod restarts over and over (the statefulset form never fails, it restarts). "
               "`kubectl logs --previous {{ $labels.pod }} -n {{ $labels.namespace }}`.",
               severity="warning", for_minutes=CRASHLOOP_MINUTES),
        _alert("RltrainRunQueuedTooLong",
               f'max by (namespace, pod) (kube_pod_status_phase{{namespace="{ns}", phase="Pending"}}) == 1',
               "{{ $labels.pod }} has waited " + str(a.queued_alert_minutes) + " minutes to start",
               "Pending: not scheduled (GPUs, EFA devices or huge pages taken by another run, quota, "
               "a node not Ready) or still pulling its image. `kubectl describe pod {{ $labels.pod }} "
               "-n {{ $labels.namespace }}` shows which.",
               severity="warning", for_minutes=a.queued_alert_minutes),
    ]


def rules_spec(a: RulesArgs) -> dict[str, Any]:
    """The PrometheusRule spec; the same document is a Prometheus rules file for promtool."""
    return {"groups": [
        {"name": "rltrain.cost", "interval": "1m", "rules": cost_rules()},
        {"name": "rltrain.gpu", "rules": gpu_alerts(a)},
        {"name": "rltrain.efa", "rules": efa_alerts()},
        {"name": "rltrain.runs", "rules": run_alerts(a)},
    ]}


def expressions(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(rule name, expr) of every rule."""
    return [(r.get("alert") or r["record"], r["expr"]) for g in spec["groups"] for r in g["rules"]]


def recorded_names(spec: dict[str, Any]) -> set[str]:
    return {r["record"] for g in spec["groups"] for r in g["rules"] if "record" in r}
