"""Grafana dashboards as code (grafana-foundation-sdk), provisioned through the Grafana sidecar.

Four dashboards, each one ConfigMap labelled `grafana_dashboard: "1"` in the monitoring
namespace, which kube-prometheus-stack's Grafana sidecar loads (its default label and value,
searchNamespace ALL) into the folder named by the `grafana_folder` annotation:

- GPUs: utilisation, memory, power, SM clock, tensor activity, XID errors, NVLink, per run pod.
- EFA: RDMA read/write bytes, sent/received bytes, retransmits, impaired connections, per device.
- Runs: Ray nodes, queued (Pending) pods, Job status, Ray node metrics, GPU use of run pods.
- Cost: running GPU nodes x the catalog's price (the `rltrain:` recording rules).

Every query names only metrics an exporter of the stack emits (tests/test_monitoring_metrics.py).
The JSON is the classic dashboard model of grafana-foundation-sdk 1769699379!11.6.0 (Grafana 11.6
types; Grafana 13.2, the pinned chart's, migrates it on load).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

import pulumi_kubernetes as k8s
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, GridPos, VariableRefresh

from components.k8s.monitoring_rules import AGENT_CONDITIONS, GPU_ROLE_SELECTOR
from components.stack.labels import MANAGED_BY

FOLDER = "rltrain"
FOLDER_ANNOTATION = "grafana_folder"
SIDECAR_LABEL = {"grafana_dashboard": "1"}
# The datasource kube-prometheus-stack provisions (grafana.sidecar.datasources.uid default).
DATASOURCE = DataSourceRef(type_val="prometheus", uid="prometheus")
RATE = "$__rate_interval"
NODE = 'node=~"$node"'
_FAILING_BY_CONDITION = (
    f'max by (node, condition) (kube_node_status_condition{{condition=~"{"|".join(AGENT_CONDITIONS)}", '
    f'status="false"}} == 1) and on (node) kube_node_labels{{{GPU_ROLE_SELECTOR}}}')
_FAILING = f"max by (node) ({_FAILING_BY_CONDITION})"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str = ""
    instant: bool = False


@dataclass(frozen=True)
class PanelSpec:
    kind: str  # "stat" | "timeseries" | "table"
    title: str
    queries: tuple[Query, ...]
    w: int
    h: int
    unit: Optional[str] = None
    description: str = ""


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    description: str
    rows: tuple[tuple[str, tuple[PanelSpec, ...]], ...]
    node_variable_metric: Optional[str] = None

    @property
    def panels(self) -> list[PanelSpec]:
        return [p for _, panels in self.rows for p in panels]

    def queries(self) -> list[str]:
        exprs = [q.expr for p in self.panels for q in p.queries]
        if self.node_variable_metric:
            exprs.append(self.node_variable_metric)
        return exprs

    def model(self) -> dict[str, Any]:
        """The dashboard JSON model (built with the SDK)."""
        return json.loads(self.json())

    def json(self) -> str:
        return JSONEncoder(sort_keys=True, indent=2).encode(build(self).build()) + "\n"


def _s(title: str, expr: str, unit: Optional[str] = None, w: int = 4, description: str = "") -> PanelSpec:
    return PanelSpec("stat", title, (Query(expr, instant=True),), w, 4, unit, description)


def _ts(title: str, *queries: Query, unit: Optional[str] = None, w: int = 12, h: int = 8,
        description: str = "") -> PanelSpec:
    return PanelSpec("timeseries", title, tuple(queries), w, h, unit, description)


# The runs' headline scalars (components/workloads/curves.py, scripts/curves_metrics.py): the value at
# each run's newest step, as Prometheus keeps it over time; TensorBoard has the same curves over steps.
RUN_METRICS = ("reward", "loss", "seconds per step")


def run_curves_row(training_namespace: str) -> tuple[str, tuple[PanelSpec, ...]]:
    sel = f'namespace="{training_namespace}"'
    return ("Training runs (TensorBoard: kubectl port-forward deploy/rltrain-curves 6006)", (
        *(_ts(f"Run {metric}", Query(f'max by (run) (rltrain_run_scalar{{{sel}, metric="{metric}"}})', "{{run}}"), w=8,
              description=f"Each training run's {metric} at its newest step (the trainer profile's TensorBoard tag, "
                          "read from its event files by the curves exporter); one line per run, side by side.")
          for metric in RUN_METRICS),
        PanelSpec("table", "Newest step per run and metric",
                  (Query(f"max by (run, metric, tag) (rltrain_run_scalar_step{{{sel}}})", instant=True),), 24, 6),
    ))


def gpu_board(training_namespace: str, curves: bool = False) -> Board:
    ns = training_namespace
    return Board(
        "rltrain-gpu", "rltrain / GPUs",
        "DCGM exporter: every GPU of the GPU nodes, and which run pod it is allocated to.",
        (
            ("Cluster", (
                _s("GPUs", "count(DCGM_FI_DEV_GPU_UTIL)"),
                _s("GPUs allocated to pods", 'count(DCGM_FI_DEV_GPU_UTIL{pod!=""}) or vector(0)'),
                _s("Mean GPU utilisation", "avg(DCGM_FI_DEV_GPU_UTIL)", "percent"),
                _s("Tensor pipe active", "avg(DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)", "percentunit",
                   description="DCGM profiling metric; absent on GPUs without the profiling module."),
                _s("GPU power", "sum(DCGM_FI_DEV_POWER_USAGE)", "watt"),
                _s("GPUs with an XID", "count(DCGM_FI_DEV_XID_ERRORS > 0) or vector(0)",
                   description="DCGM_FI_DEV_XID_ERRORS holds the last XID; alert RltrainGpuXidError."),
            )),
            # What the EKS node monitoring agent reports and node repair acts on
            # (docs/gpu-failure-runbook.md; alerts RltrainGpuNodeUnhealthy, RltrainGpuNodeRepairInProgress).
            ("Node health", (
                _s("GPU nodes", f"count(kube_node_labels{{{GPU_ROLE_SELECTOR}}}) or vector(0)", w=6,
                   description="GPU nodes registered; fewer than the node group's count while EKS replaces one."),
                _s("GPU nodes with a failing condition", f"count({_FAILING}) or vector(0)", w=6,
                   description="A node condition of the node monitoring agent is False: repair follows."),
                PanelSpec("table", "Conditions reported False (node, condition)",
                          (Query(_FAILING_BY_CONDITION, instant=True),), 12, 4),
            )),
            ("Per GPU", (
                _ts("GPU utilisation", Query(f"DCGM_FI_DEV_GPU_UTIL{{{NODE}}}", "{{node}} GPU {{gpu}}"),
                    unit="percent"),
                _ts("GPU memory used", Query(f"DCGM_FI_DEV_FB_USED{{{NODE}}} * 1024 * 1024", "{{node}} GPU {{gpu}}"),
                    unit="bytes"),
                _ts("Power", Query(f"DCGM_FI_DEV_POWER_USAGE{{{NODE}}}", "{{node}} GPU {{gpu}}"), unit="watt", w=8),
                _ts("SM clock", Query(f"DCGM_FI_DEV_SM_CLOCK{{{NODE}}} * 1000000", "{{node}} GPU {{gpu}}"),
                    unit="hertz", w=8),
                _ts("Tensor pipe active", Query(f"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{{{NODE}}}", "{{node}} GPU {{gpu}}"),
                    unit="percentunit", w=8),
                _ts("NVLink traffic (counter rate, all links)",
                    Query(f"sum by (node, gpu) (rate(DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{{{NODE}}}[{RATE}]))",
                          "{{node}} GPU {{gpu}}"),
                    description="Rate of DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL; its unit depends on the DCGM "
                                "release, compare GPUs with each other rather than with a link's rating."),
                PanelSpec("table", "XID errors (last XID per GPU)",
                          (Query("DCGM_FI_DEV_XID_ERRORS > 0", instant=True),), 12, 8),
            )),
            ("Runs", (
                _ts("GPU utilisation by run pod",
                    Query(f'avg by (namespace, pod) (DCGM_FI_DEV_GPU_UTIL{{namespace="{ns}"}})', "{{pod}}"),
                    unit="percent", w=24),
            )),
            *([run_curves_row(ns)] if curves else []),
        ),
        node_variable_metric="DCGM_FI_DEV_GPU_UTIL",
    )


def efa_board() -> Board:
    def per_device(counter: str) -> Query:
        return Query(f"sum by (node, device) (rate(efa_{counter}_total{{{NODE}}}[{RATE}]))", "{{node}} {{device}}")

    return Board(
        "rltrain-efa", "rltrain / EFA",
        "EFA hardware counters (efa_metrics.py via node-exporter's textfile collector). NCCL on EFA "
        "shows as RDMA bytes; near-zero RDMA during a collective means it fell back to TCP.",
        (
            ("Overview", (
                _s("EFA devices", "sum(efa_devices)", w=6),
                _s("RDMA read + write", f"sum(rate(efa_rdma_read_bytes_total[{RATE}])) + "
                                        f"sum(rate(efa_rdma_write_bytes_total[{RATE}]))", "Bps", w=6),
                _s("Retransmitted share", "sum(rate(efa_retrans_pkts_total[5m])) / sum(rate(efa_tx_pkts_total[5m]))",
                   "percentunit", w=6),
                _s("Nodes with exporter errors", "sum(efa_metrics_scrape_error)", w=6),
            )),
            ("Per device", (
                _ts("RDMA read bytes", per_device("rdma_read_bytes"), unit="Bps"),
                _ts("RDMA write bytes", per_device("rdma_write_bytes"), unit="Bps"),
                _ts("Sent bytes", per_device("tx_bytes"), unit="Bps"),
                _ts("Received bytes", per_device("rx_bytes"), unit="Bps"),
                _ts("Retransmitted packets", per_device("retrans_pkts"), unit="pps"),
                _ts("Impaired remote connections",
                    Query(f"sum by (node, device) (increase(efa_impaired_remote_conn_events_total{{{NODE}}}[5m]))",
                          "{{node}} {{device}}"),
                    Query(f"sum by (node, device) (increase(efa_unresponsive_remote_events_total{{{NODE}}}[5m]))",
                          "{{node}} {{device}} unresponsive")),
            )),
        ),
        node_variable_metric="efa_devices",
    )


def runs_board(training_namespace: str) -> Board:
    ns = training_namespace
    return Board(
        "rltrain-runs", "rltrain / Runs",
        f"Runs in namespace {ns}: Ray nodes, queued pods, Job status (kube-state-metrics, Ray).",
        (
            ("Now", (
                _s("Ray nodes", "count(ray_node_cpu_utilization) or vector(0)", w=6,
                   description="Ray nodes exporting metrics (each run pod's metrics-export-port)."),
                _s("Running run pods", f'sum(kube_pod_status_phase{{namespace="{ns}", phase="Running"}})', w=6),
                _s("Queued (Pending) pods", f'sum(kube_pod_status_phase{{namespace="{ns}", phase="Pending"}})', w=6),
                _s("Failed runs", f'count(kube_job_failed{{namespace="{ns}", condition="true"}} == 1) or vector(0)',
                   w=6),
            )),
            ("Status", (
                _ts("Job pods by state",
                    Query(f'sum by (job_name) (kube_job_status_active{{namespace="{ns}"}})', "{{job_name}} active"),
                    Query(f'sum by (job_name) (kube_job_status_succeeded{{namespace="{ns}"}})',
                          "{{job_name}} succeeded"),
                    Query(f'sum by (job_name) (kube_job_status_failed{{namespace="{ns}"}})', "{{job_name}} failed")),
                _ts("Pods by phase", Query(f'sum by (phase) (kube_pod_status_phase{{namespace="{ns}"}})', "{{phase}}")),
            )),
            ("Ray", (
                _ts("Ray node CPU", Query("ray_node_cpu_utilization", "{{instance}}"), unit="percent", w=8),
                _ts("Ray node GPU utilisation", Query("ray_node_gpus_utilization", "{{instance}}"), unit="percent", w=8),
                _ts("Ray node memory used", Query("ray_node_mem_used", "{{instance}}"), unit="bytes", w=8),
                _ts("GPU utilisation of run pods",
                    Query(f'avg by (pod) (DCGM_FI_DEV_GPU_UTIL{{namespace="{ns}"}})', "{{pod}}"), unit="percent",
                    w=24),
            )),
        ),
    )


def cost_board() -> Board:
    return Board(
        "rltrain-cost", "rltrain / Cost",
        "Running GPU nodes x the catalog's dated on-demand price (components/stack/catalog.py), as "
        "recorded by the rltrain.cost rules. Not counted: control plane, system nodes, FSx, transfer.",
        (
            ("Now", (
                _s("GPU nodes, $/h", "rltrain:gpu_nodes_cost_usd_per_hour", "currencyUSD", w=8),
                _s("GPU nodes", "sum(rltrain:gpu_nodes:count)", w=8),
                _s("GPU nodes, $ over the time range",
                   "sum_over_time(rltrain:gpu_nodes_cost_usd_per_hour[$__range]) / 60", "currencyUSD", w=8,
                   description="The rule is evaluated every minute: the sum of $/h samples / 60."),
            )),
            ("Over time", (
                _ts("GPU nodes, $/h", Query("rltrain:gpu_nodes_cost_usd_per_hour", "$/h"), unit="currencyUSD"),
                _ts("GPU nodes by instance type", Query("rltrain:gpu_nodes:count", "{{instance_type}}")),
                PanelSpec("table", "Catalog prices ($/h, on-demand)",
                          (Query("rltrain:instance_price_usd_per_hour", instant=True),), 24, 6, "currencyUSD"),
            )),
        ),
    )


def serving_board(training_namespace: str, evaluation: bool = False) -> Board:
    """The serving Deployment's vLLM metrics (monitoring_metrics.VLLM_METRICS): request latency,
    tokens per second, KV-cache use. Only with workloads.serving on. With serving.evaluation, a row
    of the evaluation's accuracy per served step (monitoring_metrics.EVAL_METRICS)."""
    sel = f'namespace="{training_namespace}"'
    rows = (("Evaluation", (
        # The step whose result file is newest: topk(1) of the result timestamps.
        _s("Accuracy, newest evaluation", f"max(rltrain_eval_accuracy{{{sel}}} and on(step) "
           f"topk(1, rltrain_eval_result_timestamp_seconds{{{sel}}}))", "percentunit", w=6),
        _ts("Accuracy over served steps", Query(f"max by (step) (rltrain_eval_accuracy{{{sel}}})", "step {{step}}"),
            unit="percentunit", w=18),
    )),) if evaluation else ()
    return Board(
        "rltrain-serving", "rltrain / Serving",
        f"The vLLM server of namespace {training_namespace} (Deployment rltrain-serving), per pod.",
        (
            ("Now", (
                _s("Requests running", f"sum(vllm:num_requests_running{{{sel}}}) or vector(0)", w=6),
                _s("Requests waiting", f"sum(vllm:num_requests_waiting{{{sel}}}) or vector(0)", w=6),
                _s("Generated tokens/s", f"sum(rate(vllm:generation_tokens_total{{{sel}}}[{RATE}]))", w=6),
                _s("KV cache used (max)", f"max(vllm:kv_cache_usage_perc{{{sel}}})", "percentunit", w=6),
            )),
            ("Latency and throughput", (
                _ts("Request latency (end to end)",
                    *(Query(f"histogram_quantile({q}, sum by (le) (rate(vllm:e2e_request_latency_seconds_bucket"
                            f"{{{sel}}}[{RATE}])))", f"p{int(q * 100)}") for q in (0.5, 0.9, 0.99)),
                    unit="s", w=8),
                _ts("Time to first token",
                    *(Query(f"histogram_quantile({q}, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket"
                            f"{{{sel}}}[{RATE}])))", f"p{int(q * 100)}") for q in (0.5, 0.99)),
                    unit="s", w=8),
                _ts("Tokens per second",
                    Query(f"sum by (pod) (rate(vllm:generation_tokens_total{{{sel}}}[{RATE}]))", "{{pod}} generated"),
                    Query(f"sum by (pod) (rate(vllm:prompt_tokens_total{{{sel}}}[{RATE}]))", "{{pod}} prompt"),
                    w=8),
                _ts("KV cache used", Query(f"vllm:kv_cache_usage_perc{{{sel}}}", "{{pod}}"), unit="percentunit", w=24),
            )),
            *rows,
        ),
    )


def evaluation_board(training_namespace: str) -> Board:
    """The embodied evaluation's success rate per evaluated step (workloads.embodiedEvaluation:
    RLinf's eval/success_once, served by eval_metrics.py as monitoring_metrics.EVAL_METRICS)."""
    sel = f'namespace="{training_namespace}"'
    return Board(
        "rltrain-evaluation", "rltrain / Evaluation",
        f"RLinf's embodied evaluation of the checkpoints of namespace {training_namespace} (Job rltrain-embodied-eval-*).",
        (("Success rate", (
            _s("Success rate, newest evaluation", f"max(rltrain_eval_success_rate{{{sel}}} and on(step) "
               f"topk(1, rltrain_eval_result_timestamp_seconds{{{sel}}}))", "percentunit", w=6),
            _s("Episodes, newest evaluation", f"max(rltrain_eval_episodes{{{sel}}} and on(step) "
               f"topk(1, rltrain_eval_result_timestamp_seconds{{{sel}}}))", w=6),
            _ts("Success rate over evaluated steps",
                Query(f"max by (step) (rltrain_eval_success_rate{{{sel}}})", "step {{step}}"), unit="percentunit", w=12),
        )),),
    )


def all_dashboards(training_namespace: str, serving: bool = False, evaluation: bool = False,
                   embodied_evaluation: bool = False, curves: bool = False) -> list[Board]:
    return [gpu_board(training_namespace, curves), efa_board(), runs_board(training_namespace), cost_board(),
            *([serving_board(training_namespace, evaluation)] if serving else []),
            *([evaluation_board(training_namespace)] if embodied_evaluation else [])]


# --- building ---------------------------------------------------------------------------------------


def _target(q: Query, ref: str) -> prometheus.Dataquery:
    t = prometheus.Dataquery().expr(q.expr).ref_id(ref).datasource(DATASOURCE)
    if q.legend:
        t = t.legend_format(q.legend)
    return t.instant() if q.instant else t.range()


def _panel(p: PanelSpec, panel_id: int):
    builder = {"stat": stat.Panel, "timeseries": timeseries.Panel, "table": table.Panel}[p.kind]()
    builder = builder.id(panel_id).title(p.title).datasource(DATASOURCE).grid_pos(GridPos(h=p.h, w=p.w, x=0, y=0))
    if p.description:
        builder = builder.description(p.description)
    if p.unit:
        builder = builder.unit(p.unit)
    for i, q in enumerate(p.queries):
        builder = builder.with_target(_target(q, chr(ord("A") + i)))
    return builder


def build(board: Board) -> gd.Dashboard:
    d = (gd.Dashboard(board.title).uid(board.uid).description(board.description).tags(["rltrain"])
         .refresh("30s").time("now-3h", "now").timezone("utc").readonly())
    if board.node_variable_metric:
        d = d.with_variable(gd.QueryVariable("node").label("Node").datasource(DATASOURCE)
                            .query(f"label_values({board.node_variable_metric}, node)")
                            .multi(True).include_all(True).all_value(".*")
                            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED))
    next_id = 1  # unique panel ids: Grafana links, shares and edits panels by id
    for title, panels in board.rows:
        d = d.with_row(gd.Row(title).id(next_id))
        next_id += 1
        for p in panels:
            d = d.with_panel(_panel(p, next_id))
            next_id += 1
    return d


def configmap_args(board: Board, namespace: str) -> k8s.core.v1.ConfigMapInitArgs:
    return k8s.core.v1.ConfigMapInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=f"{board.uid}-dashboard", namespace=namespace,
            labels={**MANAGED_BY, "app.kubernetes.io/component": "dashboards", **SIDECAR_LABEL},
            annotations={FOLDER_ANNOTATION: FOLDER}),
        data={f"{board.uid}.json": board.json()})
