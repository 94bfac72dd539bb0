"""RayJobTraining: multi-node Ray training as a KubeRay `ray.io/v1` RayJob (`multiNode.form: rayjob`).

The KubeRay operator (components/k8s/kuberay.py, pinned chart 1.6.2) creates a Ray cluster for the
run, submits the configured command as the Ray job's entrypoint, and deletes the cluster when the
job ends (`shutdownAfterJobFinishes`). Fields as ray-project/kuberay v1.6.2 declares them
(ray-operator/apis/ray/v1/rayjob_types.go RayJobSpec:209-302, raycluster_types.go
RayClusterSpec:13-53, AuthOptions:82-107, HeadGroupSpec:129-154, WorkerGroupSpec:157-201).

The pods: a GPU head and N-1 GPU workers (one worker group), every one a whole GPU node built by
the pod builder every workload uses (pod.training_pod_template: all GPUs and EFA devices, huge pages,
/dev/shm, /fsx, the GPU toleration and node selector, one pod per node, the secret env, CKPT_DIR and
RESUME=auto). What KubeRay needs of them:
- the Ray container first (KubeRay's RayContainerIndex 0) and *no command*: KubeRay writes
  `ulimit -n 65536; ray start ... --block` from `rayStartParams` (controllers/ray/common/pod.go
  BuildPod:618-652), adding `--num-cpus`, `--memory` and `--num-gpus` from the container's limits
  (generateRayStartCommand:981-1021);
- the head's ports under KubeRay's names, which its head Service copies (common/service.go
  getServicePorts:403-434): gcs-server (`multiNode.rayPort`), dashboard 8265, client 10001 and
  metrics 8080. Named `metrics`, not `ray-metrics`: KubeRay adds a `metrics` port of 8080 to the
  Service whenever the head has none by that name, and a Service with two ports of 8080 is invalid.
  The workers declare the same `metrics` port (KubeRay would add it otherwise, pod.go:446-454);
- `restartPolicy: Never`: a failed Ray pod is deleted and created again by KubeRay
  (raycluster_controller.go:1212) instead of restarting in place with stale Ray state.
`rayStartParams` set `metrics-export-port` 8080 on every node (Prometheus) and switch usage stats
off; the head's dashboard listens on the pod IP (KubeRay's default, set here explicitly): it is the
Jobs API the operator submits to, token-protected, reachable only from the operator.

Submission mode: **HTTPMode**. The operator submits the entrypoint to the head's dashboard (8265)
itself (rayjob_controller.go:310-316). K8sJobMode would add a submitter Job: with Kueue that is a
third pod set (kueue pkg/controller/jobs/rayjob/rayjob_controller.go expectedPodSetsCount:158-164),
which Kueue places on the GPU flavor (its node labels and toleration) beside the Ray pods, and
which cannot carry the run's label (the run's required one-pod-per-node anti-affinity would leave it
no node) so it would need a network path of its own to the dashboard. The operator reaches the
dashboard in every mode anyway (it polls the job's status there, rayjob_controller.go:300-306), so
HTTPMode adds no flow: the head's NetworkPolicy admits the run's own pods and the operator on 8265,
nothing else. SidecarMode can hang in Initializing (kuberay #4945). What HTTPMode costs: the
entrypoint's output is the Ray job's log (`ray job logs`), not a Kubernetes Job's, and it goes with
the Ray cluster when the run ends; trainers log to /fsx or MLflow.

Token authentication: `rayClusterSpec.authOptions.mode: token` (Ray >= 2.52, config refuses
older). KubeRay injects RAY_AUTH_MODE and RAY_AUTH_TOKEN into every Ray container and init
container (pod.go SetContainerTokenAuthEnvVars:297-336) and sends the token with its own dashboard
requests (utils/util.go:974-1000). The token is KubeRay's own, a fresh Secret per Ray cluster named
after it (raycluster_controller.go reconcileAuthSecret:379-430), unless
`multiNode.rayAuthTokenSecret` names a secret config key: then the stack's Secret
`<run>-ray-token` (data key `auth_token`) holds it and `authOptions.secretName` points at it.

Retries: `backoffLimit` = `workloads.retries`; every failed attempt counts (KubeRay has no pod
failure policy), and each retry is a new Ray cluster (rayjob_types.go:214-218) that resumes from
CKPT_DIR. `activeDeadlineSeconds` = runs.deadline_seconds (a run past it is failed and not retried,
rayjob_controller.go:536-545).

Kueue: the queue label on the RayJob; Kueue suspends it at creation and admits the head and worker
pod sets together (no `suspend` set here). Both pod sets prefer one nearest network switch and form
one pod set group (`kueue.x-k8s.io/podset-group-name`: a group of exactly two pod sets, one of them
a single pod, kueue pkg/controller/jobframework/tas_validation.go:214-250), so the head lands beside
its workers.

Lifecycle: a custom resource is patched in place on a spec change, and a RayJob does not apply
later spec edits to its Ray cluster (FACTS "KubeRay"): `replace_on_changes` on the spec and labels,
fixed name, delete first (the deletion is awaited; skipAwait skips only the create wait).
"""

from __future__ import annotations

import dataclasses
import shlex
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import kuberay, kueue
from components.stack.config import StackConfig
from components.k8s import security
from components.workloads import env, multinode, placement, pod, runs, trainer
from components.k8s.options import child_opts

API_VERSION = "ray.io/v1"
RUN = multinode.RUN  # the same run (label, checkpoint identity) as the other multi-node forms
COMPONENT = multinode.COMPONENT
WORKER_GROUP = "workers"  # "head" is reserved for the head's pod set (Kueue)
SUBMISSION_MODE = "HTTPMode"
# KubeRay's port names and defaults (ray-operator/controllers/ray/utils/constant.go:105-116).
DASHBOARD_PORT = kuberay.DASHBOARD_PORT
CLIENT_PORT = 10001
METRICS_PORT = 8080  # Ray's metrics-export-port (FACTS "Monitoring"; components/k8s/monitoring.py)
METRICS_PORT_NAME = "metrics"
HEAD_LABEL = {"ray.io/node-type": "head"}  # KubeRay labels every head pod (common/pod.go labelPod)
# The Kueue pod set group of the head and its workers.
PODSET_GROUP = "ray-cluster"
PODSET_GROUP_ANNOTATION = "kueue.x-k8s.io/podset-group-name"
TOKEN_SECRET_KEY = "auth_token"  # KubeRay reads the token from this key (utils/constant.go:174)
# Why the Ray pods fail the checkov checks they fail (security.annotate_pods derives which from the
# templates): the training pod's reasons, and the probes KubeRay adds itself (common/pod.go
# initLivenessAndReadinessProbe:478-576, unless the operator's ENABLE_PROBES_INJECTION is false).
SKIP_REASONS = dataclasses.replace(
    security.TRAINING,
    no_liveness="KubeRay adds its own liveness probe to the Ray container (raylet health)",
    no_readiness="KubeRay adds its own readiness probe to the Ray container (raylet and, on the head, GCS health)",
)


class RayJobTrainingArgs(runs.WorkloadArgs):
    # The stack's first RayJob run installs the KubeRay operator (StackConfig.kuberay_operator), once.
    install_operator: bool = True


def token_secret_name(run: str = RUN) -> str:
    return f"{run}-ray-token"


def entrypoint(cfg: StackConfig, run=None) -> str:
    return shlex.join(trainer.training_command(cfg, run))


def head_start_params(cfg: StackConfig) -> dict[str, str]:
    """`ray start --head` flags (each `--key=value`; "true" is a bare flag, pod.go convertParamMap)."""
    return {
        "port": str(cfg.workloads.multi_node.ray_port),
        # The Jobs API KubeRay submits to: on the pod IP (KubeRay's default, written out), token-protected.
        "dashboard-host": "0.0.0.0",
        "metrics-export-port": str(METRICS_PORT),
        "disable-usage-stats": "true",
    }


def worker_start_params(cfg: StackConfig) -> dict[str, str]:
    return {"metrics-export-port": str(METRICS_PORT), "disable-usage-stats": "true"}


def _port(name: str, port: int) -> k8s.core.v1.ContainerPortArgs:
    return k8s.core.v1.ContainerPortArgs(name=name, container_port=port, protocol="TCP")


def head_ports(cfg: StackConfig) -> list[k8s.core.v1.ContainerPortArgs]:
    return [_port("gcs-server", cfg.workloads.multi_node.ray_port), _port("dashboard", DASHBOARD_PORT),
            _port("client", CLIENT_PORT), _port(METRICS_PORT_NAME, METRICS_PORT)]


def worker_ports() -> list[k8s.core.v1.ContainerPortArgs]:
    return [_port(METRICS_PORT_NAME, METRICS_PORT)]


def podset_annotations(cfg: StackConfig) -> dict[str, str]:
    """Kueue: prefer one nearest switch for the whole Ray cluster (head and workers as one group)."""
    topology = kueue.podset_topology(cfg)
    return {**topology, PODSET_GROUP_ANNOTATION: PODSET_GROUP} if topology else {}


def ray_pod_template(a: RayJobTrainingArgs, secret_name: Optional[pulumi.Input[str]],
                     ports: list[k8s.core.v1.ContainerPortArgs], run: str = RUN) -> k8s.core.v1.PodTemplateSpecArgs:
    cfg = a.cfg
    return pod.training_pod_template(
        cfg,
        claim_name=a.claim_name,
        secret_name=secret_name,
        pod_labels=runs.labels(COMPONENT, run),
        command=None,  # KubeRay writes the `ray start` command
        num_nodes=cfg.multi_node_count,
        affinity=placement.run_affinity(run),
        restart_policy="Never",
        annotations=podset_annotations(cfg),
        ports=ports,
        # The entrypoint runs on the head: its resume wrapper is mounted on every Ray pod (one template).
        scripts=[a.scripts[f] for f in trainer.scripts(cfg, a.run)],
        run=a.run,
    )


def rayjob_spec(a: RayJobTrainingArgs, secret_name: Optional[pulumi.Input[str]],
                token_secret: Optional[str] = None, run: str = RUN) -> dict[str, Any]:
    cfg = a.cfg
    w = cfg.workloads
    workers = cfg.multi_node_count - 1
    auth: dict[str, Any] = {"mode": "token"}
    if token_secret:
        auth["secretName"] = token_secret
    return {
        "entrypoint": entrypoint(cfg, a.run),
        "submissionMode": SUBMISSION_MODE,
        # Delete the Ray cluster when the job ends (Kueue requires it of a queued RayJob).
        "shutdownAfterJobFinishes": True,
        "activeDeadlineSeconds": runs.deadline_seconds(cfg),
        "backoffLimit": w.retries,
        "rayClusterSpec": {
            "rayVersion": w.multi_node.ray_version,
            "authOptions": auth,
            "headGroupSpec": {
                "rayStartParams": head_start_params(cfg),
                "template": ray_pod_template(a, secret_name, head_ports(cfg), run),
            },
            "workerGroupSpecs": [{
                "groupName": WORKER_GROUP,
                # Fixed size: no autoscaling (Kueue refuses it for a queued RayJob).
                "replicas": workers, "minReplicas": workers, "maxReplicas": workers,
                "rayStartParams": worker_start_params(cfg),
                "template": ray_pod_template(a, secret_name, worker_ports(), run),
            }],
        },
    }


def skip_annotations(spec: dict[str, Any]) -> dict[str, str]:
    """The checkov skips of the Ray pods, derived from the head and worker templates: each template
    gets its own, the RayJob all of them (checkov does not look inside a custom resource;
    tests/test_checkov.py scans the templates as Pods)."""
    cluster = spec["rayClusterSpec"]
    templates = {"head": cluster["headGroupSpec"]["template"],
                 **{g["groupName"]: g["template"] for g in cluster["workerGroupSpecs"]}}
    return security.annotate_pods(templates, SKIP_REASONS, kind="Pod")


def guard_names(run: str = RUN) -> str:
    """The run's NetworkPolicy and PDB in this form: named apart from the other forms' (same run
    label), so a form switch creates them before the old form's are deleted without a name clash."""
    return f"{run}-rayjob"


def dashboard_policy_args(run: str, namespace: pulumi.Input[str], obj_labels: dict[str, str],
                          operator_installed: bool) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """The operator may reach the head's dashboard port (8265), nothing else (added to the run's
    same-run policy: NetworkPolicies are a union)."""
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=runs.object_metadata(f"{run}-dashboard", namespace, obj_labels),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels={**runs.selector_labels(run), **HEAD_LABEL}),
            policy_types=["Ingress"],
            ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(
                from_=[kuberay.operator_peer(operator_installed)],
                ports=[k8s.networking.v1.NetworkPolicyPortArgs(port=DASHBOARD_PORT, protocol="TCP")])],
        ),
    )


class RayJobTraining(pulumi.ComponentResource):
    """KubeRay operator (optional), the run's policies and PDB, and the RayJob."""

    workload_name: str

    def __init__(self, name: str, args: RayJobTrainingArgs, namespace: pulumi.Input[str],
                 secret_name: Optional[pulumi.Input[str]] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:RayJobTraining", name, None, opts)
        cfg = args.cfg
        run = args.run.resource_name if args.run is not None else RUN
        obj_labels = runs.labels(COMPONENT, run)
        deps: list[pulumi.Resource] = []
        if cfg.kuberay_operator and args.install_operator:
            deps.append(kuberay.operator_release(f"{name}-kuberay-operator", self, opts))
        guards = guard_names(run)
        # The other forms' same-run policy and PDB (multinode.run_guards), under this form's names.
        netpol = k8s.networking.v1.NetworkPolicy(
            f"{name}-netpol", multinode.network_policy_args(
                run, namespace, obj_labels, env.mlflow_port(cfg.workloads.mlflow_tracking_uri), name=guards),
            child_opts(self, opts))
        dashboard = k8s.networking.v1.NetworkPolicy(
            f"{name}-dashboard-netpol", dashboard_policy_args(run, namespace, obj_labels, cfg.kuberay_operator),
            child_opts(self, opts))
        pdb = k8s.policy.v1.PodDisruptionBudget(
            f"{name}-pdb", multinode.pdb_args(run, namespace, obj_labels, cfg.multi_node_count, name=guards),
            child_opts(self, opts))
        deps += [netpol, dashboard, pdb]
        token_secret = None
        key = cfg.workloads.multi_node.ray_auth_token_secret
        if key:
            token_secret = token_secret_name(run)
            secret = k8s.core.v1.Secret(
                f"{name}-ray-token", k8s.core.v1.SecretInitArgs(
                    metadata=runs.object_metadata(token_secret, namespace, obj_labels),
                    type="Opaque",
                    string_data={TOKEN_SECRET_KEY: pulumi.Config("rltrain").require_secret(key)}),
                child_opts(self, opts))
            deps.append(secret)
        spec = rayjob_spec(args, secret_name, token_secret, run)
        awaits = runs.await_success(args.await_seconds, custom_resource=True) if args.await_seconds else runs.SKIP_AWAIT
        self.rayjob = k8s.apiextensions.CustomResource(
            f"{name}-rayjob",
            api_version=API_VERSION,
            kind="RayJob",
            # The queue label (Kueue on): Kueue suspends the RayJob (spec.suspend) at creation and
            # admits the head and the workers together.
            metadata=runs.object_metadata(run, namespace, {**obj_labels, **kueue.queue_labels(cfg)},
                                          {**awaits, **skip_annotations(spec)}),
            spec=spec,
            # A custom resource is replaced only when its name or namespace changes (pulumi-kubernetes
            # provider/pkg/provider/diff.go); KubeRay would not apply a patched spec to the running
            # cluster, and a finished RayJob never runs again. Fixed name: delete first.
            opts=child_opts(self, opts, *deps, delete_before_replace=True,
                                 replace_on_changes=["spec", *runs.REPLACE_ON_LABELS]),
        )
        self.workload = self.rayjob
        self.workload_name = run
        self.register_outputs({"rayjob": run})
