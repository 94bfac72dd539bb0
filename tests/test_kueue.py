"""Kueue: installed by the stack (cluster-wide rule), the queue objects derived from the catalog and the
node group, every GPU workload queued (never suspended by the program), the priority order and the
opt-in gate (components/k8s/kueue.py, components/workloads/*)."""

from __future__ import annotations

import json

import pytest
import yaml
from support import STACKS, objects, rendered
from test_kueue_support import load_variant, variant

from components.k8s import kueue
from components.offline import deploy_model, policy
from components.offline.mock_engine import ROOT
from components.stack import catalog, validate, versions
from components.workloads import placement, runs, validation
from components.workloads import nccl as nccl_mod

RUN_KINDS = ("Job", "MPIJob", "StatefulSet", "RayJob")


def kueue_objects(r, kind):
    return [m for m in objects(r, kind) if m["apiVersion"] == kueue.API_VERSION]


def release(r):
    found = [x for x in r.resources if x["type"] == "kubernetes:helm.sh/v3:Release"
             and x["inputs"]["chart"] == kueue.chart_ref()]
    return found[0] if found else None


def templates(doc):
    spec = doc["spec"]
    if doc["kind"] == "MPIJob":
        return [rs["template"] for rs in spec["mpiReplicaSpecs"].values()]
    return [spec["template"]]


def requested(template):
    names = set()
    for c in template["spec"]["containers"]:
        res = c.get("resources") or {}
        names |= set(res.get("requests") or {}) | set(res.get("limits") or {})
    return names


def gpu_workloads(r):
    return [m for m in r.manifests if m["kind"] in RUN_KINDS
            and any("nvidia.com/gpu" in requested(t) for t in templates(m))]


# --- done when: p5 -------------------------------------------------------------------------------


def test_p5_cluster_queue_quota_and_coverage():
    r = rendered("p5")
    [cq] = kueue_objects(r, "ClusterQueue")
    assert cq["metadata"]["name"] == "rltrain"
    [group] = cq["spec"]["resourceGroups"]
    [flavor] = group["flavors"]
    quota = {x["name"]: x["nominalQuota"] for x in flavor["resources"]}
    assert quota["nvidia.com/gpu"] == "16" and quota["vpc.amazonaws.com/efa"] == "64"
    # Covered resources and the flavor's resources list the same names, in the same order (CRD rule).
    assert group["coveredResources"] == [x["name"] for x in flavor["resources"]]
    # Every resource any queued pod requests (the MPI launcher's included) is covered.
    wanted = set()
    for doc in r.manifests:
        if (doc["metadata"].get("labels") or {}).get(kueue.QUEUE_LABEL):
            for t in templates(doc):
                wanted |= requested(t)
    assert wanted == {"cpu", "memory", "nvidia.com/gpu", "vpc.amazonaws.com/efa", "hugepages-2Mi"}
    assert wanted <= set(group["coveredResources"])
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "rltrain"}}
    assert cq["spec"]["queueingStrategy"] == "StrictFIFO"
    assert cq["spec"]["preemption"]["withinClusterQueue"] == "Never"


def test_quota_is_what_the_nodes_offer():
    cfg = rendered("p5").cfg
    alloc = catalog.get("p5.48xlarge").allocatable(efa=True)
    assert kueue.nominal_quota(cfg) == {
        "cpu": f"{2 * (alloc.cpu_milli - catalog.DAEMONSET_CPU_MILLI)}m",
        "memory": f"{2 * (alloc.memory_mib_conservative - catalog.DAEMONSET_MEMORY_MIB)}Mi",
        "nvidia.com/gpu": "16", "vpc.amazonaws.com/efa": "64",
        "hugepages-2Mi": f"{2 * catalog.EFA_HUGEPAGES_2MI * catalog.HUGEPAGE_MIB}Mi"}
    # The training pod (sized from the same catalog) fits one node's share.
    assert 187 * 1000 <= kueue.node_offer(cfg)["cpu"]


@pytest.mark.parametrize("stack", ["dev", "p4de", "p5"])
def test_every_gpu_workload_carries_the_queue_label(stack):
    r = rendered(stack)
    runs_ = gpu_workloads(r)
    assert len(runs_) >= 3
    for doc in runs_:
        assert doc["metadata"]["labels"][kueue.QUEUE_LABEL] == kueue.LOCAL_QUEUE, doc["metadata"]["name"]
        # On the workload object only: pods carrying it would be taken for bare pods.
        for t in templates(doc):
            assert kueue.QUEUE_LABEL not in (t["metadata"].get("labels") or {})
    [lq] = kueue_objects(r, "LocalQueue")
    assert (lq["metadata"]["name"], lq["metadata"]["namespace"]) == (kueue.LOCAL_QUEUE, "rltrain")
    assert lq["spec"] == {"clusterQueue": "rltrain"}


@pytest.mark.parametrize("stack", STACKS)
def test_no_object_sets_suspend(stack):
    for doc in rendered(stack).manifests:
        spec = doc.get("spec") or {}
        assert "suspend" not in spec and "suspend" not in (spec.get("runPolicy") or {}), doc["metadata"]["name"]


def test_queue_objects_are_named_after_the_namespace_and_ordered_after_kueue():
    r = variant("p5", {"rltrain:training": {"namespace": "team-a"}})
    owned = deploy_model.owned_cluster_wide(r.resources)
    assert "ClusterQueue team-a" in owned
    for obj in ("ResourceFlavor team-a-gpu-", "Topology team-a-network-"):  # + the hash of their spec
        assert [o for o in owned if o.startswith(obj) and len(o) == len(obj) + 8], obj
    assert "Helm release kueue-system/kueue (oci://registry.k8s.io/kueue/charts/kueue 0.19.2)" in owned
    graph = deploy_model.Graph(r.resources)
    rel = deploy_model.ref(release(r))
    crs = [x for x in r.resources if x["type"].startswith("kubernetes:kueue.x-k8s.io/")]
    assert len(crs) == 4
    for x in crs:
        assert graph.reaches(deploy_model.ref(x), {rel}), x["name"]
    # Flavor and topology are content-named, never replaced under their name; the ClusterQueue is
    # updated in place; the LocalQueue (no finalizer) is replaced when its clusterQueue changes.
    opts = {x["inputs"]["kind"]: x["options"] for x in crs}
    assert opts["LocalQueue"]["replaceOnChanges"] == ["spec.clusterQueue"]
    for kind in ("Topology", "ResourceFlavor", "ClusterQueue"):
        assert "replaceOnChanges" not in opts[kind] and not opts[kind].get("deleteBeforeReplace"), kind


def test_every_stack_passes_the_kueue_rules():
    for stack in STACKS:
        assert policy.evaluate(rendered(stack).resources, rules=["kueue-queue", "schedule-fits"]) == [], stack


# --- the installation ----------------------------------------------------------------------------


def test_release_is_the_pinned_oci_chart():
    rel = release(rendered("p5"))["inputs"]
    assert rel["chart"] == "oci://registry.k8s.io/kueue/charts/kueue" and rel["version"] == "0.19.2"
    assert (versions.KUEUE.chart, versions.KUEUE.version) == ("kueue", "0.19.2")
    assert "repositoryOpts" not in rel  # an OCI reference carries its registry
    assert rel["namespace"] == "kueue-system" and rel["createNamespace"] is True
    assert rel["skipAwait"] is False  # waits for the webhooks before any queued run is created


def manager_config(r):
    text = release(r)["inputs"]["values"]["managerConfig"]["controllerManagerConfigYaml"]
    return yaml.safe_load("\n".join(text) if isinstance(text, list) else text)


def test_wait_for_pods_ready_is_sized_from_the_pull_margin():
    cfg = manager_config(rendered("p5"))
    wfpr = cfg["waitForPodsReady"]
    assert "enable" not in wfpr  # no such field: Kueue's strict decoding would refuse the file
    assert kueue.PODS_READY_TIMEOUT_SECONDS == 6 * runs.IMAGE_PULL_MARGIN_SECONDS
    assert wfpr["timeout"] == f"{kueue.PODS_READY_TIMEOUT_SECONDS // 60}m" == "60m"
    # Above Kueue's default (30 min, which evicts slow p5 pulls) and two pulls in sequence.
    assert kueue.PODS_READY_TIMEOUT_SECONDS > 30 * 60 >= 2 * runs.IMAGE_PULL_MARGIN_SECONDS
    assert wfpr["requeuingStrategy"]["backoffLimitCount"] == rendered("p5").cfg.workloads.infrastructure_restarts == 3
    assert cfg["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and cfg["kind"] == "Configuration"
    assert cfg["manageJobsWithoutQueueName"] is False


def test_pods_ready_timeout_is_configurable():
    r = variant("p5", {"rltrain:kueue": {"podsReadyTimeoutMinutes": 90}})
    assert manager_config(r)["waitForPodsReady"]["timeout"] == "90m"


def test_integrations_cover_every_workload_kind():
    frameworks = manager_config(rendered("p5"))["integrations"]["frameworks"]
    assert {"batch/job", "kubeflow.org/mpijob", "ray.io/rayjob"} <= set(frameworks)
    # No pod-based integration: its webhook would act on every pod of a managed namespace.
    assert not {"pod", "deployment", "statefulset"} & set(frameworks)


# --- bring your own cluster ----------------------------------------------------------------------


def test_byo_renders_no_kueue_unless_opted_in():
    r = rendered("byo")
    assert release(r) is None
    assert not [m for m in r.manifests if m["apiVersion"] == kueue.API_VERSION]
    assert not [d for d in r.manifests if kueue.QUEUE_LABEL in (d["metadata"].get("labels") or {})]
    assert not r.cfg.kueue_install and not r.cfg.kueue_enabled


def test_byo_opt_in_installs_and_queues():
    r = variant("byo", {"rltrain:kueue": {"install": True}})
    assert release(r) is not None
    kinds = sorted(m["kind"] for m in r.manifests if m["apiVersion"] == kueue.API_VERSION)
    assert kinds == ["ClusterQueue", "LocalQueue", "ResourceFlavor", "Topology"]  # p4de gets the topology labels
    assert all(d["metadata"]["labels"][kueue.QUEUE_LABEL] == "training" for d in gpu_workloads(r))


def test_byo_existing_cluster_queue():
    r = variant("byo", {"rltrain:kueue": {"clusterQueue": "shared-gpus"}})
    assert release(r) is None  # that Kueue is the cluster's
    [lq] = kueue_objects(r, "LocalQueue")
    assert lq["spec"] == {"clusterQueue": "shared-gpus"}
    assert not [m for m in r.manifests if m["kind"] in ("ClusterQueue", "ResourceFlavor", "Topology")]
    # No topology of its own: no pod set names a level it cannot know.
    assert "podset-preferred-topology" not in yaml.safe_dump(r.manifests)
    assert all(d["metadata"]["labels"][kueue.QUEUE_LABEL] == "training" for d in gpu_workloads(r))


def test_two_stacks_with_their_own_queues_share_nothing_cluster_wide():
    owned = [set(deploy_model.owned_cluster_wide(variant("byo", {"rltrain:kueue": {"enabled": True},
                                                                 "rltrain:training": {"namespace": ns}}).resources))
             for ns in ("team-a", "team-b")]
    assert {o for o in owned[0] if o.startswith(("ClusterQueue", "ResourceFlavor", "Topology"))}
    assert not owned[0] & owned[1], owned[0] & owned[1]


# --- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize("base,edits,path,words", [
    ("p5", {"rltrain:workloads": {"multiNode": {"enabled": True, "form": "statefulset"}}},
     "rltrain:workloads.multiNode.form", "cannot be queued whole"),
    ("byo", {"rltrain:kueue": {"install": True, "clusterQueue": "shared"}}, "rltrain:kueue.install", "do not install"),
    ("p5", {"rltrain:kueue": {"clusterQueue": "shared"}}, "rltrain:kueue.clusterQueue", "only with cluster.existing"),
    ("p5", {"rltrain:kueue": {"install": True, "enabled": False}}, "rltrain:kueue.install", "queueing is off"),
    ("p5", {"rltrain:workloads": {"trainingAfterChecks": True, "validation": {"enabled": False},
                                  "ncclTest": {"enabled": False}}},
     "rltrain:workloads.trainingAfterChecks", "neither is enabled"),
    ("p5", {"rltrain:kueue": {"queue": "x"}}, "rltrain:kueue.queue", "unknown key"),
])
def test_config_refusals(base, edits, path, words):
    with pytest.raises(validate.ConfigError) as e:
        load_variant(base, edits)
    assert any(p == path and words in msg for p, msg in e.value.problems), e.value.problems


def test_statefulset_form_without_kueue_is_allowed():
    cfg = load_variant("p5", {"rltrain:kueue": {"enabled": False},
                              "rltrain:workloads": {"multiNode": {"enabled": True, "form": "statefulset"}}})
    assert not cfg.kueue_enabled and not cfg.kueue_install


def test_switched_off_installs_nothing():
    r = variant("p5", {"rltrain:kueue": {"enabled": False}})
    assert release(r) is None and not [m for m in r.manifests if m["apiVersion"] == kueue.API_VERSION]
    assert not [d for d in r.manifests if kueue.QUEUE_LABEL in (d["metadata"].get("labels") or {})]


# --- topology ------------------------------------------------------------------------------------


def test_topology_where_the_instance_type_has_the_labels():
    r = rendered("p5")
    [topo] = kueue_objects(r, "Topology")
    assert [lvl["nodeLabel"] for lvl in topo["spec"]["levels"]] == [
        "topology.k8s.aws/network-node-layer-1", "topology.k8s.aws/network-node-layer-2",
        "topology.k8s.aws/network-node-layer-3", "kubernetes.io/hostname"]
    [flavor] = kueue_objects(r, "ResourceFlavor")
    assert flavor["spec"] == {"nodeLabels": {"role": "gpu-training", "node.kubernetes.io/instance-type": "p5.48xlarge"},
                              "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                              "topologyName": kueue.topology_name(r.cfg)}
    # The nearest layer is the one the pod affinity prefers too.
    assert kueue.NEAREST_LAYER == placement.TOPOLOGY_WEIGHTS[0][0]


def test_g6_has_no_topology():
    r = rendered("dev")
    assert not kueue_objects(r, "Topology")
    [flavor] = kueue_objects(r, "ResourceFlavor")
    assert "topologyName" not in flavor["spec"]
    assert "podset-preferred-topology" not in yaml.safe_dump(r.manifests)
    assert [kueue.has_network_topology(catalog.get(t)) for t in ("p4de.24xlarge", "p5en.48xlarge", "g6.12xlarge",
                                                                  "g5.xlarge")] == [True, True, False, False]


def test_multi_node_pod_sets_prefer_the_nearest_layer():
    r = rendered("p5")
    mn = next(m for m in r.manifests if m["kind"] == "Job" and m["metadata"]["name"] == "rltrain-multinode")
    mpi = next(m for m in r.manifests if m["kind"] == "MPIJob")
    for t in (mn["spec"]["template"], mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]):
        ann = t["metadata"]["annotations"]
        assert ann[kueue.PREFERRED_TOPOLOGY] == "topology.k8s.aws/network-node-layer-3"
        assert "kueue.x-k8s.io/podset-required-topology" not in ann  # a required level can block forever
    single = next(m for m in r.manifests if m["kind"] == "Job" and m["metadata"]["name"] == "rltrain-training")
    assert kueue.PREFERRED_TOPOLOGY not in single["spec"]["template"]["metadata"]["annotations"]


# --- priorities and the gate ---------------------------------------------------------------------


def test_priority_classes_order_validation_nccl_training():
    r = rendered("p5")
    # Named after the namespace, the run and the value (a new value is a new class: runs.py).
    classes = {m["metadata"]["name"].rsplit("-", 1)[0]: m for m in objects(r, "PriorityClass")}
    assert all(m["metadata"]["name"].endswith(f"-{m['value']}") for m in classes.values())
    assert classes["rltrain-validation"]["value"] > classes["rltrain-nccl-test"]["value"] \
        > classes["rltrain-training"]["value"]
    # The checks order the queue; they never evict a running run.
    assert classes["rltrain-validation"]["preemptionPolicy"] == classes["rltrain-nccl-test"]["preemptionPolicy"] \
        == "Never"
    by_run = {}
    for doc in gpu_workloads(r):
        by_run[doc["metadata"]["name"]] = {t["spec"]["priorityClassName"] for t in templates(doc)}
    assert by_run == {"rltrain-validation": {"rltrain-validation-1000200"},
                      "rltrain-nccl-test": {"rltrain-nccl-test-1000100"},
                      "rltrain-training": {"rltrain-training-1000000"}, "rltrain-multinode": {"rltrain-training-1000000"}}


def test_gate_off_by_default():
    r = rendered("p5")
    jobs = {m["metadata"]["name"]: m for m in objects(r, "Job")}
    assert jobs["rltrain-validation"]["metadata"]["annotations"]["pulumi.com/waitFor"] == "jsonpath={.metadata.uid}"
    [mpi] = objects(r, "MPIJob")
    assert mpi["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"


def test_gate_creates_training_after_the_checks_passed():
    r = variant("p5", {"rltrain:workloads": {"trainingAfterChecks": True}})
    rows = {x["name"]: x for x in r.resources}
    val = rows["workloads-validation-job"]["inputs"]["metadata"]["annotations"]
    # The provider's own Job await: done when Complete, an error at once when Failed.
    assert "pulumi.com/waitFor" not in val and "pulumi.com/skipAwait" not in val
    # Its deadline counts from admission; Pulumi's timer from the create: plus the queue allowance.
    queued = r.cfg.monitoring.queued_alert_minutes * 60
    assert val["pulumi.com/timeoutSeconds"] == str(queued + validation.DEADLINE_SECONDS)
    # The MPIJob is not awaited (a waitFor cannot fail); its gate Job is, with the provider's Job await.
    mpi = rows["workloads-nccl-test-mpijob"]["inputs"]["metadata"]["annotations"]
    assert mpi["pulumi.com/skipAwait"] == "true"
    gate = rows["workloads-nccl-test-gate-job"]["inputs"]
    assert "pulumi.com/waitFor" not in gate["metadata"]["annotations"]
    # Queued behind validation: its own deadline plus validation's, plus the queue allowance.
    assert gate["spec"]["activeDeadlineSeconds"] == queued + nccl_mod.DEADLINE_SECONDS + validation.DEADLINE_SECONDS
    graph = deploy_model.Graph(r.resources)
    checks = {deploy_model.ref(rows["workloads-validation-job"]), deploy_model.ref(rows["workloads-nccl-test-gate-job"])}
    for train in ("workloads-single-node-job", "workloads-multi-node-job"):
        for check in checks:
            assert graph.reaches(deploy_model.ref(rows[train]), {check}), (train, check)
    # The deletion is still awaited (no skipAwait), so a replaced check never races its successor.
    assert policy.evaluate(r.resources, rules=["run-replacement", "deploy-order", "kueue-queue"]) == []


def test_operations_page_says_how_to_watch_the_queue_and_what_the_gate_does():
    text = (ROOT / "docs" / "operations.md").read_text()
    assert "kubectl get workloads -n rltrain" in text and "kubectl get clusterqueue" in text
    assert "trainingAfterChecks" in text and "rltrain:kueue" in text


def test_a_queue_label_change_replaces_the_run():
    """Kueue's webhook refuses a queue label change on a run that is not suspended: the run is replaced
    (deleted first), and the impact report says so."""
    from components.offline import impact
    r = rendered("p5")
    for x in r.resources:
        if x["inputs"].get("kind") in ("Job", "MPIJob"):
            assert "metadata.labels" in x["options"]["replaceOnChanges"] and x["options"]["deleteBeforeReplace"]
    before = [dict(x) for x in r.resources]
    after = []
    for x in r.resources:
        x = json.loads(json.dumps(x))  # a deep copy as the record holds it (resources.json); ~10x yaml's
        if x["inputs"].get("kind") == "Job" and x["inputs"]["metadata"]["name"] == "rltrain-training":
            x["inputs"]["metadata"]["labels"][kueue.QUEUE_LABEL] = "other"
        after.append(x)
    found = {i.name: i.kind for i in impact.classify(before, after, r.cfg)}
    assert found == {"workloads-single-node-job": impact.RUN_RESTART}


def test_sim_kueue_timing_shortens_timeout_and_backoff_only_there():
    """Rendered stacks keep a 60 s first requeue backoff and a PodsReady timeout of 60 s at least
    (KueueArgs); the simulated cluster's scenarios may pass (timeout, backoff) seconds, below that
    floor, set on the Configuration the program built (cluster/sim.py kueue_timed)."""
    from cluster import sim

    args = kueue.kueue_args(rendered("p5").cfg)
    config = kueue.manager_config(args)
    assert config["waitForPodsReady"]["requeuingStrategy"]["backoffBaseSeconds"] == 60
    assert sim.kueue_timed(config, None) is config
    short = sim.kueue_timed(config, (20, 5))["waitForPodsReady"]
    assert (short["timeout"], short["recoveryTimeout"]) == ("20s", "20s")
    assert short["requeuingStrategy"]["backoffBaseSeconds"] == 5
    assert short["requeuingStrategy"]["backoffLimitCount"] == args.requeue_limit
    assert config == kueue.manager_config(args)  # the program's own, untouched
    with pytest.raises(ValueError, match="pods_ready_timeout_seconds"):
        kueue.KueueArgs.model_validate({**args.model_dump(), "pods_ready_timeout_seconds": 20})
