"""The training pod's pure builders (components/workloads/pod.py): no Pulumi runtime involved."""

import pytest

from components.stack import catalog
from components.stack import config
from components.workloads import pod
from components.workloads import placement
from components.workloads import runs
from components.k8s import security
from components.workloads import sizing
from components.workloads import volumes
from components.scripts import resume_wrapper
IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf-on-eks/rlinf:20260401-085549"


def make_cfg(instance="p5.48xlarge", count=2, efa=None, workloads=None, training=None):
    data = {"instanceType": instance, "count": count}
    if efa is not None:
        data["efa"] = efa
    return config.StackConfig.model_validate({
        "gpuNodes": data,
        "workloads": {"image": IMAGE, **(workloads or {})},
        "training": training or {},
    })


def env_of(template):
    return {e.name: e for e in template.spec.containers[0].env}


def template(cfg, **kw):
    kw.setdefault("secret_name", "training-secrets" if cfg.training.secret_env else None)
    return pod.training_pod_template(cfg, claim_name="fsx-claim", pod_labels=runs.labels("t", "run"),
                                     command=["python3", "train.py"], num_nodes=1, **kw)


# ---------------------------------------------------------------------------------------------
# sizing


@pytest.mark.parametrize("instance,cpu,mem_gib,gpus,efa", [
    ("p4de.24xlarge", 93, 1026, 8, 4),
    ("p5.48xlarge", 187, 1845, 8, 32),
    ("g6.12xlarge", 46, 161, 4, 1),
])
def test_sizing_derived_from_catalog(instance, cpu, mem_gib, gpus, efa):
    s = sizing.pod_sizing(make_cfg(instance))
    assert (s.cpu, s.memory_gib, s.gpus, s.efa) == (cpu, mem_gib, gpus, efa)
    assert sizing.fits(s, catalog.get(instance))


@pytest.mark.parametrize("instance,ref_cpu,ref_mem_gib", [("p4de.24xlarge", 90, 1000), ("p5.48xlarge", 180, 1800)])
def test_sizing_covers_reference_sizes(instance, ref_cpu, ref_mem_gib):
    s = sizing.pod_sizing(make_cfg(instance))
    assert s.cpu >= ref_cpu and s.memory_gib >= ref_mem_gib


@pytest.mark.parametrize("instance", ["p4de.24xlarge", "p5.48xlarge", "g6.12xlarge", "g5.12xlarge"])
def test_pod_plus_daemonsets_fit_allocatable_with_shm_inside_the_limit(instance):
    it = catalog.get(instance)
    s = sizing.pod_sizing(make_cfg(instance))
    alloc = it.allocatable()
    assert s.cpu * 1000 + catalog.DAEMONSET_CPU_MILLI <= alloc.cpu_milli
    # The memory-backed /dev/shm is charged to the pod's memory limit: limit (which includes shm)
    # plus DaemonSets fits the conservative allocatable, and shm leaves most of it to the processes.
    assert s.memory_mib + catalog.DAEMONSET_MEMORY_MIB <= alloc.memory_mib_conservative
    assert s.shm_gib * 1024 <= s.memory_mib * sizing.SHM_MAX_SHARE
    assert s.memory_gib - s.shm_gib >= 0.75 * s.memory_gib


def test_fits_rejects_oversized():
    it = catalog.get("p5.48xlarge")
    s = sizing.pod_sizing(make_cfg())
    assert not sizing.fits(sizing.PodSizing(cpu=192, memory_mib=s.memory_mib, shm_gib=8, gpus=8, efa=32), it)
    assert not sizing.fits(sizing.PodSizing(cpu=s.cpu, memory_mib=2048 * 1024, shm_gib=8, gpus=8, efa=32), it)
    assert not sizing.fits(sizing.PodSizing(cpu=s.cpu, memory_mib=s.memory_mib, shm_gib=8, gpus=8, efa=33), it)
    assert not sizing.fits(sizing.PodSizing(cpu=s.cpu, memory_mib=s.memory_mib, shm_gib=1000, gpus=8, efa=32), it)


def test_oversized_shm_is_a_clear_error():
    with pytest.raises(ValueError, match="shmSizeGiB"):
        sizing.pod_sizing(make_cfg(workloads={"shmSizeGiB": 1000}))


def test_resources_limits_equal_requests_for_gpu_and_efa():
    r = template(make_cfg()).spec.containers[0].resources
    assert r.requests["nvidia.com/gpu"] == r.limits["nvidia.com/gpu"] == "8"
    assert r.requests["vpc.amazonaws.com/efa"] == r.limits["vpc.amazonaws.com/efa"] == "32"
    assert r.requests["memory"] == r.limits["memory"] == "1845Gi"
    assert r.requests["cpu"] == "187" and "cpu" not in r.limits


def test_cpu_limit_only_when_asked():
    s = sizing.PodSizing(cpu=2, memory_mib=20 * 1024, shm_gib=12, gpus=8, efa=32, cpu_limit=True)
    r = template(make_cfg(), sizing=s).spec.containers[0].resources
    assert r.requests["cpu"] == r.limits["cpu"] == "2"
    assert r.requests["memory"] == r.limits["memory"] == "20Gi"


def test_efa_key_omitted_without_efa():
    cfg = make_cfg(count=1)  # one node: EFA automatic -> off
    assert cfg.gpu_nodes.efa_devices_per_node == 0
    r = template(cfg).spec.containers[0].resources
    assert "vpc.amazonaws.com/efa" not in r.requests and "vpc.amazonaws.com/efa" not in r.limits


# ---------------------------------------------------------------------------------------------
# env


def test_efa_env_only_with_efa_devices():
    with_efa = env_of(template(make_cfg()))
    assert with_efa["FI_PROVIDER"].value == "efa"
    assert with_efa["FI_EFA_USE_DEVICE_RDMA"].value == "1"
    without = env_of(template(make_cfg(efa=False)))
    assert not [n for n in without if n.startswith("FI_")]
    assert without["NCCL_DEBUG"].value == "WARN"


def test_env_contents_and_order():
    cfg = make_cfg(workloads={"mlflowTrackingUri": "http://mlflow.mlflow.svc.cluster.local",
                              "env": {"OMP_NUM_THREADS": "8"}})
    env = template(cfg).spec.containers[0].env
    names = [e.name for e in env]
    assert names == sorted(names)
    by = {e.name: e for e in env}
    assert by["NUM_GPUS"].value == "8" and by["NUM_NODES"].value == "1"
    assert by["CONFIG_NAME"].value == "maniskill_ppo_openvlaoft"  # trainers.RLINF.default_config
    assert by["PATH"].value.startswith("/opt/venv/openvla-oft/bin:")
    assert by["PYTORCH_CUDA_ALLOC_CONF"].value == "expandable_segments:True"
    assert by["TORCH_NCCL_AVOID_RECORD_STREAMS"].value == "1"
    assert by["MLFLOW_TRACKING_URI"].value.startswith("http://mlflow")
    assert by["OMP_NUM_THREADS"].value == "8"
    assert by["POD_NAMESPACE"].value_from.field_ref.field_path == "metadata.namespace"
    assert by["NODE_NAME"].value_from.field_ref.field_path == "spec.nodeName"
    assert "MLFLOW_TRACKING_URI" not in env_of(template(make_cfg()))


def test_secrets_only_via_secret_key_ref():
    cfg = make_cfg(training={"secretEnv": {"HF_TOKEN": "hfToken"}})
    e = env_of(template(cfg))["HF_TOKEN"]
    assert e.value is None
    assert e.value_from.secret_key_ref.name == "training-secrets"
    assert e.value_from.secret_key_ref.key == "hfToken"
    with pytest.raises(ValueError, match="Secret name"):
        template(cfg, secret_name=None)
    # validation pods do not get the secrets at all
    assert "HF_TOKEN" not in env_of(template(cfg, secret_name=None, include_secrets=False))


def test_user_env_cannot_override_program_env():
    with pytest.raises(ValueError, match="NUM_NODES"):
        template(make_cfg(workloads={"env": {"NUM_NODES": "4"}}))


# ---------------------------------------------------------------------------------------------
# volumes, image, security, scheduling


@pytest.mark.parametrize("instance,shm", [("p4de.24xlarge", 72), ("p5.48xlarge", 128), ("g6.12xlarge", 12)])
def test_shm_default_from_instance(instance, shm):
    t = template(make_cfg(instance))
    vols = {v.name: v for v in t.spec.volumes}
    assert vols["dshm"].empty_dir.medium == "Memory"
    assert vols["dshm"].empty_dir.size_limit == f"{shm}Gi"
    assert shm == catalog.shm_default_gib(catalog.get(instance))


def test_shm_configured():
    t = template(make_cfg(workloads={"shmSizeGiB": 64}))
    assert {v.name: v for v in t.spec.volumes}["dshm"].empty_dir.size_limit == "64Gi"


def test_volumes_and_mounts():
    t = template(make_cfg())
    vols = {v.name: v for v in t.spec.volumes}
    assert vols["fsx"].persistent_volume_claim.claim_name == "fsx-claim"
    assert "scripts" not in vols  # a pod mounts only the scripts it runs (none here)
    mounts = {m.name: m.mount_path for m in t.spec.containers[0].volume_mounts}
    assert mounts == {"fsx": "/fsx", "dshm": "/dev/shm"}


def test_image_and_pull_policy():
    c = template(make_cfg()).spec.containers[0]
    assert c.image == IMAGE and c.image_pull_policy == "IfNotPresent"
    assert c.name == runs.CONTAINER


def test_hardened_security_context():
    t = template(make_cfg())
    c = t.spec.containers[0]
    assert c.security_context.allow_privilege_escalation is False
    assert c.security_context.capabilities.drop == ["ALL"]
    assert c.security_context.capabilities.add is None
    assert t.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    assert t.spec.automount_service_account_token is False
    assert t.spec.service_account_name == "training-sa"
    assert t.spec.priority_class_name == "rltrain-training-1000000"  # its value in its name (runs.py)
    assert t.spec.termination_grace_period_seconds == 300


def test_scheduling_on_gpu_nodes():
    t = template(make_cfg())
    # Required node affinity on the GPU role, no nodeSelector: Kueue owns it (placement.py).
    assert t.spec.node_selector is None
    [term] = t.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    [(expr)] = term.match_expressions
    assert (expr.key, expr.operator, expr.values) == ("role", "In", ["gpu-training"])
    (tol,) = t.spec.tolerations
    assert (tol.key, tol.operator, tol.effect) == ("nvidia.com/gpu", "Exists", "NoSchedule")
    assert t.spec.topology_spread_constraints is None


def test_run_affinity_colocates_instead_of_spreading():
    a = placement.run_affinity("r")
    (anti,) = a.pod_anti_affinity.required_during_scheduling_ignored_during_execution
    assert anti.topology_key == "kubernetes.io/hostname"
    prefs = {p.pod_affinity_term.topology_key: p.weight
             for p in a.pod_affinity.preferred_during_scheduling_ignored_during_execution}
    assert prefs["topology.k8s.aws/network-node-layer-3"] == 100
    assert 0 < prefs["topology.k8s.aws/network-node-layer-2"] < 100


def test_checkov_skips_follow_the_pod():
    # what each pod does decides its skips (components/k8s/security.py; tests/test_checkov.py
    # holds them to checkov): the trainer's, with a secret env
    t = template(make_cfg(training={"secretEnv": {"HF_TOKEN": "hfToken"}}))
    skips = security.parse(security.annotate(t, security.TRAINING, kind="Job"))
    assert set(skips) == {"CKV_K8S_11", "CKV_K8S_15", "CKV_K8S_22", "CKV_K8S_23", "CKV_K8S_35", "CKV_K8S_40",
                          "CKV_K8S_43"}
    assert skips["CKV_K8S_11"] == "no CPU limit: " + security.TRAINING.no_cpu_limit
    assert skips["CKV_K8S_35"].startswith("Secret values in env HF_TOKEN: ")
    assert skips["CKV_K8S_23"].startswith("no runAsUser or runAsNonRoot, every capability dropped: ")
    # no secret env, an image by digest: no skip for either
    t = template(make_cfg(workloads={"image": "r/i@sha256:" + "0" * 64}))
    skips = security.parse(security.annotate(t, security.TRAINING, kind="Job"))
    assert "CKV_K8S_35" not in skips and "CKV_K8S_43" not in skips and "CKV_K8S_15" not in skips


def test_skips_go_on_the_workload_not_the_template():
    t = template(make_cfg(training={"secretEnv": {"HF_TOKEN": "hfToken"}}), annotations={"x": "y"})
    skips = security.annotate(t, security.TRAINING, kind="Job")
    assert skips and all(k.startswith("checkov.io/skip") for k in skips)
    assert "x" not in skips and "CKV_K8S_35" in security.parse(skips)
    # a reason's wording must not change the pod template (which restarts the run)
    assert not security.parse(t.metadata.annotations) and t.metadata.annotations["x"] == "y"


def test_read_only_root_gets_a_tmp_volume():
    t = template(make_cfg(), read_only_root=True)
    c = t.spec.containers[0]
    assert c.security_context.read_only_root_filesystem is True
    assert {m.name: m.mount_path for m in c.volume_mounts}["tmp"] == "/tmp"
    tmp = {v.name: v for v in t.spec.volumes}["tmp"]
    assert tmp.empty_dir.size_limit == volumes.TMP_SIZE and tmp.empty_dir.medium is None
    assert "CKV_K8S_22" not in security.parse(security.annotate(t, security.TRAINING, kind="Job"))
    # training keeps a writable root filesystem
    assert template(make_cfg()).spec.containers[0].security_context.read_only_root_filesystem is None


def test_deadline_and_failure_policy():
    cfg = make_cfg(workloads={"maxRunMinutes": 60})
    # 60 min + 10 min pull margin (reference: 4200) + room for 3 infrastructure restarts, each a node
    # repair (EKS's longest repair wait, 30 min) and a cold pull (10 min): components/stack/node_repair.py
    assert runs.deadline_seconds(cfg) == 4200 + 3 * (30 * 60 + 10 * 60)
    assert runs.deadline_seconds(make_cfg(workloads={"maxRunMinutes": 60, "infrastructureRestarts": 0})) == 4200
    rules = runs.pod_failure_policy(cfg).rules
    assert rules[0].action == "Ignore" and rules[0].on_pod_conditions[0].type == "DisruptionTarget"
    assert rules[1].action == "FailJob"
    assert rules[1].on_exit_codes.container_name == "trainer"
    assert rules[1].on_exit_codes.operator == "In" and rules[1].on_exit_codes.values == [2, resume_wrapper.EXIT_NO_PROGRESS, 126, 127]
