"""Stack configuration: one pydantic model tree, the `rltrain:` keys of `Pulumi.<stack>.yaml`.

Each top-level section is one structured key (`rltrain:gpuNodes`, ...). Models are frozen and reject
unknown keys; each checks its own keys alone (types, ranges, patterns, the validators below).
Loading, and every check that reads more than one key, is components/stack/validate.py.
docs/configuration.md, generated from these models (components/offline/config_reference.py),
documents every key with its type and default. A new section's model goes in a module of its own
beside the component it feeds (components/stack/elastic.py, lifecycle.py, ...).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any, Literal, Optional, get_args

from pydantic import Field, PrivateAttr, field_validator, model_validator

from components.stack import catalog, trainers
from components.stack.curves import CurvesConfig
from components.stack.data_repository import FsxS3
from components.stack.elastic import ElasticConfig
from components.stack.image_build import BuiltImage, ImageSetting, validated as _built_image
from components.stack.embodied_evaluation import EmbodiedEvaluation
from components.stack.lifecycle import CheckpointRetention, ExportConfig
from components.stack.model_base import _Model
from components.stack.runs import Run, RunConfig
from components.stack import runs as runs_mod

NAMESPACE = "rltrain"
SECTIONS = ("cluster", "network", "gpuNodes", "storage", "training", "workloads", "monitoring", "kueue")
# The Grafana admin password: a secret config key (`pulumi config set --secret rltrain:grafanaAdminPassword`).
GRAFANA_PASSWORD_KEY = "grafanaAdminPassword"
# EKS standard support, 2026-11 (FACTS.md).
KubernetesVersion = Literal["1.34", "1.35", "1.36"]
KUBERNETES_VERSIONS = get_args(KubernetesVersion)
# FSx for Lustre PERSISTENT_2 (FACTS.md).
FSX_THROUGHPUTS = (125, 250, 500, 1000)
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


# ---------------------------------------------------------------------------------------------
# cluster


class ExistingCluster(_Model):
    """Bring your own cluster: no AWS resource is created."""

    kubeconfig_secret: str = "kubeconfig"
    """secret config key holding the kubeconfig"""
    context: Optional[str] = None
    """kubeconfig context; none = the kubeconfig's current context"""


class SystemNodes(_Model):
    """The CPU node group for operators and add-ons (x86_64, not accelerated)."""

    instance_type: str = "m6i.xlarge"
    """EC2 instance type of the system nodes"""
    count: int = Field(2, ge=1, le=20)
    """number of system nodes, 1-20"""


class ClusterConfig(_Model):
    """The EKS cluster (or, with `existing`, the cluster you bring)."""

    name: Optional[str] = Field(None, pattern=r"^[A-Za-z][A-Za-z0-9-]{0,99}$")
    """EKS cluster name; none = `rltrain-<stack>`"""
    kubernetes_version: KubernetesVersion = "1.35"
    """Kubernetes minor version, in quotes (EKS standard support, 2026-11)"""
    endpoint_public_access: bool = True
    """public API endpoint on; the private endpoint is always on"""
    public_access_cidrs: tuple[str, ...] = ()
    """CIDRs allowed to reach the public endpoint; required while it is on; `0.0.0.0/0` (or CIDRs covering the internet together) refused; must be empty when the endpoint is private-only"""
    admin_role_arns: tuple[str, ...] = ()
    """IAM roles given cluster-admin through EKS access entries (authentication mode API)"""
    system_nodes: SystemNodes = SystemNodes()
    """the CPU node group for operators and add-ons"""
    existing: Optional[ExistingCluster] = None
    """bring your own cluster: no AWS resource is created"""
    install_device_plugins: Optional[bool] = None
    """install the NVIDIA and EFA device plugins (cluster-wide DaemonSets in `kube-system`); none = `true` on a created cluster, `false` (opt-in) on a bring-your-own one"""
    allow_replacement: bool = False
    """explicit opt-in for a change that replaces the EKS cluster (see [the impact guard](offline-render.md#reviewing-a-change))"""

    @field_validator("admin_role_arns")
    @classmethod
    def _arns(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for arn in v:
            if not re.match(r"^arn:aws[a-z-]*:iam::\d{12}:role/.+$", arn):
                raise ValueError(f"{arn!r} is not an IAM role ARN (arn:aws:iam::123456789012:role/NAME)")
        return v

    @field_validator("public_access_cidrs")
    @classmethod
    def _cidrs(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for cidr in v:
            try:
                net = ipaddress.ip_network(cidr, strict=True)
            except ValueError as e:
                raise ValueError(f"{cidr!r} is not a CIDR block ({e})") from None
            if net.prefixlen == 0:
                raise ValueError(
                    f"{cidr!r} opens the API endpoint to the whole internet; "
                    "list your office/VPN CIDRs, or set endpointPublicAccess: false"
                )
        return v


# ---------------------------------------------------------------------------------------------
# network


class ExistingNetwork(_Model):
    """Use an existing VPC instead of creating one."""

    vpc_id: str = Field(pattern=r"^vpc-[0-9a-f]+$")
    """the VPC id (`vpc-...`)"""
    private_subnet_ids: tuple[str, ...] = Field(min_length=2)
    """private subnets of the cluster, 2 or more"""
    gpu_subnet_id: str = Field(pattern=r"^subnet-[0-9a-f]+$")
    """the subnet of the GPU nodes and FSx; must be one of `privateSubnetIds`"""


class NetworkConfig(_Model):
    """The VPC (created, or `existing`); not allowed on a bring-your-own cluster."""

    vpc_cidr: str = "10.0.0.0/16"
    """VPC CIDR, /16 to /20; a quarter per private subnet (pods take VPC IPs)"""
    availability_zones: tuple[str, ...] = Field(("us-east-1a", "us-east-1b"), min_length=2, max_length=3)
    """2-3 availability zones of `aws:region`"""
    gpu_availability_zone: Optional[str] = None
    """the one AZ of the GPU nodes, their placement group and FSx (EFA needs one AZ); none = the first of `availabilityZones`"""
    existing: Optional[ExistingNetwork] = None
    """use an existing VPC"""

    @field_validator("vpc_cidr")
    @classmethod
    def _vpc_cidr(cls, v: str) -> str:
        try:
            net = ipaddress.ip_network(v, strict=True)
        except ValueError as e:
            raise ValueError(f"{v!r} is not a CIDR block ({e})") from None
        if not 16 <= net.prefixlen <= 20:
            raise ValueError(f"{v!r}: prefix must be /16 to /20 to fit the subnets")
        return v

    @property
    def gpu_az(self) -> str:
        return self.gpu_availability_zone or self.availability_zones[0]


# ---------------------------------------------------------------------------------------------
# GPU nodes


class Capacity(_Model):
    """How the GPU instances are bought."""

    type: Literal["on-demand", "capacity-block", "odcr"] = "on-demand"
    """with a reservation (`capacity-block`, `odcr`) no placement group is created: the reservation places the nodes"""
    reservation_id: Optional[str] = Field(None, pattern=r"^cr-[0-9a-f]+$")
    """the reservation id `cr-...`: required for `capacity-block` and `odcr`, refused for `on-demand`"""


class RootVolume(_Model):
    """The gp3 root volume of each GPU node, sized for 15-20 GB image pulls."""

    # Large training images (15-20 GB) pull faster from a fast root volume; SOCI parallel pull
    # wants >= 600 MiB/s (FACTS.md "Start-up latency").
    size_gib: int = Field(500, ge=100, le=16384, alias="sizeGiB")
    """size in GiB, 100-16384"""
    throughput_mibps: int = Field(1000, ge=125, le=1000, alias="throughputMiBps")
    """gp3 throughput, 125-1000 MiB/s"""
    iops: int = Field(16000, ge=3000, le=16000)
    """gp3 IOPS, 3000-16000"""


class KubeletTopology(_Model):
    """Kubelet CPU and Topology Manager policies of the GPU nodes (nodeadm). None = derived from the
    shapes of the pods that run there (components/stack/topology.py)."""

    cpu_manager_policy: Optional[Literal["none", "static"]] = None
    """kubelet cpuManagerPolicy"""
    topology_manager_policy: Optional[Literal["none", "best-effort", "restricted", "single-numa-node"]] = None
    """kubelet topologyManagerPolicy"""


class GpuNodesConfig(_Model):
    """The GPU node group: one instance type, one AZ, EFA, and a cluster placement group on On-Demand capacity."""

    instance_type: str
    """an instance type of the catalog (components/stack/catalog.py)"""
    count: int = Field(ge=1, le=256)
    """number of GPU nodes, 1-256"""
    efa: Optional[bool] = None
    """EFA devices on the nodes; none = automatic: on for EFA-capable types with 2+ nodes; `true` on a type without EFA is an error"""
    capacity: Capacity = Capacity()
    """on-demand, a capacity block or an on-demand capacity reservation"""
    root_volume: RootVolume = RootVolume()
    """the root volume of each GPU node"""
    local_storage: Literal["raid0", "none"] = "raid0"
    """`raid0`: nodeadm puts containerd and the kubelet on the local NVMe disks as RAID0; `none` to skip"""
    fast_image_pull: bool = False
    """nodeadm SOCI parallel image pull (`FastImagePull`)"""
    allow_replacement: bool = False
    """explicit opt-in for a change that replaces the GPU node group (running pods are killed)"""
    # A roll kills the running runs, or fails on their PodDisruptionBudgets.
    allow_node_roll: bool = False
    """explicit opt-in for a change that rolls every GPU node (a new launch template version, a Kubernetes upgrade, fewer nodes); without it the node group ignores a new template or version"""
    topology: KubeletTopology = KubeletTopology()
    """kubelet CPU and Topology Manager policies of the GPU nodes (nodeadm); unset = derived from the pod shapes"""
    elastic: ElasticConfig = ElasticConfig()
    """elastic GPU capacity: no node held, Karpenter launches up to a maximum for admitted runs (components/stack/elastic.py)"""

    @field_validator("instance_type")
    @classmethod
    def _known_type(cls, v: str) -> str:
        if v not in catalog.CATALOG:
            raise ValueError(f"unknown instance type; allowed: {', '.join(catalog.INSTANCE_TYPES)}")
        return v

    @property
    def instance(self) -> catalog.InstanceType:
        return catalog.get(self.instance_type)

    @property
    def efa_enabled(self) -> bool:
        if self.efa is None:
            return self.instance.has_efa and self.count >= 2
        return self.efa

    @property
    def efa_devices_per_node(self) -> int:
        return self.instance.efa_devices if self.efa_enabled else 0

    @property
    def total_gpus(self) -> int:
        return self.instance.gpu_count * self.count

    @property
    def node_limit(self) -> int:
        """The most GPU nodes the stack may hold at once: `elastic.maxNodes` (none = `count`) in elastic
        mode, `count` otherwise (Karpenter's NodePool limit, Kueue's quota, the preflight quota check)."""
        e = self.elastic
        return (e.max_nodes or self.count) if e.enabled else self.count


# ---------------------------------------------------------------------------------------------
# storage


class FsxConfig(_Model):
    """The FSx for Lustre file system (PERSISTENT_2), mounted by every workload at `/fsx`."""

    storage_capacity_gib: int = Field(1200, alias="storageCapacityGiB")
    """capacity in GiB: 1200, 2400 or a multiple of 2400 (PERSISTENT_2)"""
    per_unit_storage_throughput: int = 250
    """throughput per TiB: 125, 250, 500 or 1000 MB/s/TiB"""
    metadata_iops: Optional[int] = None
    """metadata IOPS: 1500, 3000, 6000, 12000 or a multiple of 12000; none = automatic metadata mode"""
    backup_retention_days: int = Field(7, ge=0, le=90)
    """days of automatic daily backups, 0-90; a final backup is taken on delete"""
    s3: Optional[FsxS3] = None
    """an S3 bucket the file system exports to: the served step's export, and on opt-in every run's checkpoints"""

    @field_validator("storage_capacity_gib")
    @classmethod
    def _capacity(cls, v: int) -> int:
        if v not in (1200, 2400) and (v <= 0 or v % 2400):
            raise ValueError("PERSISTENT_2 capacity must be 1200, 2400 or a multiple of 2400 GiB")
        return v

    @field_validator("per_unit_storage_throughput")
    @classmethod
    def _throughput(cls, v: int) -> int:
        if v not in FSX_THROUGHPUTS:
            raise ValueError(f"allowed MB/s/TiB: {', '.join(map(str, FSX_THROUGHPUTS))}")
        return v

    @field_validator("metadata_iops")
    @classmethod
    def _metadata(cls, v: Optional[int]) -> Optional[int]:
        if v is not None and v not in (1500, 3000, 6000) and (v <= 0 or v % 12000):
            raise ValueError("allowed: 1500, 3000, 6000, 12000 or a multiple of 12000")
        return v


class StorageConfig(_Model):
    """The shared ReadWriteMany volume every workload mounts at `/fsx`: FSx for Lustre on a created
    cluster, an existing claim or a storage class on a bring-your-own one."""

    fsx: Optional[FsxConfig] = FsxConfig()
    """the FSx for Lustre file system of a created cluster"""
    claim_name: str = Field("fsx-claim", pattern=_DNS_LABEL)
    """the ReadWriteMany claim every workload mounts at `/fsx`"""
    existing_claim: Optional[str] = Field(None, pattern=_DNS_LABEL)
    """bring your own cluster: mount this existing claim"""
    storage_class: Optional[str] = None
    """bring your own cluster: create the claim from this storage class"""
    claim_size_gib: int = Field(1200, ge=1, alias="claimSizeGiB")
    """size of that claim in GiB (bring your own cluster; a created cluster's claim is the FSx size)"""
    allow_claim_expansion: bool = False
    """bring your own cluster: the storage class sets `allowVolumeExpansion: true`, so a larger
    `claimSizeGiB` grows the bound claim; without it the impact guard refuses a larger size, which the
    API server would refuse (a smaller one is always refused)"""
    allow_replacement: bool = False
    """explicit opt-in for a change that replaces the FSx file system (its data is lost)"""


# ---------------------------------------------------------------------------------------------
# training namespace


class S3Access(_Model):
    """The only S3 location the training role (EKS Pod Identity) may read and write."""

    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    """the S3 bucket"""
    prefix: str = "rltrain/"
    """the prefix in the bucket"""


class TrainingConfig(_Model):
    """The training namespace, its service account and what its pods may reach."""

    namespace: str = Field("rltrain", pattern=_DNS_LABEL)
    """the training namespace (not `default` or `kube-*`)"""
    service_account: str = Field("training-sa", pattern=_DNS_LABEL)
    """its service account (API token not mounted; not `default`)"""
    pod_security: Literal["baseline", "restricted"] = "baseline"
    """Pod Security Admission level enforced and warned; `restricted` is always audited (API server audit log)"""
    s3: Optional[S3Access] = None
    """the S3 location of the training role"""
    secret_env: dict[str, str] = {}
    """container env var -> name of a secret config key, e.g. `HF_TOKEN: hfToken` (`pulumi config set --secret rltrain:hfToken ...`); delivered through a Kubernetes Secret, never as a plain value"""

    @field_validator("secret_env")
    @classmethod
    def _secret_env(cls, v: dict[str, str]) -> dict[str, str]:
        for env, key in v.items():
            if not re.match(_ENV_NAME, env):
                raise ValueError(f"{env!r} is not an environment variable name")
            if key in SECTIONS or not re.match(r"^[A-Za-z][A-Za-z0-9_-]*$", key):
                raise ValueError(f"{key!r} cannot name a secret config key")
        return v


# ---------------------------------------------------------------------------------------------
# workloads


class SingleNode(_Model):
    """The single-node training Job: the implicit run `single-node` (components/stack/runs.py).

    Its default lives on the model, not on the section's field: a section written without `enabled`
    (say `singleNode: {}`) keeps it (a field default of `SingleNode(enabled=True)` over a model
    default of false would turn it off)."""

    enabled: bool = True
    """create the single-node run `single-node` (Job `rltrain-training`)"""


# Cold pull of a 15-20 GB image (FACTS.md "Start-up latency"), added to every run's deadline (D6);
# Kueue's waitForPodsReady timeout is derived from it (k8s/kueue.py).
IMAGE_PULL_MARGIN_SECONDS = 10 * 60
# PriorityClass values: the queue (Kueue orders by priority, then creation) runs validation, then
# the NCCL test, then training. The two check classes never preempt a running run.
TRAINING_PRIORITY = 1000000
NCCL_TEST_PRIORITY = 1000100
VALIDATION_PRIORITY = 1000200
_PRIORITY = dict(ge=0, le=1000000000)


class Validation(_Model):
    """The cluster validation Job, one pod per GPU node (on by default; the default is the model's, so
    `validation: {priority: ...}` keeps it on)."""

    enabled: bool = True
    """create the validation Job"""

    priority: int = Field(VALIDATION_PRIORITY, **_PRIORITY)
    """value of the `<namespace>-validation-<value>` PriorityClass (queue order only: `preemptionPolicy: Never`)"""


class MultiNode(_Model):
    """Multi-node Ray training, one pod per GPU node."""

    enabled: bool = False
    """create the multi-node run"""
    # indexed-job serves clusters without KubeRay; rayjob is components/workloads/rayjob.py.
    form: Literal["indexed-job", "statefulset", "rayjob"] = "indexed-job"
    """`indexed-job` (the Ray launcher in an Indexed Job), `statefulset` (the reference's form; refused while queueing is on), `rayjob` (a KubeRay RayJob); see [operations](operations.md)"""
    nodes: Optional[int] = Field(None, ge=2)
    """number of nodes, 2 or more; none = every GPU node"""
    ray_port: int = Field(6379, ge=1024, le=65535)
    """Ray head port (launcher forms only; refused with `rayjob`)"""
    node_wait_seconds: Optional[int] = Field(None, ge=10, le=3600)
    """how long the head waits for every node of the run to be up and healthy (launcher forms only; refused with `rayjob`); none = the time a node repair takes, 40 min (EKS's longest repair wait, 30 min, plus the 10-minute cold-pull margin), so that a repair never ends a run"""
    # Delivered from the training Secret. None in the launcher forms: no token.
    ray_auth_token_secret: Optional[str] = Field(None, pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    """secret config key holding a Ray auth token: every pod gets it as `RAY_AUTH_TOKEN` and Ray refuses clients without it; with `rayjob` none = KubeRay's own token per Ray cluster"""
    ray_version: Optional[str] = Field(None, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    """the Ray version in `workloads.image` (KubeRay's `rayVersion`); required with `rayjob`, at least 2.52.0; refused when the image tag names another Ray version"""
    install_kuberay: Optional[bool] = Field(None, alias="installKubeRay")
    """with `rayjob`: install the pinned KubeRay operator (cluster-wide: CRDs, cluster roles); none = `true` on a created cluster, `false` (opt-in) on a bring-your-own one"""


class NcclTest(_Model):
    """The NCCL all_reduce check between nodes (an MPIJob), against the instance's published bus bandwidth."""

    enabled: bool = False
    """create the NCCL test (needs 2+ nodes)"""
    install_mpi_operator: Optional[bool] = None
    """install the pinned Kubeflow MPI operator (cluster-wide: CRD, cluster roles); none = `true` on a created cluster, `false` (opt-in) on a bring-your-own one"""
    image: str = "public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.42.0-ofiv1.16.0-ncclv2.27.5-1-testsv2.16.4"
    """the nccl-tests image (a specific tag or digest)"""
    # The default, the published figure's size (catalog.NcclReference): the check compares like with like.
    message_size_bytes: Optional[int] = Field(None, ge=8)
    """message size whose bus bandwidth is checked; none = the size the instance's reference figure was published at (p5: 2 GiB, p4de: 1 GiB); another size is labelled *not like for like*"""
    min_bus_bw_fraction: float = Field(0.9, gt=0, le=1.5)
    """the check fails below this fraction of the published 2-node bus bandwidth"""
    priority: int = Field(NCCL_TEST_PRIORITY, **_PRIORITY)
    """value of the `<namespace>-nccl-test-<value>` PriorityClass (queue order only: `preemptionPolicy: Never`)"""


# Serving the policy being trained (components/workloads/serving.py, docs/serving.md).

# Flags of the vLLM OpenAI server the program sets itself (serving.py server_args): extraArgs may
# not repeat them (argparse keeps the last value: a repeat would silently override the program's).
SERVING_PROGRAM_FLAGS = ("--model", "--served-model-name", "--host", "--port", "--tensor-parallel-size", "-tp",
                         "--max-model-len")
# The checkpoint layout inside a run's checkpoint directory: veRL's trainer saves
# `global_step_<N>/actor/huggingface` (an HF-format copy of the actor) beside its sharded state.
DEFAULT_CHECKPOINT_LAYOUT = "global_step_{step}/actor/huggingface"


class ServingModel(_Model):
    """What the server loads: a run's checkpoint (by run and step) or a fixed path on the shared volume."""

    # The program knows each run's directory (components/workloads/env.py run_dir).
    run: Optional[str] = Field(None, pattern=runs_mod.NAME_PATTERN)
    """training run whose checkpoint directory holds the served model: `single-node`, `multi-node` or a named run (workloads.runs) of the stack's trainer config"""
    # A new step is a config change, shown as a serving restart.
    step: Optional[int] = Field(None, ge=0)
    """checkpoint step served (with run)"""
    # {step} is replaced by the step served.
    checkpoint_layout: str = Field(DEFAULT_CHECKPOINT_LAYOUT, pattern=r"^[^/].*\{step\}.*$")
    """path of a step's HF weights inside the checkpoint directory"""
    path: Optional[str] = Field(None, pattern=r"^/fsx/[^\s]*$")
    """fixed model directory under /fsx"""
    # With the volume's read throughput it sets the startup probe's budget.
    size_gib: Optional[int] = Field(None, ge=1, le=4096, alias="sizeGiB")
    """size of the model weights in GiB; none = the trainer profile's model (parameters x 2 bytes, what the export writes), else 16"""


class EvaluationConfig(_Model):
    """A CronJob that runs components/scripts/evaluate.py against the serving endpoint."""

    enabled: bool = False
    """create the evaluation CronJob (needs serving.enabled)"""
    schedule: str = Field("0 */6 * * *", pattern=r"^(\S+\s+){4}\S+$")
    """cron schedule (5 fields)"""
    # A small Python image: the script uses the standard library only.
    image: Optional[str] = None
    """evaluation image; default the pinned Python image"""
    # A JSONL file of {"prompt": ..., "expected": ...} on the shared volume.
    prompts_path: Optional[str] = Field(None, pattern=r"^/fsx/[^\s]+$")
    """JSONL prompts file under /fsx; none = the family's: the shipped math set for the reasoning family, else /fsx/eval/prompts.jsonl"""
    max_tokens: Optional[int] = Field(None, ge=1, le=32768)
    """max_tokens per completion; none = 4096 for the reasoning family (its models reason at length before the boxed answer), else 256"""
    deadline_minutes: int = Field(60, ge=5, le=1440)
    """activeDeadlineSeconds of each evaluation Job"""


class ServingConfig(_Model):
    """A vLLM OpenAI-compatible server for the policy being trained (off by default)."""

    enabled: bool = False
    """create the serving Deployment, Service, PDB and NetworkPolicy"""
    image: Optional[str] = None
    """vLLM OpenAI server image; default the pin in versions.py"""
    model: ServingModel = ServingModel()
    gpus_per_replica: int = Field(1, ge=1, le=8, alias="gpusPerReplica")
    """GPUs of one replica"""
    # vLLM shards the model over this many GPUs of one pod; it must equal gpusPerReplica (a GPU
    # requested and unused is wasted, a shard without a GPU fails at start).
    tensor_parallel_size: Optional[int] = Field(None, ge=1, le=8)
    """tensor parallel size; default gpusPerReplica"""
    replicas: int = Field(1, ge=1, le=64)
    """server replicas"""
    max_model_len: Optional[int] = Field(None, ge=16)
    """--max-model-len; default the model's"""
    extra_args: tuple[str, ...] = ()
    """further vLLM server flags (not the ones the program sets)"""
    # The grace period after SIGTERM is longer.
    max_request_seconds: int = Field(600, ge=10, le=7200)
    """longest request, in seconds"""
    # auto: surge one replica when a whole replica fits beside what runs, else replace one at a
    # time; surge / replace: forced (a surge onto a full node group is refused by the render).
    rollout: Literal["auto", "surge", "replace"] = "auto"
    """rolling update strategy"""
    # The stack's FSx knows its own.
    load_throughput_mb_s: Optional[int] = Field(None, ge=10, alias="loadThroughputMBps")
    """volume read throughput in MB/s (byo clusters)"""
    evaluation: EvaluationConfig = EvaluationConfig()
    export: ExportConfig = ExportConfig()
    """the export Job of the served step (a trainer checkpoint to a Hugging Face directory the server loads)"""

    @field_validator("image")
    @classmethod
    def _pinned(cls, v: Optional[str]) -> Optional[str]:
        return None if v is None else check_pinned_image(v)

    @property
    def tp(self) -> int:
        return self.tensor_parallel_size or self.gpus_per_replica


class Staging(_Model):
    """The staging Job (components/workloads/staging.py): puts the models and task assets the
    trainer profile names for `configName` on the shared volume before any training run starts."""

    enabled: Optional[bool] = None
    """None = on when workloads.trainer has a profile"""
    s3_prefix: Optional[str] = Field(
        None, alias="s3Prefix", pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
    """stage from s3://bucket/prefix/<name>/ (each item's directory name) instead of the model hub; the training role must be allowed to read it"""
    # RLinf/RLinf v0.3 docker/Dockerfile bakes ENV HF_ENDPOINT=https://hf-mirror.com into the image
    # unless it is built with NO_MIRROR=1: the staging Job sets it explicitly, never the image's.
    hf_endpoint: str = Field("https://huggingface.co", alias="hfEndpoint", pattern=r"^https://[^\s/]+(/\S*)?$")
    """HF_ENDPOINT of the staging Job (the model hub it downloads from); set explicitly because the RLinf image bakes a mirror in"""
    deadline_minutes: int = Field(120, ge=5, le=1440)
    """activeDeadlineSeconds of the staging Job, and how long `pulumi up` waits for it before training is created"""


class ResumeContract(_Model):
    """How a trainer writes checkpoints and is told to resume, for a trainer without a profile
    (workloads.trainer: none). With a profile, its own terms are used (components/stack/trainers.py)."""

    checkpoint_env: str = Field(pattern=_ENV_NAME)
    """env var that receives the run's checkpoint directory"""
    steps_under: str = ""
    """where step directories appear under it ('' = directly)"""
    step_prefix: str
    """a step directory's name is this prefix and the step number"""
    complete_marks: tuple[str, ...] = Field(min_length=1)
    """files, relative to a step directory, that exist once the step is complete"""
    resume_env: str = Field(pattern=_ENV_NAME)
    """env var the resume argument is appended to"""
    resume_format: str = Field(pattern=r"\{step_dir\}")
    """the argument; {step_dir} is replaced by the newest complete step directory"""


class WorkloadsConfig(_Model):
    """The training runs and the checks, and what every run gets."""

    image: ImageSetting
    """training image with a specific tag or `@sha256:` digest (`:latest` or no tag is refused), or `build: {...}`: the image the stack builds (components/stack/image_build.py)"""
    # The trainer inside the image (components/stack/trainers.py): its profile gives PATH, the
    # known configs and models, staging, placement and the resume terms. "none": only `command`
    # and `env` are passed, nothing is checked or staged. The one `description=` of these models: it
    # lists the profiles of trainers.py, which a docstring (a literal) would copy.
    trainer: str = Field(trainers.RLINF.name, description="trainer profile: "
                         + ", ".join([*trainers.PROFILES, trainers.NO_TRAINER]))
    command: tuple[str, ...] = ("bash", "/workspace/eks/scripts/run_training_eks.sh")
    """the training command"""
    config_name: str = trainers.RLINF.default_config
    """the trainer's config (Hydra --config-name), one the profile knows"""
    venv_name: Optional[str] = None
    """the image's virtual environment; None = the one the profile gives for configName"""
    model_path: Optional[str] = Field(None, pattern=r"^/")
    """model directory on /fsx; None = the one the profile gives for configName (staged by the staging Job)"""
    experiment_name: str = "maniskill-openvlaoft-ppo"
    """passed as `EXPERIMENT_NAME`; names the run's checkpoint directory"""
    staging: Staging = Staging()
    """the staging Job that puts the profile's models and assets on /fsx before training"""
    # With trainer none and no resume: no resume mapping, every retry restarts.
    resume: Optional[ResumeContract] = None
    """how a trainer without a profile writes checkpoints and is told to resume; None = the profile's terms"""
    mlflow_tracking_uri: Optional[str] = None
    """passed as `MLFLOW_TRACKING_URI` (and the runs' egress to its port opened); RLinf v0.3 has no MLflow logger (its backends: tensorboard, wandb, swanlab), so with the RLinf profiles nothing reaches it unless your own code logs there: the runs' curves are TensorBoard files on /fsx (workloads.curves)"""
    env: dict[str, str] = {}
    """extra env vars; names that look like credentials, names the program sets and values that look like secrets are refused (use `training.secretEnv`)"""
    shm_size_gib: Optional[int] = Field(None, ge=1, alias="shmSizeGiB")
    """memory-backed `/dev/shm` in GiB, counted against the pod's memory limit; none = 1/16 of node memory (8-256)"""
    termination_grace_period_seconds: int = Field(300, ge=30, le=3600)
    """time the trainer gets after SIGTERM to checkpoint"""
    max_run_minutes: int = Field(1440, ge=5)
    """the run's deadline is this plus a 10-minute image-pull margin"""
    checkpoint_size_gib: Optional[int] = Field(None, ge=1, alias="checkpointSizeGiB")
    """size of one checkpoint: the render estimates its write time to FSx and warns when it exceeds `terminationGracePeriodSeconds`; none = not estimated"""
    checkpoints: CheckpointRetention = CheckpointRetention()
    """checkpoint retention per run (the newest `keep` complete ones) and the volume budget's margin"""
    retries: int = Field(3, ge=0, le=20)
    """failures allowed (disruptions such as node drains, a node lost or repaired, never count)"""
    # Two bounds on whole-run restarts caused by the infrastructure, separate from the trainer's
    # failure budget above: Kueue's waitForPodsReady requeue limit (components/k8s/kueue.py), and
    # the resume wrapper's restarts from the same checkpoint (components/workloads/trainer.py), which
    # also counts the restarts Kueue's count misses (its topology-aware NodeFailures evictions, pods
    # lost with their node; kueue v0.19.2 pkg/controller/core/workload_controller.go).
    infrastructure_restarts: int = Field(3, ge=0, le=20)
    """bounds whole-run restarts after infrastructure failures, twice: with queueing on, a run whose pods are not all Ready within `kueue.podsReadyTimeoutMinutes` (after admission, or after a pod was lost with its node) is evicted whole, requeued with backoff and admitted again, and after this many such requeues it is deactivated (reason RequeuingLimitExceeded); and, whatever restarted it (a node lost, any eviction, a retried crash), a run with a resume mapping that would be started more than this many times again from the same checkpoint (or fresh again) without a newer complete one fails instead (its Job Failed, reason PodFailurePolicy, exit 10 of the resume wrapper)"""
    fail_fast_exit_codes: tuple[int, ...] = (2, 126, 127)
    """exit codes (1-255) that fail the run at once (usage error, not executable, not found); a multi-node run ignores 6 and 9 instead (the Ray launcher's head or peer lost, or a node of the run unhealthy), and with a resume mapping also 3 and 4 (its waits for nodes that did not come; bounded by `infrastructureRestarts`)"""
    priority: int = Field(TRAINING_PRIORITY, **_PRIORITY)
    """value of the `<namespace>-training-<value>` PriorityClass (the training runs' place in the queue; a new value is a new class, and the runs are recreated with it)"""
    single_node: SingleNode = SingleNode()
    """the single-node training Job (on by default): the implicit run `single-node`"""
    runs: tuple[RunConfig, ...] = ()
    """named training runs, each with its own config, node count, overrides, priority and deadline, and its own checkpoint directory and curves ([experiments](experiments.md)); beside the implicit `single-node` and `multi-node` runs of singleNode / multiNode"""
    multi_node: MultiNode = MultiNode()
    """multi-node Ray training: `enabled` creates the implicit run `multi-node`; the other keys are the multi-node form of every run of 2+ nodes"""
    nccl_test: NcclTest = NcclTest()
    """the NCCL all_reduce check"""
    validation: Validation = Validation()
    """cluster validation, one pod per GPU node (on by default)"""
    serving: ServingConfig = ServingConfig()
    """the vLLM server for the policy being trained (off by default)"""
    embodied_evaluation: EmbodiedEvaluation = EmbodiedEvaluation()
    """the embodied family's evaluation: RLinf's own evaluation of a checkpoint in the simulator, a GPU Job through the queue (off by default)"""
    curves: CurvesConfig = CurvesConfig()
    """TensorBoard over every run's event files and the Grafana panel of their headline scalars (components/stack/curves.py)"""
    training_after_checks: bool = False
    """opt-in gate: the training runs are created only after validation and the NCCL test (those enabled) succeeded; `pulumi up` then waits for them"""
    # The run gets SIGTERM and its grace period, then starts over.
    allow_run_restart: bool = False
    """explicit opt-in for a change that stops a running run and starts it again (a new pod template, a changed MPIJob spec)"""

    @model_validator(mode="before")
    @classmethod
    def _profile_defaults(cls, data: Any) -> Any:
        """configName, command and experimentName default to the trainer profile's; venvName and
        modelPath to what the profile gives for configName."""
        if not isinstance(data, dict):
            return data
        profile = trainers.get(data.get("trainer", trainers.RLINF.name))
        data = dict(data)
        if profile is not None:
            # The profile's own config, command and experiment name unless set (a second profile's
            # defaults are its own, not the embodied default's).
            if data.get("configName") is None and data.get("config_name") is None:
                data["configName"] = profile.default_config
            if data.get("command") is None:
                data["command"] = profile.command
            if data.get("experimentName") is None and data.get("experiment_name") is None:
                data["experimentName"] = profile.experiment_name
        name = data.get("configName", data.get("config_name"))
        tc = profile.configs.get(name) if profile and isinstance(name, str) else None
        if tc is None:
            return data
        if data.get("venvName") is None and data.get("venv_name") is None:
            data["venvName"] = tc.venv
        if data.get("modelPath") is None and data.get("model_path") is None:
            data["modelPath"] = tc.model_path
        return data

    @field_validator("trainer")
    @classmethod
    def _known_trainer(cls, v: str) -> str:
        known = [*trainers.PROFILES, trainers.NO_TRAINER]
        if v not in known:
            raise ValueError(f"unknown trainer profile; known: {', '.join(known)}")
        return v

    @property
    def profile(self) -> Optional[trainers.TrainerProfile]:
        return trainers.get(self.trainer)

    @property
    def trainer_config(self) -> Optional[trainers.TrainerConfig]:
        p = self.profile
        return p.configs.get(self.config_name) if p else None

    @property
    def staging_enabled(self) -> bool:
        return self.profile is not None if self.staging.enabled is None else self.staging.enabled

    @property
    def resume_terms(self) -> Optional[trainers.ResumeTerms]:
        """The resume mapping of the training command: the configured one, else the profile's."""
        if self.resume is not None:
            r = self.resume
            return trainers.ResumeTerms(checkpoint_env=r.checkpoint_env, steps_under=r.steps_under,
                                        step_prefix=r.step_prefix, complete_marks=r.complete_marks,
                                        resume_env=r.resume_env, resume_format=r.resume_format)
        return self.profile.resume if self.profile else None

    @field_validator("image")
    @classmethod
    def _pinned_image(cls, v: str | BuiltImage) -> str:
        return check_pinned_image(v) if isinstance(v, str) else _built_image(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not re.match(_ENV_NAME, name):
                raise ValueError(f"{name!r} is not an environment variable name")
        # Names that look like credentials, and names the program sets: validate.py (one problem per
        # name, at rltrain:workloads.env.NAME).
        return v


def check_pinned_image(v: str) -> str:
    """A specific tag or digest: `:latest` or no tag makes pods of one run differ (D7)."""
    if "@sha256:" in v:
        return v
    last = v.rsplit("/", 1)[-1]
    if ":" not in last:
        raise ValueError("image has no tag: use a specific tag or @sha256 digest, not the implicit :latest "
                         "(policy rule image-pinned)")
    if last.rsplit(":", 1)[1] in ("latest", ""):
        raise ValueError(":latest is not allowed: use a specific tag or @sha256 digest (policy rule image-pinned)")
    return v


# ---------------------------------------------------------------------------------------------
# monitoring (components/k8s/monitoring.py)


class AlertReceiver(_Model):
    """Where Alertmanager sends the stack's alerts. The URL or key is a credential (a Slack incoming
    webhook URL carries its token): it comes from secret config and reaches Alertmanager as a file
    of a Kubernetes Secret, never as a Helm value."""

    type: Literal["slack", "webhook", "pagerduty"]
    """where alerts go"""
    secret_key: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    """secret config key holding the Slack webhook URL, the webhook URL or the PagerDuty routing key; mounted into Alertmanager as a file, never a Helm value"""
    channel: Optional[str] = None
    """Slack only: the channel; none = the webhook's own"""


class MonitoringConfig(_Model):
    """Prometheus, Grafana, Alertmanager, the DCGM and EFA exporters, Ray scraping, alerts and dashboards
    ([monitoring](monitoring.md)). The Grafana admin password is the secret config key
    `rltrain:grafanaAdminPassword`, required while monitoring is on."""

    enabled: Optional[bool] = None
    """install the monitoring stack (cluster-wide: CRDs, node-exporter and DCGM DaemonSets); none = `true` on a created cluster, `false` (opt-in) on a bring-your-own one"""
    namespace: str = Field("monitoring", pattern=_DNS_LABEL)
    """its namespace (Pod Security `privileged`: the node agents need host access); must differ from `training.namespace`"""
    retention_days: int = Field(15, ge=1, le=3650)
    """Prometheus retention in days; retention by size is 85 % of the volume"""
    # Retention by size is set a little below it, so the disk never fills.
    storage_size_gib: int = Field(100, ge=10, le=16384, alias="storageSizeGiB")
    """the Prometheus volume in GiB (gp3, encrypted; can grow, not shrink)"""
    storage_class: Optional[str] = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    """bring your own cluster only: the storage class of the Prometheus volume; none = the cluster's default (a created cluster uses the stack's `rltrain-gp3`)"""
    # Image pulls of 15-20 GB take up to ~10 minutes and count as Pending.
    queued_alert_minutes: int = Field(30, ge=5, le=10080)
    """a run pod Pending longer than this raises `RltrainRunQueuedTooLong` (an image pull counts as Pending)"""
    alert_receiver: Optional[AlertReceiver] = None
    """where alerts are sent; none = only in Alertmanager's UI"""
    # The agent's dcgm-server DaemonSet runs the DCGM host engine on hostPort 5555 of every GPU node
    # (components/k8s/node_health.py).
    node_monitoring_agent: bool = False
    """bring your own cluster only: the cluster runs the EKS node monitoring agent, so the DCGM exporter connects to the agent's host engine on the node (port 5555) instead of starting its own; `false` = the exporter embeds its own (a created cluster always installs the agent)"""


# ---------------------------------------------------------------------------------------------
# kueue (components/k8s/kueue.py)


class KueueConfig(_Model):
    """Whole-workload queueing: every GPU workload waits in a Kueue queue until all its pods fit."""

    install: Optional[bool] = None
    """install the pinned Kueue controller (Helm, cluster-wide: CRDs, webhooks); none = `true` on a created cluster, `false` on a bring-your-own one, or when `enabled: false` or `clusterQueue` is set"""
    enabled: Optional[bool] = None
    """queue the GPU workloads; none = on when the stack installs Kueue or `clusterQueue` is set; `false` falls back to the namespace quota alone (partial admission possible)"""
    # Instead of the stack's own ResourceFlavor, ClusterQueue and Topology.
    cluster_queue: Optional[str] = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    """bring your own cluster: an existing ClusterQueue of the cluster's Kueue; the stack then creates only its LocalQueue, pointing at it"""
    # None: components/k8s/kueue.py PODS_READY_TIMEOUT_SECONDS, from the image-pull margin.
    pods_ready_timeout_minutes: Optional[int] = Field(None, ge=10, le=1440)
    """Kueue's `waitForPodsReady.timeout`: an admitted run whose pods are not all Ready by then is evicted and requeued; none = 60 (6 x the 10-minute image-pull margin)"""


# ---------------------------------------------------------------------------------------------
# the whole stack


class StackConfig(_Model):
    _stack: Optional["StackConfig"] = PrivateAttr(None)
    cluster: ClusterConfig = ClusterConfig()
    network: NetworkConfig = NetworkConfig()
    gpu_nodes: GpuNodesConfig
    storage: StorageConfig = StorageConfig()
    training: TrainingConfig = TrainingConfig()
    workloads: WorkloadsConfig
    monitoring: MonitoringConfig = MonitoringConfig()
    kueue: KueueConfig = KueueConfig()

    @property
    def kueue_install(self) -> bool:
        """The stack installs the Kueue controller (StackConfig.installs, unless queueing is off or
        an existing ClusterQueue is named: that Kueue is the cluster's)."""
        k = self.kueue
        if k.install is not None:
            return k.install
        if k.cluster_queue is not None or k.enabled is False:
            return False
        return self.installs(None)

    @property
    def kueue_enabled(self) -> bool:
        """GPU workloads carry the queue label and wait, suspended by Kueue, until admitted whole."""
        k = self.kueue
        return k.enabled if k.enabled is not None else (self.kueue_install or k.cluster_queue is not None)

    @property
    def monitoring_enabled(self) -> bool:
        """On by default on a created cluster, off by default (opt-in) on a bring-your-own one."""
        m = self.monitoring.enabled
        return (not self.byo_cluster) if m is None else m

    @property
    def byo_cluster(self) -> bool:
        return self.cluster.existing is not None

    @property
    def training_secret_keys(self) -> tuple[str, ...]:
        """Secret config keys that go into the training Secret (secretEnv, the Ray token)."""
        keys = set(self.training.secret_env.values())
        if self.multi_node_runs and self.workloads.multi_node.ray_auth_token_secret:
            keys.add(self.workloads.multi_node.ray_auth_token_secret)
        return tuple(sorted(keys))

    def installs(self, setting: Optional[bool]) -> bool:
        """One rule for every cluster-wide install (operators, CRDs, device plugins, queues,
        monitoring): on by default on a created cluster, off by default and opt-in on a
        bring-your-own one, where the cluster's owners may already run it."""
        return (not self.byo_cluster) if setting is None else setting

    @property
    def device_plugins(self) -> bool:
        return self.installs(self.cluster.install_device_plugins)

    @property
    def mpi_operator(self) -> bool:
        return self.installs(self.workloads.nccl_test.install_mpi_operator)

    @property
    def kuberay_operator(self) -> bool:
        """The stack installs the KubeRay operator: the RayJob form is on (StackConfig.installs)."""
        mn = self.workloads.multi_node
        return mn.form == "rayjob" and self.multi_node_runs and self.installs(mn.install_kuberay)

    @property
    def multi_node_count(self) -> int:
        return self.workloads.multi_node.nodes or self.gpu_nodes.count

    # --- the training runs (components/stack/runs.py) ---------------------------------------------

    @property
    def training_runs(self) -> tuple[Run, ...]:
        """Every training run of the stack: the implicit `single-node` and `multi-node` (when their
        section is enabled), then the named runs in the order written, disabled ones included (their
        entry keeps their identity)."""
        w = self.workloads
        common = dict(trainer=w.trainer, config_name=w.config_name, priority=w.priority,
                      max_run_minutes=w.max_run_minutes)
        out = []
        if w.single_node.enabled:
            out.append(runs_mod.implicit("single-node", 1, **common))
        if w.multi_node.enabled:
            out.append(runs_mod.implicit("multi-node", self.multi_node_count, **common))
        out += [runs_mod.named(rc, i, **common) for i, rc in enumerate(w.runs)]
        return tuple(out)

    @property
    def enabled_runs(self) -> tuple[Run, ...]:
        return tuple(r for r in self.training_runs if r.enabled)

    def run(self, name: str) -> Optional[Run]:
        return next((r for r in self.training_runs if r.name == name), None)

    @property
    def curves_enabled(self) -> bool:
        """The curves Deployment (components/workloads/curves.py): `workloads.curves.enabled`, none = on
        when a run's trainer profile says where it writes TensorBoard files."""
        on = self.workloads.curves.enabled
        known = any((p := trainers.get(r.trainer)) is not None and p.tensorboard_under for r in self.training_runs)
        return known if on is None else bool(on and self.training_runs)

    @property
    def multi_node_runs(self) -> bool:
        """Some enabled run takes 2+ nodes: the multi-node form's objects (KubeRay, the launcher, the
        Ray token) are needed."""
        return any(r.multi_node for r in self.enabled_runs)

    def for_run(self, run: Run) -> "StackConfig":
        """The stack as one run sees it: its trainer profile and config (with their venv, model and
        command), its priority, deadline and node count. The implicit runs see the stack as it is."""
        if run.implicit:
            return self
        w = self.workloads
        upd: dict[str, Any] = {"priority": run.priority, "max_run_minutes": run.max_run_minutes}
        if run.trainer != w.trainer or run.config_name != w.config_name:
            profile = trainers.get(run.trainer)
            tc = profile.configs.get(run.config_name) if profile else None
            upd.update(trainer=run.trainer, config_name=run.config_name)
            if run.trainer != w.trainer and profile is not None:
                upd.update(command=profile.command, experiment_name=profile.experiment_name)
            if tc is not None:
                upd.update(venv_name=tc.venv, model_path=tc.model_path)
        if run.multi_node:
            upd["multi_node"] = w.multi_node.model_copy(update={"nodes": run.nodes})
        view = self.model_copy(update={"workloads": w.model_copy(update=upd)})
        view._stack = self
        return view

    @property
    def stack(self) -> "StackConfig":
        """The whole stack (a run's view, StackConfig.for_run, keeps it: another run's identity is
        derived from the stack, never from a view)."""
        return self._stack or self
