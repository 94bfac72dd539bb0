"""Kueue operated safely (issue 20): no Kueue object is replaced under a fixed name, the webhooks see only
the stack's namespaces, two controller replicas with a disruption budget, the controller scraped
(components/k8s/kueue.py, components/k8s/monitoring.py, components/offline/impact.py)."""

from __future__ import annotations

import copy

import pytest
import yaml
from support import obj, rendered, stack_copy
from test_kueue_support import variant

from components.k8s import kueue, monitoring
from components.offline import impact, render
from components.stack import versions

KUEUE_TYPES = ("kubernetes:kueue.x-k8s.io/v1beta2:",)


def release_inputs(r):
    [rel] = [x for x in r.resources if x["type"] == "kubernetes:helm.sh/v3:Release"
             and x["inputs"]["chart"] == kueue.chart_ref()]
    return rel["inputs"]


def manager_config(r):
    text = release_inputs(r)["values"]["managerConfig"]["controllerManagerConfigYaml"]
    return yaml.safe_load("\n".join(text) if isinstance(text, list) else text)


def selects(selector: dict, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector against a namespace's labels (matchLabels, In/NotIn/Exists/DoesNotExist)."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        op, key, values = e["operator"], e["key"], e.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def ns_labels(name: str) -> dict[str, str]:
    return {"kubernetes.io/metadata.name": name}


# --- the webhooks see only the stack's namespaces ------------------------------------------------


def namespace_labels(r) -> dict[str, str]:
    [ns] = [x for x in r.resources if x["type"] == "kubernetes:core/v1:Namespace"
            and x["inputs"]["metadata"]["name"] == r.cfg.training.namespace]
    return {**ns_labels(r.cfg.training.namespace), **ns["inputs"]["metadata"]["labels"]}


@pytest.mark.parametrize("stack", ["dev", "p4de", "p5"])
def test_webhook_selector_is_in_the_kueue_configuration(stack):
    r = rendered(stack)
    sel = manager_config(r)["managedJobsNamespaceSelector"]
    assert sel == {"matchLabels": {"rltrain/kueue-managed": "true"}}
    # The chart renders this selector as the namespaceSelector of every job webhook (mjob.kb.io,
    # vjob.kb.io, mmpijob.kb.io, mrayjob.kb.io, ...; charts/kueue/templates/webhook/manifests.yaml at
    # v0.19.2): the training namespace (labelled by the stack) reaches Kueue, nobody else's does.
    assert selects(sel, namespace_labels(r))
    for other in (r.cfg.monitoring.namespace,  # kube-prometheus-stack's hook Jobs
                  "kube-system", versions.KUEUE_NAMESPACE, "team-b", "default"):
        assert not selects(sel, ns_labels(other)), other
    # Without the selector the chart's default sends every namespace but two (the fail-closed
    # webhooks then block other teams' Jobs whenever Kueue is down): the test of the test.
    default = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "NotIn",
                                     "values": ["kube-system", versions.KUEUE_NAMESPACE]}]}
    assert selects(default, ns_labels(r.cfg.monitoring.namespace))


def test_a_second_stacks_namespace_is_selected_by_the_first_stacks_kueue():
    """Kueue v0.19.2 reconciles only Jobs whose namespace its selector matches, queue label or not
    (pkg/controller/jobframework/reconciler.go): a selector listing the installing stack's namespace
    left a second stack's runs unqueued on the same cluster (tests/sim/test_day_two.py scenario 8 deploys one)."""
    installer = rendered("p5")
    second = variant("byo", {"rltrain:training": {"namespace": "team-a"}, "rltrain:kueue": {"enabled": True}})
    sel = manager_config(installer)["managedJobsNamespaceSelector"]
    assert second.cfg.kueue_enabled and selects(sel, namespace_labels(second))
    quiet = variant("byo", {"rltrain:training": {"namespace": "team-b"}, "rltrain:kueue": {"enabled": False}})
    assert not selects(sel, namespace_labels(quiet))


def test_configuration_keeps_only_known_fields():
    """The Configuration is strictly decoded: the added keys are fields of config.kueue.x-k8s.io/v1beta2
    (apis/config/v1beta2/configuration_types.go at v0.19.2: Configuration.ManagedJobsNamespaceSelector,
    ControllerMetrics.EnableClusterQueueResources)."""
    cfg = manager_config(rendered("p5"))
    assert cfg["metrics"] == {"bindAddress": ":8443", "enableClusterQueueResources": True}
    assert cfg["manageJobsWithoutQueueName"] is False
    assert set(cfg) == {"apiVersion", "kind", "health", "metrics", "webhook", "leaderElection", "controller",
                        "clientConnection", "manageJobsWithoutQueueName", "managedJobsNamespaceSelector",
                        "waitForPodsReady", "integrations"}


# --- two replicas and a disruption budget ----------------------------------------------------------


def test_two_controller_replicas_with_a_disruption_budget():
    values = release_inputs(rendered("p5"))["values"]
    cm = values["controllerManager"]
    assert cm["replicas"] == 2
    # charts/kueue/templates/manager/manager-pdb.yaml: minAvailable over kueue.selectorLabels. One of
    # the two may be drained at a time, never both.
    assert cm["podDisruptionBudget"] == {"enabled": True, "minAvailable": 1}
    assert cm["podDisruptionBudget"]["minAvailable"] < cm["replicas"]
    [spread] = cm["topologySpreadConstraints"]
    assert spread["topologyKey"] == "kubernetes.io/hostname"
    assert spread["labelSelector"]["matchLabels"] == {"app.kubernetes.io/name": "kueue",
                                                      "app.kubernetes.io/instance": kueue.RELEASE,
                                                      "control-plane": "controller-manager"}
    # A single system node still schedules both (a spread, not a hard anti-affinity).
    assert spread["whenUnsatisfiable"] == "ScheduleAnyway"


# --- metrics on and scraped ----------------------------------------------------------------------


def test_kueue_controller_is_scraped():
    r = rendered("p5")
    values = release_inputs(r)["values"]
    # The chart's own ServiceMonitor would need the Prometheus CRDs before Kueue; ours comes after them.
    assert values["enablePrometheus"] is False
    sm = obj(r, "ServiceMonitor", "rltrain-kueue")
    assert sm["metadata"]["namespace"] == r.cfg.monitoring.namespace
    spec = sm["spec"]
    # ServiceMonitor fields of prometheus-operator v0.93.1 (monitoring.coreos.com/v1 CRD), the endpoint
    # as Kueue's own chart writes it (charts/kueue/templates/prometheus/monitor.yaml at v0.19.2).
    assert set(spec) == {"namespaceSelector", "selector", "endpoints"}
    assert set(spec["endpoints"][0]) == {"port", "path", "scheme", "interval", "bearerTokenFile", "tlsConfig"}
    assert spec["namespaceSelector"] == {"matchNames": [versions.KUEUE_NAMESPACE]}
    assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "metrics-service"
    [ep] = spec["endpoints"]
    assert (ep["port"], ep["scheme"], ep["path"]) == ("https", "https", "/metrics")
    assert ep["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    # The rules' Kueue alerts name the stack's ClusterQueue.
    rule = obj(r, "PrometheusRule", "rltrain")
    [queue] = [g for g in rule["spec"]["groups"] if g["name"] == "rltrain.queue"]
    assert all('cluster_queue="rltrain"' in x["expr"] for x in queue["rules"])


def test_no_kueue_scrape_without_the_stacks_kueue():
    r = variant("byo", {"rltrain:monitoring": {"enabled": True}})
    assert not [m for m in r.manifests if m["kind"] == "ServiceMonitor"
                and m["metadata"]["name"] == "rltrain-kueue"]
    assert monitoring.monitoring_args(r.cfg).kueue_cluster_queue is None


# --- no Kueue object is replaced under a fixed name ------------------------------------------------


def _kueue_rows(resources):
    return {x["name"]: x for x in resources if x["type"].startswith(KUEUE_TYPES)}


def _render_p5_with(monkeypatch, change: str, tmp_path):
    if change == "flavor-label":
        labels = kueue.flavor_node_labels
        monkeypatch.setattr(kueue, "flavor_node_labels", lambda cfg: {**labels(cfg), "rltrain/pool": "a"})
    elif change == "toleration":
        monkeypatch.setattr(kueue, "GPU_TOLERATION", {"key": "nvidia.com/gpu", "operator": "Exists"})
    elif change == "topology-level":
        monkeypatch.setattr(kueue, "NETWORK_LAYERS", kueue.NETWORK_LAYERS[1:])
    if change == "quota":
        # Under the stack's own name (a variant's other name would name another cluster: a replacement).
        proj = stack_copy(tmp_path, "p5", lambda doc: doc["config"]["rltrain:gpuNodes"].update(count=3))
        return render.render_stack("p5", proj)
    return render.render_stack("p5")


# change -> the Kueue objects that get a new (content) name; the ClusterQueue is always updated in place.
RENAMED = {
    "flavor-label": {"kueue-flavor"},
    "toleration": {"kueue-flavor"},
    "topology-level": {"kueue-topology", "kueue-flavor"},
    "quota": set(),
}


@pytest.mark.parametrize("change", sorted(RENAMED))
def test_no_kueue_object_is_replaced_under_a_fixed_name(monkeypatch, change, tmp_path):
    before = rendered("p5")
    after = _render_p5_with(monkeypatch, change, tmp_path)
    old, new = _kueue_rows(before.resources), _kueue_rows(after.resources)
    assert set(old) == set(new) == {"kueue-topology", "kueue-flavor", "kueue-cluster-queue", "kueue-local-queue"}
    renamed = {n for n in new if new[n]["inputs"]["metadata"]["name"] != old[n]["inputs"]["metadata"]["name"]}
    assert renamed == RENAMED[change]
    for n in renamed:  # created before the old one is deleted, under its own name
        assert not new[n]["options"].get("deleteBeforeReplace") and not new[n]["options"].get("replaceOnChanges")
    # The ClusterQueue keeps its name and names the current flavor.
    cq = new["kueue-cluster-queue"]["inputs"]
    assert cq["metadata"]["name"] == old["kueue-cluster-queue"]["inputs"]["metadata"]["name"]
    assert [f["name"] for f in cq["spec"]["resourceGroups"][0]["flavors"]] == [
        new["kueue-flavor"]["inputs"]["metadata"]["name"]]
    assert new["kueue-flavor"]["inputs"]["spec"].get("topologyName") == \
        new["kueue-topology"]["inputs"]["metadata"]["name"]
    # The impact model agrees: a replacement only under a new name, the ClusterQueue in place, and
    # nothing that never finishes or is refused.
    verdicts = {i.name: i for i in impact.classify(before.resources, after.resources, after.cfg)
                if i.type.startswith(KUEUE_TYPES)}
    for n, v in verdicts.items():
        assert v.kind in (impact.IN_PLACE, impact.REPLACE) and v.allowed, v.line()
        if v.kind == impact.REPLACE:
            assert n in renamed and "new name" in v.why, v.line()
    assert {n for n, v in verdicts.items() if v.kind == impact.REPLACE} == renamed
    if change == "quota":
        assert verdicts["kueue-cluster-queue"].kind == impact.IN_PLACE
        assert "nominalQuota" in verdicts["kueue-cluster-queue"].why
    else:
        assert verdicts["kueue-cluster-queue"].kind == impact.IN_PLACE


def _flavor_rows():
    r = rendered("p5")
    before = [copy.deepcopy(x) for x in r.resources]
    return r, before


def test_impact_refuses_a_flavor_replaced_under_its_fixed_name():
    """The hazard itself, as the impact model sees it: a flavor replaced in place (replaceOnChanges with
    its fixed name) would wait on Kueue's resource-in-use finalizer for ever."""
    r, before = _flavor_rows()
    after = [copy.deepcopy(x) for x in r.resources]
    [flavor] = [x for x in after if x["name"] == "kueue-flavor"]
    flavor["inputs"]["spec"]["tolerations"] = []
    flavor["options"]["replaceOnChanges"] = ["spec"]
    flavor["options"]["deleteBeforeReplace"] = True
    [v] = [i for i in impact.classify(before, after, r.cfg) if i.name == "kueue-flavor"]
    assert v.kind == impact.NEVER_FINISHES and not v.allowed and "finalizer" in v.why
    assert v in impact.check(before, after, r.cfg).refused


def test_impact_refuses_an_in_place_change_of_an_immutable_field():
    r, before = _flavor_rows()
    after = [copy.deepcopy(x) for x in r.resources]
    [topo] = [x for x in after if x["name"] == "kueue-topology"]
    topo["inputs"]["spec"]["levels"] = topo["inputs"]["spec"]["levels"][1:]
    [v] = [i for i in impact.classify(before, after, r.cfg) if i.name == "kueue-topology"]
    assert v.kind == impact.REFUSED and not v.allowed and "immutable" in v.why


def test_queue_operations_page_explains_every_queue_alert():
    from components.k8s import monitoring_rules as mr
    from components.offline.mock_engine import ROOT
    page = ROOT / mr.QUEUE_RUNBOOK.split("#")[0]
    text = page.read_text()
    assert "\n## Alerts\n" in text  # the runbook anchor
    spec = mr.rules_spec(mr.RulesArgs(training_namespace="rltrain", queued_alert_minutes=30, cluster_queue="rltrain"))
    linked = [r["alert"] for g in spec["groups"] for r in g["rules"]
              if r.get("annotations", {}).get("runbook_url") == mr.QUEUE_RUNBOOK]
    assert len(linked) == 6
    for alert in linked:
        assert f"`{alert}`" in text, alert
    assert "managedJobsNamespaceSelector" in text and "resource-in-use" in text
