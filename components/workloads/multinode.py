"""MultiNodeTraining: one Ray cluster over N GPU nodes, one pod per node, head = rank 0.

Every pod runs `python3 /scripts/ray_launcher.py -- <workloads.command>`; the launcher (a file in the
scripts ConfigMap, no envsubst: SEED-DEFECTS D1) makes rank 0 the Ray head, waits for N nodes and
runs the training command; other ranks join as workers and retry reaching the head (D14). It is
PID 1 and forwards SIGTERM to the trainer (D4); the grace period comes from config.

Forms (`workloads.multiNode.form`):
- `indexed-job` (default, run-to-completion, D2): batch/v1 Job, completionMode Indexed,
  completions = parallelism = N, `successPolicy` index 0: the head's success completes the Job and
  stops the workers. Pod hostnames are `<job>-<index>`, resolvable through the headless Service
  named as the pod `subdomain`.
- `statefulset`: kept for clusters whose tooling expects it. Pods restart with policy Always, so the
  launcher's RUN_DONE_MARKER on /fsx (keyed by a hash of the run's inputs) makes a finished run idle
  instead of training again. Any spec change replaces the whole StatefulSet (all pods stop together)
  instead of a rolling update that would mix two runs in one Ray cluster.

Around both: a headless Service (`publishNotReadyAddresses`, so workers resolve the head before it
is ready, D14), a NetworkPolicy (D11), a PodDisruptionBudget with minAvailable = every pod (D13).

Ports. The Service lists only the Ray GCS port (`multiNode.rayPort`): a headless Service proxies
nothing, its ports only name SRV records; the dashboard (8265) and client server (10001) are not
published, and the launcher binds the dashboard to loopback. Ray node-to-node traffic (raylet,
object manager, worker ports 10002-19999 by default) and NCCL's TCP bootstrap use ports picked at
run time, so the NetworkPolicy admits every port *between pods of the same run* and nothing from any
other pod. EFA traffic (SRD) bypasses the kernel IP stack and is not subject to NetworkPolicy.
Every node exports Ray's metrics on 8080 (`--metrics-export-port` through RAY_START_EXTRA_ARGS),
declared as the container port `ray-metrics` that the monitoring's PodMonitor scrapes.

The third form, `rayjob` (a KubeRay RayJob), is components/workloads/rayjob.py.

No liveness probe (D3): nothing observable from outside tells a hung collective from a long step;
the launcher exits non-zero when the cluster does not form (3, 4), and activeDeadlineSeconds bounds
a hang.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.stack import node_repair
from components.stack.config import StackConfig
from components.k8s import kueue
from components.k8s import security
from components.workloads import env, node_health_access, placement, pod, runs, trainer, volumes
from components.k8s.options import child_opts
from components.stack.labels import short_hash
RUN = "rltrain-multinode"
COMPONENT = "multinode"
LAUNCHER = "/scripts/ray_launcher.py"
# EKS Pod Identity agent (credentials for S3), a link-local address served by the node.
POD_IDENTITY_CIDR = "169.254.170.23/32"
# FSx for Lustre: TCP 988 and 1018-1023 (FACTS.md).
LUSTRE_PORTS = ((988, None), (1018, 1023))
# Ray's Prometheus metrics on every node (metrics-export-port, 8080 in the AWS reference, FACTS
# "Monitoring"), declared as a container port by this name: the Ray PodMonitor of
# components/k8s/monitoring.py scrapes the run pods' port of that name (tests check they agree).
# The dashboard agent serves it also with the launcher's --include-dashboard=false (Ray 2.60
# services.py starts the agent on every node; a "minimal" Ray without ray[default] has no metrics).
RAY_METRICS_PORT = 8080
RAY_METRICS_PORT_NAME = "ray-metrics"
EXTRA_ARGS_ENV = "RAY_START_EXTRA_ARGS"
NODE_RANK_ENV = "NODE_RANK_ENV"  # ray_launcher.py: the variable it exports the rank under


class MultiNodeTrainingArgs(runs.WorkloadArgs):
    pass


def service_name(run: str) -> str:
    return f"{run}-svc"


def launcher_command(cfg: StackConfig, run=None) -> list[str]:
    return ["python3", LAUNCHER, "--", *trainer.training_command(cfg, run)]


def head_host(run: str, namespace: pulumi.Input[str]) -> pulumi.Output[str]:
    """DNS name of rank 0: `<run>-0.<svc>.<namespace>.svc.cluster.local` (Job and StatefulSet alike)."""
    return pulumi.Output.concat(run, "-0.", service_name(run), ".", namespace, ".svc.cluster.local")


def done_marker(cfg: StackConfig, run: str) -> str:
    """Per-run marker: a changed image, command or config starts a new run, an unchanged one does not."""
    w = cfg.workloads
    key = short_hash(w.image, json.dumps(list(w.command)), w.config_name, w.model_path or "",
                         str(cfg.multi_node_count))
    return f"{volumes.FSX_PATH}/runs/{w.experiment_name}/{run}-{key}.done"


def ray_secret_refs(cfg: StackConfig) -> dict[str, str]:
    """Ray token authentication (Ray >= 2.52: RAY_AUTH_TOKEN, read by ray_launcher.py): every pod
    of the run gets the token from the training Secret; clients without it are refused."""
    key = cfg.workloads.multi_node.ray_auth_token_secret
    return {"RAY_AUTH_TOKEN": key} if key else {}


def ray_start_extra_args(cfg: StackConfig) -> str:
    """The launcher's RAY_START_EXTRA_ARGS (added to every `ray start`, head and workers): those of
    `workloads.env`, then the metrics port, last so that it wins (click keeps the last value)."""
    own = shlex.join([f"--metrics-export-port={RAY_METRICS_PORT}"])
    return " ".join(a for a in (cfg.workloads.env.get(EXTRA_ARGS_ENV, "").strip(), own) if a)


def ray_env(cfg: StackConfig, run: str, namespace: pulumi.Input[str]) -> dict[str, pulumi.Input[str]]:
    mn = cfg.workloads.multi_node
    env: dict[str, pulumi.Input[str]] = {
        "RAY_HEAD_HOST": head_host(run, namespace),
        "RAY_PORT": str(mn.ray_port),
        # Both waits outlast a node repair (components/stack/node_repair.py): a head waiting for a
        # worker whose node is repaired, a worker waiting for a head whose node is, see it come
        # back instead of giving up (exits 3 and 4, runs.ray_ignored_exit_codes).
        "RAY_NODE_WAIT_SECONDS": str(mn.node_wait_seconds or node_repair.repair_bound_seconds()),
        "RAY_JOIN_DEADLINE_SECONDS": str(node_repair.repair_bound_seconds()),
        EXTRA_ARGS_ENV: ray_start_extra_args(cfg),
    }
    # The head's node check names the run's pods (node_health_access.py).
    env.update(node_health_access.env(run))
    if mn.form == "statefulset":
        env["RUN_DONE_MARKER"] = done_marker(cfg, run)
    rank_env = trainer.node_rank_env(cfg)
    if rank_env:
        # The launcher exports the pod's rank under this name before `ray start` (RLinf orders
        # its nodes by RLINF_NODE_RANK, captured by Ray at start; without it, by IP).
        env[NODE_RANK_ENV] = rank_env
        # RLinf's scheduler lists actors through Ray's state API, which the dashboard serves
        # (RLinf/RLinf@050543189957 rlinf/scheduler/cluster/cluster.py: ray.util.state.list_actors):
        # on, bound to the head's loopback (ray_launcher.py RAY_DASHBOARD).
        env["RAY_DASHBOARD"] = "loopback"
    return env


# ---------------------------------------------------------------------------------------------
# objects around the pods (also used by the single-node Job)


def headless_service_args(run: str, namespace: pulumi.Input[str], ray_port: int,
                          obj_labels: dict[str, str]) -> k8s.core.v1.ServiceInitArgs:
    return k8s.core.v1.ServiceInitArgs(
        metadata=runs.object_metadata(service_name(run), namespace, obj_labels),
        spec=k8s.core.v1.ServiceSpecArgs(
            cluster_ip="None",
            publish_not_ready_addresses=True,
            selector=runs.selector_labels(run),
            ports=[k8s.core.v1.ServicePortArgs(name="ray-gcs", port=ray_port, target_port=ray_port,
                                               protocol="TCP")],
        ),
    )


def _port(port: int, end: Optional[int] = None, protocol: str = "TCP") -> k8s.networking.v1.NetworkPolicyPortArgs:
    return k8s.networking.v1.NetworkPolicyPortArgs(port=port, end_port=end, protocol=protocol)


def network_policy_args(run: str, namespace: pulumi.Input[str], obj_labels: dict[str, str],
                        mlflow_port: Optional[int] = None, name: Optional[str] = None
                        ) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """Same-run traffic on any port; out: DNS, HTTPS, Pod Identity, FSx; in: nothing else (D11).

    Egress 0.0.0.0/0 TCP 443: the trainer pulls models/datasets (Hugging Face, S3) and writes to S3.
    Egress TCP 988/1018-1023 to the FSx file system. The Lustre client mounts /fsx from the node's
    kernel (host network namespace), which NetworkPolicy does not govern; the rule is kept for Lustre
    tools run inside the pod and costs nothing else. Egress to the Pod Identity agent
    (169.254.170.23:80) is how the AWS SDK gets the training role's credentials.
    The VPC CNI enforces NetworkPolicy only with its network policy agent enabled.
    """
    same_run = k8s.networking.v1.NetworkPolicyPeerArgs(
        pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(run)))
    anywhere = k8s.networking.v1.NetworkPolicyPeerArgs(
        ip_block=k8s.networking.v1.IPBlockArgs(cidr="0.0.0.0/0"))
    dns = runs.dns_peer()
    egress = [
        k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[same_run]),
        k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[dns], ports=[_port(53, protocol="UDP"), _port(53)]),
        k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[anywhere], ports=[_port(443)]),
        k8s.networking.v1.NetworkPolicyEgressRuleArgs(
            to=[k8s.networking.v1.NetworkPolicyPeerArgs(ip_block=k8s.networking.v1.IPBlockArgs(cidr=POD_IDENTITY_CIDR))],
            ports=[_port(80)]),
        k8s.networking.v1.NetworkPolicyEgressRuleArgs(
            to=[anywhere], ports=[_port(p, e) for p, e in LUSTRE_PORTS]),
    ]
    if mlflow_port and mlflow_port != 443:
        # The tracking server, in-cluster (any namespace) or outside.
        egress.append(k8s.networking.v1.NetworkPolicyEgressRuleArgs(
            to=[anywhere, k8s.networking.v1.NetworkPolicyPeerArgs(
                namespace_selector=k8s.meta.v1.LabelSelectorArgs())],
            ports=[_port(mlflow_port)]))
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=runs.object_metadata(name or run, namespace, obj_labels),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(run)),
            policy_types=["Ingress", "Egress"],
            ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(from_=[same_run])],
            egress=egress,
        ),
    )


def pdb_args(run: str, namespace: pulumi.Input[str], obj_labels: dict[str, str], pods: int,
             name: Optional[str] = None) -> k8s.policy.v1.PodDisruptionBudgetInitArgs:
    """No voluntary eviction of a running run (D13): every pod of the run must stay available.

    `minAvailable`, not `maxUnavailable`: the disruption controller cannot compute the latter for
    pods without a scale subresource (Job pods) and then allows nothing while reporting a sync
    error (FACTS "pulumi-kubernetes and pulumi-eks behaviour"). Consequence, by design: a node
    drain (a managed node group update) cannot evict a running run and fails after EKS's 15-minute
    drain timeout with PodEvictionFailure; the impact report refuses node rolls without opt-in.
    """
    return k8s.policy.v1.PodDisruptionBudgetInitArgs(
        metadata=runs.object_metadata(name or run, namespace, obj_labels),
        spec=k8s.policy.v1.PodDisruptionBudgetSpecArgs(
            min_available=pods,
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(run)),
        ),
    )


def run_guards(name: str, run: str, namespace: pulumi.Input[str], obj_labels: dict[str, str],
               cfg: StackConfig, parent: pulumi.Resource, opts: Optional[pulumi.ResourceOptions], pods: int = 1
               ) -> tuple[k8s.networking.v1.NetworkPolicy, k8s.policy.v1.PodDisruptionBudget]:
    """The NetworkPolicy and PodDisruptionBudget every training run gets (single- and multi-node)."""
    netpol = k8s.networking.v1.NetworkPolicy(
        f"{name}-netpol",
        network_policy_args(run, namespace, obj_labels, env.mlflow_port(cfg.workloads.mlflow_tracking_uri)),
        child_opts(parent, opts))
    pdb = k8s.policy.v1.PodDisruptionBudget(f"{name}-pdb", pdb_args(run, namespace, obj_labels, pods),
                                            child_opts(parent, opts))
    return netpol, pdb


# ---------------------------------------------------------------------------------------------
# the pods


def pod_template(a: MultiNodeTrainingArgs, namespace: pulumi.Input[str],
                 secret_name: Optional[pulumi.Input[str]], run: str = RUN) -> k8s.core.v1.PodTemplateSpecArgs:
    cfg = a.cfg
    form = cfg.workloads.multi_node.form
    return pod.training_pod_template(
        cfg,
        claim_name=a.claim_name,
        secret_name=secret_name,
        pod_labels=runs.labels(COMPONENT, run),
        command=launcher_command(cfg, a.run),
        num_nodes=cfg.multi_node_count,
        extra_env=ray_env(cfg, run, namespace),
        affinity=placement.run_affinity(run),
        restart_policy="Never" if form == "indexed-job" else "Always",
        # A StatefulSet sets the subdomain from serviceName itself.
        subdomain=service_name(run) if form == "indexed-job" else None,
        scripts=[a.scripts["ray_launcher.py"], *(a.scripts[f] for f in trainer.scripts(cfg, a.run))],
        secret_refs=ray_secret_refs(cfg),
        run=a.run,
        # Kueue places the pod set preferably under one nearest switch (never required).
        annotations=kueue.podset_topology(cfg) if form == "indexed-job" else None,
        ports=[k8s.core.v1.ContainerPortArgs(name=RAY_METRICS_PORT_NAME, container_port=RAY_METRICS_PORT,
                                             protocol="TCP")],
        api_token=True,
    )


def job_args(a: MultiNodeTrainingArgs, namespace: pulumi.Input[str], secret_name: Optional[pulumi.Input[str]],
             run: str = RUN) -> k8s.batch.v1.JobInitArgs:
    cfg = a.cfg
    n = cfg.multi_node_count
    w = cfg.workloads
    template = pod_template(a, namespace, secret_name, run)
    # checkov reads skips from the Job's own metadata: the skips derived from the pod go there
    # only (on the template, a reason's wording would restart the run).
    return k8s.batch.v1.JobInitArgs(
        # The queue label (Kueue on): admitted whole, every pod at once, or not at all.
        metadata=runs.object_metadata(run, namespace, {**runs.labels(COMPONENT, run), **kueue.queue_labels(cfg)},
                                     {**runs.AWAIT_CREATED,
                                      **security.annotations([*security.skips(template.spec, security.TRAINING,
                                                                              kind="Job"),
                                                              node_health_access.TOKEN_SKIP])}),
        spec=k8s.batch.v1.JobSpecArgs(
            completion_mode="Indexed",
            completions=n,
            parallelism=n,
            # The head's success ends the run; workers (ray start --block) never succeed on their own.
            success_policy=k8s.batch.v1.SuccessPolicyArgs(rules=[
                k8s.batch.v1.SuccessPolicyRuleArgs(succeeded_indexes="0")]),
            backoff_limit=w.retries,
            pod_failure_policy=runs.pod_failure_policy(cfg, ray=True),
            active_deadline_seconds=runs.deadline_seconds(cfg),
            template=template,
        ),
    )


# The StatefulSet's pods are checked for probes too (checkov leaves them out only for Jobs).
STATEFULSET_SKIP_REASONS = dataclasses.replace(
    security.TRAINING,
    no_liveness="nothing observable tells a hung collective from a long step (D3)",
    no_readiness="the headless Service publishes not-ready pods: workers resolve the head before it is ready (D14)",
)


def statefulset_args(a: MultiNodeTrainingArgs, namespace: pulumi.Input[str],
                     secret_name: Optional[pulumi.Input[str]], run: str = RUN) -> k8s.apps.v1.StatefulSetInitArgs:
    cfg = a.cfg
    template = pod_template(a, namespace, secret_name, run)
    return k8s.apps.v1.StatefulSetInitArgs(
        metadata=runs.object_metadata(run, namespace, runs.labels(COMPONENT, run),
                                     {**runs.AWAIT_CREATED,
                                      **security.annotations([*security.skips(template.spec, STATEFULSET_SKIP_REASONS,
                                                                              kind="StatefulSet"),
                                                              node_health_access.TOKEN_SKIP])}),
        spec=k8s.apps.v1.StatefulSetSpecArgs(
            service_name=service_name(run),
            replicas=cfg.multi_node_count,
            pod_management_policy="Parallel",
            selector=k8s.meta.v1.LabelSelectorArgs(match_labels=runs.selector_labels(run)),
            template=template,
        ),
    )


class MultiNodeTraining(pulumi.ComponentResource):
    """Headless Service, NetworkPolicy, PDB and the Indexed Job (or StatefulSet) of one Ray run."""

    workload_name: str
    service_name: str
    head_host: pulumi.Output[str]

    def __init__(self, name: str, args: MultiNodeTrainingArgs, namespace: pulumi.Input[str],
                 secret_name: Optional[pulumi.Input[str]] = None,
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:MultiNodeTraining", name, None, opts)
        cfg = args.cfg
        run = args.run.resource_name if args.run is not None else RUN
        obj_labels = runs.labels(COMPONENT, run)
        svc = k8s.core.v1.Service(
            f"{name}-svc", headless_service_args(run, namespace, cfg.workloads.multi_node.ray_port, obj_labels),
            child_opts(self, opts))
        netpol, pdb = run_guards(name, run, namespace, obj_labels, cfg, self, opts, pods=cfg.multi_node_count)
        access = node_health_access.build(name, cfg, run, namespace, self, opts)
        # Fixed name + delete-before-replace: see job.py. The pods must not start before the
        # Service (DNS), the policy, the PDB and the head's API access exist.
        deps = (svc, netpol, pdb, *access)
        if cfg.workloads.multi_node.form == "indexed-job":
            workload = k8s.batch.v1.Job(
                f"{name}-job", job_args(args, namespace, secret_name, run),
                child_opts(self, opts, *deps, delete_before_replace=True,
                                replace_on_changes=runs.REPLACE_JOB_ON))
        else:
            workload = k8s.apps.v1.StatefulSet(
                f"{name}-statefulset", statefulset_args(args, namespace, secret_name, run),
                child_opts(self, opts, *deps, delete_before_replace=True, replace_on_changes=["spec"]))
        self.workload = workload
        self.workload_name = run
        self.service_name = service_name(run)
        self.head_host = head_host(run, namespace)
        self.register_outputs({"workload": run, "service": self.service_name, "headHost": self.head_host})
