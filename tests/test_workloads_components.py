"""The workload components through the recording mock engine (components/offline/mock_engine.py)."""

from __future__ import annotations

import json

import pulumi
import pulumi_kubernetes as k8s
import pytest

from components.stack import validate
from components.offline import render, unset_secrets
from components.offline.resources import node_requirements
from components.offline.mock_engine import run_program
from components.scripts import resume_wrapper
from components.workloads import nccl
from components.workloads.build import build_workloads
from components.workloads.script_files import SCRIPTS_DIR, read_scripts, scripts_digest


def _render(stack: str, mutate=None, kueue=None):
    values, secret_keys, cfg = unset_secrets.load_stack(stack)
    if mutate or kueue:
        values = dict(values)
        w = json.loads(values["rltrain:workloads"])
        if mutate:
            mutate(w)
        values["rltrain:workloads"] = json.dumps(w)
        if kueue is not None:
            values["rltrain:kueue"] = json.dumps(kueue)
        prefix = "rltrain:"
        cfg = validate.load({k[len(prefix):]: v for k, v in values.items() if k.startswith(prefix)},
                          secret_keys={k[len(prefix):] for k in secret_keys})

    def program():
        provider = k8s.Provider("test", kubeconfig="{}")
        build_workloads(cfg, namespace="rltrain", claim_name="fsx-claim",
                        secret_name="training-secrets" if cfg.training.secret_env else None,
                        opts=pulumi.ResourceOptions(provider=provider))

    result = run_program(stack=stack, config=values, secret_keys=secret_keys, program=program)
    return cfg, result, render.manifests(result)


@pytest.fixture(scope="module")
def p5():
    return _render("p5")


@pytest.fixture(scope="module")
def p4de():
    return _render("p4de")


@pytest.fixture(scope="module")
def sts():
    # The StatefulSet form cannot be queued whole (config refuses it while Kueue is on).
    return _render("p5", lambda w: w.update(multiNode={"enabled": True, "form": "statefulset"}),
                   kueue={"enabled": False})


def find(docs, kind, name):
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)}"
    return found[0]


def container(doc, name="trainer"):
    spec = doc["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == name)


def env(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def assert_whole_node(c, gpus, efa):
    r = c["resources"]
    assert str(r["requests"]["nvidia.com/gpu"]) == str(r["limits"]["nvidia.com/gpu"]) == str(gpus)
    if efa:
        assert str(r["requests"]["vpc.amazonaws.com/efa"]) == str(r["limits"]["vpc.amazonaws.com/efa"]) == str(efa)
    else:  # a run that does not use EFA requests neither EFA devices nor huge pages
        assert not {"vpc.amazonaws.com/efa", "hugepages-2Mi"} & (set(r["requests"]) | set(r["limits"]))


# ---------------------------------------------------------------------------------------------
# single node


def test_p5_training_job(p5):
    cfg, result, docs = p5
    job = find(docs, "Job", "rltrain-training")
    spec = job["spec"]
    pod = spec["template"]["spec"]
    c = container(job)
    # RLinf on one node uses NVLink, not EFA (trainers.py single_node_efa): no EFA, no huge pages.
    assert_whole_node(c, 8, 0)
    assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"]
    # The user's command behind the resume wrapper (the trainer's resume terms).
    assert c["command"] == ["python3", "/scripts/resume_wrapper.py", "--", *cfg.workloads.command]
    assert c["imagePullPolicy"] == "IfNotPresent"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"fsx": "/fsx", "dshm": "/dev/shm", "scripts": "/scripts"}
    vols = {v["name"]: v for v in pod["volumes"]}
    assert vols["fsx"]["persistentVolumeClaim"]["claimName"] == "fsx-claim"
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "128Gi"}
    # + room for the infrastructure restarts, each a repair and a cold pull (components/stack/node_repair.py)
    assert spec["activeDeadlineSeconds"] == (cfg.workloads.max_run_minutes + 10) * 60 + 3 * 2400
    assert "ttlSecondsAfterFinished" not in spec  # a finished run stays until the stack disables it
    assert spec["backoffLimit"] == cfg.workloads.retries and spec["completions"] == 1
    assert pod["restartPolicy"] == "Never"
    rules = spec["podFailurePolicy"]["rules"]
    assert rules[0] == {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}
    assert rules[1]["action"] == "FailJob"
    assert rules[1]["onExitCodes"] == {"containerName": "trainer", "operator": "In",
                                       "values": [2, resume_wrapper.EXIT_NO_PROGRESS, 126, 127]}
    assert job["metadata"]["annotations"]["pulumi.com/waitFor"] == "jsonpath={.metadata.uid}"
    assert "pulumi.com/skipAwait" not in job["metadata"]["annotations"]
    e = env(c)
    assert e["NUM_NODES"] == "1" and e["NUM_GPUS"] == "8"
    assert e["HF_TOKEN"] == {"secretKeyRef": {"name": "training-secrets", "key": "hfToken", "optional": False}}


def test_job_fixed_name_is_deleted_before_replaced(p5):
    _, result, _ = p5
    rec = result.one("kubernetes:batch/v1:Job", "workloads-single-node-job")
    assert rec.inputs["metadata"]["name"] == "rltrain-training"
    assert rec.delete_before_replace is True
    assert rec.parent == "workloads-single-node"


def test_p4de_gets_4_efa(p4de):
    _, _, docs = p4de
    for name in ("rltrain-multinode", "rltrain-validation"):
        assert_whole_node(container(find(docs, "Job", name)), 8, 4)
    assert_whole_node(container(find(docs, "Job", "rltrain-training")), 8, 0)  # single node: no EFA
    mpi = find(docs, "MPIJob", "rltrain-nccl-test")
    w = mpi["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    assert str(w["resources"]["limits"]["vpc.amazonaws.com/efa"]) == "4"


# ---------------------------------------------------------------------------------------------
# multi node


def test_multinode_service_policy_pdb(p5):
    _, _, docs = p5
    svc = find(docs, "Service", "rltrain-multinode-svc")
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert [p["port"] for p in svc["spec"]["ports"]] == [6379]
    sel = svc["spec"]["selector"]
    np_ = find(docs, "NetworkPolicy", "rltrain-multinode")["spec"]
    assert np_["podSelector"]["matchLabels"] == sel
    assert np_["ingress"] == [{"from": [{"podSelector": {"matchLabels": sel}}]}]
    ports = {(p.get("protocol"), p["port"], p.get("endPort")) for r in np_["egress"] for p in r.get("ports", [])}
    assert {("UDP", 53, None), ("TCP", 53, None), ("TCP", 443, None), ("TCP", 988, None),
            ("TCP", 1018, 1023)} <= ports
    assert 8265 not in {p[1] for p in ports} and 10001 not in {p[1] for p in ports}
    pdb = find(docs, "PodDisruptionBudget", "rltrain-multinode")["spec"]
    assert pdb["minAvailable"] == 2 and "maxUnavailable" not in pdb and pdb["selector"]["matchLabels"] == sel


def test_multinode_indexed_job(p5):
    cfg, result, docs = p5
    job = find(docs, "Job", "rltrain-multinode")
    spec = job["spec"]
    pod = spec["template"]["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 2
    assert spec["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    assert [r["action"] for r in spec["podFailurePolicy"]["rules"]] == ["Ignore", "Ignore", "FailJob"]
    # + room for the infrastructure restarts, each a repair and a cold pull (components/stack/node_repair.py)
    assert spec["activeDeadlineSeconds"] == (cfg.workloads.max_run_minutes + 10) * 60 + 3 * 2400
    assert job["metadata"]["annotations"]["pulumi.com/waitFor"] == "jsonpath={.metadata.uid}"
    assert "pulumi.com/skipAwait" not in job["metadata"]["annotations"]
    assert pod["subdomain"] == "rltrain-multinode-svc"
    c = container(job)
    assert c["command"] == ["python3", "/scripts/ray_launcher.py", "--", "python3", "/scripts/resume_wrapper.py",
                            "--", *cfg.workloads.command]
    assert "livenessProbe" not in c
    assert_whole_node(c, 8, 32)
    e = env(c)
    assert e["NUM_NODES"] == "2"
    assert e["RAY_HEAD_HOST"] == "rltrain-multinode-0.rltrain-multinode-svc.rltrain.svc.cluster.local"
    assert e["RAY_PORT"] == "6379"
    assert "RUN_DONE_MARKER" not in e
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    prefs = pod["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert prefs[0] == {"weight": 100, "podAffinityTerm": {
        "topologyKey": "topology.k8s.aws/network-node-layer-3", "labelSelector": anti[0]["labelSelector"]}}
    assert "topologySpreadConstraints" not in pod
    rec = result.one("kubernetes:batch/v1:Job", "workloads-multi-node-job")
    assert rec.delete_before_replace
    names = {d.split("::", 1)[1] for d in rec.depends_on}
    assert {"workloads-multi-node-svc", "workloads-multi-node-netpol", "workloads-multi-node-pdb",
            "workloads-scripts-ray-launcher", "workloads-priority"} <= names


def test_each_script_in_its_own_immutable_configmap(p5):
    _, _, docs = p5
    scripts = read_scripts()
    launcher = scripts["ray_launcher.py"]
    cm = find(docs, "ConfigMap", launcher.configmap)
    # The launcher and its package _ray_launcher/ in one ConfigMap: one key per file, `/` as `.`.
    parts = sorted(p.name for p in (SCRIPTS_DIR / "_ray_launcher").glob("*.py"))
    assert [path for path, _ in launcher.parts] == [f"_ray_launcher/{name}" for name in parts]
    assert cm["data"] == {"ray_launcher.py": launcher.text,
                          **{f"_ray_launcher.{name}": text for (_, text), name in zip(launcher.parts, parts)}}
    assert cm["immutable"] is True
    assert launcher.configmap.startswith("rltrain-script-ray-launcher-")
    cms = {d["metadata"]["name"] for d in docs if d["kind"] == "ConfigMap"}
    assert cms == {scripts[f].configmap for f in ("ray_launcher.py", "validate_node.py", "nccl_check.py",
                                                  "resume_wrapper.py", "checkpoint_complete.py", "stage_assets.py",
                                                  "retention.py", "curves_metrics.py")}
    job = find(docs, "Job", "rltrain-multinode")
    pod = job["spec"]["template"]
    complete = scripts["checkpoint_complete.py"]
    assert pod["metadata"]["annotations"]["rltrain/scripts-sha256"] == scripts_digest(
        [launcher, scripts["resume_wrapper.py"], complete])
    [vol] = [v for v in pod["spec"]["volumes"] if v["name"] == "scripts"]
    wrapper = scripts["resume_wrapper.py"]
    # The wrapper imports the completeness test from the module mounted beside it.
    assert vol["projected"] == {"defaultMode": 0o755, "sources": [
        {"configMap": {"name": complete.configmap, "items": [
            {"key": "checkpoint_complete.py", "path": "checkpoint_complete.py"}]}},
        {"configMap": {"name": launcher.configmap, "items": [
            {"key": "ray_launcher.py", "path": "ray_launcher.py"},
            *({"key": f"_ray_launcher.{name}", "path": f"_ray_launcher/{name}"} for name in parts)]}},
        {"configMap": {"name": wrapper.configmap, "items": [{"key": "resume_wrapper.py", "path": "resume_wrapper.py"}]}}]}


def test_statefulset_form(sts):
    cfg, result, docs = sts
    assert not [d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "rltrain-multinode"]
    ss = find(docs, "StatefulSet", "rltrain-multinode")
    spec = ss["spec"]
    assert spec["serviceName"] == "rltrain-multinode-svc"
    assert spec["podManagementPolicy"] == "Parallel" and spec["replicas"] == 2
    assert ss["metadata"]["annotations"]["pulumi.com/waitFor"] == "jsonpath={.metadata.uid}"
    e = env(container(ss))
    marker = e["RUN_DONE_MARKER"]
    assert marker.startswith(f"/fsx/runs/{cfg.workloads.experiment_name}/rltrain-multinode-")
    assert marker.endswith(".done")
    assert e["RAY_HEAD_HOST"].startswith("rltrain-multinode-0.rltrain-multinode-svc.")
    assert result.one("kubernetes:apps/v1:StatefulSet").delete_before_replace


# ---------------------------------------------------------------------------------------------
# NCCL test and validation


def test_mpijob(p5):
    cfg, result, docs = p5
    mpi = find(docs, "MPIJob", "rltrain-nccl-test")
    assert mpi["apiVersion"] == "kubeflow.org/v2beta1"
    spec = mpi["spec"]
    assert spec["slotsPerWorker"] == 8
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
    assert spec["runPolicy"]["activeDeadlineSeconds"] > 0 and "ttlSecondsAfterFinished" not in spec["runPolicy"]
    workers = spec["mpiReplicaSpecs"]["Worker"]
    assert workers["replicas"] == 2
    w = workers["template"]["spec"]["containers"][0]
    assert_whole_node(w, 8, 32)
    assert w["resources"]["requests"]["hugepages-2Mi"] == w["resources"]["limits"]["hugepages-2Mi"]
    assert w["resources"]["requests"]["memory"] == w["resources"]["limits"]["memory"]
    assert w["command"] == ["/usr/sbin/sshd", "-De"]
    assert "nodeSelector" not in workers["template"]["spec"]  # Kueue's (placement.py)
    assert node_requirements(workers["template"]["spec"]) == {"role": "gpu-training"}
    assert env(w)["FI_PROVIDER"] == "efa"
    launcher = spec["mpiReplicaSpecs"]["Launcher"]
    assert launcher["replicas"] == 1
    # On the replica specs, never in a template: the operator overwrites the template's with the
    # replica's (launcher default OnFailure) and records a Warning event.
    assert launcher["restartPolicy"] == workers["restartPolicy"] == "Never"
    assert "restartPolicy" not in launcher["template"]["spec"] and "restartPolicy" not in workers["template"]["spec"]
    lc = launcher["template"]["spec"]["containers"][0]
    script = lc["command"][2]
    # mpirun starts once every worker's sshd answers (nccl.ssh_wait_script; tests/test_gate.py).
    assert lc["command"][:2] == ["bash", "-c"] and script.startswith("set -o pipefail; for h in ")
    assert "; mpirun --allow-run-as-root " in script
    assert "-np 16 -N 8" in script and "/opt/nccl-tests/build/all_reduce_perf" in script
    # Compared at the size the p5 figure was published at on EKS: 2 GiB, 0.9 x 437.8 GB/s.
    assert "| python3 /scripts/nccl_check.py --size 2147483648 --min-busbw 394.02" in script
    assert "EKS figure" in script and "Kubernetes section" in script
    assert "--mca pml '^ucx' --mca btl tcp,self --mca btl_tcp_if_exclude lo,docker0,veth_def_agent" in script
    assert "-c 1 -n 100" in script
    assert env(w)["NCCL_BUFFSIZE"] == "8388608" and env(w)["NCCL_P2P_NET_CHUNKSIZE"] == "524288"
    assert w["resources"]["limits"]["hugepages-2Mi"] == "5Gi"
    assert "nvidia.com/gpu" not in lc["resources"]["requests"]
    assert mpi["metadata"]["namespace"] == "rltrain"
    op = result.one("kubernetes:yaml/v2:ConfigFile")
    assert op.inputs["file"] == nccl.MPI_OPERATOR_MANIFEST
    assert f"/mpi-operator/{nccl.MPI_OPERATOR_VERSION}/deploy/v2beta1/mpi-operator.yaml" in op.inputs["file"]
    rec = result.one("kubernetes:kubeflow.org/v2beta1:MPIJob")
    assert op.ref in rec.depends_on


def test_mpi_operator_optional():
    _, result, _ = _render("p5", lambda w: w.update(ncclTest={"enabled": True, "installMpiOperator": False}))
    assert result.by_type("kubernetes:yaml/v2:ConfigFile") == []
    assert len(result.by_type("kubernetes:kubeflow.org/v2beta1:MPIJob")) == 1


def test_validation_job(p5):
    cfg, _, docs = p5
    job = find(docs, "Job", "rltrain-validation")
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 2
    assert spec["backoffLimit"] == 0 and spec["activeDeadlineSeconds"] == 1200
    assert job["metadata"]["annotations"]["pulumi.com/waitFor"] == "jsonpath={.metadata.uid}"
    assert "pulumi.com/skipAwait" not in job["metadata"]["annotations"]
    pod = spec["template"]["spec"]
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    c = container(job)
    # with the image's EFA provider check on a multi-node stack with EFA (validate_node.py --efa-provider)
    assert c["command"][:2] == ["python3", "/scripts/validate_node.py"]
    assert_whole_node(c, 8, 32)
    e = env(c)
    assert (e["EXPECTED_GPUS"], e["EXPECTED_EFA"], e["SHM_MIN_GIB"], e["FSX_PATH"]) == ("8", "32", "128", "/fsx")
    assert e["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "HF_TOKEN" not in e
    # the memory limit must exceed /dev/shm, or the tmpfs is capped below what is checked
    assert int(c["resources"]["limits"]["memory"].removesuffix("Gi")) > 128
    # hardened beyond training: CPU limit, read-only root with a /tmp emptyDir
    assert c["resources"]["requests"]["cpu"] == c["resources"]["limits"]["cpu"] == "2"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert {m["name"]: m["mountPath"] for m in c["volumeMounts"]}["tmp"] == "/tmp"
    skipped = {v.split("=", 1)[0] for k, v in job["metadata"]["annotations"].items() if k.startswith("checkov.io/")}
    assert skipped and not skipped & {"CKV_K8S_11", "CKV_K8S_22", "CKV_K8S_35"}


def test_validation_network_policy_denies_everything(p5):
    _, result, docs = p5
    job = find(docs, "Job", "rltrain-validation")
    np_ = find(docs, "NetworkPolicy", "rltrain-validation")["spec"]
    assert np_["podSelector"]["matchLabels"] == {"rltrain/run": "rltrain-validation"}
    assert np_["podSelector"]["matchLabels"].items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert np_["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in np_ and "egress" not in np_
    rec = result.one("kubernetes:batch/v1:Job", "workloads-validation-job")
    assert "kubernetes:networking.k8s.io/v1:NetworkPolicy::workloads-validation-netpol" in rec.depends_on


def test_workload_objects_carry_the_checkov_skips_of_their_pods(p5, sts):
    # checkov reads skip annotations from the Job's / StatefulSet's own metadata, not the template's;
    # the template carries none (a reason's wording must not restart the run)
    for _, _, docs in (p5, sts):
        workloads = [d for d in docs if d["kind"] in ("Job", "StatefulSet")]
        assert len(workloads) == 4  # staging, single-node, multi-node, validation
        for d in workloads:
            def skips(meta):
                return {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("checkov.io/skip")}
            assert skips(d["metadata"]) and not skips(d["spec"]["template"]["metadata"])


# ---------------------------------------------------------------------------------------------
# across everything


def test_priority_class(p5):
    pc = find(p5[2], "PriorityClass", f"rltrain-training-{p5[0].workloads.priority}")
    assert pc["value"] == p5[0].workloads.priority
    assert pc["preemptionPolicy"] == "PreemptLowerPriority" and pc["globalDefault"] is False


def _walk(value, key=None):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk(v, k)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v, key)
    else:
        yield key, value


def test_no_always_pull_or_latest(p5, p4de, sts):
    for _, _, docs in (p5, p4de, sts):
        pairs = list(_walk(docs))
        images = [v for k, v in pairs if k == "image"]
        policies = [v for k, v in pairs if k == "imagePullPolicy"]
        assert images and len(policies) == len(images)
        assert set(policies) == {"IfNotPresent"}
        for image in images:
            assert not image.endswith(":latest") and ":" in image.rsplit("/", 1)[-1]


def test_every_child_has_a_parent_and_the_provider(p5):
    _, result, _ = p5
    for r in result.records:
        if r.type.startswith("pulumi:providers:") or r.type == "rltrain:workloads:Workloads":
            continue
        assert r.parent is not None, r.name
    types = {r.type for r in result.records if r.type.startswith("rltrain:")}
    assert types == {"rltrain:workloads:Workloads", "rltrain:workloads:ScriptConfigMaps",
                     "rltrain:workloads:TrainingJob", "rltrain:workloads:MultiNodeTraining",
                     "rltrain:workloads:NcclTest", "rltrain:workloads:ClusterValidation",
                     "rltrain:workloads:StagingJob", "rltrain:workloads:CheckpointRetention",
                     "rltrain:workloads:Curves"}


def test_disabled_workloads_are_not_created():
    _, result, docs = _render("p5", lambda w: w.update(singleNode={"enabled": False}, multiNode={"enabled": False},
                                                       ncclTest={"enabled": False}, validation={"enabled": False}))
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["PriorityClass"]  # no run, no script to mount
