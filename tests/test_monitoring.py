"""The Monitoring component as rendered: on by default on created clusters, opt-in on byo; pinned
releases with reviewed values; GPU-only exporters; storage, secrets, exposure and Ray scraping."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
from support import obj, objects, rendered

from components.k8s import dashboards, monitoring
from components.offline import render, unset_secrets
from components.offline.mock_engine import run_program
from components.stack import validate, versions
from components.stack.labels import GPU_TAINT_KEY, ROLE_LABEL

CREATED = ("dev", "p4de", "p5")
RELEASE = "kubernetes:helm.sh/v3:Release"
CHART_KEYS = json.loads((Path(monitoring.__file__).parent / "monitoring_chart_keys.json").read_text())

# The command README.md and docs/monitoring.md give for Grafana (the chart's Service of the release).
PORT_FORWARD = "kubectl -n monitoring port-forward svc/kube-prometheus-stack-grafana 3000:80"


def releases(r) -> dict[str, dict]:
    return {x["inputs"]["chart"]: x["inputs"] for x in r.resources if x["type"] == RELEASE}


def mon(r) -> list[dict]:
    return [x for x in r.resources if x["name"].startswith("monitoring")]


def render_with(stack: str, monitoring_cfg: dict, secrets: dict[str, str], **sections: dict) -> render.Rendered:
    """Render a stack with `rltrain:monitoring` (and any other `sections`) replaced and extra
    secret config keys."""
    values, secret_keys, _ = unset_secrets.load_stack(stack)
    values = {**values, "rltrain:monitoring": json.dumps(monitoring_cfg)}
    values.update({f"rltrain:{k}": json.dumps(v) for k, v in sections.items()})
    values.update({f"rltrain:{k}": v for k, v in secrets.items()})
    secret_keys = set(secret_keys) | {f"rltrain:{k}" for k in secrets}
    cfg = validate.load({k[8:]: v for k, v in values.items() if k.startswith("rltrain:")},
                      secret_keys={k[8:] for k in secret_keys}, program=True)
    result = run_program(stack=stack, config=values, secret_keys=secret_keys)
    return render.Rendered(stack=stack, cfg=cfg, result=result, manifests=render.manifests(result))


@pytest.fixture(scope="module")
def byo_opted_in():
    return render_with("byo", {"enabled": True, "storageClass": "gp3-existing", "retentionDays": 30,
                               "alertReceiver": {"type": "slack", "secretKey": "slackWebhook", "channel": "#gpu"}},
                       {"grafanaAdminPassword": "x", "slackWebhook": "https://hooks.example/T/B/X"})


# --- on, off, opt-in --------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", CREATED)
def test_on_by_default_on_created_clusters_with_pinned_releases(stack):
    r = rendered(stack)
    assert r.cfg.monitoring.enabled is None and r.cfg.monitoring_enabled
    rel = releases(r)
    for chart in (versions.KUBE_PROMETHEUS_STACK, versions.DCGM_EXPORTER):
        got = rel[chart.chart]
        assert (got["version"], got["repositoryOpts"]["repo"], got["namespace"]) == (chart.version, chart.repo,
                                                                                    "monitoring")
    assert (versions.KUBE_PROMETHEUS_STACK.version, versions.DCGM_EXPORTER.version) == ("88.5.3", "4.8.2")  # FACTS
    kinds = {d["kind"] for d in r.manifests if d["metadata"].get("namespace") == "monitoring"}
    assert {"DaemonSet", "PodMonitor", "PrometheusRule", "ConfigMap", "Secret"} <= kinds


def test_byo_renders_no_monitoring_unless_opted_in(byo_opted_in):
    r = rendered("byo")
    assert not r.cfg.monitoring_enabled and not mon(r)
    assert "monitoring" not in {d["metadata"]["name"] for d in objects(r, "Namespace")}
    o = byo_opted_in
    assert set(releases(o)) >= {"kube-prometheus-stack", "dcgm-exporter"}
    # Nothing on AWS, no StorageClass of ours: the claim uses the configured class.
    assert not [x for x in mon(o) if x["type"].startswith("aws:")] and not objects(o, "StorageClass")
    spec = releases(o)["kube-prometheus-stack"]["values"]["prometheus"]["prometheusSpec"]
    assert spec["storageSpec"]["volumeClaimTemplate"]["spec"]["storageClassName"] == "gp3-existing"
    assert spec["retention"] == "30d"
    assert o.violations() == []


def test_config_defaults_and_refusals():
    base = {"gpuNodes": {"instanceType": "p5.48xlarge", "count": 2}, "workloads": {"image": "r/x:1"},
            "cluster": {"publicAccessCidrs": ["203.0.113.0/24"]}}
    cfg = validate.load(base, region="us-east-1")
    m = cfg.monitoring
    assert (m.namespace, m.retention_days, m.storage_size_gib, m.queued_alert_minutes, m.alert_receiver) == (
        "monitoring", 15, 100, 30, None)
    with pytest.raises(validate.ConfigError) as e:  # the program reads the password: it must exist
        validate.load(base, region="us-east-1", program=True)
    assert "rltrain:grafanaAdminPassword" in dict(e.value.problems)
    with pytest.raises(validate.ConfigError) as e:  # never in plain text
        validate.load({**base, "grafanaAdminPassword": "hunter2"}, region="us-east-1")
    assert "is not secret" in dict(e.value.problems)["rltrain:grafanaAdminPassword"]
    bad = {**base, "monitoring": {"namespace": "rltrain", "storageClass": "gp2",
                                  "alertReceiver": {"type": "webhook", "secretKey": "hook", "channel": "#x"}}}
    with pytest.raises(validate.ConfigError) as e:
        validate.load(bad, secret_keys={"grafanaAdminPassword"}, region="us-east-1")
    p = dict(e.value.problems)
    assert {"rltrain:monitoring.namespace", "rltrain:monitoring.storageClass", "rltrain:hook",
            "rltrain:monitoring.alertReceiver.channel"} <= set(p)
    off = validate.load({**base, "monitoring": {"enabled": False}}, region="us-east-1", program=True)
    assert not off.monitoring_enabled


# --- namespace, storage, secrets, exposure ------------------------------------------------------------


@pytest.mark.parametrize("stack", CREATED)
def test_namespace_allows_what_its_daemonsets_need(stack):
    labels = obj(rendered(stack), "Namespace", "monitoring")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels["pod-security.kubernetes.io/warn"] == "baseline"
    train = obj(rendered(stack), "Namespace", "rltrain")["metadata"]["labels"]
    assert train["pod-security.kubernetes.io/enforce"] != "privileged"


@pytest.mark.parametrize("stack", CREATED)
def test_prometheus_on_gp3_with_the_ebs_csi_addon_and_its_role(stack):
    r = rendered(stack)
    sc = obj(r, "StorageClass", monitoring.STORAGE_CLASS)
    assert (sc["provisioner"], sc["parameters"]["type"], sc["volumeBindingMode"]) == (
        "ebs.csi.aws.com", "gp3", "WaitForFirstConsumer")
    addon = next(x for x in r.resources if x["name"] == "monitoring-ebs-csi")
    assert addon["inputs"]["addonVersion"] == versions.eks_addons(r.cfg.cluster.kubernetes_version)["aws-ebs-csi-driver"]
    assoc = addon["inputs"]["podIdentityAssociations"]
    assert [a["serviceAccount"] for a in assoc] == ["ebs-csi-controller-sa"]
    assert "aws:eks/addon:Addon::cluster-pod-identity-agent" in addon["dependsOn"]
    attached = [x["inputs"]["policyArn"] for x in mon(r) if x["type"].endswith("RolePolicyAttachment")]
    assert attached == [monitoring.EBS_CSI_POLICY]
    spec = releases(r)["kube-prometheus-stack"]["values"]["prometheus"]["prometheusSpec"]
    claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
    assert claim["storageClassName"] == monitoring.STORAGE_CLASS and claim["resources"]["requests"]["storage"] == "100Gi"
    assert (spec["retention"], spec["retentionSize"]) == ("15d", "85GB")
    kps = next(x for x in r.resources if x["name"] == "monitoring-kube-prometheus-stack")
    assert {"aws:eks/addon:Addon::monitoring-ebs-csi", "kubernetes:storage.k8s.io/v1:StorageClass::monitoring-gp3",
            "kubernetes:core/v1:Secret::monitoring-grafana-admin"} <= set(kps["dependsOn"])


@pytest.mark.parametrize("stack", CREATED)
def test_grafana_password_is_a_secret_and_nothing_is_exposed(stack):
    r = rendered(stack)
    secret = obj(r, "Secret", monitoring.GRAFANA_SECRET)
    # Hidden in the render ("[secret]", or the placeholder naming the command that sets it).
    assert secret["stringData"]["admin-password"].startswith("[secret")
    values = releases(r)["kube-prometheus-stack"]["values"]
    assert values["grafana"]["admin"]["existingSecret"] == monitoring.GRAFANA_SECRET
    assert "adminPassword" not in values["grafana"]
    for part in ("grafana", "prometheus", "alertmanager"):
        assert values[part]["service"]["type"] == "ClusterIP" and values[part]["ingress"]["enabled"] is False
    assert not [d for d in r.manifests if d["kind"] == "Ingress"
                or (d["kind"] == "Service" and d["spec"].get("type") in ("LoadBalancer", "NodePort"))]


@pytest.mark.parametrize("stack", CREATED)
def test_rules_that_always_fire_on_eks_are_off(stack):
    v = releases(rendered(stack))["kube-prometheus-stack"]["values"]
    for part in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy"):
        assert v[part]["enabled"] is False
    assert not any(v["defaultRules"]["rules"][k] for k in ("etcd", "kubeControllerManager", "kubeSchedulerAlerting",
                                                             "kubeProxy"))
    spec = v["prometheus"]["prometheusSpec"]
    assert not (spec["serviceMonitorSelectorNilUsesHelmValues"] or spec["podMonitorSelectorNilUsesHelmValues"]
                or spec["ruleSelectorNilUsesHelmValues"])


def test_alert_receiver_credential_is_a_mounted_file(byo_opted_in):
    values = releases(byo_opted_in)["kube-prometheus-stack"]["values"]["alertmanager"]
    assert values["alertmanagerSpec"]["secrets"] == [monitoring.ALERT_SECRET]
    slack = next(r for r in values["config"]["receivers"] if r["name"] == "rltrain")["slack_configs"][0]
    assert slack["api_url_file"] == f"/etc/alertmanager/secrets/{monitoring.ALERT_SECRET}/value"
    assert slack["channel"] == "#gpu" and values["config"]["route"]["receiver"] == "rltrain"
    assert obj(byo_opted_in, "Secret", monitoring.ALERT_SECRET)["stringData"] == {"value": "[secret]"}
    assert "hooks.example" not in json.dumps(byo_opted_in.resources)


# --- exporters on GPU nodes -------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", CREATED)
def test_dcgm_exporter_on_gpu_nodes_with_pod_attribution(stack):
    v = releases(rendered(stack))["dcgm-exporter"]["values"]
    assert v["nodeSelector"] == ROLE_LABEL
    assert {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in v["tolerations"]
    relabel = v["serviceMonitor"]["relabelings"]
    assert {"action": "labeldrop", "regex": "pod|namespace|container"} in relabel
    assert any(r.get("targetLabel") == "node" for r in relabel)
    dcgm = next(x for x in rendered(stack).resources if x["name"] == "monitoring-dcgm-exporter")
    assert "kubernetes:helm.sh/v3:Release::monitoring-kube-prometheus-stack" in dcgm["dependsOn"]


@pytest.mark.parametrize("stack", CREATED)
def test_efa_exporter_daemonset_runs_the_script_from_a_configmap(stack):
    r = rendered(stack)
    ds = obj(r, "DaemonSet", monitoring.EFA_APP)
    spec = ds["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == ROLE_LABEL
    assert {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    c = spec["containers"][0]
    assert c["command"] == ["python3", "/scripts/efa_metrics.py"] and "@sha256:" in c["image"]
    assert {"name": "TEXTFILE_DIR", "value": "/textfile"} in c["env"]
    cm_name = next(v for v in spec["volumes"] if v["name"] == "script")["configMap"]["name"]
    cm = obj(r, "ConfigMap", cm_name)
    assert cm["metadata"]["namespace"] == "monitoring" and cm["immutable"] is True
    assert cm["data"]["efa_metrics.py"] == monitoring.EFA_SCRIPT.read_text()
    host = next(v for v in spec["volumes"] if v["name"] == "textfile")["hostPath"]["path"]
    ne = releases(r)["kube-prometheus-stack"]["values"]["prometheus-node-exporter"]
    assert f"--collector.textfile.directory={host}" in ne["extraArgs"]
    assert ne["extraHostVolumeMounts"][0]["hostPath"] == host and ne["extraHostVolumeMounts"][0]["readOnly"]
    assert list(monitoring.NODE_EXPORTER_DEFAULT_ARGS) == ne["extraArgs"][:2]  # the chart's defaults kept


def test_no_efa_exporter_without_efa():
    r = render_with("dev", {}, {}, gpuNodes={"instanceType": "g6.12xlarge", "count": 2, "efa": False})
    assert not r.cfg.gpu_nodes.efa_enabled and releases(r)["dcgm-exporter"]
    assert not objects(r, "DaemonSet")


# --- Ray ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stack", CREATED)
def test_ray_podmonitor_and_the_one_port_prometheus_may_reach(stack):
    r = rendered(stack)
    pm = obj(r, "PodMonitor", "rltrain-ray")
    # PodMonitor fields of prometheus-operator v0.93.1 (monitoring.coreos.com/v1 CRD).
    assert set(pm["spec"]) == {"namespaceSelector", "selector", "podMetricsEndpoints"}
    assert pm["spec"]["namespaceSelector"]["matchNames"] == ["rltrain"]
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == monitoring.RAY_METRICS_PORT_NAME
    np = obj(r, "NetworkPolicy", "rltrain-allow-prometheus")
    assert np["metadata"]["namespace"] == "rltrain" and np["spec"]["policyTypes"] == ["Ingress"]
    (rule,) = np["spec"]["ingress"]
    assert rule["ports"] == [{"port": monitoring.RAY_METRICS_PORT, "protocol": "TCP"}]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    assert peer["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "prometheus"}
    # Created after the training namespace it lives in, stated on the object itself.
    rec = next(x for x in r.resources if x["name"] == "monitoring-ray-scrape")
    assert "kubernetes:core/v1:Namespace::training-namespace" in rec["dependsOn"]


# --- values against the charts, built-ins against the Kubernetes schema -----------------------------------


def _paths(d: dict, prefix: tuple = ()) -> list[str]:
    out = []
    for k, v in d.items():
        p = prefix + (str(k),)
        out.append(".".join(p))
        if isinstance(v, dict) and v:
            out += _paths(v, p)
    return out


@pytest.mark.parametrize("chart,build", [("kube-prometheus-stack 88.5.3", monitoring.kps_values),
                                         ("dcgm-exporter 4.8.2", monitoring.dcgm_values)])
def test_helm_values_use_only_keys_the_chart_has(chart, build):
    """Neither chart ships a values.schema.json at the pinned version; the snapshot
    monitoring_chart_keys.json holds the key paths of the chart's (and its subcharts') values.yaml
    at that version around the ones we set ("free": a map the chart leaves empty, any key goes)."""
    known = CHART_KEYS[chart]
    a = monitoring.MonitoringArgs(namespace="monitoring", training_namespace="rltrain", kubernetes_version="1.35",
                                  retention_days=15, storage_size_gib=100, created_cluster=True, efa=True,
                                  node_hostengine=True,
                                  alert_receiver=monitoring.AlertReceiverArgs(type="slack", channel="#x"))
    unknown = []
    for p in _paths(build(a)):
        parts = p.split(".")
        if p not in known and not any(known.get(".".join(parts[:i])) == "free" for i in range(1, len(parts))):
            unknown.append(p)
    assert unknown == []
    # The check itself catches a typo.
    assert "grafana.admin.existingSecrets" not in known


@pytest.mark.parametrize("stack", CREATED)
def test_monitoring_objects_validate_strictly(stack):
    r = rendered(stack)
    built_in = [d for d in r.manifests if d["metadata"].get("namespace") == "monitoring"
                and not d["apiVersion"].startswith("monitoring.coreos.com")]
    built_in += [obj(r, "StorageClass", monitoring.STORAGE_CLASS), obj(r, "Namespace", "monitoring"),
                 obj(r, "NetworkPolicy", "rltrain-allow-prometheus")]
    for d in built_in:
        kubernetes_validate.validate(d, f"{r.cfg.cluster.kubernetes_version}.0", strict=True)


@pytest.mark.parametrize("stack", CREATED)
def test_dashboards_provisioned_through_the_sidecar(stack):
    r = rendered(stack)
    cms = [d for d in objects(r, "ConfigMap") if d["metadata"].get("labels", {}).get("grafana_dashboard") == "1"]
    assert sorted(c["metadata"]["name"] for c in cms) == sorted(
        f"{b.uid}-dashboard" for b in dashboards.all_dashboards("rltrain"))
    for c in cms:
        assert c["metadata"]["annotations"] == {dashboards.FOLDER_ANNOTATION: dashboards.FOLDER}
        (body,) = c["data"].values()
        model = json.loads(body)
        assert model["uid"] and model["panels"]
        ids = [p["id"] for p in model["panels"]]
        assert len(ids) == len(set(ids))
    sidecar = releases(r)["kube-prometheus-stack"]["values"]["grafana"]["sidecar"]["dashboards"]
    assert sidecar["folderAnnotation"] == dashboards.FOLDER_ANNOTATION


def test_port_forward_command_names_the_chart_service():
    assert PORT_FORWARD == f"kubectl -n monitoring port-forward svc/{monitoring.GRAFANA_SERVICE} 3000:80"


def test_monitoring_page_picture_is_the_current_dashboard_and_says_synthetic():
    from components.k8s import dashboards_picture
    committed = dashboards_picture.OUT.read_text()
    assert committed == dashboards_picture.gpu_picture(), (
        "docs/gpu-dashboard.svg is stale: python -m components.k8s.dashboards_picture")
    assert "SYNTHETIC DATA" in committed
    titles = {p.title for p in dashboards.gpu_board("rltrain").panels}
    assert all(t.replace("&", "&amp;") in committed for t in titles)
    page = (Path(__file__).resolve().parents[1] / "docs" / "monitoring.md").read_text()
    assert "](gpu-dashboard.svg)" in page and PORT_FORWARD in page
