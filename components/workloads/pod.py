"""The training pod: sizes, env, volumes, scheduling and security, as pure functions.

Every workload of the stack (single-node Job, multi-node Job/StatefulSet, validation Job) builds
its pod here, so a p5 stack cannot keep a p4de size in one of them (SEED-DEFECTS D9). Nothing in
this module needs a Pulumi runtime: the functions return typed `pulumi_kubernetes` Args, which the
tests inspect directly.

Sizing (whole node for one training pod; derived from `components.stack.catalog`, D9/D10)
----------------------------------------------------------------------------------
GPUs and EFA devices: all the node has (`gpu_count`; `efa_devices_per_node`, 0 when EFA is off,
and then the key is omitted). Extended resources: limits == requests.

CPU request = floor((allocatable_cpu - DAEMONSET_CPU_MILLI - 2 % x allocatable_cpu) / 1000) cores.
    p4de.24xlarge: allocatable 95 690m -> 93 cores;  p5.48xlarge: 191 450m -> 187 cores;
    g6.12xlarge: 47 810m -> 46 cores. No CPU limit (CFS quotas throttle data loaders and NCCL
    proxy threads; the request already reserves nearly the whole node).

Memory request = limit = floor((allocatable.memory_mib_conservative - DAEMONSET_MEMORY_MIB
    - 2 % x memory_mib_conservative) / 1024) GiB, where on EFA nodes allocatable is net of the
    driver's pre-allocated huge pages (catalog.EFA_HUGEPAGES_2MI x 2 MiB = 10 256 MiB).
    p4de: 1 072 456 MiB conservative -> 1026 GiB;  p5: 1 928 154 MiB -> 1845 GiB;
    g6: 168 677 MiB -> 161 GiB.
EFA pods also request `hugepages-2Mi` (catalog.EFA_POD_HUGEPAGES_MIB, 5120 MiB) from that pool
for libfabric, as requests == limits beside GPUs and EFA devices.
The memory-backed /dev/shm emptyDir is charged to the same pod memory cgroup (FACTS.md), i.e. it
lives *inside* this limit, not beside it: pages the trainer writes to /dev/shm plus its own RSS
must stay below the limit. `fits()` therefore checks (a) the whole limit plus the DaemonSets fits
the conservative allocatable, (b) /dev/shm takes at most a quarter of the limit, which leaves
p5 1845 - 128 = 1717 GiB and p4de 1026 - 72 = 954 GiB for the processes, and (c) the huge pages
fit the node's pool.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence
from urllib.parse import urlsplit

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field

from components.stack import catalog
from components.stack import config as config_mod
from components.stack.config import StackConfig
from components.stack.labels import GPU_TAINT_KEY, MANAGED_BY, ROLE_LABEL

GPU = "nvidia.com/gpu"
HUGEPAGES = "hugepages-2Mi"
EFA = "vpc.amazonaws.com/efa"
CONTAINER = "trainer"
PRIORITY_CLASS = "rltrain-training"
SCRIPTS_CONFIGMAP = "rltrain-scripts"
SCRIPTS_PATH = "/scripts"
SCRIPTS_MODE = 0o755
FSX_PATH = "/fsx"
SHM_PATH = "/dev/shm"
GPU_NODE_SELECTOR = dict(ROLE_LABEL)
RUN_LABEL = "rltrain/run"
# Cold pull of a 15-20 GB image (FACTS.md "Start-up latency"), added to every deadline (D6).
IMAGE_PULL_MARGIN_SECONDS = 10 * 60

CPU_HEADROOM = 0.02
MEMORY_HEADROOM = 0.02
# /dev/shm may use at most this share of the pod memory limit (it is charged to it).
SHM_MAX_SHARE = 0.25

# Env set by the program; user `workloads.env` may not override these (the launcher and the
# validation script depend on them being right).
PROTECTED_ENV = frozenset({
    "NUM_GPUS", "NUM_NODES", "POD_NAMESPACE", "NODE_NAME", "JOB_COMPLETION_INDEX",
    "RAY_HEAD_HOST", "RAY_PORT", "RAY_NODE_WAIT_SECONDS", "RUN_DONE_MARKER",
    "EXPECTED_GPUS", "EXPECTED_EFA", "SHM_MIN_GIB", "FSX_PATH",
})


# ---------------------------------------------------------------------------------------------
# sizing


@dataclass(frozen=True)
class PodSizing:
    """What one pod requests on one GPU node (`pod_sizing` for training; validation makes its own)."""

    cpu: int  # whole cores, request only
    memory_mib: int  # request == limit; /dev/shm is inside it
    shm_gib: int
    gpus: int
    efa: int
    # Training: False (no CPU limit, see the module docstring). Small helper pods (validation) set a
    # CPU limit equal to the request.
    cpu_limit: bool = False

    @property
    def hugepages_mib(self) -> int:
        """EFA pods request huge pages for libfabric (catalog.EFA_POD_HUGEPAGES_MIB) rather than
        switching them off (FI_EFA_USE_HUGE_PAGE=0): the driver pre-allocates them on every EFA
        node whether used or not, one GPU pod runs per node, and the reference NCCL job does so."""
        return catalog.EFA_POD_HUGEPAGES_MIB if self.efa > 0 else 0

    @property
    def memory_gib(self) -> int:
        return self.memory_mib // catalog.GIB_IN_MIB

    def extended(self) -> dict[str, str]:
        """GPU, EFA and the EFA huge pages, requests == limits; EFA and huge pages omitted when 0."""
        out = {GPU: str(self.gpus)}
        if self.efa > 0:
            out[EFA] = str(self.efa)
            out[HUGEPAGES] = f"{self.hugepages_mib}Mi"
        return out

    def resources(self) -> k8s.core.v1.ResourceRequirementsArgs:
        memory = f"{self.memory_gib}Gi" if self.memory_mib % catalog.GIB_IN_MIB == 0 else f"{self.memory_mib}Mi"
        cpu = {"cpu": str(self.cpu)}
        return k8s.core.v1.ResourceRequirementsArgs(
            requests={**cpu, "memory": memory, **self.extended()},
            limits={**(cpu if self.cpu_limit else {}), "memory": memory, **self.extended()},
        )


def shm_gib(cfg: StackConfig) -> int:
    return cfg.workloads.shm_size_gib or config_mod.shm_default_gib(cfg.gpu_nodes.instance)


def sizing_for(it: catalog.InstanceType, *, efa: int, shm: int) -> PodSizing:
    alloc = it.allocatable(efa=efa > 0)
    cpu_milli = alloc.cpu_milli - catalog.DAEMONSET_CPU_MILLI - math.ceil(alloc.cpu_milli * CPU_HEADROOM)
    mem_mib = (alloc.memory_mib_conservative - catalog.DAEMONSET_MEMORY_MIB
               - math.ceil(alloc.memory_mib_conservative * MEMORY_HEADROOM))
    return PodSizing(cpu=cpu_milli // 1000, memory_mib=(mem_mib // catalog.GIB_IN_MIB) * catalog.GIB_IN_MIB,
                     shm_gib=shm, gpus=it.gpu_count, efa=efa)


def fits(sizing: PodSizing, instance: catalog.InstanceType) -> bool:
    """True when the pod plus the GPU node's DaemonSets fit what the kubelet offers."""
    alloc = instance.allocatable(efa=sizing.efa > 0)
    return (
        sizing.cpu * 1000 + catalog.DAEMONSET_CPU_MILLI <= alloc.cpu_milli
        and sizing.hugepages_mib <= alloc.hugepages_2mi_mib
        and sizing.memory_mib + catalog.DAEMONSET_MEMORY_MIB <= alloc.memory_mib_conservative
        and sizing.shm_gib * catalog.GIB_IN_MIB <= sizing.memory_mib * SHM_MAX_SHARE
        and 0 < sizing.gpus <= instance.gpu_count
        and 0 <= sizing.efa <= instance.efa_devices
    )


def pod_sizing(cfg: StackConfig) -> PodSizing:
    it = cfg.gpu_nodes.instance
    sizing = sizing_for(it, efa=cfg.gpu_nodes.efa_devices_per_node, shm=shm_gib(cfg))
    if not fits(sizing, it):
        raise ValueError(
            f"training pod {sizing} does not fit {it.name} (allocatable {it.allocatable(efa=sizing.efa > 0)}); "
            f"/dev/shm ({sizing.shm_gib} GiB) may use at most {SHM_MAX_SHARE:.0%} of the memory limit: "
            "lower rltrain:workloads.shmSizeGiB"
        )
    return sizing


# ---------------------------------------------------------------------------------------------
# run-level settings shared by the Jobs


def deadline_seconds(cfg: StackConfig) -> int:
    """Training time plus the cold image pull margin (D6)."""
    return cfg.workloads.max_run_minutes * 60 + IMAGE_PULL_MARGIN_SECONDS


def pod_failure_policy(cfg: StackConfig) -> k8s.batch.v1.PodFailurePolicyArgs:
    """Disruptions are free retries; configuration errors fail the Job at once (D5).

    Ignore comes first: rules match in order, and a pod killed by a drain or preemption is never a
    configuration error whatever its exit code during shutdown.
    """
    rules = [k8s.batch.v1.PodFailurePolicyRuleArgs(
        action="Ignore",
        on_pod_conditions=[k8s.batch.v1.PodFailurePolicyOnPodConditionsPatternArgs(
            type="DisruptionTarget", status="True")],
    )]
    codes = sorted({c for c in cfg.workloads.fail_fast_exit_codes if c != 0})
    if codes:
        rules.append(k8s.batch.v1.PodFailurePolicyRuleArgs(
            action="FailJob",
            on_exit_codes=k8s.batch.v1.PodFailurePolicyOnExitCodesRequirementArgs(
                container_name=CONTAINER, operator="In", values=codes),
        ))
    return k8s.batch.v1.PodFailurePolicyArgs(rules=rules)


def labels(component: str, run: str) -> dict[str, str]:
    return {**MANAGED_BY, "app.kubernetes.io/name": "rltrain", "app.kubernetes.io/component": component,
            RUN_LABEL: run}


def selector_labels(run: str) -> dict[str, str]:
    return {RUN_LABEL: run}


def short_hash(*parts: str, length: int = 8) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:length]


def mlflow_port(uri: Optional[str]) -> Optional[int]:
    if not uri:
        return None
    u = urlsplit(uri)
    return u.port or (443 if u.scheme == "https" else 80)


# ---------------------------------------------------------------------------------------------
# env


def _plain(name: str, value: pulumi.Input[str]) -> k8s.core.v1.EnvVarArgs:
    return k8s.core.v1.EnvVarArgs(name=name, value=value)


def _field(name: str, path: str) -> k8s.core.v1.EnvVarArgs:
    return k8s.core.v1.EnvVarArgs(name=name, value_from=k8s.core.v1.EnvVarSourceArgs(
        field_ref=k8s.core.v1.ObjectFieldSelectorArgs(field_path=path)))


def secret_env(cfg: StackConfig, secret_name: Optional[pulumi.Input[str]]) -> list[k8s.core.v1.EnvVarArgs]:
    """Secrets as secretKeyRef only, never a plain value in the pod spec (D16)."""
    mapping = cfg.training.secret_env
    if mapping and secret_name is None:
        raise ValueError("training.secretEnv is set but no Secret name was passed to the workloads")
    return [
        k8s.core.v1.EnvVarArgs(name=env, value_from=k8s.core.v1.EnvVarSourceArgs(
            secret_key_ref=k8s.core.v1.SecretKeySelectorArgs(name=secret_name, key=key, optional=False)))
        for env, key in sorted(mapping.items())
    ]


def env_vars(cfg: StackConfig, *, num_nodes: int, secret_name: Optional[pulumi.Input[str]],
             efa: int, extra: Optional[Mapping[str, pulumi.Input[str]]] = None,
             include_secrets: bool = True) -> list[k8s.core.v1.EnvVarArgs]:
    """The container env, sorted by name. `extra` is component-specific (Ray, validation)."""
    w = cfg.workloads
    it = cfg.gpu_nodes.instance
    values: dict[str, pulumi.Input[str]] = {
        "NUM_GPUS": str(it.gpu_count),
        "NUM_NODES": str(num_nodes),
        "CONFIG_NAME": w.config_name,
        "VENV_NAME": w.venv_name,
        "MODEL_PATH": w.model_path,
        "EXPERIMENT_NAME": w.experiment_name,
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
        **catalog.nccl_env(it, efa),
    }
    if w.mlflow_tracking_uri:
        values["MLFLOW_TRACKING_URI"] = w.mlflow_tracking_uri
    clash = sorted(set(w.env) & PROTECTED_ENV)
    if clash:
        raise ValueError(f"rltrain:workloads.env may not set {', '.join(clash)}: the program sets them")
    values.update(w.env)  # user tuning (e.g. NCCL_DEBUG=INFO) wins over the defaults above
    values.update(extra or {})
    secrets = secret_env(cfg, secret_name) if include_secrets else []
    clash = sorted({s.name for s in secrets} & (set(values) | {"POD_NAMESPACE", "NODE_NAME"}))
    if clash:
        raise ValueError(f"training.secretEnv names {', '.join(clash)}, which is also a plain env var")
    out = [_plain(k, v) for k, v in values.items()]
    out += [_field("POD_NAMESPACE", "metadata.namespace"), _field("NODE_NAME", "spec.nodeName")]
    out += secrets
    return sorted(out, key=lambda e: e.name)


# ---------------------------------------------------------------------------------------------
# volumes, scheduling, security


# Scratch space of a pod whose root filesystem is read-only (disk-backed, small).
TMP_PATH = "/tmp"
TMP_SIZE = "64Mi"


def volumes(claim_name: str, shm: int, *, tmp: bool = False) -> list[k8s.core.v1.VolumeArgs]:
    return [
        k8s.core.v1.VolumeArgs(name="fsx", persistent_volume_claim=k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(
            claim_name=claim_name)),
        # Memory-backed: charged to the pod memory limit (see the module docstring).
        k8s.core.v1.VolumeArgs(name="dshm", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
            medium="Memory", size_limit=f"{shm}Gi")),
        k8s.core.v1.VolumeArgs(name="scripts", config_map=k8s.core.v1.ConfigMapVolumeSourceArgs(
            name=SCRIPTS_CONFIGMAP, default_mode=SCRIPTS_MODE)),
    ] + ([k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(size_limit=TMP_SIZE))]
         if tmp else [])


def volume_mounts(*, tmp: bool = False) -> list[k8s.core.v1.VolumeMountArgs]:
    return [
        k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=FSX_PATH),
        k8s.core.v1.VolumeMountArgs(name="dshm", mount_path=SHM_PATH),
        k8s.core.v1.VolumeMountArgs(name="scripts", mount_path=SCRIPTS_PATH, read_only=True),
    ] + ([k8s.core.v1.VolumeMountArgs(name="tmp", mount_path=TMP_PATH)] if tmp else [])


def gpu_tolerations() -> list[k8s.core.v1.TolerationArgs]:
    return [k8s.core.v1.TolerationArgs(key=GPU_TAINT_KEY, operator="Exists", effect="NoSchedule")]


def container_security_context(add_capabilities: Sequence[str] = (), *,
                               read_only_root: bool = False) -> k8s.core.v1.SecurityContextArgs:
    """No privilege escalation, every capability dropped but `add_capabilities`.

    readOnlyRootFilesystem only where the command is known not to write outside its volumes (the
    validation pod). Training runs the user's command in the user's image, and Python, Ray, Hugging
    Face, Triton and the training code write caches and outputs under $HOME, /tmp and the working
    directory.
    """
    return k8s.core.v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"], add=list(add_capabilities) or None),
        read_only_root_filesystem=True if read_only_root else None,
    )


def pod_security_context() -> k8s.core.v1.PodSecurityContextArgs:
    return k8s.core.v1.PodSecurityContextArgs(
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"))


def image_is_digest(image: str) -> bool:
    return "@sha256:" in image


def checkov_skips(cfg: StackConfig, *, image: str, cpu_limit: bool = False, read_only_root: bool = False,
                  secrets: bool = False, extra: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """Annotations for the checkov findings that are deliberate here, each with its reason.

    checkov (3.3.x) reads `checkov.io/skip<N>: CHECK=reason` from the metadata of the object it
    scans: for a Job or StatefulSet that is the object's own metadata, also for the graph checks on
    the pod inside it (CKV2_K8S_*); the pod template's annotations are not read (tested by
    experiment). So the workload object carries these (`skips_of(template)`), and the pod template
    too, for Pods scanned on their own. A reason may not contain "=" (checkov splits on it).
    """
    reasons = [
        ("CKV_K8S_8", "no liveness probe can tell a hung collective from a busy one (D3)"),
        ("CKV_K8S_9", "run-to-completion pod, no traffic to gate on readiness"),
        ("CKV_K8S_15", "IfNotPresent on purpose: large image with a pinned tag"),
        ("CKV_K8S_23", "the CUDA/EFA image runs as root; all capabilities dropped"),
        ("CKV_K8S_40", "the CUDA/EFA image runs as root; all capabilities dropped"),
    ]
    if not read_only_root:
        reasons.append(("CKV_K8S_22", "Python, Ray and model caches write to the root filesystem"))
    if not cpu_limit:
        reasons.append(("CKV_K8S_11", "no CPU limit: CFS throttling stalls data loaders"))
    if not image_is_digest(image):
        reasons.append(("CKV_K8S_43", "a specific tag is enforced by config, latest is rejected"))
    if secrets:
        reasons.append(("CKV_K8S_35", "secretKeyRef env is what the training code reads"))
    reasons += extra
    if any("=" in why or not why.strip() for _, why in reasons):
        raise ValueError(f"checkov skip reasons must be non-empty and free of '=': {reasons}")
    return {f"checkov.io/skip{i}": f"{check}={why}" for i, (check, why) in enumerate(sorted(reasons), 1)}


def skips_of(template: k8s.core.v1.PodTemplateSpecArgs) -> dict[str, str]:
    """The checkov skip annotations of a pod template, for the workload object that holds it."""
    annotations = template.metadata.annotations or {}
    return {k: v for k, v in annotations.items() if k.startswith("checkov.io/skip")}


# ---------------------------------------------------------------------------------------------
# the pod template


def training_pod_template(
    cfg: StackConfig,
    *,
    claim_name: str,
    secret_name: Optional[pulumi.Input[str]],
    pod_labels: Mapping[str, str],
    command: Sequence[str],
    num_nodes: int,
    extra_env: Optional[Mapping[str, pulumi.Input[str]]] = None,
    affinity: Optional[k8s.core.v1.AffinityArgs] = None,
    restart_policy: str = "Never",
    subdomain: Optional[str] = None,
    annotations: Optional[Mapping[str, str]] = None,
    sizing: Optional[PodSizing] = None,
    include_secrets: bool = True,
    read_only_root: bool = False,
) -> k8s.core.v1.PodTemplateSpecArgs:
    """One whole GPU node's pod running `command` in the training image.

    `read_only_root`: a read-only root filesystem with a small /tmp emptyDir, for a command known
    to write only to its volumes.
    """
    w = cfg.workloads
    sizing = sizing or pod_sizing(cfg)
    env = env_vars(cfg, num_nodes=num_nodes, secret_name=secret_name, efa=sizing.efa, extra=extra_env,
                   include_secrets=include_secrets)
    skips = checkov_skips(cfg, image=w.image, cpu_limit=sizing.cpu_limit, read_only_root=read_only_root,
                          secrets=include_secrets and bool(cfg.training.secret_env))
    container = k8s.core.v1.ContainerArgs(
        name=CONTAINER,
        image=w.image,
        image_pull_policy="IfNotPresent",
        command=list(command),
        env=env,
        resources=sizing.resources(),
        volume_mounts=volume_mounts(tmp=read_only_root),
        security_context=container_security_context(read_only_root=read_only_root),
    )
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=dict(pod_labels), annotations={**skips, **(annotations or {})}),
        spec=k8s.core.v1.PodSpecArgs(
            restart_policy=restart_policy,
            service_account_name=cfg.training.service_account,
            automount_service_account_token=False,
            priority_class_name=PRIORITY_CLASS,
            termination_grace_period_seconds=w.termination_grace_period_seconds,
            node_selector=dict(GPU_NODE_SELECTOR),
            tolerations=gpu_tolerations(),
            affinity=affinity,
            subdomain=subdomain,
            security_context=pod_security_context(),
            containers=[container],
            volumes=volumes(claim_name, sizing.shm_gib, tmp=read_only_root),
        ),
    )


def one_pod_per_node(run: str) -> k8s.core.v1.PodAntiAffinityArgs:
    return k8s.core.v1.PodAntiAffinityArgs(required_during_scheduling_ignored_during_execution=[
        k8s.core.v1.PodAffinityTermArgs(
            topology_key="kubernetes.io/hostname",
            label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector_labels(run)),
        )
    ])


# EC2 instance topology labels: layer 3 is the switch closest to the instance.
TOPOLOGY_WEIGHTS = (("topology.k8s.aws/network-node-layer-3", 100), ("topology.k8s.aws/network-node-layer-2", 50))


def co_locate(run: str) -> k8s.core.v1.PodAffinityArgs:
    """Prefer the switch the run's other pods are on (affinity, not spread: D8).

    Preferred, not required: a node group without the labels, or a run larger than one switch,
    still schedules.
    """
    return k8s.core.v1.PodAffinityArgs(preferred_during_scheduling_ignored_during_execution=[
        k8s.core.v1.WeightedPodAffinityTermArgs(weight=weight, pod_affinity_term=k8s.core.v1.PodAffinityTermArgs(
            topology_key=key,
            label_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=selector_labels(run)),
        ))
        for key, weight in TOPOLOGY_WEIGHTS
    ])


def run_affinity(run: str, *, co_located: bool = True) -> k8s.core.v1.AffinityArgs:
    return k8s.core.v1.AffinityArgs(pod_anti_affinity=one_pod_per_node(run),
                                    pod_affinity=co_locate(run) if co_located else None)


# ---------------------------------------------------------------------------------------------
# resource options


def _as_list(deps) -> list:
    if deps is None:
        return []
    return list(deps) if isinstance(deps, (list, tuple)) else [deps]


def child_opts(parent: pulumi.Resource, opts: Optional[pulumi.ResourceOptions], *extra_deps: pulumi.Resource,
               **kwargs) -> pulumi.ResourceOptions:
    """Options of a component's child: parent, the caller's Kubernetes provider and dependencies.

    depends_on is not inherited from a component by its children, so it is passed on explicitly
    (the namespace and its service account must exist before any pod is created).
    """
    return pulumi.ResourceOptions(
        parent=parent,
        provider=opts.provider if opts else None,
        depends_on=[*_as_list(opts.depends_on if opts else None), *extra_deps],
        **kwargs,
    )


# ---------------------------------------------------------------------------------------------
# component args and object metadata

# pulumi-kubernetes otherwise waits for a Job to complete / a StatefulSet to be ready: `pulumi up`
# would block for the whole training run (FACTS.md "Pulumi facts that bite").
SKIP_AWAIT = {"pulumi.com/skipAwait": "true"}


class WorkloadArgs(BaseModel):
    """What every workload component takes besides its namespace and Secret name (Pulumi Inputs)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    cfg: StackConfig
    claim_name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
    # sha256 of the scripts ConfigMap; pods that run a script carry it (a changed script = new run).
    scripts_digest: str = ""


def object_metadata(name: str, namespace: pulumi.Input[str], obj_labels: Mapping[str, str],
                    annotations: Optional[Mapping[str, str]] = None) -> k8s.meta.v1.ObjectMetaArgs:
    return k8s.meta.v1.ObjectMetaArgs(name=name, namespace=namespace, labels=dict(obj_labels),
                                      annotations=dict(annotations) if annotations else None)


def scripts_annotation(digest: str) -> dict[str, str]:
    return {"rltrain/scripts-sha256": digest} if digest else {}
