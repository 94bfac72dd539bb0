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
- `xid` on DCGM_EXP_XID_ERRORS_COUNT: the XID class (dcgm-exporter internal/pkg/collector/
  xid_collector.go at 4.5.3-4.8.2); `cluster_queue`, `reason`, `underlying_cause`, `resource` on the
  Kueue series (kueue pkg/metrics/metrics.go at v0.19.2).

What each alert means and what to do: docs/queue-operations.md.
"""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field

from components.stack import catalog, node_repair
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
QUEUE_RUNBOOK = "docs/queue-operations.md#alerts"
# DCGM_EXP_XID_ERRORS_COUNT is not a running total: each scrape reports, per GPU and XID class, how
# many XIDs DCGM logged in the last window (--xid-count-window-size, default 5 min; dcgm-exporter
# pkg/cmd/app.go and internal/pkg/collector/expcollector.go at 4.5.3-4.8.2), and the class's series
# disappears once the window holds none. So increase() would miscount (a window that slides past one
# XID reads as a counter reset); the alert takes the window's highest count over XID_ALERT_MINUTES
# (longer than the exporter's window, so a missed scrape does not resolve it) and resolves once the
# burst has left both windows.
XID_ALERT_MINUTES = 10
# A failed run alerts on the transition: for this long after its Job turned Failed, then resolves
# (a failed Job stays Failed until deleted; an alert on the state would fire until then).
RUN_FAILED_ALERT_MINUTES = 60
# Kueue: the window over which a ClusterQueue's pending count must have grown, with none of its GPUs
# reserved, for RltrainQueueStuckGpusIdle; and over which an eviction or deactivation alerts.
QUEUE_STUCK_MINUTES = 15
QUEUE_STUCK_FOR_MINUTES = 5
EVICTION_ALERT_MINUTES = 30
GPU_RESOURCE = "nvidia.com/gpu"
# Node repair (docs/gpu-failure-runbook.md): the conditions the EKS node monitoring agent sets on a
# node (EKS user guide, node-health: one per category; AcceleratedHardwareReady and NetworkingReady
# are what a broken GPU or EFA device turns False), which kube-state-metrics exports like any node
# condition (kube_node_status_condition, one series per condition and status).
AGENT_CONDITIONS = ("AcceleratedHardwareReady", "NetworkingReady", "KernelReady", "StorageReady",
                    "ContainerRuntimeReady")
NODE_UNHEALTHY_MINUTES = 1
# A GPU node missing this long: EKS is replacing it (or the capacity is gone).
REPAIR_ALERT_MINUTES = 2
# How far back a run's replaced pods are counted: a replaced pod alerts for this long, then resolves.
RUN_RESTART_WINDOW_MINUTES = 60
REPAIR_RUNBOOK = "docs/gpu-failure-runbook.md#alerts"
# A reboot repair keeps the node's name (EKS user guide, node-health-nma: most H100 XIDs are repaired
# by a reboot), so no GPU node goes missing and RltrainGpuNodeRepairInProgress (a count of nodes)
# stays quiet. What shows it: the node NotReady after the agent's condition turned False on it
# within a repair's time (node_repair.repair_bound_seconds: the longest repair wait + a cold pull),
# then Ready again under the same name. A node whose Node object is younger than the window is a
# replacement that registered NotReady, not a reboot.
REBOOT_LOOKBACK_MINUTES = node_repair.repair_bound_seconds() // 60
REBOOT_ALERT_MINUTES = 1
REBOOTED_WINDOW_MINUTES = 60

GPU_ROLE_SELECTOR = ",".join(f'label_{k.replace(".", "_").replace("/", "_").replace("-", "_")}="{v}"'
                              for k, v in ROLE_LABEL.items())


class RulesArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    training_namespace: str
    queued_alert_minutes: int = Field(ge=1)
    # The stack's ClusterQueue when its Kueue is scraped (the stack installs Kueue): the Kueue alerts.
    cluster_queue: Optional[str] = None
    # GPU nodes the node group keeps (gpuNodes.count) on a created cluster; 0: not known or not fixed
    # (a bring-your-own cluster's, a Capacity Block's outside its window): no repair-in-progress alert.
    gpu_node_count: int = Field(0, ge=0)


def _alert(name: str, expr: str, summary: str, description: str, *, severity: str,
           for_minutes: int = 0, runbook: str = RUNBOOK) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_minutes:
        rule["for"] = f"{for_minutes}m"
    rule["labels"] = {"severity": severity, "team": "rltrain"}
    rule["annotations"] = {"summary": summary, "description": description, "runbook_url": runbook}
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
         "expr": f"count by (instance_type) (label_replace(kube_node_labels{{{GPU_ROLE_SELECTOR}}}, "
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
               f'max by (node, gpu, UUID, xid) (max_over_time(DCGM_EXP_XID_ERRORS_COUNT{{xid!=""}}[{XID_ALERT_MINUTES}m])) > 0',
               "GPU {{ $labels.gpu }} on {{ $labels.node }} reported XID {{ $labels.xid }}",
               "DCGM logged XID {{ $labels.xid }} on this GPU ({{ $value }} in the exporter's window). "
               "48/63/64/94/95 are ECC errors, 79 means the GPU fell off the bus, 13/31/43 are usually the "
               "application's fault. Check `kubectl describe node {{ $labels.node }}` and the run's logs; a "
               "hardware XID needs the node drained and replaced. Resolves once no new XID of this class "
               f"has been seen for {XID_ALERT_MINUTES} minutes.",
               severity="critical", runbook=QUEUE_RUNBOOK),
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
               f"and on (node) kube_node_labels{{{GPU_ROLE_SELECTOR}}}",
               "GPU node {{ $labels.node }} is not Ready",
               "Its pods are evicted after the toleration timeout and a multi-node run loses a rank. "
               "EKS node auto-repair replaces a node that stays unhealthy.",
               severity="critical", for_minutes=NODE_NOT_READY_MINUTES),
    ]


def repair_alerts(a: RulesArgs) -> list[dict[str, Any]]:
    """A broken GPU node, its repair, and what it did to the run (docs/gpu-failure-runbook.md)."""
    ns = a.training_namespace
    conditions = "|".join(AGENT_CONDITIONS)
    run = 'label_rltrain_run!=""'
    out = [
        _alert("RltrainGpuNodeUnhealthy",
               f'max by (node, condition) (kube_node_status_condition{{condition=~"{conditions}", status="false"}}) == 1\n'
               f"and on (node) kube_node_labels{{{GPU_ROLE_SELECTOR}}}",
               "GPU node {{ $labels.node }}: {{ $labels.condition }} is False",
               "The EKS node monitoring agent found a fault on the node (AcceleratedHardwareReady: a GPU "
               "XID, a GPU off the bus, DCGM health; NetworkingReady: an EFA or network interface down). "
               "EKS node repair replaces or reboots the node once the condition has held for its repair wait "
               "(10 minutes for AcceleratedHardwareReady), one node at a time; the run's pods on it are lost "
               "and the run restarts from its newest complete checkpoint. `kubectl describe node "
               "{{ $labels.node }}` shows the condition's reason. Resolves when the condition is True again "
               "or the node is gone.",
               severity="critical", for_minutes=NODE_UNHEALTHY_MINUTES, runbook=REPAIR_RUNBOOK),
        _alert("RltrainRunPodsReplaced",
               f"count by (namespace, label_rltrain_run) (max_over_time(kube_pod_labels{{namespace=\"{ns}\", {run}}}"
               f"[{RUN_RESTART_WINDOW_MINUTES}m]))\n"
               f"- count by (namespace, label_rltrain_run) (kube_pod_labels{{namespace=\"{ns}\", {run}}})\n> 0",
               "Run {{ $labels.label_rltrain_run }}: {{ $value }} pod(s) replaced in the last "
               f"{RUN_RESTART_WINDOW_MINUTES} minutes",
               "Pods of the run were replaced by new ones: a node lost or repaired (the pod's DisruptionTarget "
               "condition; not counted against workloads.retries), a whole-run restart by Kueue (after a "
               "PodsReady timeout: the Workload's status.requeueState.count, bounded by "
               "workloads.infrastructureRestarts; after NodeFailures: not counted there), or a retry after a "
               "trainer failure (counted). Restarts from the same checkpoint are bounded by the resume "
               "wrapper whatever caused them (workloads.infrastructureRestarts). `kubectl get events -n {{ $labels.namespace }} "
               "--field-selector reason=TaintManagerEviction` and `kubectl get workloads -n "
               "{{ $labels.namespace }}` tell which. Resolves once no pod was replaced for "
               f"{RUN_RESTART_WINDOW_MINUTES} minutes.",
               severity="warning", runbook=REPAIR_RUNBOOK),
        *reboot_alerts(),
    ]
    if a.gpu_node_count:
        out.insert(1, _alert(
            "RltrainGpuNodeRepairInProgress",
            f"(count(kube_node_labels{{{GPU_ROLE_SELECTOR}}}) or vector(0)) < {a.gpu_node_count}",
            "{{ $value }} of " + str(a.gpu_node_count) + " GPU nodes in the cluster",
            "A GPU node of the node group is missing: EKS is replacing it (node repair or a lost "
            "instance) and a run that needs every node waits for it. A replacement normally joins "
            "within minutes; if it does not, the node group's health (`aws eks describe-nodegroup`) "
            "names the cause (capacity, quota). Resolves when the group is whole again.",
            severity="warning", for_minutes=REPAIR_ALERT_MINUTES, runbook=REPAIR_RUNBOOK))
    return out


def reboot_alerts() -> list[dict[str, Any]]:
    """A reboot repair, while it happens and after (docs/gpu-failure-runbook.md, "A reboot repair")."""
    conditions = "|".join(AGENT_CONDITIONS)
    ready = 'kube_node_status_condition{condition="Ready", status="true"}'
    gpu = f"kube_node_labels{{{GPU_ROLE_SELECTOR}}}"
    return [
        _alert("RltrainGpuNodeRebootRepairInProgress",
               f"{ready} == 0\n"
               f"and on (node) max by (node) (max_over_time(kube_node_status_condition{{condition=~\"{conditions}\", "
               f"status=\"false\"}}[{REBOOT_LOOKBACK_MINUTES}m])) == 1\n"
               f"and on (node) {gpu}",
               "GPU node {{ $labels.node }} is rebooting after a fault the node monitoring agent reported",
               "The node is not Ready, and within the last " + str(REBOOT_LOOKBACK_MINUTES) + " minutes the "
               "EKS node monitoring agent reported a fault on it: EKS node repair is rebooting it (most H100 "
               "XIDs are repaired by a reboot, which keeps the node's name, so RltrainGpuNodeRepairInProgress "
               "does not fire), or terminating it for a replacement (then the node disappears and that alert "
               "takes over). The kubelet's graceful shutdown marked the run's pods on it Failed with "
               "DisruptionTarget (TerminationByKubelet), which the pod failure policy does not count; the Job "
               "recreates them and they wait, Pending, for the node. `kubectl get node {{ $labels.node }}` "
               "shows it NotReady, then Ready under the same name. Resolves when it is Ready again.",
               severity="warning", for_minutes=REBOOT_ALERT_MINUTES, runbook=REPAIR_RUNBOOK),
        _alert("RltrainGpuNodeRebooted",
               f"{ready} == 1\n"
               f"and on (node) min_over_time({ready}[{REBOOTED_WINDOW_MINUTES}m]) == 0\n"
               f"and on (node) (time() - kube_node_created) > {REBOOTED_WINDOW_MINUTES * 60}\n"
               f"and on (node) {gpu}",
               "GPU node {{ $labels.node }} came back Ready under the same name",
               f"The node was not Ready within the last {REBOOTED_WINDOW_MINUTES} minutes and is Ready again, "
               "and its Node object is older than that: it was rebooted in place (a reboot repair, or a kubelet "
               "that stopped reporting), not replaced. A run's pods lost in the reboot show as Failed with "
               "DisruptionTarget (graceful shutdown: not counted) or, if the kubelet could not shut them down "
               "(a hard reboot), ContainerStatusUnknown with exit code 137 (counted against workloads.retries: "
               "`kubectl get job <run> -o jsonpath='{.status.failed}'`). Resolves "
               f"{REBOOTED_WINDOW_MINUTES} minutes after it was last not Ready.",
               severity="info", runbook=REPAIR_RUNBOOK),
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
               f'max by (namespace, job_name) (kube_job_failed{{namespace="{ns}", condition="true"}}) == 1\n'
               f'unless max by (namespace, job_name) (kube_job_failed{{namespace="{ns}", condition="true"}} '
               f"offset {RUN_FAILED_ALERT_MINUTES}m) == 1",
               "Run {{ $labels.job_name }} has failed",
               "The Job reached its failure condition (retries exhausted, a fail-fast exit code or "
               "its deadline). `kubectl describe job {{ $labels.job_name }} -n {{ $labels.namespace }}`. "
               f"Alerts for {RUN_FAILED_ALERT_MINUTES} minutes after the failure, then resolves: the Job "
               "stays Failed until it is deleted or replaced.",
               severity="critical", runbook=QUEUE_RUNBOOK),
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


def _counted(selector: str, by: str, minutes: int) -> str:
    """Events of a counter in the last `minutes`: its increase, or its series appearing. Kueue creates
    a labelled counter series at its first event, already at 1, and increase() never counts a
    series' first sample: the first deactivation of a queue would go unseen."""
    return (f"sum by ({by}) (increase({selector}[{minutes}m])) > 0\n"
            f"or (sum by ({by}) ({selector}) > 0 unless sum by ({by}) ({selector} offset {minutes}m))")


def queue_alerts(a: RulesArgs) -> list[dict[str, Any]]:
    """Kueue's own view of the queue (kueue pkg/metrics/metrics.go at v0.19.2): a queued workload
    has no pod until it is admitted, so the pod alerts above never see it."""
    cq = f'cluster_queue="{a.cluster_queue}"'
    pending = f"sum by (cluster_queue) (kueue_pending_workloads{{{cq}}})"
    return [
        _alert("RltrainWorkloadPendingTooLong",
               f"{pending} > 0",
               "ClusterQueue {{ $labels.cluster_queue }} has had workloads waiting for "
               + str(a.queued_alert_minutes) + " minutes",
               "kueue_pending_workloads (status active or inadmissible) stayed above zero: a run is not "
               f"admitted. `kubectl get workloads -n {a.training_namespace}` shows which and why "
               "(QuotaReserved=False names the missing resource; inadmissible means it can never fit as "
               "configured).",
               severity="warning", for_minutes=a.queued_alert_minutes, runbook=QUEUE_RUNBOOK),
        _alert("RltrainWorkloadEvicted",
               _counted(f'kueue_evicted_workloads_total{{{cq}, reason!="Deactivated"}}',
                        "cluster_queue, reason, underlying_cause", EVICTION_ALERT_MINUTES),
               "A workload of {{ $labels.cluster_queue }} was evicted ({{ $labels.reason }})",
               "Kueue evicted an admitted workload and requeued it (PodsReadyTimeout: its pods were not "
               "all Ready within waitForPodsReady.timeout - slow image pull, a pod that cannot start; "
               "NodeFailures: a node of the run went away). After backoffLimitCount PodsReady-timeout "
               "requeues it is deactivated (RltrainWorkloadDeactivated); NodeFailures requeues are not "
               f"counted there (the resume wrapper bounds those restarts). `kubectl get workloads -n {a.training_namespace}`.",
               severity="warning", runbook=QUEUE_RUNBOOK),
        _alert("RltrainWorkloadDeactivated",
               _counted(f'kueue_evicted_workloads_total{{{cq}, reason="Deactivated"}}',
                        "cluster_queue, underlying_cause", EVICTION_ALERT_MINUTES),
               "A workload of {{ $labels.cluster_queue }} was deactivated ({{ $labels.underlying_cause }})",
               "Kueue set the workload inactive (RequeuingLimitExceeded: evicted backoffLimitCount times "
               "for not getting Ready). Its Job stays suspended with no pod and no failure: nothing else "
               "alerts, nothing retries. Find it with `kubectl get workloads -n "
               f"{a.training_namespace} -o custom-columns=NAME:.metadata.name,ACTIVE:.spec.active`, fix the "
               "cause, then re-activate it (set the Workload's spec.active to true) or replace the run.",
               severity="critical", runbook=QUEUE_RUNBOOK),
        _alert("RltrainQueueStuckGpusIdle",
               f"{pending}\n"
               f"> sum by (cluster_queue) (kueue_pending_workloads{{{cq}}} offset {QUEUE_STUCK_MINUTES}m)\n"
               "unless on (cluster_queue)\n"
               f"max_over_time(sum by (cluster_queue) (kueue_cluster_queue_resource_reservation{{{cq}, "
               f'resource="{GPU_RESOURCE}"}})[{QUEUE_STUCK_MINUTES}m:1m]) > 0',
               "ClusterQueue {{ $labels.cluster_queue }}: work piles up while its GPUs sit idle",
               f"More workloads pending than {QUEUE_STUCK_MINUTES} minutes ago and none of the queue's GPUs "
               "reserved in that time: nothing is admitted although the quota is free. Usually the head "
               "of the queue can never fit (StrictFIFO blocks everything behind it: a resource the queue "
               "does not cover, more nodes than the quota) or the ClusterQueue is inactive. `kubectl "
               "describe clusterqueue {{ $labels.cluster_queue }}` and `kubectl get workloads -n "
               f"{a.training_namespace}`.",
               severity="critical", for_minutes=QUEUE_STUCK_FOR_MINUTES, runbook=QUEUE_RUNBOOK),
    ]


def rules_spec(a: RulesArgs) -> dict[str, Any]:
    """The PrometheusRule spec; the same document is a Prometheus rules file for promtool."""
    groups = [
        {"name": "rltrain.cost", "interval": "1m", "rules": cost_rules()},
        {"name": "rltrain.gpu", "rules": gpu_alerts(a)},
        {"name": "rltrain.efa", "rules": efa_alerts()},
        {"name": "rltrain.repair", "rules": repair_alerts(a)},
        {"name": "rltrain.runs", "rules": run_alerts(a)},
    ]
    if a.cluster_queue:
        groups.append({"name": "rltrain.queue", "rules": queue_alerts(a)})
    return {"groups": groups}


def expressions(spec: dict[str, Any]) -> list[tuple[str, str]]:
    """(rule name, expr) of every rule."""
    return [(r.get("alert") or r["record"], r["expr"]) for g in spec["groups"] for r in g["rules"]]


