"""Monitoring: Prometheus, Grafana and Alertmanager (kube-prometheus-stack), the DCGM exporter, EFA
counters, Ray metrics, the stack's alert and recording rules and its dashboards.

One rule decides whether it is installed (`rltrain:monitoring.enabled`): on by default on a created
cluster, off by default and opt-in on a bring-your-own one (StackConfig.monitoring_enabled), like
every cluster-wide install. Everything lives in its own namespace, whose Pod Security level is
`privileged`: node-exporter needs the host network, PID namespace and root filesystem, the DCGM
exporter the kubelet's pod-resources socket (hostPath) and SYS_ADMIN for profiling metrics, the
EFA exporter a hostPath for node-exporter's textfile directory. The training namespace keeps its
own, stricter level.

- kube-prometheus-stack and dcgm-exporter are Helm releases pinned in versions.py; their values
  are built here (`kps_values`, `dcgm_values`) and reviewable in the render. Neither chart ships a
  values.schema.json at the pinned version, so the values are checked by tests against the chart
  defaults' keys instead (tests/test_monitoring.py).
- Nothing is exposed outside the cluster: every Service ClusterIP, no Ingress; open Grafana with
  `kubectl port-forward` (README "Monitoring").
- Prometheus keeps its data on a gp3 EBS claim. On a created cluster the stack declares the EBS CSI
  add-on (pinned per Kubernetes minor, its role handed over by EKS Pod Identity) and the gp3
  StorageClass; on a bring-your-own cluster, `monitoring.storageClass` or the cluster's default.
- The Grafana admin password is a Pulumi secret (`rltrain:grafanaAdminPassword`), delivered as a
  Kubernetes Secret the chart reads (`grafana.admin.existingSecret`), never a Helm value.
- EFA: components/scripts/efa_metrics.py, from an immutable ConfigMap named by its content, runs
  as a DaemonSet on the GPU nodes and writes node-exporter textfile metrics into a host directory
  node-exporter reads with its textfile collector.
- Ray: a PodMonitor for run pods that declare a container port named `ray-metrics` (Ray's
  metrics-export-port), and a NetworkPolicy that admits Prometheus to that port of the run pods and
  nothing else (their own policies admit only same-run traffic).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Callable, Literal, Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field

from components.k8s import dashboards, kueue, monitoring_metrics, monitoring_rules, node_health
from components.stack import versions
from components.stack.config import GRAFANA_PASSWORD_KEY, StackConfig
from components.stack.labels import (GPU_INSTANCE_ANNOTATION, GPU_NODES_ANNOTATION, GPU_TAINT_KEY, MANAGED_BY,
                                     ROLE_LABEL)
from components.k8s import security

RELEASE = "kube-prometheus-stack"
DCGM_RELEASE = "dcgm-exporter"
# Service names the chart derives from the release name (its fullname, truncated to 26 characters).
GRAFANA_SERVICE = f"{RELEASE}-grafana"
# Short on purpose: checkov's secret scan (test_checkov) flags a longer name beside "existingSecret"
# as a high-entropy string.
GRAFANA_SECRET = "grafana-admin"
ALERT_SECRET = "rltrain-alert-receiver"
ALERT_SECRET_KEY = "value"
STORAGE_CLASS = "rltrain-gp3"
EBS_CSI_POLICY = "arn:aws:iam::aws:policy/service-role/AmazonEBSCSIDriverPolicy"
# node-exporter's textfile collector directory on the host, shared with the EFA exporter.
TEXTFILE_HOST_DIR = "/var/lib/node_exporter/textfile_collector"
EFA_APP = "rltrain-efa-metrics"
EFA_SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "efa_metrics.py"
EFA_INTERVAL_SECONDS = 15
# Ray's metrics-export-port (8080 in the AWS distributed-training reference, FACTS "Monitoring").
# A run pod is scraped when it declares this port under this name.
RAY_METRICS_PORT = 8080
RAY_METRICS_PORT_NAME = "ray-metrics"
KUBERAY_METRICS_PORT_NAME = "metrics"
RUN_LABEL = "rltrain/run"
# kube-state-metrics: labels copied into kube_node_labels / kube_pod_labels (off by default).
KSM_LABELS_ALLOWLIST = (f"nodes=[node.kubernetes.io/instance-type,{','.join(ROLE_LABEL)}]", f"pods=[{RUN_LABEL}]")
# kube-prometheus-stack's own defaults for node-exporter's extraArgs (values.yaml at 88.5.3): a
# list value replaces the default, so they are repeated before ours.
NODE_EXPORTER_DEFAULT_ARGS = (
    "--collector.filesystem.mount-points-exclude=^/(dev|proc|sys|run/containerd/.+|var/lib/docker/.+"
    "|var/lib/kubelet/.+)($|/)",
    "--collector.filesystem.fs-types-exclude=^(autofs|binfmt_misc|bpf|cgroup2?|configfs|debugfs|devpts"
    "|devtmpfs|fusectl|hugetlbfs|iso9660|mqueue|nsfs|overlay|proc|procfs|pstore|rpc_pipefs|securityfs"
    "|selinuxfs|squashfs|sysfs|tracefs|erofs)$",
)
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


class AlertReceiverArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["slack", "webhook", "pagerduty"]
    channel: Optional[str] = None


class MonitoringArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    namespace: str
    training_namespace: str
    kubernetes_version: str
    retention_days: int = Field(ge=1)
    storage_size_gib: int = Field(ge=10)
    # None: the stack's own gp3 class on a created cluster, the cluster's default class on a
    # bring-your-own one (unless monitoring.storageClass names one).
    storage_class: Optional[str] = None
    # A created cluster: the stack declares the EBS CSI add-on and the gp3 StorageClass.
    created_cluster: bool = False
    # The EKS node monitoring agent runs on the GPU nodes (always on a created cluster, where the
    # stack installs it; monitoring.nodeMonitoringAgent on a bring-your-own one): the DCGM exporter
    # then uses the agent's host engine, never its own (node_health.py).
    node_hostengine: bool = False
    efa: bool = False
    queued_alert_minutes: int = Field(30, ge=1)
    alert_receiver: Optional[AlertReceiverArgs] = None
    # The GPU node shape, recorded on the namespace like on the training one (its exporters run
    # on those nodes); the policy rules read it from the Namespace objects.
    gpu_instance_type: str = ""
    gpu_node_count: int = 0
    gpu_capacity_block: bool = False
    # Elastic GPU capacity (gpuNodes.elastic): Karpenter holds 0 to maxNodes GPU nodes, zero whenever
    # nothing runs, so no node count is "the group whole" (issue 44 item 4).
    gpu_elastic: bool = False
    # workloads.serving: a PodMonitor for the vLLM server's /metrics and the Serving dashboard.
    serving: bool = False
    # workloads.serving.evaluation: a PodMonitor for the eval-metrics Deployment (accuracy over steps).
    evaluation: bool = False
    # workloads.embodiedEvaluation: the same PodMonitor (success rate over steps) and the Evaluation dashboard.
    embodied_evaluation: bool = False
    # workloads.curves: a PodMonitor for the curves exporter and the runs' panels of the GPU dashboard.
    curves: bool = False
    # The stack installs Kueue: its controller is scraped and the queue alerts name this ClusterQueue.
    kueue_cluster_queue: Optional[str] = None

    @property
    def effective_storage_class(self) -> Optional[str]:
        return STORAGE_CLASS if self.created_cluster else self.storage_class


def monitoring_args(cfg: StackConfig) -> MonitoringArgs:
    m = cfg.monitoring
    r = m.alert_receiver
    return MonitoringArgs(
        namespace=m.namespace, training_namespace=cfg.training.namespace,
        kubernetes_version=cfg.cluster.kubernetes_version, retention_days=m.retention_days,
        storage_size_gib=m.storage_size_gib, storage_class=m.storage_class, created_cluster=not cfg.byo_cluster,
        node_hostengine=not cfg.byo_cluster or m.node_monitoring_agent,
        efa=cfg.gpu_nodes.efa_enabled, queued_alert_minutes=m.queued_alert_minutes,
        alert_receiver=AlertReceiverArgs(type=r.type, channel=r.channel) if r else None,
        gpu_instance_type=cfg.gpu_nodes.instance_type, gpu_node_count=cfg.gpu_nodes.count,
        gpu_capacity_block=cfg.gpu_nodes.capacity.type == "capacity-block",
        gpu_elastic=cfg.gpu_nodes.elastic.enabled,
        serving=cfg.workloads.serving.enabled,
        evaluation=cfg.workloads.serving.enabled and cfg.workloads.serving.evaluation.enabled,
        embodied_evaluation=cfg.workloads.embodied_evaluation.enabled,
        curves=cfg.curves_enabled,
        kueue_cluster_queue=kueue.cluster_queue_name(cfg) if cfg.kueue_install and cfg.kueue_enabled else None)


def rules_args(a: MonitoringArgs) -> monitoring_rules.RulesArgs:
    return monitoring_rules.RulesArgs(training_namespace=a.training_namespace,
                                      queued_alert_minutes=a.queued_alert_minutes,
                                      cluster_queue=a.kueue_cluster_queue,
                                      # The node group's fixed size, where the stack creates it (a
                                      # Capacity Block's group holds no node outside its window; an
                                      # elastic stack holds none while idle, its normal state).
                                      gpu_node_count=a.gpu_node_count if a.created_cluster and not a.gpu_capacity_block
                                      and not a.gpu_elastic else 0)


def _labels(component: str) -> dict[str, str]:
    return {**MANAGED_BY, "app.kubernetes.io/component": component}


# --- namespace, storage ---------------------------------------------------------------------------


def namespace_args(a: MonitoringArgs) -> k8s.core.v1.NamespaceInitArgs:
    version = f"v{a.kubernetes_version}"
    return k8s.core.v1.NamespaceInitArgs(metadata=k8s.meta.v1.ObjectMetaArgs(name=a.namespace, labels={
        **_labels("monitoring"),
        # node-exporter (hostNetwork, hostPID, hostPath /), dcgm-exporter (hostPath pod-resources,
        # SYS_ADMIN) and the EFA exporter (hostPath) are refused by `baseline`.
        "pod-security.kubernetes.io/enforce": "privileged",
        "pod-security.kubernetes.io/enforce-version": version,
        # Anything new that needs more than baseline shows up as a warning and in the audit log.
        "pod-security.kubernetes.io/warn": "baseline",
        "pod-security.kubernetes.io/warn-version": version,
        "pod-security.kubernetes.io/audit": "baseline",
        "pod-security.kubernetes.io/audit-version": version,
    }, annotations={GPU_INSTANCE_ANNOTATION: a.gpu_instance_type, GPU_NODES_ANNOTATION: str(a.gpu_node_count)}))


def storage_class_args() -> k8s.storage.v1.StorageClassInitArgs:
    return k8s.storage.v1.StorageClassInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=STORAGE_CLASS, labels=_labels("monitoring")),
        provisioner="ebs.csi.aws.com",
        # gp3 baseline (3000 IOPS, 125 MiB/s) is ample for one Prometheus; encrypted with the
        # account's EBS key (aws-ebs-csi-driver docs/parameters.md).
        parameters={"type": "gp3", "encrypted": "true", "csi.storage.k8s.io/fstype": "ext4"},
        # The system nodes span two AZs and an EBS volume lives in one: create it where the
        # Prometheus pod is scheduled, not before.
        volume_binding_mode="WaitForFirstConsumer",
        # Metrics can be rebuilt, checkpoints cannot: the volume goes with its claim. The claim
        # outlives the Prometheus StatefulSet (Kubernetes keeps volumeClaimTemplate claims) and
        # goes with the namespace, i.e. on `pulumi destroy`.
        reclaim_policy="Delete",
        allow_volume_expansion=True,
    )


# --- Helm values ------------------------------------------------------------------------------------


def alertmanager_config(a: MonitoringArgs) -> dict[str, Any]:
    """Merged by Helm into the chart's default config (its inhibit rules and templates stay); the
    credential is a file of the mounted Secret (Alertmanager *_file fields, v0.34.0)."""
    receivers: list[dict[str, Any]] = [{"name": "null"}]
    default = "null"
    r = a.alert_receiver
    if r:
        path = f"/etc/alertmanager/secrets/{ALERT_SECRET}/{ALERT_SECRET_KEY}"
        if r.type == "slack":
            cfg: dict[str, Any] = {"api_url_file": path, "send_resolved": True}
            if r.channel:
                cfg["channel"] = r.channel
            receivers.append({"name": "rltrain", "slack_configs": [cfg]})
        elif r.type == "webhook":
            receivers.append({"name": "rltrain", "webhook_configs": [{"url_file": path, "send_resolved": True}]})
        else:
            receivers.append({"name": "rltrain",
                              "pagerduty_configs": [{"routing_key_file": path, "send_resolved": True}]})
        default = "rltrain"
    return {
        "route": {
            "receiver": default,
            "group_by": ["alertname", "namespace", "node"],
            "group_wait": "30s", "group_interval": "5m", "repeat_interval": "12h",
            # Watchdog always fires (it proves the pipeline works): never sent.
            "routes": [{"receiver": "null", "matchers": ['alertname = "Watchdog"']}],
        },
        "receivers": receivers,
    }


def kps_values(a: MonitoringArgs) -> dict[str, Any]:
    """kube-prometheus-stack 88.5.3 values (keys checked against the chart's values.yaml in
    tests/test_monitoring.py)."""
    storage: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                               "resources": {"requests": {"storage": f"{a.storage_size_gib}Gi"}}}
    if a.effective_storage_class:
        storage["storageClassName"] = a.effective_storage_class
    retention_size_gib = int(a.storage_size_gib * 0.85)
    clusterip = {"type": "ClusterIP"}
    return {
        "crds": {"enabled": True},
        # EKS runs the control plane: kube-controller-manager, kube-scheduler and etcd cannot be
        # scraped, and kube-proxy binds its metrics to 127.0.0.1:10249 (helm-charts#977,
        # terraform-aws-eks#742). Their ServiceMonitors would only fail and their "...Down" alerts
        # always fire: switched off with their rules (the rule templates check both switches).
        "kubeControllerManager": {"enabled": False},
        "kubeScheduler": {"enabled": False},
        "kubeEtcd": {"enabled": False},
        "kubeProxy": {"enabled": False},
        "defaultRules": {"create": True, "rules": {
            "etcd": False, "kubeControllerManager": False, "kubeSchedulerAlerting": False,
            "kubeSchedulerRecording": False, "kubeProxy": False, "windows": False}},
        "windowsMonitoring": {"enabled": False},
        "nodeExporter": {"operatingSystems": {"aix": {"enabled": False}, "darwin": {"enabled": False}}},
        "prometheus-node-exporter": {
            # The EFA exporter writes efa.prom into this host directory on GPU nodes; the chart
            # default tolerates every NoSchedule taint, so node-exporter runs there too.
            "extraArgs": [*NODE_EXPORTER_DEFAULT_ARGS, f"--collector.textfile.directory={TEXTFILE_HOST_DIR}"],
            "extraHostVolumeMounts": [{"name": "textfile", "hostPath": TEXTFILE_HOST_DIR,
                                       "mountPath": TEXTFILE_HOST_DIR, "readOnly": True,
                                       "type": "DirectoryOrCreate"}],
        },
        "kube-state-metrics": {"metricLabelsAllowlist": list(KSM_LABELS_ALLOWLIST)},
        "prometheus": {
            "service": clusterip,
            "ingress": {"enabled": False},
            "prometheusSpec": {
                "retention": f"{a.retention_days}d",
                # Below the volume size: Prometheus deletes old blocks before the disk fills.
                "retentionSize": f"{retention_size_gib}GB",
                "storageSpec": {"volumeClaimTemplate": {"spec": storage}},
                # The claim goes with the StatefulSet (the release): on destroy Kubernetes deletes
                # it, and the StorageClass's reclaim Delete the EBS volume, while the EBS CSI driver
                # still runs (the namespace waits for its claims and goes before the driver, below).
                # prometheus-operator CommonPrometheusFields.persistentVolumeClaimRetentionPolicy,
                # copied onto the StatefulSet; StatefulSetAutoDeletePVC is GA since Kubernetes 1.32
                # (KEP-1847). Scaling keeps the claim: whenScaled Retain.
                "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Retain"},
                # Pick up every ServiceMonitor, PodMonitor and PrometheusRule, not only this
                # release's (FACTS "Monitoring"): the DCGM exporter's, the Ray PodMonitor, our rules.
                "serviceMonitorSelectorNilUsesHelmValues": False,
                "podMonitorSelectorNilUsesHelmValues": False,
                "ruleSelectorNilUsesHelmValues": False,
                "probeSelectorNilUsesHelmValues": False,
                "resources": {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"memory": "8Gi"}},
            },
        },
        "alertmanager": {
            "service": clusterip,
            "ingress": {"enabled": False},
            "config": alertmanager_config(a),
            "alertmanagerSpec": {"secrets": [ALERT_SECRET] if a.alert_receiver else []},
        },
        "grafana": {
            # Keys admin-user / admin-password: the chart's defaults (grafana.admin.userKey/passwordKey).
            "admin": {"existingSecret": GRAFANA_SECRET},
            "service": clusterip,
            "ingress": {"enabled": False},
            # The sidecar loads every ConfigMap labelled grafana_dashboard=1 (any namespace, the
            # chart's default) into the folder its grafana_folder annotation names.
            "sidecar": {"dashboards": {"folderAnnotation": dashboards.FOLDER_ANNOTATION,
                                       "provider": {"foldersFromFilesStructure": True}}},
            # The chart's `helm test` pod: never run by Pulumi.
            "testFramework": {"enabled": False},
        },
    }


def dcgm_values(a: MonitoringArgs) -> dict[str, Any]:
    """dcgm-exporter chart 4.8.2 values (keys checked against its values.yaml in the tests)."""
    return {
        # The chart's counter list plus the per-XID-class count the XID alert reads
        # (monitoring_metrics.DCGM_ADDED_COUNTERS; customMetrics is the complete list, not added to it).
        "customMetrics": monitoring_metrics.dcgm_counters_csv(),
        # GPU nodes only: its default tolerations cover the control-plane taint only (FACTS).
        "nodeSelector": dict(ROLE_LABEL),
        "tolerations": [GPU_TOLERATION],
        # One DCGM host engine per GPU node: the node monitoring agent's, where it runs
        # (node_health.py); otherwise the exporter's own embedded one (the chart's default).
        **node_health.exporter_hostengine_values(a.node_hostengine),
        "serviceMonitor": {
            "enabled": True,
            "interval": "15s",
            # Per-pod GPU attribution: the chart always sets DCGM_EXPORTER_KUBERNETES=true and mounts
            # the kubelet's pod-resources socket, so each GPU's series carries the pod, namespace
            # and container it is allocated to. Those names collide with the target labels
            # Prometheus adds for the exporter's own pod, which would rename the GPU's to
            # exported_pod/...; dropping the target's copies keeps `pod`, `namespace`,
            # `container` meaning the GPU's user (and absent on an idle GPU), as in
            # kube-state-metrics, so the two join.
            "relabelings": [
                {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"},
                {"action": "labeldrop", "regex": "pod|namespace|container"},
            ],
        },
    }


# --- EFA exporter -----------------------------------------------------------------------------------


def efa_script() -> tuple[str, str]:
    """(ConfigMap name, script text): named by content, immutable (a change is a new ConfigMap)."""
    text = EFA_SCRIPT.read_text()
    digest = hashlib.sha256(text.encode()).hexdigest()[:10]
    return f"{EFA_APP}-{digest}", text


def efa_configmap_args(a: MonitoringArgs) -> k8s.core.v1.ConfigMapInitArgs:
    name, text = efa_script()
    return k8s.core.v1.ConfigMapInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, namespace=a.namespace, labels=_labels("efa-metrics")),
        immutable=True, data={EFA_SCRIPT.name: text})


# Root: it writes into a host directory the kubelet creates root-owned (hostPath ignores fsGroup).
EFA_SKIP_REASONS = security.Reasons(
    root="it writes into the host's textfile directory, which the kubelet creates root-owned (hostPath ignores fsGroup)")
_FRESH = ("import os, sys, time; "
          f"sys.exit(time.time() - os.path.getmtime('/textfile/efa.prom') > {4 * EFA_INTERVAL_SECONDS})")


def efa_daemonset_args(a: MonitoringArgs) -> k8s.apps.v1.DaemonSetInitArgs:
    cm_name, _ = efa_script()
    selector = {"app.kubernetes.io/name": EFA_APP}
    probe = k8s.core.v1.ProbeArgs(exec_=k8s.core.v1.ExecActionArgs(command=["python3", "-c", _FRESH]),
                                  initial_delay_seconds=EFA_INTERVAL_SECONDS * 2,
                                  period_seconds=EFA_INTERVAL_SECONDS * 2, timeout_seconds=5)
    ds = k8s.apps.v1.DaemonSetInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=EFA_APP, namespace=a.namespace,
                                            labels={**_labels("efa-metrics"), **selector}),
        spec=k8s.apps.v1.DaemonSetSpecArgs(
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector),
            update_strategy=k8s.apps.v1.DaemonSetUpdateStrategyArgs(type="RollingUpdate"),
            template=k8s.core.v1.PodTemplateSpecArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(labels={**_labels("efa-metrics"), **selector}),
                spec=k8s.core.v1.PodSpecArgs(
                    node_selector=dict(ROLE_LABEL),
                    tolerations=[k8s.core.v1.TolerationArgs(**GPU_TOLERATION)],
                    # The same class the device plugins and DCGM exporter use: a node-level agent
                    # is not preempted by a training pod.
                    priority_class_name="system-node-critical",
                    automount_service_account_token=False,
                    security_context=security.pod_security_context(),
                    containers=[k8s.core.v1.ContainerArgs(
                        name="efa-metrics",
                        image=versions.EFA_EXPORTER_IMAGE,
                        image_pull_policy="IfNotPresent",
                        command=["python3", f"/scripts/{EFA_SCRIPT.name}"],
                        env=[
                            k8s.core.v1.EnvVarArgs(name="TEXTFILE_DIR", value="/textfile"),
                            k8s.core.v1.EnvVarArgs(name="INTERVAL_SECONDS", value=str(EFA_INTERVAL_SECONDS)),
                            k8s.core.v1.EnvVarArgs(name="NODE_NAME", value_from=k8s.core.v1.EnvVarSourceArgs(
                                field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path="spec.nodeName"))),
                            k8s.core.v1.EnvVarArgs(name="PYTHONDONTWRITEBYTECODE", value="1"),
                        ],
                        resources=k8s.core.v1.ResourceRequirementsArgs(
                            requests={"cpu": "10m", "memory": "32Mi"}, limits={"cpu": "100m", "memory": "64Mi"}),
                        security_context=security.container_security_context(read_only_root=True),
                        liveness_probe=probe, readiness_probe=probe,
                        # /sys/class/infiniband is read from the container's own /sys: it is not
                        # namespaced, the pod sees every EFA device of the host (efa_metrics.py).
                        volume_mounts=[
                            k8s.core.v1.VolumeMountArgs(name="script", mount_path="/scripts", read_only=True),
                            k8s.core.v1.VolumeMountArgs(name="textfile", mount_path="/textfile"),
                        ],
                    )],
                    volumes=[
                        k8s.core.v1.VolumeArgs(name="script", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
                            name=cm_name, default_mode=0o555)),
                        k8s.core.v1.VolumeArgs(name="textfile", host_path=k8s.core.v1.HostPathVolumeSourceArgs(
                            path=TEXTFILE_HOST_DIR, type="DirectoryOrCreate")),
                    ],
                ),
            ),
        ),
    )
    # checkov skips derived from the pod, on the DaemonSet (which checkov reads; not on the template,
    # whose change would roll the exporter pods).
    ds.metadata.annotations = security.annotate(ds.spec.template, EFA_SKIP_REASONS, kind="DaemonSet")
    return ds


# --- Ray --------------------------------------------------------------------------------------------


def kueue_servicemonitor_spec() -> dict[str, Any]:
    """Kueue's controller metrics (kueue_pending_workloads, kueue_evicted_workloads_total, ...): the
    chart's metrics Service in kueue-system, endpoint as the chart's own ServiceMonitor has it
    (charts/kueue/templates/prometheus/monitor.yaml at v0.19.2: HTTPS on port `https`, the scraper's
    service-account token, the controller's self-signed certificate not verified). The endpoint
    authorizes the token (controller-runtime WithAuthenticationAndAuthorization, cmd/kueue/main.go):
    kube-prometheus-stack's Prometheus ClusterRole allows GET on the /metrics non-resource URL."""
    return {
        "namespaceSelector": {"matchNames": [versions.KUEUE_NAMESPACE]},
        "selector": {"matchLabels": dict(kueue.METRICS_SERVICE_LABELS)},
        "endpoints": [{
            "port": kueue.METRICS_PORT_NAME, "path": "/metrics", "scheme": "https", "interval": "30s",
            "bearerTokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token",
            "tlsConfig": {"insecureSkipVerify": True},
        }],
    }


def ray_podmonitor_spec(a: MonitoringArgs) -> dict[str, Any]:
    return {
        "namespaceSelector": {"matchNames": [a.training_namespace]},
        "selector": {"matchExpressions": [{"key": RUN_LABEL, "operator": "Exists"}]},
        # Only pods that declare the port by this name are scraped (Prometheus keeps the targets
        # whose container port name matches): a run without Ray metrics is not a failing target.
        # The launcher forms name the port `ray-metrics`; KubeRay's pods (the RayJob form) name it
        # `metrics`, the name KubeRay's head Service reserves for 8080 (kuberay v1.6.2
        # ray-operator/controllers/ray/common/service.go).
        "podMetricsEndpoints": [{"port": port, "path": "/metrics", "interval": "15s",
                                 "relabelings": [{"sourceLabels": ["__meta_kubernetes_pod_node_name"],
                                                  "targetLabel": "node", "action": "replace"}]}
                                for port in (RAY_METRICS_PORT_NAME, KUBERAY_METRICS_PORT_NAME)],
    }


def serving_podmonitor_spec(a: MonitoringArgs) -> dict[str, Any]:
    """The vLLM server's /metrics on its API port (named `http` by components/workloads/serving.py,
    whose NetworkPolicy admits Prometheus there); pods selected by the serving component label."""
    return {
        "namespaceSelector": {"matchNames": [a.training_namespace]},
        "selector": {"matchLabels": {"app.kubernetes.io/component": "serving"}},
        "podMetricsEndpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
    }


def eval_metrics_podmonitor_spec(a: MonitoringArgs) -> dict[str, Any]:
    """The evaluation results as metrics (components/scripts/eval_metrics.py) on the port named
    `metrics` of the eval-metrics Deployment (components/workloads/evaluation.py, whose
    NetworkPolicy admits Prometheus there). Every 60 s: the results change every few hours."""
    return {
        "namespaceSelector": {"matchNames": [a.training_namespace]},
        "selector": {"matchLabels": {"app.kubernetes.io/component": "eval-metrics"}},
        "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "60s"}],
    }


def curves_podmonitor_spec(a: MonitoringArgs) -> dict[str, Any]:
    """The runs' headline scalars (components/scripts/curves_metrics.py) on the port named `metrics`
    of the curves Deployment (components/workloads/curves.py, whose NetworkPolicy admits Prometheus
    there). Every 60 s: the exporter rescans the event files every 30 s."""
    return {
        "namespaceSelector": {"matchNames": [a.training_namespace]},
        "selector": {"matchLabels": {"app.kubernetes.io/component": "curves"}},
        "podMetricsEndpoints": [{"port": "metrics", "path": "/metrics", "interval": "60s"}],
    }


def ray_network_policy_args(a: MonitoringArgs) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """Added to the runs' own policies (NetworkPolicies are a union): Prometheus pods of the
    monitoring namespace may reach the Ray metrics port of a run pod, nothing else more."""
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name="rltrain-allow-prometheus", namespace=a.training_namespace,
                                            labels=_labels("monitoring")),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_expressions=[
                k8s.meta.v1.LabelSelectorRequirementArgs(key=RUN_LABEL, operator="Exists")]),
            policy_types=["Ingress"],
            ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                from_=[k8s.networking.v1.NetworkPolicyPeerArgs(
                    namespace_selector=k8s.meta.v1.LabelSelectorArgs(
                        match_labels={"kubernetes.io/metadata.name": a.namespace}),
                    # The operator's Prometheus pods (the chart's Service selects them by this label).
                    pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={"app.kubernetes.io/name": "prometheus"}),
                )],
                ports=[k8s.networking.v1.NetworkPolicyPortArgs(port=RAY_METRICS_PORT, protocol="TCP")],
            )],
        ),
    )


# --- the component ----------------------------------------------------------------------------------


# (name, managed policy ARNs, parent) -> an IAM role EKS Pod Identity can hand to a service account.
# iam.pod_identity_role, handed in by __main__.py (k8s/ does not import aws/): (name, policies, parent,
# cluster=(name, ARN), namespace=, service_account=) -> a role whose `arn` follows its attachments.
RoleFactory = Callable[..., Any]


class Monitoring(pulumi.ComponentResource):
    """See the module docstring. `cluster`: the created cluster's name as its output (None on a
    bring-your-own cluster); `after`: what the EBS CSI add-on needs first (the Pod Identity agent);
    `pod_identity_role(name, policy_arns, parent)`: creates the EBS CSI driver's role (aws/iam.py's
    pod_identity_role, handed in by __main__.py: k8s/ reads nothing of aws/)."""

    namespace: pulumi.Output[str]

    def __init__(self, name: str, args: MonitoringArgs, *, grafana_password: pulumi.Input[str],
                 alert_secret: Optional[pulumi.Input[str]] = None, cluster: Optional[pulumi.Input[str]] = None,
                 after: tuple[pulumi.Resource, ...] = (), pod_identity_role: Optional[RoleFactory] = None,
                 opts: Optional[pulumi.ResourceOptions] = None, cluster_arn: Optional[pulumi.Input[str]] = None):
        super().__init__("rltrain:index:Monitoring", name, None, opts)
        if args.alert_receiver and alert_secret is None:
            raise ValueError("monitoring.alertReceiver needs its secret value")
        # What the component waits for (the training namespace, the node groups), stated again on
        # the children that must come after it rather than left to the parent link.
        outer = list(opts.depends_on) if opts and isinstance(opts.depends_on, (list, tuple)) else []
        child = pulumi.ResourceOptions(parent=self, depends_on=outer)
        before_release: list[pulumi.Resource] = []
        storage_first: list[pulumi.Resource] = []

        if args.created_cluster and cluster is not None:
            if pod_identity_role is None:
                raise ValueError("a created cluster's monitoring needs pod_identity_role for the EBS CSI driver")
            # The role trusts only the driver's controller service account of this cluster (with the
            # cluster's ARN: its account), not every Pod Identity association in the account.
            role = pod_identity_role(
                f"{name}-ebs-csi-role", [EBS_CSI_POLICY], self,
                cluster=(cluster, cluster_arn) if cluster_arn is not None else None,
                namespace="kube-system", service_account=versions.EBS_CSI_SERVICE_ACCOUNT)
            # The association is created with the add-on, so its controller pods start with
            # credentials (a separate association would need them restarted).
            addon = aws.eks.Addon(
                f"{name}-ebs-csi", cluster_name=cluster, addon_name=versions.EBS_CSI_ADDON,
                addon_version=versions.eks_addons(args.kubernetes_version)[versions.EBS_CSI_ADDON],
                pod_identity_associations=[aws.eks.AddonPodIdentityAssociationArgs(
                    role_arn=role.arn, service_account=versions.EBS_CSI_SERVICE_ACCOUNT)],
                # Every EKS add-on resolves conflicts the same way (deploy model `addon-conflicts`).
                resolve_conflicts_on_create="OVERWRITE", resolve_conflicts_on_update="OVERWRITE",
                opts=pulumi.ResourceOptions(parent=self, depends_on=[*after, *outer]))
            sc = k8s.storage.v1.StorageClass(f"{name}-gp3", storage_class_args(),
                                             pulumi.ResourceOptions(parent=self, depends_on=[addon]))
            before_release += [addon, sc]
            storage_first = [addon, sc]

        # After the EBS CSI driver and its StorageClass, so deleted before them: `pulumi destroy`
        # waits for the namespace to be gone, claims included, before it deletes the driver, which
        # then deletes no volume (the volumes of claims deleted after it stay, billed).
        ns = k8s.core.v1.Namespace(f"{name}-namespace", namespace_args(args),
                                   pulumi.ResourceOptions(parent=self, depends_on=[*outer, *storage_first]))
        in_ns = pulumi.ResourceOptions(parent=self, depends_on=[ns])
        before_release.insert(0, ns)

        grafana = k8s.core.v1.Secret(f"{name}-grafana-admin", k8s.core.v1.SecretInitArgs(
            metadata=k8s.meta.v1.ObjectMetaArgs(name=GRAFANA_SECRET, namespace=args.namespace,
                                                labels=_labels("grafana")),
            type="Opaque",
            string_data={"admin-user": "admin", "admin-password": pulumi.Output.secret(grafana_password)}), in_ns)
        before_release.append(grafana)
        if args.alert_receiver:
            alert = k8s.core.v1.Secret(f"{name}-alert-receiver", k8s.core.v1.SecretInitArgs(
                metadata=k8s.meta.v1.ObjectMetaArgs(name=ALERT_SECRET, namespace=args.namespace,
                                                    labels=_labels("alertmanager")),
                type="Opaque", string_data={ALERT_SECRET_KEY: pulumi.Output.secret(alert_secret)}), in_ns)
            before_release.append(alert)

        # Waits for its resources (and the operator's webhook) to be ready; the first install
        # provisions the Prometheus volume, hence the longer timeout.
        self.stack = k8s.helm.v3.Release(
            f"{name}-kube-prometheus-stack", name=RELEASE, chart=versions.KUBE_PROMETHEUS_STACK.chart,
            version=versions.KUBE_PROMETHEUS_STACK.version, namespace=args.namespace,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=versions.KUBE_PROMETHEUS_STACK.repo),
            values=kps_values(args), timeout=900,
            opts=pulumi.ResourceOptions(parent=self, depends_on=before_release))
        after_crds = pulumi.ResourceOptions(parent=self, depends_on=[self.stack])
        # Its ServiceMonitor needs the operator's CRDs first (FACTS).
        k8s.helm.v3.Release(
            f"{name}-dcgm-exporter", name=DCGM_RELEASE, chart=versions.DCGM_EXPORTER.chart,
            version=versions.DCGM_EXPORTER.version, namespace=args.namespace,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=versions.DCGM_EXPORTER.repo),
            values=dcgm_values(args), opts=after_crds)

        if args.efa:
            cm = k8s.core.v1.ConfigMap(f"{name}-efa-script", efa_configmap_args(args), in_ns)
            k8s.apps.v1.DaemonSet(f"{name}-efa-metrics", efa_daemonset_args(args),
                                  pulumi.ResourceOptions(parent=self, depends_on=[ns, cm]))

        k8s.apiextensions.CustomResource(
            f"{name}-rules", api_version="monitoring.coreos.com/v1", kind="PrometheusRule",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="rltrain", namespace=args.namespace, labels=_labels("rules")),
            spec=monitoring_rules.rules_spec(rules_args(args)), opts=after_crds)
        if args.kueue_cluster_queue:
            k8s.apiextensions.CustomResource(
                f"{name}-kueue-servicemonitor", api_version="monitoring.coreos.com/v1", kind="ServiceMonitor",
                metadata=k8s.meta.v1.ObjectMetaArgs(name="rltrain-kueue", namespace=args.namespace,
                                                    labels=_labels("kueue")),
                spec=kueue_servicemonitor_spec(), opts=after_crds)
        k8s.apiextensions.CustomResource(
            f"{name}-ray-podmonitor", api_version="monitoring.coreos.com/v1", kind="PodMonitor",
            metadata=k8s.meta.v1.ObjectMetaArgs(name="rltrain-ray", namespace=args.namespace, labels=_labels("ray")),
            spec=ray_podmonitor_spec(args), opts=after_crds)
        # In the training namespace: the component's opts carry the dependency on it.
        k8s.networking.v1.NetworkPolicy(f"{name}-ray-scrape", ray_network_policy_args(args), child)

        if args.serving:
            k8s.apiextensions.CustomResource(
                f"{name}-serving-podmonitor", api_version="monitoring.coreos.com/v1", kind="PodMonitor",
                metadata=k8s.meta.v1.ObjectMetaArgs(name="rltrain-serving", namespace=args.namespace,
                                                    labels=_labels("serving")),
                spec=serving_podmonitor_spec(args), opts=after_crds)
        if args.evaluation or args.embodied_evaluation:
            k8s.apiextensions.CustomResource(
                f"{name}-eval-metrics-podmonitor", api_version="monitoring.coreos.com/v1", kind="PodMonitor",
                metadata=k8s.meta.v1.ObjectMetaArgs(name="rltrain-eval-metrics", namespace=args.namespace,
                                                    labels=_labels("eval-metrics")),
                spec=eval_metrics_podmonitor_spec(args), opts=after_crds)
        if args.curves:
            k8s.apiextensions.CustomResource(
                f"{name}-curves-podmonitor", api_version="monitoring.coreos.com/v1", kind="PodMonitor",
                metadata=k8s.meta.v1.ObjectMetaArgs(name="rltrain-curves", namespace=args.namespace,
                                                    labels=_labels("curves")),
                spec=curves_podmonitor_spec(args), opts=after_crds)
        for board in dashboards.all_dashboards(args.training_namespace, serving=args.serving,
                                               evaluation=args.evaluation,
                                               embodied_evaluation=args.embodied_evaluation, curves=args.curves):
            k8s.core.v1.ConfigMap(f"{name}-dashboard-{board.uid}", dashboards.configmap_args(board, args.namespace),
                                  in_ns)
        self.namespace = ns.metadata.name
        self.register_outputs({"namespace": self.namespace})


def build_monitoring(cfg: StackConfig, *, secret: Callable[[str], pulumi.Output[str]],
                     cluster: Optional[pulumi.Input[str]] = None, after: tuple[pulumi.Resource, ...] = (),
                     pod_identity_role: Optional[RoleFactory] = None,
                     opts: Optional[pulumi.ResourceOptions] = None,
                     cluster_arn: Optional[pulumi.Input[str]] = None) -> Optional[Monitoring]:
    """The Monitoring component when the stack wants it (StackConfig.monitoring_enabled); `secret`
    reads a secret config key (pulumi.Config("rltrain").require_secret)."""
    if not cfg.monitoring_enabled:
        return None
    r = cfg.monitoring.alert_receiver
    return Monitoring("monitoring", monitoring_args(cfg), grafana_password=secret(GRAFANA_PASSWORD_KEY),
                      alert_secret=secret(r.secret_key) if r else None, cluster=cluster, after=after,
                      pod_identity_role=pod_identity_role, opts=opts, cluster_arn=cluster_arn)
