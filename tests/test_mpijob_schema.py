"""The NCCL test's MPIJob against the structure of the kubeflow.org/v2beta1 MPIJob CRD.

kubernetes-validate has no schema for a custom resource, so the MPIJob's own fields are checked
against the v2beta1 spec (field names, types and enums as the mpi-operator CRD
`manifests/base/kubeflow.org_mpijobs.yaml` defines them, written out here), and every replica's pod
template strictly against the core/v1 PodTemplate schema of the stack's Kubernetes version.
"""

import jsonschema
import kubernetes_validate
import pytest
from support import rendered

INT = {"type": "integer"}
MPIJOB_SPEC = {
    "type": "object",
    "additionalProperties": False,
    "required": ["mpiReplicaSpecs"],
    "properties": {
        "launcherCreationPolicy": {"enum": ["AtStartup", "WaitForWorkersReady"]},
        "mpiImplementation": {"enum": ["OpenMPI", "Intel", "MPICH"]},
        "runLauncherAsWorker": {"type": "boolean"},
        "slotsPerWorker": INT,
        "sshAuthMountPath": {"type": "string"},
        "runPolicy": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "activeDeadlineSeconds": INT, "backoffLimit": INT, "ttlSecondsAfterFinished": INT,
                "cleanPodPolicy": {"enum": ["None", "Running", "All"]},
                "suspend": {"type": "boolean"}, "managedBy": {"type": "string"},
                "schedulingPolicy": {"type": "object"},
            },
        },
        "mpiReplicaSpecs": {
            "type": "object",
            "additionalProperties": False,
            "required": ["Launcher", "Worker"],
            "patternProperties": {"^(Launcher|Worker)$": {
                "type": "object",
                "additionalProperties": False,
                "required": ["template"],
                "properties": {"replicas": INT, "restartPolicy": {"enum": ["Always", "OnFailure", "Never", "ExitCode"]},
                               "template": {"type": "object"}},
            }},
        },
    },
}
MPIJOB = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {"apiVersion": {"const": "kubeflow.org/v2beta1"}, "kind": {"const": "MPIJob"},
                   "metadata": {"type": "object"}, "spec": MPIJOB_SPEC},
}


def mpijobs(stack):
    return [m for m in rendered(stack).manifests if m["kind"] == "MPIJob"]


@pytest.mark.parametrize("stack", ["p4de", "p5"])
def test_mpijob_matches_v2beta1_structure(stack):
    [job] = mpijobs(stack)
    jsonschema.validate(job, MPIJOB)
    version = rendered(stack).cfg.cluster.kubernetes_version
    for role, replica in job["spec"]["mpiReplicaSpecs"].items():
        template = {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"nccl-{role.lower()}"},
                    "template": replica["template"]}
        kubernetes_validate.validate(template, f"{version}.0", strict=True)


def test_structure_check_catches_a_typo():
    [job] = mpijobs("p5")
    job = {**job, "spec": {**job["spec"], "launcherCreationPolicy": "WaitForWorkers"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(job, MPIJOB)
