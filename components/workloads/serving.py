"""Serving: a vLLM OpenAI-compatible server for the policy being trained (`workloads.serving`, off by default).

Objects (pure builders below, one `Serving` component): a Deployment `rltrain-serving`, a Service of
the same name in front of it (port 8000, `http`), a PodDisruptionBudget and a NetworkPolicy.

- **Model**: a run's checkpoint (`model.run` + `model.step`): the run's checkpoint directory (the
  one the program gives the run as CKPT_DIR, env.checkpoint_dir) joined with `model.checkpointLayout`
  for that step; or a fixed `model.path` on the shared volume. The path is on the pod template (as
  `--model`) and in the annotation `rltrain/served-model-path`; the run and step are labels. A new
  step is a changed pod template: a rolling update of the Deployment, never a training restart
  (the impact report classifies it as "serving restart").
- **Size of a replica**: `gpusPerReplica` GPUs (tensor parallel over exactly those, config refuses
  a different size) and the same share of the whole-node training pod's CPU and memory
  (sizing.sizing_for), CPU limit = request: a Guaranteed pod, which the kubelet's static CPU manager
  gives exclusive cores (components/stack/topology.py). No EFA: tensor parallelism stays on the
  node's NVLink.
- **/dev/shm** (memory-backed, inside the memory limit): vLLM's Kubernetes guide mounts a 2 GiB
  memory emptyDir at /dev/shm, which the guide says tensor parallel inference needs
  (vllm-project/vllm docs/deployment/k8s.md, the GPU Deployment example); one
  more GiB per further tensor parallel rank (an allowance, not measured here).
- **Probes**: all on vLLM's `/health` (200 once the engine is up). The server starts listening only
  after the weights are loaded, so a *startup* probe carries the load: its budget (periodSeconds x
  failureThreshold) = ENGINE_INIT_SECONDS + 2 x the time to read every replica's weights from the
  volume at its throughput (FSx PERSISTENT_2: perUnitStorageThroughput MB/s per TiB x capacity,
  FACTS "FSx for Lustre"; replicas created together share it). Kubernetes runs neither liveness nor
  readiness until the startup probe succeeded ("Configure Liveness, Readiness and Startup Probes",
  kubernetes.io): a loading server is neither killed nor sent traffic. Liveness tolerates a minute
  of a busy server not answering.
- **Shutdown**: a preStop sleep lets the endpoints controller take the pod out of the Service
  first, then SIGTERM; the grace period is that sleep + `maxRequestSeconds` + a margin, longer than
  the longest request.
- **Placement** like the training pods (placement.py: the GPU node selector and taint). One replica
  per node (required anti-affinity) when a node fits only one; otherwise replicas prefer their
  siblings' node (packed, whole nodes stay free for training; `affinity`).
- **Rollout from free capacity** (`rollout_strategy`): the default 25 % surge leaves a new pod
  Pending forever on a full GPU node group. The program places the training runs (whole nodes) and
  the replicas onto the node group; when a whole replica still fits, it surges one (maxSurge 1,
  maxUnavailable 0), else it replaces one at a time (maxSurge 0, maxUnavailable 1). The Kueue quota
  leaves the serving replicas (and a surge) out of what training may be admitted to (kueue.py).
- **PodDisruptionBudget**: maxUnavailable 1 with two or more replicas (a node roll keeps the others
  serving); 0 with one (a drain waits, like for a training run: gpuNodes.allowNodeRoll).
- **NetworkPolicy**: in, the server port from pods of the training namespace and from Prometheus of
  the monitoring namespace (`/metrics` on the same port); out, DNS (the server reads only /fsx).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.stack import fit, node_efa, versions
from components.stack.config import StackConfig
from components.stack.labels import CHECKS_SERVICE_ACCOUNT, GPU, SERVING_COMPONENT
from components.k8s import security
from components.workloads import env, export, placement, runs, sizing, trainer, volumes
from components.workloads.sizing import PodSizing
from components.k8s.options import child_opts

NAME = "rltrain-serving"
COMPONENT = SERVING_COMPONENT
CONTAINER = "server"
PORT = 8000
PORT_NAME = "http"
HEALTH_PATH = "/health"
MODULE = "vllm.entrypoints.openai.api_server"
# What a reviewer reads on the Deployment and its pods: the model served.
MODEL_ANNOTATION = "rltrain/served-model-path"
RUN_LABEL = "rltrain/served-run"
STEP_LABEL = "rltrain/served-step"
# After the weights: CUDA graph capture, the KV cache allocation, torch.compile warm-up of the
# engine (minutes on a large model; vLLM logs each). A fixed allowance, not measured here.
ENGINE_INIT_SECONDS = 300
STARTUP_PERIOD_SECONDS = 10
# The lowest FSx for Lustre PERSISTENT_2 file system (125 MB/s/TiB x 1.2 TiB, FACTS): the volume's
# read throughput when the stack does not know it (bring your own cluster, no loadThroughputMBps).
ASSUMED_THROUGHPUT_MB_S = 125 * 1200 / 1024
# vLLM's Kubernetes guide (v0.11.0 docs/deployment/k8s.md): a 2 GiB memory emptyDir at /dev/shm for
# tensor-parallel inference; the +1 GiB per further TP rank is this project's allowance.
SHM_BASE_GIB = 2
PRESTOP_SLEEP_SECONDS = 15
SHUTDOWN_MARGIN_SECONDS = 30
PROMETHEUS_LABELS = {"app.kubernetes.io/name": "prometheus"}
# vLLM's cache root (vllm-project/vllm v0.11.0 vllm/envs.py VLLM_CACHE_ROOT, default ~/.cache/vllm):
# its torch.compile artifacts go under it (torch_compile_cache/<hash>, vllm/compilation/backends.py),
# the hash taken over the whole engine config, the model path and max_model_len included. So a
# restarted or rescheduled replica of the same step reuses them instead of compiling again; serving a
# new step (another --model path) compiles once more. On the shared volume, it outlives the pod.
VLLM_CACHE_ROOT = "/fsx/cache/vllm"
WAIT_CONTAINER = "wait-for-export"
WAIT_POLL_SECONDS = 30
# The init container's program: poll for the export's marker, bounded, the path and the Job named
# in the error (python3: the vLLM image has it; no shell arithmetic for Kubernetes to mistake for $(VAR)).
WAIT_PROGRAM = (
    "import os, sys, time\n"
    "m, job, limit = os.environ['EXPORT_MARKER'], os.environ['EXPORT_JOB'], float(os.environ['EXPORT_WAIT_SECONDS'])\n"
    "end = time.monotonic() + limit\n"
    "print(f'[wait-for-export] waiting up to {limit:.0f} s for {m} (written by Job {job})', flush=True)\n"
    "while not os.path.isfile(m):\n"
    "    if time.monotonic() >= end:\n"
    "        sys.exit(f'[wait-for-export] {m} not there after {limit:.0f} s: see kubectl logs job/{job}')\n"
    f"    time.sleep({WAIT_POLL_SECONDS})\n"
    "print(f'[wait-for-export] found {m}', flush=True)\n")

# The server runs as the image's user (root) with a writable root (vLLM and Triton write caches
# under $HOME and /tmp); the image is a pinned tag.
SKIP_REASONS = security.Reasons(
    root="the vLLM OpenAI server image runs as root and rltrain keeps its user",
    writable_root="vLLM, Triton and torch.compile write caches under $HOME and /tmp",
    pull_policy="a large image under a pinned tag, pulled once per node",
    tag="a pinned release tag of the vLLM image (config refuses latest and untagged)",
)


def image(cfg: StackConfig) -> str:
    return cfg.workloads.serving.image or versions.VLLM_OPENAI_IMAGE


def run_nodes(cfg: StackConfig, run: str) -> int:
    found = cfg.run(run)
    return found.nodes if found is not None else 1 if run == "single-node" else cfg.multi_node_count


def model_path(cfg: StackConfig) -> str:
    """The model directory served: a run's checkpoint at a step, or the fixed path."""
    m = cfg.workloads.serving.model
    if m.path:
        return m.path
    assert m.run is not None and m.step is not None  # config refuses otherwise
    if export.enabled(cfg):  # what the export Job writes (export.py), never the raw trainer layout
        return export.out_dir(cfg)
    ckpt = env.dir_of(cfg, m.run)
    # Step directories sit where the trainer writes them: with a trainer profile that is below the
    # run's directory (RLinf: <experiment>/<config experiment>/checkpoints, components/stack/trainers.py).
    steps = trainer.steps_dir(cfg, ckpt) if cfg.workloads.resume_terms is not None else ckpt
    return f"{steps}/{m.checkpoint_layout.format(step=m.step)}"


def served_model_name(cfg: StackConfig) -> str:
    """The name clients ask for: the experiment's, stable across checkpoints."""
    return cfg.workloads.experiment_name


def server_args(cfg: StackConfig) -> list[str]:
    """The flags the program sets (config.SERVING_PROGRAM_FLAGS), then extraArgs."""
    sv = cfg.workloads.serving
    args = [f"--model={model_path(cfg)}", f"--served-model-name={served_model_name(cfg)}", "--host=0.0.0.0",
            f"--port={PORT}", f"--tensor-parallel-size={sv.tp}"]
    if sv.max_model_len:
        args.append(f"--max-model-len={sv.max_model_len}")
    return args + list(sv.extra_args)


# --- sizes ------------------------------------------------------------------------------------------


def shm_gib(cfg: StackConfig) -> int:
    return SHM_BASE_GIB + cfg.workloads.serving.tp - 1


# Host side of a replica beyond its weights: the Python server, the tokenizer, CUDA's host context
# and pinned buffers, per replica (an allowance, not measured: check `kubectl top pod`).
HOST_ALLOWANCE_GIB = 6
# CPUs: the API server and the engine's scheduler process, plus one per tensor parallel worker
# (vLLM runs one worker process per GPU); an allowance, not measured.
CPU_BASE = 2
CPU_PER_GPU = 2


def model_facts(cfg: StackConfig):
    """The served model's facts when the stack knows them (a profiled trainer's run step)."""
    tc = cfg.workloads.trainer_config
    if cfg.workloads.serving.model.run and tc is not None and tc.model is not None:
        return tc.model
    return None


def max_len(cfg: StackConfig) -> Optional[int]:
    m = model_facts(cfg)
    return cfg.workloads.serving.max_model_len or (m.max_position if m else None)


def replica_sizing(cfg: StackConfig) -> PodSizing:
    """Sized from the model when the stack knows it: host memory = the weights (vLLM reads them
    through the host) + /dev/shm + HOST_ALLOWANCE_GIB, CPUs = CPU_BASE + CPU_PER_GPU per GPU; GPU
    memory is checked in config (weights + one max-length sequence's KV cache per rank). Otherwise
    the GPUs' share of the whole-node training pod's CPU and memory. Guaranteed (CPU limit)."""
    it = cfg.gpu_nodes.instance
    gpus = cfg.workloads.serving.gpus_per_replica
    if model_facts(cfg) is not None:
        mem_gib = math.ceil(weights_gib(cfg)) + shm_gib(cfg) + HOST_ALLOWANCE_GIB
        return PodSizing(cpu=CPU_BASE + CPU_PER_GPU * gpus, memory_mib=mem_gib * 1024, shm_gib=shm_gib(cfg),
                         gpus=gpus, efa=0, cpu_limit=True)
    whole = sizing.sizing_for(it, efa=cfg.gpu_nodes.efa_devices_per_node, shm=1,
                              node_efa=node_efa.interfaces(cfg.gpu_nodes))
    mem_gib = whole.memory_gib * gpus // it.gpu_count
    return PodSizing(cpu=whole.cpu * gpus // it.gpu_count, memory_mib=mem_gib * 1024, shm_gib=shm_gib(cfg),
                     gpus=gpus, efa=0, cpu_limit=True)


def reserved(cfg: StackConfig) -> dict[str, int]:
    """What serving holds of the node group, in the Kueue quota's units (millicores, MiB, GPUs):
    the replicas, plus the surge pod where one fits (a forced surge without room is the render
    rule rollout-fits' to refuse, not the quota's). Empty when serving is off."""
    if not cfg.workloads.serving.enabled:
        return {}
    s = replica_sizing(cfg)
    n = cfg.workloads.serving.replicas + (rollout_strategy(cfg).max_surge if surge_fits(cfg) else 0)
    return {"cpu": s.cpu * 1000 * n, "memory": s.memory_mib * n, GPU: s.gpus * n}


# --- time budgets -----------------------------------------------------------------------------------


def throughput_mb_s(cfg: StackConfig) -> tuple[float, str]:
    """(MB/s the weights load at, where the figure comes from)."""
    sv, fsx = cfg.workloads.serving, cfg.storage.fsx
    if sv.load_throughput_mb_s:
        return float(sv.load_throughput_mb_s), "workloads.serving.loadThroughputMBps"
    if fsx is not None and not cfg.byo_cluster:
        return (fsx.per_unit_storage_throughput * fsx.storage_capacity_gib / 1024,
                f"FSx {fsx.storage_capacity_gib} GiB x {fsx.per_unit_storage_throughput} MB/s/TiB")
    return ASSUMED_THROUGHPUT_MB_S, "assumed: the smallest FSx PERSISTENT_2 file system"


# Weights of a model the stack knows nothing of (model.path without model.sizeGiB).
DEFAULT_WEIGHTS_GIB = 16


def weights_gib(cfg: StackConfig) -> float:
    """model.sizeGiB, else the trainer profile's model at the export's bf16 (export.py), else 16."""
    m, tc = cfg.workloads.serving.model, cfg.workloads.trainer_config
    if m.size_gib is not None:
        return float(m.size_gib)
    if m.run and tc is not None and tc.model is not None:
        return tc.model.weights_gib(export.EXPORT_DTYPE_BYTES)
    return float(DEFAULT_WEIGHTS_GIB)


def load_seconds(cfg: StackConfig) -> float:
    """Every replica reading its weights at once from the shared volume."""
    sv = cfg.workloads.serving
    mb_s, _ = throughput_mb_s(cfg)
    return weights_gib(cfg) * 1024 * sv.replicas / mb_s


def startup_budget_seconds(cfg: StackConfig) -> int:
    raw = ENGINE_INIT_SECONDS + 2 * load_seconds(cfg)
    return math.ceil(raw / STARTUP_PERIOD_SECONDS) * STARTUP_PERIOD_SECONDS


def grace_seconds(cfg: StackConfig) -> int:
    return PRESTOP_SLEEP_SECONDS + cfg.workloads.serving.max_request_seconds + SHUTDOWN_MARGIN_SECONDS


# --- rollout from free capacity ---------------------------------------------------------------------


@dataclass(frozen=True)
class Rollout:
    max_surge: int
    max_unavailable: int
    why: str


def training_nodes(cfg: StackConfig) -> int:
    """Whole GPU nodes the largest training run holds while serving runs (runs queue one after
    another; the checks are short and run before)."""
    return max([0] + [r.nodes for r in cfg.enabled_runs])


def surge_fits(cfg: StackConfig) -> bool:
    """A surge replica fits beside the largest training run (on whole nodes) and the replicas,
    placed first fit (components/stack/fit.py)."""
    free, placed = fit.serving_replicas(cfg, training_nodes(cfg))
    surge = fit.first_fit({GPU: float(cfg.workloads.serving.gpus_per_replica)}, 1, free,
                          one_per_node=fit.one_replica_per_node(cfg), taken=placed)
    return len(surge) == 1


def rollout_strategy(cfg: StackConfig) -> Rollout:
    sv = cfg.workloads.serving
    fits = surge_fits(cfg)
    if sv.rollout == "surge" or (sv.rollout == "auto" and fits):
        why = ("a whole replica fits beside the training runs and the replicas: surge one, keep every replica serving"
               if fits else "forced by workloads.serving.rollout: surge (no whole replica fits beside what runs)")
        return Rollout(1, 0, why)
    why = ("no whole replica fits beside the training runs and the replicas: replace one at a time"
           if not fits else "workloads.serving.rollout: replace")
    return Rollout(0, 1, why)


# --- builders ---------------------------------------------------------------------------------------


def labels(cfg: StackConfig) -> dict[str, str]:
    m = cfg.workloads.serving.model
    extra = {RUN_LABEL: m.run, STEP_LABEL: str(m.step)} if m.run else {}
    return {**runs.labels(COMPONENT, NAME), **extra}


def _probe(period: int, failures: int, timeout: int) -> k8s.core.v1.ProbeArgs:
    return k8s.core.v1.ProbeArgs(http_get=k8s.core.v1.HTTPGetActionArgs(path=HEALTH_PATH, port=PORT_NAME),
                                 period_seconds=period, failure_threshold=failures, timeout_seconds=timeout)


def probes(cfg: StackConfig) -> dict[str, k8s.core.v1.ProbeArgs]:
    return {
        "startup": _probe(STARTUP_PERIOD_SECONDS, startup_budget_seconds(cfg) // STARTUP_PERIOD_SECONDS, 5),
        "readiness": _probe(5, 3, 5),
        # Only after startup succeeded; a busy engine may answer slowly: 4 x 15 s before a restart.
        "liveness": _probe(15, 4, 10),
    }


def affinity(cfg: StackConfig) -> k8s.core.v1.AffinityArgs:
    """One replica per node (required) when a node holds only one; otherwise replicas *prefer* the
    node of their siblings: packed, they leave whole nodes to the whole-node training pods (the
    scheduler's default scoring, LeastAllocated, would spread them over every node and leave no
    node whole). The schedule in the render places them the same way (first fit)."""
    term = k8s.core.v1.PodAffinityTermArgs(topology_key="kubernetes.io/hostname",
                                           label_selector=k8s.meta.v1.LabelSelectorArgs(
                                               match_labels=runs.selector_labels(NAME)))
    if fit.one_replica_per_node(cfg):
        return placement.gpu_affinity(pod_anti_affinity=placement.one_pod_per_node(NAME))
    return placement.gpu_affinity(pod_affinity=k8s.core.v1.PodAffinityArgs(
        preferred_during_scheduling_ignored_during_execution=[
            k8s.core.v1.WeightedPodAffinityTermArgs(weight=100, pod_affinity_term=term)]))


def pod_template(cfg: StackConfig, claim_name: str) -> k8s.core.v1.PodTemplateSpecArgs:
    s = replica_sizing(cfg)
    p = probes(cfg)
    container = k8s.core.v1.ContainerArgs(
        name=CONTAINER,
        image=image(cfg),
        image_pull_policy="IfNotPresent",
        command=["python3", "-m", MODULE],
        args=server_args(cfg),
        ports=[k8s.core.v1.ContainerPortArgs(name=PORT_NAME, container_port=PORT, protocol="TCP")],
        env=[k8s.core.v1.EnvVarArgs(name="HF_HUB_OFFLINE", value="1"),  # weights come from /fsx only
             k8s.core.v1.EnvVarArgs(name="VLLM_CACHE_ROOT", value=VLLM_CACHE_ROOT)],
        resources=s.resources(),
        startup_probe=p["startup"], readiness_probe=p["readiness"], liveness_probe=p["liveness"],
        lifecycle=k8s.core.v1.LifecycleArgs(pre_stop=k8s.core.v1.LifecycleHandlerArgs(
            sleep=k8s.core.v1.SleepActionArgs(seconds=PRESTOP_SLEEP_SECONDS))),
        volume_mounts=volumes.volume_mounts(),
        security_context=security.container_security_context(),
    )
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=labels(cfg), annotations={MODEL_ANNOTATION: model_path(cfg)}),
        spec=k8s.core.v1.PodSpecArgs(
            # The checks' account: no AWS role (the server reads only /fsx), no API token.
            service_account_name=CHECKS_SERVICE_ACCOUNT,
            automount_service_account_token=False,
            priority_class_name=runs.priority_class(cfg),
            termination_grace_period_seconds=grace_seconds(cfg),
            tolerations=placement.gpu_tolerations(),
            affinity=affinity(cfg),
            security_context=security.pod_security_context(),
            init_containers=wait_containers(cfg),
            containers=[container],
            volumes=volumes.volumes(claim_name, s.shm_gib),
        ),
    )


def await_annotations(cfg: StackConfig) -> dict[str, str]:
    """`pulumi up` waits for the rollout (the provider's Deployment await) up to the time the
    replicas need to load, plus the cold image pull. Served from an export, the replicas wait for
    training to reach the step (hours): `up` then only waits for the Deployment to exist
    (runs.AWAIT_CREATED), and the rollout is watched with kubectl (docs/serving.md)."""
    if export.enabled(cfg):
        return dict(runs.AWAIT_CREATED)
    return {"pulumi.com/timeoutSeconds": str(startup_budget_seconds(cfg) + runs.IMAGE_PULL_MARGIN_SECONDS)}


def wait_containers(cfg: StackConfig) -> Optional[list[k8s.core.v1.ContainerArgs]]:
    """The init container that holds a replica until the export of its step exists: it waits,
    neither crash-looping nor failing the deploy, for as long as the export Job may wait."""
    if not export.enabled(cfg):
        return None
    res = {"cpu": "100m", "memory": "64Mi"}  # limits = requests: the pod stays Guaranteed
    return [k8s.core.v1.ContainerArgs(
        name=WAIT_CONTAINER, image=image(cfg), image_pull_policy="IfNotPresent",
        command=["python3", "-c", WAIT_PROGRAM],
        env=[k8s.core.v1.EnvVarArgs(name="EXPORT_MARKER", value=export.marker(cfg)),
             k8s.core.v1.EnvVarArgs(name="EXPORT_JOB", value=export.name(cfg)),
             k8s.core.v1.EnvVarArgs(name="EXPORT_WAIT_SECONDS", value=str(wait_seconds(cfg)))],
        resources=k8s.core.v1.ResourceRequirementsArgs(requests=res, limits=res),
        volume_mounts=[k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=volumes.FSX_PATH, read_only=True)],
        security_context=security.container_security_context(read_only_root=True))]


def wait_seconds(cfg: StackConfig) -> int:
    """How long a replica waits for the export: the export's own wait plus its conversion."""
    return export.wait_seconds(cfg) + export.CONVERT_SECONDS if export.enabled(cfg) else 0


def deployment_args(cfg: StackConfig, claim_name: str, namespace: pulumi.Input[str]) -> k8s.apps.v1.DeploymentInitArgs:
    sv = cfg.workloads.serving
    template = pod_template(cfg, claim_name)
    r = rollout_strategy(cfg)
    return k8s.apps.v1.DeploymentInitArgs(
        metadata=runs.object_metadata(NAME, namespace, labels(cfg), {
            MODEL_ANNOTATION: model_path(cfg),
            **await_annotations(cfg),
            **security.annotate(template, SKIP_REASONS, kind="Deployment")}),
        spec=k8s.apps.v1.DeploymentSpecArgs(
            replicas=sv.replicas,
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(NAME)),
            strategy=k8s.apps.v1.DeploymentStrategyArgs(type="RollingUpdate", rolling_update=(
                k8s.apps.v1.RollingUpdateDeploymentArgs(max_surge=r.max_surge, max_unavailable=r.max_unavailable))),
            # A replica is available once Ready (the startup probe already covers the load).
            min_ready_seconds=0,
            # A rollout that makes no progress for the load time plus a pull is reported failed.
            progress_deadline_seconds=startup_budget_seconds(cfg) + runs.IMAGE_PULL_MARGIN_SECONDS + wait_seconds(cfg),
            revision_history_limit=3,
            template=template,
        ),
    )


def service_args(cfg: StackConfig, namespace: pulumi.Input[str]) -> k8s.core.v1.ServiceInitArgs:
    return k8s.core.v1.ServiceInitArgs(
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME)),
        spec=k8s.core.v1.ServiceSpecArgs(
            type="ClusterIP",
            selector=runs.selector_labels(NAME),
            ports=[k8s.core.v1.ServicePortArgs(name=PORT_NAME, port=PORT, target_port=PORT_NAME, protocol="TCP")],
        ),
    )


def pdb_args(cfg: StackConfig, namespace: pulumi.Input[str]) -> k8s.policy.v1.PodDisruptionBudgetInitArgs:
    """maxUnavailable: a Deployment's pods have a scale subresource (unlike Job pods)."""
    return k8s.policy.v1.PodDisruptionBudgetInitArgs(
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME)),
        spec=k8s.policy.v1.PodDisruptionBudgetSpecArgs(
            max_unavailable=1 if cfg.workloads.serving.replicas > 1 else 0,
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(NAME)),
        ),
    )


def network_policy_args(cfg: StackConfig, namespace: pulumi.Input[str]) -> k8s.networking.v1.NetworkPolicyInitArgs:
    port = [k8s.networking.v1.NetworkPolicyPortArgs(port=PORT, protocol="TCP")]
    same_ns = k8s.networking.v1.NetworkPolicyPeerArgs(pod_selector=k8s.meta.v1.LabelSelectorArgs())
    prometheus = k8s.networking.v1.NetworkPolicyPeerArgs(
        namespace_selector=k8s.meta.v1.LabelSelectorArgs(
            match_labels={"kubernetes.io/metadata.name": cfg.monitoring.namespace}),
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=dict(PROMETHEUS_LABELS)))
    dns = runs.dns_peer()
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME)),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(NAME)),
            policy_types=["Ingress", "Egress"],
            ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(from_=[same_ns], ports=port),
                     k8s.networking.v1.NetworkPolicyIngressRuleArgs(from_=[prometheus], ports=port)],
            egress=[k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[dns], ports=[
                k8s.networking.v1.NetworkPolicyPortArgs(port=53, protocol="UDP"),
                k8s.networking.v1.NetworkPolicyPortArgs(port=53, protocol="TCP")])],
        ),
    )


def sizing_lines(cfg: StackConfig) -> list[str]:
    s, m = replica_sizing(cfg), model_facts(cfg)
    if m is None:
        return [f"  replica: {s.cpu} CPU, {s.memory_mib // 1024} GiB (the GPUs' share of a node: model unknown)"]
    length = max_len(cfg) or m.max_position
    tp = cfg.workloads.serving.tp
    per_gpu = m.per_gpu_gib(length, tp)
    return [f"  replica: {s.cpu} CPU, {s.memory_mib // 1024} GiB = weights {weights_gib(cfg):,.1f} GiB + /dev/shm "
            f"{s.shm_gib} GiB + {HOST_ALLOWANCE_GIB} GiB allowance; per GPU {per_gpu:,.1f} GiB = weights / tensor "
            f"parallel {tp} + the KV cache of one {length}-token sequence ({m.kv_cache_gib(length):,.1f} GiB) for "
            f"{max(1, m.kv_heads // tp)} of {m.kv_heads} KV heads ({m.source})"]


def summary(cfg: StackConfig) -> list[str]:
    """Lines for the render summary: what is served and how it rolls out and starts."""
    sv = cfg.workloads.serving
    if not sv.enabled:
        return []
    r = rollout_strategy(cfg)
    mb_s, source = throughput_mb_s(cfg)
    m = sv.model
    what = f"run {m.run} step {m.step}" if m.run else "a fixed path"
    return [f"serving: {sv.replicas} x {sv.gpus_per_replica} GPU (tensor parallel {sv.tp}) {image(cfg)}, "
            f"{what}: {model_path(cfg)}",
            *([f"  waits (init container {WAIT_CONTAINER}) up to {wait_seconds(cfg)} s for {export.marker(cfg)}"]
              if export.enabled(cfg) else []),
            f"  startup budget {startup_budget_seconds(cfg)} s = {ENGINE_INIT_SECONDS} s engine start + 2 x "
            f"{load_seconds(cfg):,.0f} s to read {sv.replicas} x {weights_gib(cfg):,.1f} GiB at {mb_s:,.0f} MB/s ({source})",
            *sizing_lines(cfg),
            f"  rollout maxSurge {r.max_surge} / maxUnavailable {r.max_unavailable}: {r.why}",
            f"  grace period {grace_seconds(cfg)} s (longest request {sv.max_request_seconds} s)"]


class ServingArgs(runs.WorkloadArgs):
    pass


class Serving(pulumi.ComponentResource):
    """The serving Deployment with its Service, PodDisruptionBudget and NetworkPolicy."""

    def __init__(self, name: str, args: ServingArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:Serving", name, None, opts)
        cfg = args.cfg
        netpol = k8s.networking.v1.NetworkPolicy(f"{name}-netpol", network_policy_args(cfg, namespace),
                                                 child_opts(self, opts))
        pdb = k8s.policy.v1.PodDisruptionBudget(f"{name}-pdb", pdb_args(cfg, namespace), child_opts(self, opts))
        self.service = k8s.core.v1.Service(f"{name}-service", service_args(cfg, namespace),
                                           child_opts(self, opts))
        self.deployment = k8s.apps.v1.Deployment(f"{name}-deployment",
                                                 deployment_args(cfg, args.claim_name, namespace),
                                                 child_opts(self, opts, netpol, pdb))
        self.model_path = model_path(cfg)
        self.register_outputs({"deployment": NAME, "service": NAME, "modelPath": self.model_path})
