"""Every rendered built-in Kubernetes object validates (strict) against the schema of the stack's
Kubernetes version, with the real `kubernetes-validate` schemas (no network)."""

import kubernetes_validate
import pytest
import yaml
from support import STACKS, rendered

from components.offline.mock_engine import ROOT

CRD_KINDS = {("kubeflow.org/v2beta1", "MPIJob")}  # not a built-in: no schema in kubernetes-validate
# The Prometheus operator's objects (monitoring): checked by tests/test_monitoring.py.
CRD_KINDS |= {("monitoring.coreos.com/v1", "PodMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule")}
# The Kueue controller's ServiceMonitor: checked by tests/test_kueue_operations.py.
CRD_KINDS |= {("monitoring.coreos.com/v1", "ServiceMonitor")}
# Kueue's objects: checked against their CRDs' fields in tests/test_kueue_schema.py.
CRD_KINDS |= {("kueue.x-k8s.io/v1beta2", kind) for kind in ("ResourceFlavor", "ClusterQueue", "LocalQueue", "Topology")}
# KubeRay's objects (multiNode.form rayjob): checked against the CRD's fields in tests/test_rayjob_schema.py.
CRD_KINDS |= {("ray.io/v1", "RayJob")}
# Karpenter's objects (elastic mode): checked against the v1.14.0 CRDs in tests/test_karpenter_crds.py.
CRD_KINDS |= {("karpenter.k8s.aws/v1", "EC2NodeClass"), ("karpenter.sh/v1", "NodePool"),
              ("karpenter.sh/v1alpha1", "NodeOverlay")}


def _validate_all(docs, version):
    errors = []
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CRD_KINDS:
            continue
        try:
            kubernetes_validate.validate(doc, f"{version}.0", strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.append(f"{doc['kind']}/{doc['metadata']['name']}: {e.message} at {list(e.path)}")
    return errors


@pytest.mark.parametrize("stack", STACKS)
def test_rendered_objects_validate_strictly(stack):
    r = rendered(stack)
    assert _validate_all(r.manifests, r.cfg.cluster.kubernetes_version) == []


@pytest.mark.parametrize("stack", STACKS)
def test_committed_render_validates(stack):
    path = ROOT / "rendered" / stack / "manifests.yaml"
    docs = list(yaml.safe_load_all(path.read_text()))
    assert docs, f"{path} is empty: run python -m components.offline.render --all"
    assert _validate_all(docs, rendered(stack).cfg.cluster.kubernetes_version) == []


def test_a_wrong_field_is_caught():
    doc = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "x"}, "automountToken": False}
    assert _validate_all([doc], "1.35")
