"""The Kueue objects against the kueue.x-k8s.io/v1beta2 CRDs, and the controller's Configuration
against config.kueue.x-k8s.io/v1beta2, unknown fields refused.

kubernetes-validate has no schema for a custom resource, so the fields are written out here as the
CRDs of kubernetes-sigs/kueue v0.19.2 define them (config/components/crd/bases/
kueue.x-k8s.io_{resourceflavors,clusterqueues,localqueues,topologies}.yaml: names, types, enums,
patterns, limits, required fields and the x-kubernetes-validations rules that apply to the fields
the stack sets), and the Configuration's fields as apis/config/v1beta2/configuration_types.go
declares them (Kueue decodes it strictly: an unknown field stops the controller).
"""

import copy

import jsonschema
import pytest
import yaml
from support import rendered
from test_kueue_support import variant

from components.k8s import kueue

NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
QUANTITY = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
LABEL_KEY = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
STR = {"type": "string"}
INT = {"type": "integer"}
BOOL = {"type": "boolean"}
QTY = {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": QUANTITY}]}
STRMAP = {"type": "object", "additionalProperties": {"type": "string"}}
EFFECT = {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]}


def obj(props, required=(), **extra):
    return {"type": "object", "additionalProperties": False, "properties": props, "required": list(required),
            **extra}


TOLERATION = obj({"key": STR, "operator": {"enum": ["Equal", "Exists"]}, "value": STR, "effect": EFFECT,
                  "tolerationSeconds": INT})
SELECTOR = obj({"matchLabels": STRMAP, "matchExpressions": {"type": "array", "items": obj(
    {"key": STR, "operator": STR, "values": {"type": "array", "items": STR}}, ["key", "operator"])}})
SPECS = {
    "ResourceFlavor": obj({
        "nodeLabels": STRMAP,
        "nodeTaints": {"type": "array", "maxItems": 8, "items": obj(
            {"key": STR, "value": STR, "effect": EFFECT, "timeAdded": STR}, ["effect", "key"])},
        "tolerations": {"type": "array", "maxItems": 8, "items": TOLERATION},
        "topologyName": {"type": "string", "pattern": NAME},
    }),
    "ClusterQueue": obj({
        "admissionChecksStrategy": {"type": "object"},
        "admissionScope": obj({"admissionMode": {"enum": ["UsageBasedAdmissionFairSharing",
                                                          "NoAdmissionFairSharing"]}}, ["admissionMode"]),
        "cohortName": {"type": "string", "pattern": NAME},
        "concurrentAdmissionPolicy": {"type": "object"},
        "fairSharing": obj({"weight": QTY}),
        "flavorFungibility": obj({
            "preference": {"enum": ["BorrowingOverPreemption", "PreemptionOverBorrowing"]},
            "whenCanBorrow": {"enum": ["MayStopSearch", "TryNextFlavor"]},
            "whenCanPreempt": {"enum": ["MayStopSearch", "TryNextFlavor"]}}),
        "namespaceSelector": SELECTOR,
        "preemption": obj({
            "borrowWithinCohort": obj({"maxPriorityThreshold": INT, "policy": {"enum": ["Never", "LowerPriority"]}}),
            "reclaimWithinCohort": {"enum": ["Never", "LowerPriority", "Any"]},
            "withinClusterQueue": {"enum": ["Never", "LowerPriority", "LowerOrNewerEqualPriority"]}}),
        "queueingStrategy": {"enum": ["StrictFIFO", "BestEffortFIFO"]},
        "resourceGroups": {"type": "array", "maxItems": 16, "items": obj({
            "coveredResources": {"type": "array", "maxItems": 64, "items": STR},
            "flavors": {"type": "array", "maxItems": 64, "items": obj({
                "name": {"type": "string", "pattern": NAME},
                "resources": {"type": "array", "maxItems": 64, "items": obj(
                    {"name": STR, "nominalQuota": QTY, "borrowingLimit": QTY, "lendingLimit": QTY},
                    ["name", "nominalQuota"])},
            }, ["name", "resources"])},
        }, ["coveredResources", "flavors"])},
        "stopPolicy": {"enum": ["None", "Hold", "HoldAndDrain"]},
    }),
    "LocalQueue": obj({"clusterQueue": {"type": "string", "pattern": NAME}, "fairSharing": obj({"weight": QTY}),
                       "stopPolicy": {"enum": ["None", "Hold", "HoldAndDrain"]}}),
    "Topology": obj({"levels": {"type": "array", "maxItems": 16, "items": obj(
        {"nodeLabel": {"type": "string", "pattern": LABEL_KEY}}, ["nodeLabel"])}}, ["levels"]),
}
CLUSTER_SCOPED = {"ResourceFlavor", "ClusterQueue", "Topology"}


def schema(kind):
    meta = obj({"name": {"type": "string", "pattern": NAME}, "namespace": STR, "labels": STRMAP,
                "annotations": STRMAP}, ["name"] + ([] if kind in CLUSTER_SCOPED else ["namespace"]))
    if kind in CLUSTER_SCOPED:
        meta["properties"].pop("namespace")
    return obj({"apiVersion": {"const": "kueue.x-k8s.io/v1beta2"}, "kind": {"const": kind}, "metadata": meta,
                "spec": SPECS[kind]}, ["apiVersion", "kind", "metadata", "spec"])


def cel_rules(doc):
    """The CRDs' x-kubernetes-validations rules on the fields the stack sets."""
    kind, spec = doc["kind"], doc["spec"]
    problems = []
    if kind == "ResourceFlavor":
        if "topologyName" in spec and not spec.get("nodeLabels"):
            problems.append("at least one nodeLabel is required when topology is set")
        for t in spec.get("tolerations") or []:
            if "key" not in t and t.get("operator") != "Exists":
                problems.append("operator must be Exists when 'key' is empty")
            if t.get("operator") == "Exists" and "value" in t:
                problems.append("a value must be empty when 'operator' is 'Exists'")
    if kind == "ClusterQueue":
        for g in spec.get("resourceGroups") or []:
            for f in g["flavors"]:
                if [r["name"] for r in f["resources"]] != g["coveredResources"]:
                    problems.append("flavors must list the coveredResources, in order")
        if "cohortName" not in spec and any("borrowingLimit" in r for g in spec.get("resourceGroups") or []
                                            for f in g["flavors"] for r in f["resources"]):
            problems.append("borrowingLimit must be nil when cohort is empty")
    if kind == "Topology":
        labels = [lvl["nodeLabel"] for lvl in spec["levels"]]
        if len(set(labels)) != len(labels):
            problems.append("levels must be unique")
        if "kubernetes.io/hostname" in labels and labels[-1] != "kubernetes.io/hostname":
            problems.append("the kubernetes.io/hostname label can only be used at the lowest level")
    return problems


def kueue_docs(r):
    return [m for m in r.manifests if m["apiVersion"].startswith("kueue.x-k8s.io/")]


@pytest.mark.parametrize("stack", ["dev", "p4de", "p5"])
def test_kueue_objects_match_the_crds(stack):
    docs = kueue_docs(rendered(stack))
    assert {d["kind"] for d in docs} >= {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    for doc in docs:
        jsonschema.validate(doc, schema(doc["kind"]))
        assert cel_rules(doc) == [], (doc["kind"], cel_rules(doc))


def test_existing_cluster_queue_variant_matches_the_crd():
    [doc] = kueue_docs(variant("byo", {"rltrain:kueue": {"clusterQueue": "shared-gpus"}}))
    jsonschema.validate(doc, schema("LocalQueue"))


@pytest.mark.parametrize("kind,mutate", [
    ("ClusterQueue", lambda s: s.update(queueingStrategy="StrictFifo")),
    ("ClusterQueue", lambda s: s["resourceGroups"][0].update(covered=["cpu"])),
    ("ClusterQueue", lambda s: s["resourceGroups"][0]["flavors"][0]["resources"][0].update(nominalQuota="lots")),
    ("ResourceFlavor", lambda s: s.update(nodeSelector={"a": "b"})),
    ("Topology", lambda s: s["levels"][0].update(label="x")),
    ("LocalQueue", lambda s: s.update(clusterQueueName="x")),
])
def test_structure_check_catches_a_typo(kind, mutate):
    [doc] = [d for d in kueue_docs(rendered("p5")) if d["kind"] == kind]
    doc = copy.deepcopy(doc)
    mutate(doc["spec"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, schema(kind))


def test_cel_rules_catch_a_reordered_quota_and_a_misplaced_hostname():
    docs = {d["kind"]: copy.deepcopy(d) for d in kueue_docs(rendered("p5"))}
    docs["ClusterQueue"]["spec"]["resourceGroups"][0]["coveredResources"].reverse()
    docs["Topology"]["spec"]["levels"].reverse()
    assert cel_rules(docs["ClusterQueue"]) and cel_rules(docs["Topology"])


# --- the controller's Configuration --------------------------------------------------------------

DURATION = {"type": "string", "pattern": r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$"}
CONFIGURATION = obj({
    "apiVersion": {"const": "config.kueue.x-k8s.io/v1beta2"}, "kind": {"const": "Configuration"},
    "namespace": STR,
    # ControllerManager (inline)
    "webhook": obj({"port": INT, "host": STR, "certDir": STR}),
    "leaderElection": obj({"leaderElect": BOOL, "leaseDuration": DURATION, "renewDeadline": DURATION,
                           "retryPeriod": DURATION, "resourceLock": STR, "resourceName": STR,
                           "resourceNamespace": STR}),
    "metrics": obj({"bindAddress": STR, "enableClusterQueueResources": BOOL, "customLabels": {"type": "array"},
                    "localQueueMetrics": {"type": "object"}}),
    "health": obj({"healthProbeBindAddress": STR, "readinessEndpointName": STR, "livenessEndpointName": STR}),
    "pprofBindAddress": STR,
    "controller": obj({"groupKindConcurrency": {"type": "object", "additionalProperties": INT},
                       "cacheSyncTimeout": INT}),
    "tls": {"type": "object"},
    # Configuration
    "manageJobsWithoutQueueName": BOOL,
    "managedJobsNamespaceSelector": SELECTOR,
    "internalCertManagement": obj({"enable": BOOL, "webhookServiceName": STR, "webhookSecretName": STR}),
    "waitForPodsReady": obj({
        "timeout": DURATION, "blockAdmission": BOOL, "recoveryTimeout": DURATION,
        "requeuingStrategy": obj({"timestamp": {"enum": ["Eviction", "Creation"]}, "backoffLimitCount": INT,
                                  "backoffBaseSeconds": INT, "backoffMaxSeconds": INT}),
    }, ["timeout"]),
    "clientConnection": obj({"qps": {"type": "number"}, "burst": INT}),
    "integrations": obj({"frameworks": {"type": "array", "items": {"enum": [
        "batch/job", "kubeflow.org/mpijob", "ray.io/rayjob", "ray.io/rayservice", "ray.io/raycluster",
        "jobset.x-k8s.io/jobset", "kubeflow.org/paddlejob", "kubeflow.org/pytorchjob", "kubeflow.org/tfjob",
        "kubeflow.org/xgboostjob", "kubeflow.org/jaxjob", "trainer.kubeflow.org/trainjob",
        "workload.codeflare.dev/appwrapper", "sparkoperator.k8s.io/sparkapplication", "pod", "deployment",
        "statefulset", "leaderworkerset.x-k8s.io/leaderworkerset"]}},
        "externalFrameworks": {"type": "array", "items": STR}, "labelKeysToCopy": {"type": "array", "items": STR}}),
    "multiKueue": {"type": "object"}, "fairSharing": {"type": "object"}, "admissionFairSharing": {"type": "object"},
    "resources": {"type": "object"}, "featureGates": {"type": "object", "additionalProperties": BOOL},
    "objectRetentionPolicies": {"type": "object"}, "visibilityServer": {"type": "object"},
}, ["apiVersion", "kind"])


def manager_config():
    r = next(x for x in rendered("p5").resources if x["type"] == "kubernetes:helm.sh/v3:Release"
             and x["inputs"]["chart"] == kueue.chart_ref())
    text = r["inputs"]["values"]["managerConfig"]["controllerManagerConfigYaml"]
    return yaml.safe_load("\n".join(text) if isinstance(text, list) else text)


def test_manager_configuration_decodes_strictly():
    jsonschema.validate(manager_config(), CONFIGURATION)
    # The keys of the chart's values the stack sets, each one in charts/kueue/values.yaml at v0.19.2
    # (controllerManager.replicas / .topologySpreadConstraints / .podDisruptionBudget.enabled,
    # .minAvailable; enablePrometheus; managerConfig.controllerManagerConfigYaml).
    values = next(x for x in rendered("p5").resources if x["type"] == "kubernetes:helm.sh/v3:Release"
                  and x["inputs"]["chart"] == kueue.chart_ref())["inputs"]["values"]

    def paths(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict) and v and k != "labelSelector":
                yield from paths(v, f"{prefix}{k}.")
            else:
                yield prefix + k
    assert sorted(paths(values)) == [
        "controllerManager.podDisruptionBudget.enabled", "controllerManager.podDisruptionBudget.minAvailable",
        "controllerManager.replicas", "controllerManager.topologySpreadConstraints", "enablePrometheus",
        "managerConfig.controllerManagerConfigYaml"]


@pytest.mark.parametrize("mutate", [
    lambda c: c["waitForPodsReady"].update(enable=True),  # removed in v1beta2: the controller fails to load
    lambda c: c["integrations"]["frameworks"].append("kubeflow.org/mpijobs"),
    lambda c: c.update(waitForPodsReadyTimeout="60m"),
])
def test_configuration_check_catches_a_wrong_field(mutate):
    c = manager_config()
    mutate(c)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(c, CONFIGURATION)
