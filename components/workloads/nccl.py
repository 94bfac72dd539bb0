"""NcclTest: an MPIJob running nccl-tests all_reduce_perf across the GPU nodes, with a pass/fail.

Everything the reference typed by hand (1 GPU / 1 EFA per worker, SEED-DEFECTS D15) is derived:
slotsPerWorker = GPUs per node, workers = GPU node count, `-np` = nodes x GPUs, and each worker
requests all GPUs and EFA devices of its node. The launcher pipes the output through
`/scripts/nccl_check.py`, which fails the launcher when the bus bandwidth is below
`minBusBwFraction` x the published 2-node figure of the instance type (catalog.NcclReference), at
the size that figure was published at (p5: 437.8 GB/s at 2 GiB on EKS; p4de: 76.8 GB/s at 1 GiB,
a Slurm figure, labelled so) - a run that silently fell back to TCP (~3 GB/s on p5) fails loudly.

Workers follow the mpi-operator convention for OpenMPI: they run sshd in the foreground
(`/usr/sbin/sshd -De`; the hpc-cloud nccl-tests image installs openssh-server) and the launcher
reaches them over ssh with the keys the operator mounts. sshd as root needs a few capabilities
(privilege separation: SETUID/SETGID/SYS_CHROOT, port 22: NET_BIND_SERVICE, ...); all of them are
in the Pod Security `baseline` allow-list, everything else is dropped.

`launcherCreationPolicy: WaitForWorkersReady` keeps the launcher from starting before the workers'
DNS exists (mpi-operator #386, #481). A worker is Ready when its container runs, not when its sshd
listens, so the launcher first waits for ssh to every worker (the hosts of the operator's hostfile,
/etc/mpi/hostfile: mpi-operator v0.8.0 pkg/controller/mpi_job_controller.go), retrying for up to
SSH_WAIT_SECONDS, before mpirun starts; only then is a failure the measurement's. The reference job
lets its launcher be retried for that start-up race; here the retry is the start-up's only, and the
MPIJob keeps backoffLimit 0, so a bandwidth failure (nccl_check.py exit 1) fails the check at once.

Fail fast under workloads.trainingAfterChecks: the training runs wait for a gate Job (gate.py), not
for the MPIJob, whose `pulumi.com/waitFor` await cannot report a failure.
"""

from __future__ import annotations

import shlex
from typing import Any, Optional

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import kueue
from components.stack import catalog, elastic
from components.stack.config import StackConfig
from components.stack.labels import CHECKS_SERVICE_ACCOUNT, NCCL_TEST_COMPONENT, short_hash
from components.k8s import security
from components.workloads import gate, placement, runs, sizing, volumes
from components.workloads.gate import CheckGate, CheckGateArgs
from components.k8s.options import child_opts
# Kubeflow MPI operator release manifest (no official Helm chart; FACTS.md). Pinned: bump the tag
# here and nowhere else. Applied with server-side apply (the provider default), which the CRD's
# size needs. Path checked in kubeflow/mpi-operator: deploy/v2beta1/mpi-operator.yaml.
MPI_OPERATOR_VERSION = "v0.8.0"
MPI_OPERATOR_MANIFEST = (
    f"https://raw.githubusercontent.com/kubeflow/mpi-operator/{MPI_OPERATOR_VERSION}"
    "/deploy/v2beta1/mpi-operator.yaml"
)

NAME = "rltrain-nccl-test"
COMPONENT = NCCL_TEST_COMPONENT
ALL_REDUCE = "/opt/nccl-tests/build/all_reduce_perf"
CHECK = "/scripts/nccl_check.py"
MAX_BYTES = 16 << 30  # -e 16G, the published sweep
ITERATIONS = 100  # -n 100, and -c 1 (check results), as the reference Kubernetes job
# The reference Kubernetes MPIJob (awsome-distributed-training micro-benchmarks/nccl-tests/
# kubernetes/nccl-tests.yaml): NCCL buffer and chunk sizes, and the aws-ofi-nccl tuner shipped in
# the hpc-cloud nccl-tests image at this path. Only with EFA (FI_PROVIDER=efa).
REFERENCE_NCCL_ENV = {
    "NCCL_BUFFSIZE": "8388608",
    "NCCL_P2P_NET_CHUNKSIZE": "524288",
    "NCCL_TUNER_PLUGIN": "/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu/libnccl-ofi-tuner.so",
}
# OpenMPI transport for the launcher's own traffic (not NCCL's): no UCX, TCP between ranks, and
# never over loopback or container bridges (same reference job).
MPI_TRANSPORT = ("--mca", "pml", "^ucx", "--mca", "btl", "tcp,self",
                 "--mca", "btl_tcp_if_exclude", "lo,docker0,veth_def_agent")
# The launcher's wait for the workers' sshd (a few seconds after the container starts): attempts x
# (the ConnectTimeout + the pause between attempts) bounds it.
SSH_ATTEMPTS = 30
SSH_PAUSE_SECONDS = 5
SSH_CONNECT_TIMEOUT_SECONDS = 5
SSH_WAIT_SECONDS = SSH_ATTEMPTS * (SSH_PAUSE_SECONDS + SSH_CONNECT_TIMEOUT_SECONDS)
HOSTFILE = "/etc/mpi/hostfile"
# nccl_check.py's "cannot judge" code: ssh never came up is not a bandwidth verdict.
EXIT_SSH = 2
# The launcher pod (mpi-operator v0.8.0 defaultLabels: training.kubeflow.org/job-name, -job-role).
LAUNCHER_SELECTOR = f"training.kubeflow.org/job-name={NAME},training.kubeflow.org/job-role=launcher"
GATE_NAME = f"{NAME}-gate"
RUN_SECONDS = 30 * 60
DEADLINE_SECONDS = RUN_SECONDS + runs.IMAGE_PULL_MARGIN_SECONDS
# Launcher: mpirun and ssh only (limits = requests).
LAUNCHER_RESOURCES = {"cpu": "1", "memory": "2Gi"}
# Worker: memory for NCCL's host buffers; /dev/shm (NCCL's
# intra-node transport, well under 1 GiB for 8 GPUs) is charged to the memory limit.
WORKER_CPU = "8"
WORKER_MEMORY = "32Gi"
WORKER_SHM_GIB = 8
SSHD_CAPABILITIES = ("AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "NET_BIND_SERVICE",
                     "SETGID", "SETUID", "SYS_CHROOT")
# Why the launcher and the workers fail the checkov checks they fail (security.annotate_pods derives
# which, and what each pod does, from the templates).
_NCCL_IMAGE_PULL = "the pinned nccl-tests image, pulled once per node"
_NCCL_IMAGE_TAG = "config accepts a specific tag (latest and untagged are refused) or a digest"
SKIP_REASONS = {
    "Launcher": security.Reasons(
        root="the nccl-tests image runs as root and mpirun runs with --allow-run-as-root",
        writable_root="mpirun writes its session directory under /tmp",
        no_liveness="mpirun runs to completion; activeDeadlineSeconds ends a hang",
        no_readiness="nothing connects to the launcher: it connects to the workers",
        pull_policy=_NCCL_IMAGE_PULL,
        tag=_NCCL_IMAGE_TAG,
    ),
    "Worker": security.Reasons(
        root="sshd starts as root (privilege separation, port 22; mpi-operator's OpenMPI convention)",
        added_capabilities="sshd needs them; all are in the Pod Security baseline set",
        writable_root="sshd writes its pid file under /run, the MPI ranks it starts write under /tmp",
        no_cpu_limit="CFS throttling of NCCL's and the EFA provider's threads would lower the measured bandwidth",
        no_liveness="a restarted sshd would abort the running mpirun; activeDeadlineSeconds ends a hang",
        no_readiness="nothing is load-balanced to the workers: the launcher connects to each by name",
        pull_policy=_NCCL_IMAGE_PULL,
        tag=_NCCL_IMAGE_TAG,
    ),
}


class NcclTestArgs(runs.WorkloadArgs):
    pass


def reference(cfg: StackConfig) -> catalog.NcclReference:
    ref = cfg.gpu_nodes.instance.nccl_reference
    if ref is None:  # config validation refuses the NCCL test without one
        raise ValueError(f"no published NCCL bus bandwidth for {cfg.gpu_nodes.instance_type}")
    return ref


def check_size(cfg: StackConfig) -> int:
    """The size whose row is checked: the reference's own size unless config names another."""
    return cfg.workloads.nccl_test.message_size_bytes or reference(cfg).size_bytes


def min_busbw(cfg: StackConfig) -> float:
    return round(cfg.workloads.nccl_test.min_bus_bw_fraction * reference(cfg).busbw_gbps, 2)


def check_label(cfg: StackConfig) -> str:
    g, ref = cfg.gpu_nodes, reference(cfg)
    label = f"{g.count}x {g.instance_type}, {cfg.workloads.nccl_test.min_bus_bw_fraction} x {ref.label}"
    if check_size(cfg) != ref.size_bytes:
        label += f"; checked at {check_size(cfg)} B, not the published size: not like for like"
    return label


def _size(n: int) -> str:
    return f"{n >> 30}G" if n % (1 << 30) == 0 else str(n)


def nccl_env(cfg: StackConfig) -> dict[str, str]:
    env = catalog.nccl_env(cfg.gpu_nodes.instance, cfg.gpu_nodes.efa_devices_per_node)
    if "FI_PROVIDER" in env:
        env.update(REFERENCE_NCCL_ENV)
    return env


def launcher_script(cfg: StackConfig) -> str:
    g = cfg.gpu_nodes
    it = g.instance
    exported = [*sorted(nccl_env(cfg)), "LD_LIBRARY_PATH", "PATH"]
    mpirun = [
        "mpirun", "--allow-run-as-root", "-np", str(g.count * it.gpu_count), "-N", str(it.gpu_count),
        "--bind-to", "none", *MPI_TRANSPORT, *[a for v in exported for a in ("-x", v)],
        ALL_REDUCE, "-b", "8", "-e", _size(max(MAX_BYTES, check_size(cfg))), "-f", "2", "-g", "1",
        "-c", "1", "-n", str(ITERATIONS),
    ]
    check = ["python3", CHECK, "--size", str(check_size(cfg)), "--min-busbw", str(min_busbw(cfg)),
             "--label", check_label(cfg)]
    return f"set -o pipefail; {ssh_wait_script()}; {shlex.join(mpirun)} | {shlex.join(check)}"


def ssh_wait_script() -> str:
    """Wait for every worker's sshd (module docstring); exit EXIT_SSH with the host if one never answers."""
    ssh = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
           "-o", f"ConnectTimeout={SSH_CONNECT_TIMEOUT_SECONDS}"]
    return (f"for h in $(awk '{{print $1}}' {HOSTFILE}); do n=0; "
            f'until {shlex.join(ssh)} "$h" true; do n=$((n+1)); '
            f'if [ "$n" -ge {SSH_ATTEMPTS} ]; then echo "NCCL CHECK ERROR: ssh to $h failed {SSH_ATTEMPTS} times: '
            f'its sshd never answered"; exit {EXIT_SSH}; fi; sleep {SSH_PAUSE_SECONDS}; done; done')


def _env(values: dict[str, str]) -> list[k8s.core.v1.EnvVarArgs]:
    return [k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in sorted(values.items())]


def _pod_spec_common(cfg: StackConfig) -> dict[str, Any]:
    return dict(
        # Its own account: the test borrows nothing from training (no AWS role, no Secret).
        service_account_name=CHECKS_SERVICE_ACCOUNT,
        automount_service_account_token=False,
        # After validation, ahead of training in the queue (workloads.ncclTest.priority).
        priority_class_name=runs.check_priority_class(cfg, COMPONENT),
        security_context=security.pod_security_context(),
    )


def launcher_template(a: NcclTestArgs) -> k8s.core.v1.PodTemplateSpecArgs:
    cfg = a.cfg
    image = cfg.workloads.nccl_test.image
    obj_labels = runs.labels(COMPONENT, f"{NAME}-launcher")
    scripts = [a.scripts["nccl_check.py"]]
    return k8s.core.v1.PodTemplateSpecArgs(
        # checkov skips: on the MPIJob (skip_annotations).
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=obj_labels, annotations=volumes.scripts_annotation(scripts)),
        spec=k8s.core.v1.PodSpecArgs(
            **_pod_spec_common(cfg),
            containers=[k8s.core.v1.ContainerArgs(
                name="launcher",
                image=image,
                image_pull_policy="IfNotPresent",
                command=["bash", "-c", launcher_script(cfg)],
                env=_env(nccl_env(cfg)),
                resources=k8s.core.v1.ResourceRequirementsArgs(
                    requests=dict(LAUNCHER_RESOURCES), limits=dict(LAUNCHER_RESOURCES)),
                volume_mounts=[volumes.scripts_mount()],
                security_context=security.container_security_context(),
            )],
            volumes=[volumes.scripts_volume(scripts)],
        ),
    )


def worker_resources(cfg: StackConfig) -> k8s.core.v1.ResourceRequirementsArgs:
    g = cfg.gpu_nodes
    extended = sizing.PodSizing(cpu=0, memory_mib=0, shm_gib=0, gpus=g.instance.gpu_count,
                             efa=g.efa_devices_per_node).extended()
    fixed = {"memory": WORKER_MEMORY, **extended}  # extended() carries the EFA huge pages
    return k8s.core.v1.ResourceRequirementsArgs(requests={"cpu": WORKER_CPU, **fixed}, limits=fixed)


def worker_template(a: NcclTestArgs) -> k8s.core.v1.PodTemplateSpecArgs:
    cfg = a.cfg
    image = cfg.workloads.nccl_test.image
    run = f"{NAME}-worker"
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=runs.labels(COMPONENT, run),
                                            # Kueue: the workers preferably under one nearest switch.
                                            # checkov skips: on the MPIJob (skip_annotations).
                                            annotations={**kueue.podset_topology(cfg), **elastic.pod_annotations(cfg.gpu_nodes.elastic)}),
        spec=k8s.core.v1.PodSpecArgs(
            **_pod_spec_common(cfg),
            tolerations=placement.gpu_tolerations(),
            affinity=placement.run_affinity(run),
            containers=[k8s.core.v1.ContainerArgs(
                name="worker",
                image=image,
                image_pull_policy="IfNotPresent",
                command=["/usr/sbin/sshd", "-De"],
                env=_env(nccl_env(cfg)),
                resources=worker_resources(cfg),
                volume_mounts=[k8s.core.v1.VolumeMountArgs(name="dshm", mount_path=volumes.SHM_PATH)],
                security_context=security.container_security_context(SSHD_CAPABILITIES),
            )],
            volumes=[k8s.core.v1.VolumeArgs(name="dshm", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
                medium="Memory", size_limit=f"{WORKER_SHM_GIB}Gi"))],
        ),
    )


def mpijob_spec(a: NcclTestArgs) -> dict[str, Any]:
    cfg = a.cfg
    return {
        "slotsPerWorker": cfg.gpu_nodes.instance.gpu_count,
        "launcherCreationPolicy": "WaitForWorkersReady",
        "mpiImplementation": "OpenMPI",
        "runPolicy": {
            "cleanPodPolicy": "Running",
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            # A measurement, not a training run: report the first result.
            "backoffLimit": 0,
        },
        "mpiReplicaSpecs": {
            # restartPolicy belongs on the replica spec: the operator overwrites the pod template's
            # with it (default OnFailure for the launcher) and records a Warning event for a template
            # that sets one (mpi-operator v0.8.0 pkg/controller/mpi_job_controller.go setRestartPolicy,
            # podTemplateRestartPolicyReason; seen on the simulated cluster). Never: a failed check
            # is reported, not retried in place (runPolicy.backoffLimit 0).
            "Launcher": {"replicas": 1, "restartPolicy": "Never", "template": launcher_template(a)},
            "Worker": {"replicas": cfg.gpu_nodes.count, "restartPolicy": "Never", "template": worker_template(a)},
        },
    }


def fingerprint(a: NcclTestArgs) -> str:
    """What the MPIJob runs (image, launcher command, workers and their devices, deadline): a new MPIJob
    gets a new gate Job."""
    cfg, g = a.cfg, a.cfg.gpu_nodes
    return short_hash(cfg.workloads.nccl_test.image, launcher_script(cfg), str(g.count), str(g.instance.gpu_count),
                           str(g.efa_devices_per_node), str(DEADLINE_SECONDS), a.scripts["nccl_check.py"].digest,
                           *sorted(f"{k}={v}" for k, v in nccl_env(cfg).items()), length=16)


def gate_args(a: NcclTestArgs) -> CheckGateArgs:
    """The gate Job of the MPIJob; its deadline is the whole wait (a.await_seconds: the check's
    deadline, those queued ahead and the queue allowance, build.gate_seconds)."""
    return CheckGateArgs(name=GATE_NAME, run_name=NAME, api_group="kubeflow.org", api_version="v2beta1",
                         plural="mpijobs", launcher_selector=LAUNCHER_SELECTOR, fingerprint=fingerprint(a),
                         deadline_seconds=a.await_seconds, script=a.scripts[gate.SCRIPT])


def skip_annotations(spec: dict[str, Any]) -> dict[str, str]:
    """The checkov skips of the MPIJob's pods, derived from its replica templates, on the MPIJob
    (checkov does not look inside it; components/offline/scan_report.py scans each template as a Pod
    with its replica type's part of them)."""
    return security.annotate_pods({role: r["template"] for role, r in spec["mpiReplicaSpecs"].items()},
                                  SKIP_REASONS, kind="Pod")


def network_policy_args(namespace: pulumi.Input[str]) -> k8s.networking.v1.NetworkPolicyInitArgs:
    """Launcher and workers talk to each other on any TCP port (ssh, OpenMPI's out-of-band
    channel, NCCL's socket bootstrap; EFA traffic itself is not IP) and resolve names; nothing
    else in or out. The namespace's default deny refuses the rest."""
    test = k8s.meta.v1.LabelSelectorArgs(match_labels={"app.kubernetes.io/component": COMPONENT})
    same = k8s.networking.v1.NetworkPolicyPeerArgs(pod_selector=test)
    dns = runs.dns_peer()
    return k8s.networking.v1.NetworkPolicyInitArgs(
        metadata=runs.object_metadata(NAME, namespace, runs.labels(COMPONENT, NAME)),
        spec=k8s.networking.v1.NetworkPolicySpecArgs(
            pod_selector=test,
            policy_types=["Ingress", "Egress"],
            ingress=[k8s.networking.v1.NetworkPolicyIngressRuleArgs(from_=[same])],
            egress=[k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[same]),
                    k8s.networking.v1.NetworkPolicyEgressRuleArgs(to=[dns], ports=[
                        k8s.networking.v1.NetworkPolicyPortArgs(port=53, protocol="UDP"),
                        k8s.networking.v1.NetworkPolicyPortArgs(port=53, protocol="TCP")])],
        ),
    )


class NcclTest(pulumi.ComponentResource):
    """MPI operator (pinned release manifest, optional) and the NCCL all-reduce MPIJob."""

    mpijob_name: str

    def __init__(self, name: str, args: NcclTestArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:NcclTest", name, None, opts)
        cfg = args.cfg
        deps: list[pulumi.Resource] = []
        if cfg.mpi_operator:
            operator = k8s.yaml.v2.ConfigFile(f"{name}-mpi-operator", file=MPI_OPERATOR_MANIFEST,
                                              opts=child_opts(self, opts))
            deps.append(operator)
        netpol = k8s.networking.v1.NetworkPolicy(f"{name}-netpol", network_policy_args(namespace),
                                                 child_opts(self, opts))
        deps.append(netpol)
        spec = mpijob_spec(args)
        skips = skip_annotations(spec)
        # `pulumi up` never waits on the MPIJob itself: with workloads.trainingAfterChecks the gate Job
        # below is what the training runs wait for (a waitFor on the MPIJob cannot fail fast).
        awaits = runs.SKIP_AWAIT
        self.mpijob = k8s.apiextensions.CustomResource(
            f"{name}-mpijob",
            api_version="kubeflow.org/v2beta1",
            kind="MPIJob",
            # The queue label (Kueue on): Kueue suspends the MPIJob (runPolicy.suspend) at creation
            # and admits launcher and workers together.
            metadata=runs.object_metadata(NAME, namespace, {**runs.labels(COMPONENT, NAME), **kueue.queue_labels(cfg)},
                                         {**awaits, **skips}),
            spec=spec,
            # A custom resource is replaced only when its name or namespace changes; any other
            # spec change would be patched onto the finished MPIJob, which never runs again
            # (pulumi-kubernetes provider/pkg/provider/diff.go). Fixed name: delete first; the
            # deletion is awaited (skipAwait skips it only for built-in kinds, runs.py).
            opts=child_opts(self, opts, *deps, delete_before_replace=True,
                                 replace_on_changes=["spec", *runs.REPLACE_ON_LABELS]),
        )
        self.mpijob_name = NAME
        # What the training runs wait for (workloads.trainingAfterChecks): the gate, else the MPIJob.
        self.passed: pulumi.Resource = self.mpijob
        if args.await_seconds:
            self.gate = CheckGate(f"{name}-gate", gate_args(args), namespace, opts=child_opts(self, opts),
                                  after=(self.mpijob,))
            self.passed = self.gate.job
        self.register_outputs({"mpijob": NAME})
