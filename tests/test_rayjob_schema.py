"""The RayJob against the ray.io/v1 RayJob CRD of KubeRay 1.6.2, unknown fields refused, and every pod
template inside it strictly as a core/v1 PodTemplateSpec.

kubernetes-validate has no schema for a custom resource, so the RayJob's own fields are written out
here as ray-project/kuberay tag v1.6.2 defines them: helm-chart/kuberay-operator/crds/ray.io_rayjobs.yaml
(the CRD the pinned chart installs: property names, types, required fields and enums) and the Go types
it is generated from, ray-operator/apis/ray/v1/rayjob_types.go (RayJobSpec:209-302, the submission
modes:84-89) and raycluster_types.go (RayClusterSpec:13-53, AuthOptions:82-107 with the mode enum
`disabled`/`token`:104, HeadGroupSpec:129-154, WorkerGroupSpec:157-201). The pod templates
(`corev1.PodTemplateSpec` in those types) are checked with the stack's Kubernetes version's schema.
"""

import copy

import jsonschema
import kubernetes_validate
import pytest
from test_kueue_support import variant
from test_schemas import CRD_KINDS, _validate_all

from components.workloads import rayjob

INT = {"type": "integer"}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
NUM = {"type": "number"}
OBJ = {"type": "object"}
STRMAP = {"type": "object", "additionalProperties": STR}


def obj(props, required=()):
    return {"type": "object", "additionalProperties": False, "properties": props, "required": list(required)}


AUTH_OPTIONS = obj({"enableK8sTokenAuth": BOOL, "secretName": STR, "mode": {"enum": ["disabled", "token"]}})
HEAD_GROUP = obj({
    "enableIngress": BOOL, "headService": OBJ, "labels": STRMAP, "rayStartParams": STRMAP, "resources": STRMAP,
    "serviceType": STR, "template": OBJ,
}, ["template"])
WORKER_GROUP = obj({
    "groupName": STR, "idleTimeoutSeconds": INT, "labels": STRMAP, "maxReplicas": INT, "minReplicas": INT,
    "numOfHosts": INT, "rayStartParams": STRMAP, "replicas": INT, "resources": STRMAP, "scaleStrategy": OBJ,
    "suspend": BOOL, "template": OBJ,
}, ["groupName", "maxReplicas", "minReplicas", "template"])
RAY_CLUSTER_SPEC = obj({
    "authOptions": AUTH_OPTIONS, "autoscalerOptions": OBJ, "enableInTreeAutoscaling": BOOL,
    "gcsFaultToleranceOptions": OBJ, "headGroupSpec": HEAD_GROUP, "headServiceAnnotations": STRMAP,
    "managedBy": STR, "rayVersion": STR, "suspend": BOOL, "upgradeStrategy": OBJ,
    "workerGroupSpecs": {"type": "array", "items": WORKER_GROUP},
}, ["headGroupSpec"])
RAYJOB_SPEC = obj({
    "activeDeadlineSeconds": INT, "backoffLimit": INT, "clusterSelector": STRMAP, "deletionStrategy": OBJ,
    "entrypoint": STR, "entrypointNumCpus": NUM, "entrypointNumGpus": NUM, "entrypointResources": STR,
    "jobId": STR, "managedBy": STR, "metadata": STRMAP, "preRunningDeadlineSeconds": INT,
    "rayClusterSpec": RAY_CLUSTER_SPEC, "runtimeEnvYAML": STR, "shutdownAfterJobFinishes": BOOL,
    # The CRD types it as a string; the controller knows these four (rayjob_types.go:84-89).
    "submissionMode": {"enum": ["K8sJobMode", "HTTPMode", "InteractiveMode", "SidecarMode"]},
    "submitterConfig": obj({"backoffLimit": INT}), "submitterPodTemplate": OBJ, "suspend": BOOL,
    "ttlSecondsAfterFinished": INT,
})
RAYJOB = obj({"apiVersion": {"const": "ray.io/v1"}, "kind": {"const": "RayJob"}, "metadata": OBJ,
              "spec": RAYJOB_SPEC}, ["apiVersion", "kind", "metadata", "spec"])


def rendered_rayjob(stack="p5", edits=None):
    r = variant(stack, edits or {"rltrain:workloads": {"multiNode": {"enabled": True, "form": "rayjob",
                                                                     "rayVersion": "2.60.0"}}})
    [job] = [m for m in r.manifests if m["kind"] == "RayJob"]
    return r, job


def pod_templates(job):
    cluster = job["spec"]["rayClusterSpec"]
    yield "head", cluster["headGroupSpec"]["template"]
    for g in cluster["workerGroupSpecs"]:
        yield g["groupName"], g["template"]
    if "submitterPodTemplate" in job["spec"]:
        yield "submitter", job["spec"]["submitterPodTemplate"]


@pytest.mark.parametrize("stack", ["p5", "p4de", "dev"])
def test_rayjob_matches_the_kuberay_1_6_2_crd_and_its_pods_are_pod_templates(stack):
    r, job = rendered_rayjob(stack)
    jsonschema.validate(job, RAYJOB)
    version = r.cfg.cluster.kubernetes_version
    found = []
    for name, template in pod_templates(job):
        found.append(name)
        doc = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"ray-{name}"}, "template": template}
        kubernetes_validate.validate(doc, f"{version}.0", strict=True)
    assert found == ["head", rayjob.WORKER_GROUP]


def test_every_other_object_of_the_rayjob_stack_validates_strictly():
    """The policies, PDB and token Secret of the form (built-in kinds), as tests/test_schemas.py does."""
    r, _ = rendered_rayjob(edits={"rltrain:workloads": {"multiNode": {
        "enabled": True, "form": "rayjob", "rayVersion": "2.60.0", "rayAuthTokenSecret": "hfToken"}}})
    assert ("ray.io/v1", "RayJob") in CRD_KINDS
    assert _validate_all(r.manifests, r.cfg.cluster.kubernetes_version) == []


def test_with_its_own_token_secret_too():
    _, job = rendered_rayjob(edits={"rltrain:workloads": {"multiNode": {
        "enabled": True, "form": "rayjob", "rayVersion": "2.60.0", "rayAuthTokenSecret": "hfToken"}}})
    jsonschema.validate(job, RAYJOB)


@pytest.mark.parametrize("path,value", [
    (("spec", "shutdownAfterJobFinish"), True),  # a typo of a RayJob field
    (("spec", "submissionMode"), "HttpMode"),
    (("spec", "rayClusterSpec", "authOptions", "mode"), "Token"),
    (("spec", "rayClusterSpec", "authOptions", "secret"), "x"),
    (("spec", "rayClusterSpec", "headGroupSpec", "rayStartParams", "port"), 6379),  # values are strings
    (("spec", "rayClusterSpec", "workerGroupSpecs", 0, "replica"), 1),
])
def test_the_structure_check_catches_a_wrong_field(path, value):
    _, job = rendered_rayjob()
    bad = copy.deepcopy(job)
    node = bad
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, RAYJOB)


def test_the_pod_template_check_catches_a_wrong_field():
    r, job = rendered_rayjob()
    template = copy.deepcopy(job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"])
    template["spec"]["containers"][0]["port"] = [{"containerPort": 8080}]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": "x"},
                                      "template": template}, f"{r.cfg.cluster.kubernetes_version}.0", strict=True)
