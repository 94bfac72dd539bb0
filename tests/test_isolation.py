"""Isolation that is enforced: the VPC CNI policy agent on created clusters, a default deny in the
training namespace, a policy per run, and the checks under their own service account."""

from __future__ import annotations

import copy

import pytest
from support import rendered

from components.offline import deploy_model, policy, render
from components.stack.labels import CHECKS_SERVICE_ACCOUNT


def rows(stack="p5"):
    return copy.deepcopy(rendered(stack).resources)


def obj(rs, kind, name):
    return next(r["inputs"] for r in rs if r["inputs"].get("kind") == kind
                and (r["inputs"].get("metadata") or {}).get("name") == name)


def test_p5_enforces_network_policy_with_a_default_deny():
    rs = rows()
    cluster = next(r for r in rs if r["type"] == "eks:index:Cluster")
    assert cluster["inputs"]["vpcCniOptions"]["enableNetworkPolicy"] is True
    deny = obj(rs, "NetworkPolicy", "default-deny")
    assert deny["spec"] == {"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}
    assert policy.evaluate(rs, rules=["network-policy"]) == []
    assert "network policies: enforced (VPC CNI network policy agent on); default-deny" in \
        render.summary(rendered("p5"))


def test_the_rule_fails_when_enforcement_is_off():
    rs = rows()
    next(r for r in rs if r["type"] == "eks:index:Cluster")["inputs"]["vpcCniOptions"]["enableNetworkPolicy"] = False
    [v] = policy.evaluate(rs, rules=["network-policy"])
    assert "no enforcement" in v.message and "enable_network_policy=True" in v.fix


def test_every_gpu_pod_is_selected_by_a_policy():
    rs = [r for r in rows() if not (r["inputs"].get("kind") == "NetworkPolicy")]
    found = {v.resource for v in policy.evaluate(rs, rules=["network-policy"])}
    assert {"Job/rltrain-training", "Job/rltrain-multinode", "MPIJob/rltrain-nccl-test/Worker"} <= found


def test_byo_says_enforcement_is_the_clusters():
    assert deploy_model.enforcement(rendered("byo").resources) is None
    assert "enforcement is the cluster's" in render.summary(rendered("byo"))


def test_nccl_test_talks_only_to_itself_and_dns():
    np_ = obj(rows(), "NetworkPolicy", "rltrain-nccl-test")["spec"]
    sel = {"app.kubernetes.io/component": "nccl-test"}
    assert np_["podSelector"] == {"matchLabels": sel}
    assert np_["ingress"] == [{"from": [{"podSelector": {"matchLabels": sel}}]}]
    assert np_["egress"][0] == {"to": [{"podSelector": {"matchLabels": sel}}]}
    assert {p["port"] for p in np_["egress"][1]["ports"]} == {53}


@pytest.mark.parametrize("stack", ["p4de", "p5"])
def test_checks_run_under_their_own_service_account(stack):
    rs = rows(stack)
    sa = obj(rs, "ServiceAccount", CHECKS_SERVICE_ACCOUNT)
    assert sa["automountServiceAccountToken"] is False and "annotations" not in sa["metadata"]
    assert obj(rs, "Job", "rltrain-validation")["spec"]["template"]["spec"]["serviceAccountName"] == CHECKS_SERVICE_ACCOUNT
    mpi = obj(rs, "MPIJob", "rltrain-nccl-test")["spec"]["mpiReplicaSpecs"]
    assert {r["template"]["spec"]["serviceAccountName"] for r in mpi.values()} == {CHECKS_SERVICE_ACCOUNT}
    assert obj(rs, "Job", "rltrain-training")["spec"]["template"]["spec"]["serviceAccountName"] == "training-sa"
