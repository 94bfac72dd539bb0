"""Every value that protects money, data or a run, asserted on what the program declares (not only
through the stale-render test): break one and a test here names it."""

from __future__ import annotations

import json

import pytest
from support import rendered
from test_workloads_components import _render, container, env, find, sts  # noqa: F401,F811 (fixture)

from components.aws import iam
from components.offline import impact
from components.offline.mock_engine import run_program
from components.offline import unset_secrets
from components.offline.resources import node_requirements


def inputs(stack: str, type_: str, name: str | None = None) -> dict:
    return next(r["inputs"] for r in rendered(stack).resources
                if r["type"] == type_ and (name is None or r["name"] == name))


@pytest.mark.parametrize("stack", ["dev", "p4de", "p5"])
def test_imds_hop_limit_keeps_pods_off_the_node_role(stack):
    for name in ("gpu-lt", "cluster-system-lt"):
        md = inputs(stack, "aws:ec2/launchTemplate:LaunchTemplate", name)["metadataOptions"]
        assert (md["httpTokens"], md["httpPutResponseHopLimit"]) == ("required", 1), name


@pytest.mark.parametrize("stack", ["dev", "p4de", "p5"])
def test_every_root_volume_is_encrypted(stack):
    for name in ("gpu-lt", "cluster-system-lt"):
        [bdm] = inputs(stack, "aws:ec2/launchTemplate:LaunchTemplate", name)["blockDeviceMappings"]
        assert bdm["ebs"]["encrypted"] == "true" and bdm["ebs"]["volumeType"] == "gp3", name
    ng = inputs(stack, "eks:index:ManagedNodeGroup")
    assert ng["launchTemplate"]["id"] == "[known after deploy: cluster-system-lt.id]"


def test_efa_and_libfabric_env_on_every_efa_container():
    cfg, _, docs = _render("p5")
    e = env(container(find(docs, "Job", "rltrain-multinode")))
    assert (e["FI_PROVIDER"], e["FI_EFA_FORK_SAFE"], e["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "1", "1")
    # The single-node run uses no EFA (trainer profile): no devices, and no EFA settings either.
    single = container(find(docs, "Job", "rltrain-training"))
    assert "vpc.amazonaws.com/efa" not in single["resources"]["limits"]
    assert not [n for n in env(single) if n.startswith("FI_")]
    mpi = find(docs, "MPIJob", "rltrain-nccl-test")
    w = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert env(w)["FI_PROVIDER"] == "efa" and w["resources"]["limits"]["vpc.amazonaws.com/efa"] == "32"


def test_huge_pages_on_every_efa_pod():
    _, _, docs = _render("p5")
    for name in ("rltrain-multinode", "rltrain-validation"):
        r = container(find(docs, "Job", name))["resources"]
        assert r["requests"]["hugepages-2Mi"] == r["limits"]["hugepages-2Mi"] == "5Gi", name
    r = container(find(docs, "Job", "rltrain-training"))["resources"]  # no EFA: no huge pages
    assert "hugepages-2Mi" not in r["requests"] and "hugepages-2Mi" not in r["limits"]


def test_gpu_workers_tolerate_the_gpu_taint_and_select_gpu_nodes():
    _, _, docs = _render("p5")
    mpi = find(docs, "MPIJob", "rltrain-nccl-test")
    pods = [find(docs, "Job", n)["spec"]["template"]["spec"] for n in ("rltrain-training", "rltrain-multinode",
                                                                       "rltrain-validation")]
    pods.append(mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"])
    for pod in pods:
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        # By required node affinity, never nodeSelector: Kueue owns that field of a queued run
        # (components/workloads/placement.py; issue 34).
        assert "nodeSelector" not in pod
        assert node_requirements(pod) == {"role": "gpu-training"}
        assert pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "role", "operator": "In", "values": ["gpu-training"]}]}]}


def test_statefulset_done_marker_keeps_a_finished_run_from_training_again(sts):  # noqa: F811
    cfg, _, docs = sts
    e = env(container(find(docs, "StatefulSet", "rltrain-multinode")))
    assert e["RUN_DONE_MARKER"].startswith("/fsx/") and "rltrain-multinode" in e["RUN_DONE_MARKER"]


def test_data_repository_association_never_deletes_file_system_data():
    def with_s3(values):
        s = json.loads(values["rltrain:storage"])
        s["fsx"]["s3"] = {"bucket": "my-bucket"}
        return {**values, "rltrain:storage": json.dumps(s)}
    vals, secret, _ = unset_secrets.load_stack("p5")
    result = run_program(stack="p5", config=with_s3(vals), secret_keys=secret)
    dra = result.one("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
    assert dra.inputs["deleteDataInFilesystem"] is False


def test_fsx_and_keys_protected_and_retained():
    for r in rendered("p5").resources:
        if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem":
            assert r["options"]["protect"] and r["options"]["retainOnDelete"]
            assert r["inputs"]["skipFinalBackup"] is False
        if r["type"] == "aws:kms/key:Key":
            assert r["options"]["protect"], r["name"]


@pytest.mark.parametrize("path", impact.FSX_REPLACE)
def test_every_fsx_key_the_impact_watches_is_data_loss(path):
    before = rendered("p5").resources
    after = json.loads(json.dumps(before))
    fs = next(r for r in after if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem")
    fs["inputs"][path] = "changed"
    [i] = [i for i in impact.classify(before, after, rendered("p5").cfg) if i.name == "storage-fs"]
    assert i.kind == impact.DATA_LOSS and not i.allowed


@pytest.mark.parametrize("path", [p for p in impact.NODE_GROUP_REPLACE if "." not in p])
def test_every_node_group_key_the_impact_watches_kills_the_nodes(path):
    before = rendered("p5").resources
    after = json.loads(json.dumps(before))
    ng = next(r for r in after if r["type"] == "aws:eks/nodeGroup:NodeGroup")
    ng["inputs"][path] = "changed"
    [i] = [i for i in impact.classify(before, after, rendered("p5").cfg) if i.name == "gpu-nodes"]
    assert i.kind == impact.NODE_ROLL and not i.allowed


def test_pod_identity_trust_is_limited_to_account_cluster_and_service_account():
    trust = json.loads(iam.pod_identity_trust("rltrain-p5", "arn:aws:eks:us-east-1:123456789012:cluster/rltrain-p5",
                                              "rltrain", "training-sa"))
    [st] = trust["Statement"]
    assert st["Condition"]["StringEquals"] == {
        "aws:SourceAccount": "123456789012", "aws:RequestTag/eks-cluster-name": "rltrain-p5",
        "aws:RequestTag/kubernetes-namespace": "rltrain", "aws:RequestTag/kubernetes-service-account": "training-sa"}
    assert st["Action"] == ["sts:AssumeRole", "sts:TagSession"]


def test_training_role_trusts_only_its_service_account():
    def with_s3(values):
        t = json.loads(values["rltrain:training"])
        t["s3"] = {"bucket": "my-bucket", "prefix": "ckpt/"}
        return {**values, "rltrain:training": json.dumps(t)}
    vals, secret, _ = unset_secrets.load_stack("p5")
    result = run_program(stack="p5", config=with_s3(vals), secret_keys=secret)
    role = result.one("aws:iam/role:Role", "training-identity-role")
    cond = json.loads(role.inputs["assumeRolePolicy"])["Statement"][0]["Condition"]["StringEquals"]
    assert cond["aws:RequestTag/kubernetes-service-account"] == "training-sa"
    assert cond["aws:RequestTag/eks-cluster-name"] == "rltrain-p5"


# --- three protections that had no test of their own (issue 33) --------------------------------------


def test_fsx_capacity_3600_is_refused_before_any_resource_is_registered(monkeypatch):
    """PERSISTENT_2 takes 1200, 2400, then steps of 2400 GiB (FSx for Lustre API reference,
    CreateFileSystem StorageCapacity: "For PERSISTENT_2 SSD ... 1200 GiB, 2400 GiB, or increments
    of 2400 GiB"). 3600 is a multiple of 1200: a check weakened to 1200-steps lets it through and
    CreateFileSystem fails after the cluster exists."""
    from components.offline import mock_engine
    from components.stack import config as config_mod, validate

    monitors = []
    real = mock_engine.RecordingMonitor

    def recording(*a, **kw):
        monitors.append(real(*a, **kw))
        return monitors[-1]
    monkeypatch.setattr(mock_engine, "RecordingMonitor", recording)
    vals, secret, _ = unset_secrets.load_stack("p5")
    s = json.loads(vals["rltrain:storage"])
    s["fsx"]["storageCapacityGiB"] = 3600
    with pytest.raises(validate.ConfigError) as e:
        run_program(stack="p5", config={**vals, "rltrain:storage": json.dumps(s)}, secret_keys=secret)
    assert "rltrain:storage.fsx.storageCapacityGiB" in str(e.value) and "(got 3600)" in str(e.value)
    assert monitors and monitors[0].records == []  # refused before the first resource
    for ok in (1200, 2400, 4800, 7200):
        s["fsx"]["storageCapacityGiB"] = ok
        assert config_mod.FsxConfig(storageCapacityGiB=ok).storage_capacity_gib == ok


def test_fsx_security_group_change_is_a_data_losing_replacement():
    """pulumi-aws's aws_fsx_lustre_file_system (terraform-provider-aws internal/service/fsx/
    lustre_file_system.go) takes security_group_ids at create only: ForceNew, and its Update never
    sends them (UpdateFileSystem has no such field). A replaced group (here its description changed, which replaces an EC2
    security group) replaces the file system, which is data loss and refused without opt-in. Named
    here, not only through impact.FSX_REPLACE: dropping it from that tuple fails this test."""
    assert "securityGroupIds" in impact.FSX_REPLACE
    before = rendered("p5").resources
    after = json.loads(json.dumps(before))
    sg = next(r for r in after if r["type"] == "aws:ec2/securityGroup:SecurityGroup" and r["name"] == "storage-sg")
    sg["inputs"]["description"] = "FSx for Lustre: another description"
    found = {i.name: i for i in impact.classify(before, after, rendered("p5").cfg)}
    assert found["storage-sg"].kind == impact.REPLACE
    fs = found["storage-fs"]
    assert fs.kind == impact.DATA_LOSS and not fs.allowed and "securityGroupIds" in fs.why
    assert fs.opt_in == "rltrain:storage.allowReplacement"
    # And the file system's own list edited directly (a second group added):
    after = json.loads(json.dumps(before))
    fsr = next(r for r in after if r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem")
    fsr["inputs"]["securityGroupIds"] = [*fsr["inputs"]["securityGroupIds"], "sg-0123456789abcdef0"]
    [i] = [i for i in impact.classify(before, after, rendered("p5").cfg) if i.name == "storage-fs"]
    assert i.kind == impact.DATA_LOSS and not i.allowed


def test_statefulset_done_marker_changes_with_the_image():
    """The StatefulSet form skips training when RUN_DONE_MARKER exists: a new image with the same
    marker would be taken as already done. Each input of the run moves the marker."""
    def marker(**workloads):
        def mutate(w):
            w.update(multiNode={"enabled": True, "form": "statefulset"}, **workloads)
        _, _, docs = _render("p5", mutate, kueue={"enabled": False})
        return env(container(find(docs, "StatefulSet", "rltrain-multinode")))["RUN_DONE_MARKER"]

    base = marker()
    assert marker() == base  # unchanged inputs: the same run, its marker kept
    new_image = marker(image="123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf-on-eks/rlinf:20260501-000000")
    assert new_image != base
    assert marker(command=["python", "-m", "other.entry"]) != base
