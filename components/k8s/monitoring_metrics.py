"""The metrics each exporter of the monitoring stack emits, pinned to its version with the source.

A dashboard panel or a rule that names a metric nobody emits shows "No data" or never fires, and
nothing says why. `tests/test_monitoring_metrics.py` reads every PromQL expression the stack
provisions (dashboards, alerts, recording rules), extracts the metric names with `metric_names()`
and checks each against `EMITTED`. Change a list only from its source, at the pinned version.
"""

from __future__ import annotations

import re

from components.scripts import efa_metrics
from components.stack import versions

# --- DCGM exporter ------------------------------------------------------------------------------
# The chart's default counter list: dcgm-exporter chart 4.8.2 (versions.DCGM_EXPORTER), file
# deployment/templates/metrics-configmap.yaml at tag 4.5.3-4.8.2, the uncommented lines. The chart
# mounts it over /etc/dcgm-exporter/default-counters.csv, so these (and only these) are exported.
# The DCGM_FI_PROF_* fields need the profiling module (datacenter GPUs: A100, H100, L4); on a GPU
# without it the exporter logs "metric not enabled" and skips them (NVIDIA/dcgm-exporter#349).
DCGM_SOURCE = "NVIDIA/dcgm-exporter deployment/templates/metrics-configmap.yaml @ 4.5.3-4.8.2"
DCGM_DEFAULT_COUNTERS = (
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP", "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES", "DCGM_FI_PROF_PCIE_RX_BYTES",
)
# What the stack adds to that list (monitoring.dcgm_values sets the chart's customMetrics, which
# replaces the list: the defaults above plus these). DCGM_EXP_XID_ERRORS_COUNT, the per-XID-class
# count, is commented out of the default list (etc/default-counters.csv at the same tag) and only
# exported when listed (internal/pkg/collector/xid_collector.go IsDCGMExpXIDErrorsCountEnabled).
DCGM_ADDED_COUNTERS = ("DCGM_EXP_XID_ERRORS_COUNT",)
# The Prometheus type of each, as the chart's list declares it (the rest are gauges).
DCGM_COUNTER_TYPE = {n: "counter" for n in (
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_EXP_XID_ERRORS_COUNT")}


def dcgm_counters_csv() -> str:
    """The exporter's counter list (field, type, help) for the chart's customMetrics: the chart's
    defaults plus DCGM_ADDED_COUNTERS. customMetrics replaces the whole list (values.yaml)."""
    return "".join(f"{n}, {DCGM_COUNTER_TYPE.get(n, 'gauge')}, {n} (rltrain list)\n"
                   for n in DCGM_DEFAULT_COUNTERS + DCGM_ADDED_COUNTERS)
# Labels on every GPU series (internal/pkg/rendermetrics/render_metrics.go at the same tag):
# gpu, UUID, pci_bus_id, device, modelName, Hostname (= NODE_NAME, the node); with Kubernetes
# mapping on, the GPU's pod, namespace and container (internal/pkg/transformation/const.go).

# --- EFA textfile exporter (this repo) ----------------------------------------------------------
# components/scripts/efa_metrics.py: its fixed names, and one counter per hw_counters file named
# by COUNTER_METRIC_FORMAT (efa_<file>_total). The files are the kernel's EFA port counters
# (efa_metrics.KNOWN_PORT_COUNTERS, drivers/infiniband/hw/efa/efa_verbs.c); an older kernel has
# fewer of them (rdma_write_*, the network group).
EFA_SOURCE = "components/scripts/efa_metrics.py (METRIC_NAMES, COUNTER_METRIC_FORMAT, KNOWN_PORT_COUNTERS)"
EFA_METRICS = tuple(sorted(set(efa_metrics.METRIC_NAMES) | {
    efa_metrics.COUNTER_METRIC_FORMAT.format(c) for c in efa_metrics.KNOWN_PORT_COUNTERS}))

# --- kube-state-metrics -------------------------------------------------------------------------
# kube-state-metrics 2.20.0 (the kube-prometheus-stack 88.5.3 subchart), docs/metrics/cluster/
# node-metrics.md, workload/job-metrics.md and workload/pod-metrics.md at tag v2.20.0: the
# families of the objects the stack watches. kube_node_labels / kube_pod_labels carry only the
# labels allowed by --metric-labels-allowlist (monitoring.KSM_LABELS_ALLOWLIST).
KSM_SOURCE = f"kubernetes/kube-state-metrics docs/metrics @ v{versions.KUBE_STATE_METRICS_APP}"
KUBE_STATE_METRICS = (
    "kube_job_annotations", "kube_job_complete", "kube_job_created", "kube_job_failed", "kube_job_info",
    "kube_job_labels", "kube_job_owner", "kube_job_spec_active_deadline_seconds", "kube_job_spec_completions",
    "kube_job_spec_parallelism", "kube_job_status_active", "kube_job_status_completion_time",
    "kube_job_status_failed", "kube_job_status_ready", "kube_job_status_start_time", "kube_job_status_succeeded",
    "kube_job_status_suspended",
    "kube_node_annotations", "kube_node_created", "kube_node_deletion_timestamp", "kube_node_info",
    "kube_node_labels", "kube_node_role", "kube_node_spec_pod_cidrs", "kube_node_spec_taint",
    "kube_node_spec_unschedulable", "kube_node_status_addresses", "kube_node_status_allocatable",
    "kube_node_status_capacity", "kube_node_status_condition",
    "kube_pod_annotations", "kube_pod_completion_time", "kube_pod_container_info",
    "kube_pod_container_resource_limits", "kube_pod_container_resource_requests",
    "kube_pod_container_state_started", "kube_pod_container_status_last_terminated_exitcode",
    "kube_pod_container_status_last_terminated_reason", "kube_pod_container_status_last_terminated_timestamp",
    "kube_pod_container_status_ready", "kube_pod_container_status_restarts_total",
    "kube_pod_container_status_running", "kube_pod_container_status_terminated",
    "kube_pod_container_status_terminated_reason", "kube_pod_container_status_waiting",
    "kube_pod_container_status_waiting_reason", "kube_pod_created", "kube_pod_deletion_timestamp",
    "kube_pod_info", "kube_pod_ips", "kube_pod_labels", "kube_pod_nodeselectors", "kube_pod_owner",
    "kube_pod_restart_policy", "kube_pod_scheduler", "kube_pod_service_account", "kube_pod_start_time",
    "kube_pod_status_container_ready_time", "kube_pod_status_disruption_reason",
    "kube_pod_status_initialized_time", "kube_pod_status_phase", "kube_pod_status_qos_class",
    "kube_pod_status_ready", "kube_pod_status_ready_time", "kube_pod_status_reason", "kube_pod_status_scheduled",
    "kube_pod_status_scheduled_time", "kube_pod_status_unschedulable", "kube_pod_status_unscheduled_time",
    "kube_pod_tolerations",
)

# --- Kueue -------------------------------------------------------------------------------------
# kubernetes-sigs/kueue pkg/metrics/metrics.go at v0.19.2 (versions.KUEUE), Subsystem "kueue": the
# ClusterQueue families the rules read. The cluster_queue_resource_* and _nominal_quota families are
# reported only with metrics.enableClusterQueueResources (kueue.manager_config sets it).
KUEUE_SOURCE = f"kubernetes-sigs/kueue pkg/metrics/metrics.go @ v{versions.KUEUE.version}"
KUEUE_METRICS = tuple("kueue_" + m for m in (
    "pending_workloads", "admitted_active_workloads", "reserving_active_workloads",
    "evicted_workloads_total", "evicted_workloads_once_total", "admitted_workloads_total",
    "cluster_queue_status",
    "cluster_queue_resource_reservation", "cluster_queue_resource_usage", "cluster_queue_nominal_quota",
))

# --- Ray ----------------------------------------------------------------------------------------
# Ray 2.60.0 (requirements-dev.txt pins the same release), the node metrics of the per-node
# reporter agent: keys of METRICS_GAUGES in ray/dashboard/modules/reporter/reporter_agent.py,
# exported with the `ray_` prefix on each node's metrics-export-port. The cluster_* gauges come
# from the autoscaler only (KubeRay), which these runs do not use: left out.
RAY_SOURCE = "ray 2.60.0 ray/dashboard/modules/reporter/reporter_agent.py METRICS_GAUGES (prefix ray_)"
RAY_METRICS = tuple("ray_" + m for m in (
    "node_cpu_count", "node_cpu_utilization", "node_disk_free", "node_disk_usage", "node_gpus_available",
    "node_gpus_utilization", "node_gram_available", "node_gram_used", "node_mem_available", "node_mem_total",
    "node_mem_used", "node_network_received", "node_network_sent", "node_network_receive_speed",
    "node_network_send_speed",
))

# --- vLLM (the serving Deployment) ---------------------------------------------------------------
# vLLM's V1 engine Prometheus logger, on the server's own port at /metrics: names of
# PrometheusStatLogger in vllm-project/vllm vllm/v1/metrics/loggers.py (the versions.VLLM_OPENAI_IMAGE
# line; read from the repository's stored copy, the v0.11.0 tag tree itself not read here). Counters
# are declared without `_total` (vllm:generation_tokens) and exported with it by prometheus_client;
# histograms as _bucket/_sum/_count. vllm:gpu_cache_usage_perc is the deprecated name of
# vllm:kv_cache_usage_perc (introduced by vllm-project/vllm#18354; a vLLM 0.10.0 scrape already
# carries it, vllm-project/production-stack#617; no longer emitted by default in later releases,
# kubernetes-sigs/inference-perf#277): the dashboard reads the current one.
VLLM_SOURCE = "vllm-project/vllm vllm/v1/metrics/loggers.py PrometheusStatLogger (image " + versions.VLLM_OPENAI_IMAGE + ")"
VLLM_METRICS = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
    *(f"vllm:{h}_{part}" for h in ("e2e_request_latency_seconds", "time_to_first_token_seconds")
      for part in ("bucket", "sum", "count")),
)

# --- the evaluation's results (components/scripts/eval_metrics.py, this repo) -----------------------
EVAL_SOURCE = "components/scripts/eval_metrics.py (this repository)"
EVAL_METRICS = ("rltrain_eval_accuracy", "rltrain_eval_correct", "rltrain_eval_judged",
                "rltrain_eval_success_rate", "rltrain_eval_episodes",
                "rltrain_eval_result_timestamp_seconds", "rltrain_eval_unreadable_files")

# --- the runs' headline scalars (components/scripts/curves_metrics.py, this repo) -------------------
CURVES_SOURCE = "components/scripts/curves_metrics.py (this repository)"
CURVES_METRICS = ("rltrain_run_scalar", "rltrain_run_scalar_step")

EMITTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "dcgm-exporter": (DCGM_SOURCE, DCGM_DEFAULT_COUNTERS + DCGM_ADDED_COUNTERS),
    "efa-metrics": (EFA_SOURCE, EFA_METRICS),
    "kube-state-metrics": (KSM_SOURCE, KUBE_STATE_METRICS),
    "kueue": (KUEUE_SOURCE, KUEUE_METRICS),
    "ray": (RAY_SOURCE, RAY_METRICS),
    "vllm": (VLLM_SOURCE, VLLM_METRICS),
    "eval-metrics": (EVAL_SOURCE, EVAL_METRICS),
    "curves-metrics": (CURVES_SOURCE, CURVES_METRICS),
}


# --- metric names in a PromQL expression --------------------------------------------------------

_KEYWORDS = {"and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
             "offset", "bool", "inf", "nan", "atan2", "start", "end"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_LABEL_LIST = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.$])([a-zA-Z_:][a-zA-Z0-9_:]*)(?=\s*(\(?))")


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, keywords,
    label names (inside `{}` or a `by (...)` list), durations or Grafana variables.

    Not a full parser: enough for the expressions of this repository, tested against them.
    """
    s = _STRING.sub('""', expr)
    s = _BRACES.sub("{}", s)
    s = _BRACKETS.sub("[]", s)
    s = _LABEL_LIST.sub(" ", s)
    s = re.sub(r"\$\w+", " ", s)  # Grafana variables outside selectors ($__range, $interval)
    names = set()
    for m in _IDENT.finditer(s):
        name, paren = m.group(1), m.group(2)
        if paren or name.lower() in _KEYWORDS:
            continue
        names.add(name)
    return names
