"""A config change never deletes the volume unasked (issue 44 item 10): a claim replacement that
can delete its volume is data loss, and a namespace move of a stack whose volume is the static FSx
volume moves the volume's claim reference with it. Plus the simulated cluster's provisioner
(cluster/nodes.py provision), as a pure reconcile step."""

from __future__ import annotations

import copy

from support import rendered
from test_kueue_support import variant

from cluster import nodes
from components.offline import impact

PVC = "kubernetes:core/v1:PersistentVolumeClaim"
PV = "kubernetes:core/v1:PersistentVolume"


def _impacts(before_stack, after):
    return {(i.type, i.name): i for i in impact.classify(rendered(before_stack).resources, after.resources, after.cfg)}


def test_a_namespace_move_of_a_dynamically_provisioned_claim_is_data_loss():
    """The byo stack claims from a storage class: a new namespace is a new claim and the old one
    deleted; its volume's reclaim policy is Delete by default, so the file system and every
    checkpoint go with it. Was a plain replace ("name or namespace changed: a new object")."""
    after = variant("byo", {"rltrain:training": {"namespace": "rltrain-b"}})
    i = _impacts("byo", after)[(PVC, "storage-claim")]
    assert i.kind == impact.DATA_LOSS and i.refused
    assert i.opt_in == "rltrain:storage.allowReplacement"
    assert "storage class fsx-sc" in i.why and "reclaim policy is Delete" in i.why


def test_a_renamed_dynamically_provisioned_claim_is_data_loss():
    after = variant("byo", {"rltrain:storage": {"claimName": "fsx-claim-b"}})
    assert _impacts("byo", after)[(PVC, "storage-claim")].kind == impact.DATA_LOSS


def test_a_dynamically_provisioned_claim_removed_is_data_loss():
    before = rendered("byo").resources
    after = [r for r in copy.deepcopy(before) if not (r["type"] == PVC and r["name"] == "storage-claim")]
    [i] = [i for i in impact.classify(before, after, rendered("byo").cfg) if i.name == "storage-claim"]
    assert i.kind == impact.DATA_LOSS and "removed from the stack" in i.why


def test_a_namespace_move_of_the_static_fsx_volume_moves_its_claim_reference():
    """A created cluster's FSx volume is static (reclaim Retain): the move re-creates the volume
    under the new namespace's name, naming the new claim, so the new claim binds; no data lost."""
    after = variant("p5", {"rltrain:cluster": {"name": "rltrain-p5"}, "rltrain:training": {"namespace": "rltrain-b"}})
    got = _impacts("p5", after)
    assert got[(PVC, "storage-claim")].kind == impact.REPLACE
    pv = got[(PV, "storage-pv")]
    assert pv.kind == impact.REPLACE and "naming the new claim" in pv.why and "Retain keeps the data" in pv.why
    [new_pv] = [m for m in after.manifests if m["kind"] == "PersistentVolume"]
    [new_claim] = [m for m in after.manifests if m["kind"] == "PersistentVolumeClaim"]
    assert new_pv["spec"]["claimRef"] == {"namespace": "rltrain-b", "name": "fsx-claim"}
    assert new_claim["spec"]["volumeName"] == new_pv["metadata"]["name"] == "rltrain-b-fsx-claim"
    assert new_pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert not [i for i in got.values() if i.kind == impact.DATA_LOSS]


# --- the simulated cluster's provisioner -------------------------------------------------------------

def _claim(name, ns="rltrain", uid="0123456789abcdef", phase="Pending", cls="fsx-sc", volume=None):
    return {"metadata": {"name": name, "namespace": ns, "uid": uid},
            "spec": {"storageClassName": cls, "accessModes": ["ReadWriteMany"], "volumeName": volume,
                     "resources": {"requests": {"storage": "4800Gi"}}}, "status": {"phase": phase}}


def test_provisioner_makes_a_volume_for_every_claim_of_its_class_with_the_class_reclaim_policy():
    cfg = rendered("sim").cfg
    cls = nodes.storage_class(cfg)
    assert cls["reclaimPolicy"] == "Delete"
    static = nodes.storage(cfg)[1]  # reserved for the stack's own claim by name
    claims = [_claim("fsx-claim"), _claim("fsx-claim", ns="rltrain-b", uid="fedcba9876543210"),
              _claim("other", cls="gp3", uid="1111111111111111")]
    create, delete = nodes.provision(claims, [static], [cls])
    assert [v["metadata"]["name"] for v in create] == ["pvc-fedcba9876543210"]
    v = create[0]
    assert v["spec"]["claimRef"]["uid"] == "fedcba9876543210" and v["spec"]["claimRef"]["namespace"] == "rltrain-b"
    assert v["spec"]["persistentVolumeReclaimPolicy"] == "Delete" and v["spec"]["storageClassName"] == "fsx-sc"
    assert v["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"] == "fsx.csi.aws.com"
    assert delete == []
    # Once made, not again; once its claim is gone (Released), deleted; a Retain one stays Released.
    again, _ = nodes.provision(claims, [static, v], [cls])
    assert again == []
    released = copy.deepcopy(v)
    released["status"] = {"phase": "Released"}
    kept = copy.deepcopy(released)
    kept["metadata"]["name"], kept["spec"]["persistentVolumeReclaimPolicy"] = "pvc-kept", "Retain"
    assert nodes.provision([], [released, kept, {**static, "status": {"phase": "Released"}}], [cls]) == (
        [], ["pvc-fedcba9876543210"])


def test_the_data_loss_opt_in_can_be_set_on_a_bring_your_own_cluster_with_a_storage_class(tmp_path):
    """The refusal of a claim move names `storage.allowReplacement`; on a bring-your-own cluster that
    key is settable exactly when the claim is dynamically provisioned (storage.storageClass), else it
    has no effect there and is refused."""
    import pytest
    from test_validate import load_doc, stack_doc

    from components.stack import validate

    doc = stack_doc("byo")
    doc["config"]["rltrain:storage"]["allowReplacement"] = True
    assert load_doc(doc, tmp_path).storage.allow_replacement is True
    doc = stack_doc("byo")
    doc["config"]["rltrain:storage"] = {"existingClaim": "shared-fsx", "allowReplacement": True}
    with pytest.raises(validate.ConfigError) as e:
        load_doc(doc, tmp_path)
    assert "rltrain:storage.allowReplacement" in str(e.value)
