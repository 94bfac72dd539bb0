"""Stack configuration: one pydantic model tree, validated before any resource exists.

Each top-level section is one structured key of `Pulumi.<stack>.yaml` (`rltrain:gpuNodes`, ...).
Models are frozen and reject unknown keys. `load()` collects *every* problem, each named by its key
path as written in the stack file (`rltrain:gpuNodes.instanceType`), the bad value and what is
allowed, and raises one `ConfigError`. docs/configuration.md, generated from these models
(components/offline/config_reference.py), documents every key with its type and default.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from components.stack import catalog, refusals, trainers
from components.stack.elastic import ElasticConfig
from components.stack.image_build import BuiltImage, ImageSetting, validated as _built_image
from components.stack.embodied_evaluation import EmbodiedEvaluation
from components.stack.lifecycle import CheckpointRetention, ExportConfig
from components.stack.model_base import _Model, _field_docstrings, _module_field_docstrings  # noqa: F401
# Defined below this module (refusals.py reads them too, and config imports refusals): kept here by name.
from components.stack.catalog import shm_default_gib  # noqa: F401
from components.stack.secrets_scan import SECRET_LIKE  # noqa: F401
NAMESPACE = "rltrain"
SECTIONS = ("cluster", "network", "gpuNodes", "storage", "training", "workloads", "monitoring", "kueue")
# The Grafana admin password: a secret config key (`pulumi config set --secret rltrain:grafanaAdminPassword`).
GRAFANA_PASSWORD_KEY = "grafanaAdminPassword"
KUBERNETES_VERSIONS = ("1.34", "1.35", "1.36")  # EKS standard support, 2026-11 (FACTS.md)
# FSx for Lustre PERSISTENT_2 (FACTS.md).
FSX_THROUGHPUTS = (125, 250, 500, 1000)
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


# ---------------------------------------------------------------------------------------------
# cluster


class ExistingCluster(_Model):
    """Bring your own cluster: no AWS resource is created."""

    kubeconfig_secret: str = Field("kubeconfig", description="secret config key holding the kubeconfig")
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
    kubernetes_version: Literal["1.34", "1.35", "1.36"] = "1.35"
    """Kubernetes minor version, in quotes (EKS standard support, 2026-11)"""
    endpoint_public_access: bool = True
    """public API endpoint on; the private endpoint is always on"""
    public_access_cidrs: tuple[str, ...] = ()
    """CIDRs allowed to reach the public endpoint; required while it is on; `0.0.0.0/0` (or CIDRs covering the internet together) refused; must be empty when the endpoint is private-only"""
    # IAM roles given cluster-admin through EKS access entries (authentication mode API).
    admin_role_arns: tuple[str, ...] = ()
    """IAM roles given cluster-admin through EKS access entries (authentication mode API)"""
    system_nodes: SystemNodes = SystemNodes()
    """the CPU node group for operators and add-ons"""
    existing: Optional[ExistingCluster] = None
    """bring your own cluster: no AWS resource is created"""
    # NVIDIA and EFA device plugins (cluster-wide DaemonSets in kube-system). None = the
    # cluster-wide rule: installed on a created cluster, opt-in on a bring-your-own one.
    install_device_plugins: Optional[bool] = None
    """install the NVIDIA and EFA device plugins (cluster-wide DaemonSets in `kube-system`); none = `true` on a created cluster, `false` (opt-in) on a bring-your-own one"""
    # Opt-in for a change that replaces the EKS cluster.
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
    # GPU nodes, their placement group and the FSx file system share this one AZ (EFA needs it).
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

    cpu_manager_policy: Optional[Literal["none", "static"]] = Field(None, description="kubelet cpuManagerPolicy")
    topology_manager_policy: Optional[Literal["none", "best-effort", "restricted", "single-numa-node"]] = Field(
        None, description="kubelet topologyManagerPolicy")


class GpuNodesConfig(_Model):
    """The GPU node group: one instance type, one AZ, EFA, and a cluster placement group on On-Demand capacity."""

    instance_type: str
    """an instance type of the catalog (components/stack/catalog.py)"""
    count: int = Field(ge=1, le=256)
    """number of GPU nodes, 1-256"""
    # None = automatic: on for EFA-capable types with two or more nodes.
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
    # Opt-in for a change that replaces the node group (running pods are killed).
    allow_replacement: bool = False
    """explicit opt-in for a change that replaces the GPU node group (running pods are killed)"""
    # Opt-in for a change that rolls every GPU node (a new launch template version, fewer nodes):
    # running runs are killed, or the roll fails on their PodDisruptionBudgets.
    allow_node_roll: bool = False
    """explicit opt-in for a change that rolls every GPU node (a new launch template version, a Kubernetes upgrade, fewer nodes); without it the node group ignores a new template or version"""
    # Kubelet CPU / Topology Manager policies (nodeadm); unset = derived from the pod shapes.
    topology: KubeletTopology = KubeletTopology()
    """kubelet CPU and Topology Manager policies of the GPU nodes (nodeadm); unset = derived from the pod shapes"""
    # Elastic capacity (Karpenter): its own model, components/stack/elastic.py.
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


# ---------------------------------------------------------------------------------------------
# storage


class FsxS3(_Model):
    """An S3 data repository association: new, changed and deleted files imported and exported."""

    bucket: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
    """the S3 bucket"""
    prefix: str = "checkpoints/"
    """the prefix in the bucket"""
    file_system_path: str = Field("/checkpoints", pattern=r"^/")
    """where the bucket's prefix appears on the file system"""


class FsxConfig(_Model):
    """The FSx for Lustre file system (PERSISTENT_2), mounted by every workload at `/fsx`."""

    storage_capacity_gib: int = Field(1200, alias="storageCapacityGiB")
    """capacity in GiB: 1200, 2400 or a multiple of 2400 (PERSISTENT_2)"""
    per_unit_storage_throughput: int = 250
    """throughput per TiB: 125, 250, 500 or 1000 MB/s/TiB"""
    # None = automatic metadata mode.
    metadata_iops: Optional[int] = None
    """metadata IOPS: 1500, 3000, 6000, 12000 or a multiple of 12000; none = automatic metadata mode"""
    backup_retention_days: int = Field(7, ge=0, le=90)
    """days of automatic daily backups, 0-90; a final backup is taken on delete"""
    s3: Optional[FsxS3] = None
    """an S3 data repository association"""

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
    # Bring your own cluster: use this existing claim, or create one from this storage class.
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
    # Opt-in for a change that replaces the FSx file system (its data is lost).
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
    # Container env var -> name of a secret config key (`pulumi config set --secret rltrain:KEY`).
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


class Toggle(_Model):
    """A workload switched on or off."""

    enabled: bool = False
    """create this workload"""


# Cold pull of a 15-20 GB image (FACTS.md "Start-up latency"), added to every run's deadline (D6);
# Kueue's waitForPodsReady timeout is derived from it (k8s/kueue.py).
IMAGE_PULL_MARGIN_SECONDS = 10 * 60
# PriorityClass values: the queue (Kueue orders by priority, then creation) runs validation, then
# the NCCL test, then training. The two check classes never preempt a running run.
TRAINING_PRIORITY = 1000000
NCCL_TEST_PRIORITY = 1000100
VALIDATION_PRIORITY = 1000200
_PRIORITY = dict(ge=0, le=1000000000)


class Validation(Toggle):
    """The cluster validation Job, one pod per GPU node."""

    # Value of the `<namespace>-validation-<value>` PriorityClass (queue order, no preemption).
    priority: int = Field(VALIDATION_PRIORITY, **_PRIORITY)
    """value of the `<namespace>-validation-<value>` PriorityClass (queue order only: `preemptionPolicy: Never`)"""


class MultiNode(_Model):
    """Multi-node Ray training, one pod per GPU node."""

    enabled: bool = False
    """create the multi-node run"""
    # indexed-job: the Ray launcher in an Indexed Job (clusters without KubeRay); statefulset: the
    # reference's form; rayjob: a KubeRay RayJob (components/workloads/rayjob.py).
    form: Literal["indexed-job", "statefulset", "rayjob"] = "indexed-job"
    """`indexed-job` (the Ray launcher in an Indexed Job), `statefulset` (the reference's form; refused while queueing is on), `rayjob` (a KubeRay RayJob); see [operations](operations.md)"""
    # None = every GPU node.
    nodes: Optional[int] = Field(None, ge=2)
    """number of nodes, 2 or more; none = every GPU node"""
    ray_port: int = Field(6379, ge=1024, le=65535)
    """Ray head port (launcher forms only; refused with `rayjob`)"""
    node_wait_seconds: int = Field(300, ge=10, le=3600)
    """how long the head waits for every node (launcher forms only; refused with `rayjob`)"""
    # Secret config key holding a Ray auth token: every pod of the run gets it as RAY_AUTH_TOKEN
    # from the training Secret and Ray refuses clients without it. None = no token.
    ray_auth_token_secret: Optional[str] = Field(None, pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    """secret config key holding a Ray auth token: every pod gets it as `RAY_AUTH_TOKEN` and Ray refuses clients without it; with `rayjob` none = KubeRay's own token per Ray cluster"""
    # form rayjob: the Ray version in workloads.image (KubeRay's rayClusterSpec.rayVersion), checked
    # against the image tag where the tag carries one (refusals.py). Required with form rayjob.
    ray_version: Optional[str] = Field(None, pattern=r"^[0-9]+\.[0-9]+\.[0-9]+$")
    """the Ray version in `workloads.image` (KubeRay's `rayVersion`); required with `rayjob`, at least 2.52.0; refused when the image tag names another Ray version"""
    # form rayjob: install the pinned KubeRay operator (cluster-wide: CRDs, cluster roles).
    # None = the cluster-wide rule: installed on a created cluster, opt-in on a bring-your-own one.
    install_kuberay: Optional[bool] = Field(None, alias="installKubeRay")
    """with `rayjob`: install the pinned KubeRay operator (cluster-wide: CRDs, cluster roles); none = `true` on a created cluster, `false` (opt-in) on a bring-your-own one"""


class NcclTest(_Model):
    """The NCCL all_reduce check between nodes (an MPIJob), against the instance's published bus bandwidth."""

    enabled: bool = False
    """create the NCCL test (needs 2+ nodes)"""
    # None = the cluster-wide rule: installed on a created cluster, not on a bring-your-own one.
    install_mpi_operator: Optional[bool] = None
    """install the pinned Kubeflow MPI operator (cluster-wide: CRD, cluster roles); none = `true` on a created cluster, `false` (opt-in) on a bring-your-own one"""
    image: str = "public.ecr.aws/hpc-cloud/nccl-tests:cuda12.8.1-efa1.42.0-ofiv1.16.0-ncclv2.27.5-1-testsv2.16.4"
    """the nccl-tests image (a specific tag or digest)"""
    # The size whose bus bandwidth is checked; default: the size the instance type's reference
    # figure was published at (catalog.NcclReference), so the check compares like with like.
    message_size_bytes: Optional[int] = Field(None, ge=8)
    """message size whose bus bandwidth is checked; none = the size the instance's reference figure was published at (p5: 2 GiB, p4de: 1 GiB); another size is labelled *not like for like*"""
    # Pass when bus bandwidth >= this fraction of the published 2-node figure of the instance type.
    min_bus_bw_fraction: float = Field(0.9, gt=0, le=1.5)
    """the check fails below this fraction of the published 2-node bus bandwidth"""
    # Value of the `<namespace>-nccl-test-<value>` PriorityClass (queue order, no preemption).
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

    # The training run whose checkpoint directory holds the model (the program knows each run's
    # directory: components/workloads/env.py checkpoint_dir). None with `path`.
    run: Optional[Literal["single-node", "multi-node"]] = Field(
        None, description="training run whose checkpoint directory holds the served model")
    # The checkpoint step served; a new step is a config change shown as a serving restart.
    step: Optional[int] = Field(None, ge=0, description="checkpoint step served (with run)")
    # Where a step's servable weights sit inside the run's checkpoint directory; {step} is replaced.
    checkpoint_layout: str = Field(DEFAULT_CHECKPOINT_LAYOUT, pattern=r"^[^/].*\{step\}.*$",
                                   description="path of a step's HF weights inside the checkpoint directory")
    # A fixed model directory on the shared volume instead of a run's checkpoint.
    path: Optional[str] = Field(None, pattern=r"^/fsx/[^\s]*$", description="fixed model directory under /fsx")
    # Size of the weights: with the volume's read throughput it sets the startup probe's budget.
    size_gib: Optional[int] = Field(None, ge=1, le=4096, alias="sizeGiB",
                                    description="size of the model weights in GiB; none = the trainer profile's model "
                                                "(parameters x 2 bytes, what the export writes), else 16")


class EvaluationConfig(_Model):
    """A CronJob that runs components/scripts/evaluate.py against the serving endpoint."""

    enabled: bool = Field(False, description="create the evaluation CronJob (needs serving.enabled)")
    schedule: str = Field("0 */6 * * *", pattern=r"^(\S+\s+){4}\S+$", description="cron schedule (5 fields)")
    # Image of the evaluation pod: a small Python image (the script uses the standard library only).
    image: Optional[str] = Field(None, description="evaluation image; default the pinned Python image")
    # A JSONL file of {"prompt": ..., "expected": ...} on the shared volume.
    prompts_path: Optional[str] = Field(None, pattern=r"^/fsx/[^\s]+$",
                                        description="JSONL prompts file under /fsx; none = the family's: the "
                                                    "shipped math set for the reasoning family, else /fsx/eval/prompts.jsonl")
    max_tokens: Optional[int] = Field(None, ge=1, le=32768,
                                      description="max_tokens per completion; none = 4096 for the reasoning family "
                                                  "(its models reason at length before the boxed answer), else 256")
    deadline_minutes: int = Field(60, ge=5, le=1440, description="activeDeadlineSeconds of each evaluation Job")


class ServingConfig(_Model):
    """A vLLM OpenAI-compatible server for the policy being trained (off by default)."""

    enabled: bool = Field(False, description="create the serving Deployment, Service, PDB and NetworkPolicy")
    image: Optional[str] = Field(None, description="vLLM OpenAI server image; default the pin in versions.py")
    model: ServingModel = ServingModel()
    gpus_per_replica: int = Field(1, ge=1, le=8, alias="gpusPerReplica", description="GPUs of one replica")
    # vLLM shards the model over this many GPUs of one pod; it must equal gpusPerReplica (a GPU
    # requested and unused is wasted, a shard without a GPU fails at start).
    tensor_parallel_size: Optional[int] = Field(None, ge=1, le=8,
                                                description="tensor parallel size; default gpusPerReplica")
    replicas: int = Field(1, ge=1, le=64, description="server replicas")
    max_model_len: Optional[int] = Field(None, ge=16, description="--max-model-len; default the model's")
    extra_args: tuple[str, ...] = Field((), description="further vLLM server flags (not the ones the program sets)")
    # The longest request the server is expected to finish: the grace period after SIGTERM is longer.
    max_request_seconds: int = Field(600, ge=10, le=7200, description="longest request, in seconds")
    # auto: surge one replica when a whole replica fits beside what runs, else replace one at a
    # time; surge / replace: forced (a surge onto a full node group is refused by the render).
    rollout: Literal["auto", "surge", "replace"] = Field("auto", description="rolling update strategy")
    # Read throughput the weights load at on a bring-your-own volume (the stack's FSx knows its own).
    load_throughput_mb_s: Optional[int] = Field(None, ge=10, alias="loadThroughputMBps",
                                                description="volume read throughput in MB/s (byo clusters)")
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

    enabled: Optional[bool] = Field(None, description="None = on when workloads.trainer has a profile")
    s3_prefix: Optional[str] = Field(
        None, alias="s3Prefix", pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$",
        description="stage from s3://bucket/prefix/<name>/ (each item's directory name) instead of the "
                    "model hub; the training role must be allowed to read it")
    # RLinf/RLinf v0.3 docker/Dockerfile bakes ENV HF_ENDPOINT=https://hf-mirror.com into the image
    # unless it is built with NO_MIRROR=1: the staging Job sets it explicitly, never the image's.
    hf_endpoint: str = Field("https://huggingface.co", alias="hfEndpoint", pattern=r"^https://[^\s/]+(/\S*)?$",
                             description="HF_ENDPOINT of the staging Job (the model hub it downloads from); "
                                         "set explicitly because the RLinf image bakes a mirror in")
    deadline_minutes: int = Field(120, ge=5, le=1440,
                                  description="activeDeadlineSeconds of the staging Job, and how long "
                                              "`pulumi up` waits for it before training is created")


class ResumeContract(_Model):
    """How a trainer writes checkpoints and is told to resume, for a trainer without a profile
    (workloads.trainer: none). With a profile, its own terms are used (components/stack/trainers.py)."""

    checkpoint_env: str = Field(pattern=_ENV_NAME, description="env var that receives the run's checkpoint directory")
    steps_under: str = Field("", description="where step directories appear under it ('' = directly)")
    step_prefix: str = Field(description="a step directory's name is this prefix and the step number")
    complete_marks: tuple[str, ...] = Field(min_length=1, description="files, relative to a step directory, "
                                                                      "that exist once the step is complete")
    resume_env: str = Field(pattern=_ENV_NAME, description="env var the resume argument is appended to")
    resume_format: str = Field(pattern=r"\{step_dir\}", description="the argument; {step_dir} is replaced "
                                                                      "by the newest complete step directory")


class WorkloadsConfig(_Model):
    """The training runs and the checks, and what every run gets."""

    image: ImageSetting
    """training image with a specific tag or `@sha256:` digest (`:latest` or no tag is refused), or `build: {...}`: the image the stack builds (components/stack/image_build.py)"""
    # The trainer inside the image (components/stack/trainers.py): its profile gives PATH, the
    # known configs and models, staging, placement and the resume terms. "none": only `command`
    # and `env` are passed, nothing is checked or staged.
    trainer: str = Field(trainers.RLINF.name, description="trainer profile: "
                         + ", ".join([*trainers.PROFILES, trainers.NO_TRAINER]))
    command: tuple[str, ...] = ("bash", "/workspace/eks/scripts/run_training_eks.sh")
    """the training command"""
    config_name: str = Field(trainers.RLINF.default_config, description="the trainer's config (Hydra "
                             "--config-name), one the profile knows")
    venv_name: Optional[str] = Field(None, description="the image's virtual environment; None = the one "
                                     "the profile gives for configName")
    model_path: Optional[str] = Field(None, pattern=r"^/", description="model directory on /fsx; None = the "
                                      "one the profile gives for configName (staged by the staging Job)")
    experiment_name: str = "maniskill-openvlaoft-ppo"
    """passed as `EXPERIMENT_NAME`; names the run's checkpoint directory"""
    staging: Staging = Staging()
    """the staging Job that puts the profile's models and assets on /fsx before training"""
    # None = the trainer profile's resume terms (none: no resume mapping, every retry restarts).
    resume: Optional[ResumeContract] = None
    """how a trainer without a profile writes checkpoints and is told to resume; None = the profile's terms"""
    mlflow_tracking_uri: Optional[str] = None
    """passed as `MLFLOW_TRACKING_URI`"""
    env: dict[str, str] = {}
    """extra env vars; names that look like credentials, names the program sets and values that look like secrets are refused (use `training.secretEnv`)"""
    # None = derived from the instance type (see components/workloads/pod.py).
    shm_size_gib: Optional[int] = Field(None, ge=1, alias="shmSizeGiB")
    """memory-backed `/dev/shm` in GiB, counted against the pod's memory limit; none = 1/16 of node memory (8-256)"""
    termination_grace_period_seconds: int = Field(300, ge=30, le=3600)
    """time the trainer gets after SIGTERM to checkpoint"""
    max_run_minutes: int = Field(1440, ge=5)
    """the run's deadline is this plus a 10-minute image-pull margin"""
    # Size of one checkpoint: the render estimates its write time to FSx and warns when it exceeds
    # the grace period the trainer gets after SIGTERM. None = not estimated.
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
    """exit codes (1-255) that fail the run at once (usage error, not executable, not found); a multi-node run ignores 6 and 9 instead (the Ray launcher's head or peer lost)"""
    priority: int = Field(TRAINING_PRIORITY, **_PRIORITY)
    """value of the `<namespace>-training-<value>` PriorityClass (the training runs' place in the queue; a new value is a new class, and the runs are recreated with it)"""
    single_node: Toggle = Toggle(enabled=True)
    """the single-node training Job (on by default)"""
    multi_node: MultiNode = MultiNode()
    """multi-node Ray training"""
    nccl_test: NcclTest = NcclTest()
    """the NCCL all_reduce check"""
    validation: Validation = Validation(enabled=True)
    """cluster validation, one pod per GPU node (on by default)"""
    serving: ServingConfig = ServingConfig()
    """the vLLM server for the policy being trained (off by default)"""
    embodied_evaluation: EmbodiedEvaluation = EmbodiedEvaluation()
    """the embodied family's evaluation: RLinf's own evaluation of a checkpoint in the simulator, a GPU Job through the queue (off by default)"""
    # Opt-in gate: the training runs are created only after validation and the NCCL test (those
    # enabled) succeeded; `pulumi up` then waits for the checks to finish.
    training_after_checks: bool = False
    """opt-in gate: the training runs are created only after validation and the NCCL test (those enabled) succeeded; `pulumi up` then waits for them"""
    # Opt-in for a change that stops a running run and starts it again (a new pod template, a
    # changed MPIJob spec): the run gets SIGTERM and its grace period, then starts over.
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
        # Names that look like credentials, and names the program sets: refusals.stack_problems
        # (one problem per name, at rltrain:workloads.env.NAME).
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
    # Name of the secret config key holding the Slack webhook URL, the webhook URL or the PagerDuty
    # routing key.
    secret_key: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]*$")
    """secret config key holding the Slack webhook URL, the webhook URL or the PagerDuty routing key; mounted into Alertmanager as a file, never a Helm value"""
    # Slack only: the channel (default: the webhook's own).
    channel: Optional[str] = None
    """Slack only: the channel; none = the webhook's own"""


class MonitoringConfig(_Model):
    """Prometheus, Grafana, Alertmanager, the DCGM and EFA exporters, Ray scraping, alerts and dashboards
    ([monitoring](monitoring.md)). The Grafana admin password is the secret config key
    `rltrain:grafanaAdminPassword`, required while monitoring is on."""

    # None = the cluster-wide rule: installed on a created cluster, opt-in on a bring-your-own one.
    enabled: Optional[bool] = None
    """install the monitoring stack (cluster-wide: CRDs, node-exporter and DCGM DaemonSets); none = `true` on a created cluster, `false` (opt-in) on a bring-your-own one"""
    namespace: str = Field("monitoring", pattern=_DNS_LABEL)
    """its namespace (Pod Security `privileged`: the node agents need host access); must differ from `training.namespace`"""
    retention_days: int = Field(15, ge=1, le=3650)
    """Prometheus retention in days; retention by size is 85 % of the volume"""
    # The Prometheus volume (gp3); retention by size is set a little below it so the disk never fills.
    storage_size_gib: int = Field(100, ge=10, le=16384, alias="storageSizeGiB")
    """the Prometheus volume in GiB (gp3, encrypted; can grow, not shrink)"""
    # Bring your own cluster: the storage class of the Prometheus volume (default: the cluster's
    # default class). A created cluster gets the stack's own gp3 class.
    storage_class: Optional[str] = Field(None, pattern=r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
    """bring your own cluster only: the storage class of the Prometheus volume; none = the cluster's default (a created cluster uses the stack's `rltrain-gp3`)"""
    # A run pod Pending longer than this raises RltrainRunQueuedTooLong (image pulls of 15-20 GB
    # take up to ~10 minutes and count as Pending).
    queued_alert_minutes: int = Field(30, ge=5, le=10080)
    """a run pod Pending longer than this raises `RltrainRunQueuedTooLong` (an image pull counts as Pending)"""
    alert_receiver: Optional[AlertReceiver] = None
    """where alerts are sent; none = only in Alertmanager's UI"""
    # Bring your own cluster: whether its owners run the EKS node monitoring agent (its dcgm-server
    # DaemonSet, the DCGM host engine on hostPort 5555 of every GPU node). A created cluster always
    # runs it (components/k8s/node_health.py).
    node_monitoring_agent: bool = False
    """bring your own cluster only: the cluster runs the EKS node monitoring agent, so the DCGM exporter connects to the agent's host engine on the node (port 5555) instead of starting its own; `false` = the exporter embeds its own (a created cluster always installs the agent)"""


# ---------------------------------------------------------------------------------------------
# kueue (components/k8s/kueue.py)


class KueueConfig(_Model):
    """Whole-workload queueing: every GPU workload waits in a Kueue queue until all its pods fit."""

    # Install the Kueue controller (Helm, cluster-wide). None = the cluster-wide rule: on a created
    # cluster, off (opt-in) on a bring-your-own one, or when queueing is off or clusterQueue is set.
    install: Optional[bool] = None
    """install the pinned Kueue controller (Helm, cluster-wide: CRDs, webhooks); none = `true` on a created cluster, `false` on a bring-your-own one, or when `enabled: false` or `clusterQueue` is set"""
    # Queue the GPU workloads. None = on when the stack installs Kueue or clusterQueue is set.
    enabled: Optional[bool] = None
    """queue the GPU workloads; none = on when the stack installs Kueue or `clusterQueue` is set; `false` falls back to the namespace quota alone (partial admission possible)"""
    # Bring your own cluster: an existing ClusterQueue (of the Kueue the cluster's owners run) the
    # stack's LocalQueue points at, instead of the stack's own ResourceFlavor/ClusterQueue/Topology.
    cluster_queue: Optional[str] = Field(None, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    """bring your own cluster: an existing ClusterQueue of the cluster's Kueue; the stack then creates only its LocalQueue, pointing at it"""
    # Kueue's waitForPodsReady timeout; None = derived from the image-pull margin (kueue.py).
    pods_ready_timeout_minutes: Optional[int] = Field(None, ge=10, le=1440)
    """Kueue's `waitForPodsReady.timeout`: an admitted run whose pods are not all Ready by then is evicted and requeued; none = 60 (6 x the 10-minute image-pull margin)"""


# ---------------------------------------------------------------------------------------------
# the whole stack


class StackConfig(_Model):
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
        if self.workloads.multi_node.enabled and self.workloads.multi_node.ray_auth_token_secret:
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
        return mn.enabled and mn.form == "rayjob" and self.installs(mn.install_kuberay)

    @property
    def multi_node_count(self) -> int:
        return self.workloads.multi_node.nodes or self.gpu_nodes.count


class ConfigError(Exception):
    """Every problem of one stack config, each as (key path, message)."""

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"invalid stack config ({len(self.problems)} problem(s)):"]
        lines += [f"  {path}: {msg}" for path, msg in self.problems]
        return "\n".join(lines)


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Aliases of the model found by walking `loc` (minus its last part) from `model`."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        field = next(
            (f for n, f in current.model_fields.items() if part in (n, f.alias)), None
        )
        if field is None:
            return []
        ann = field.annotation
        inner = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        current = inner[0] if inner else ann
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _path(loc: tuple[Any, ...]) -> str:
    out = f"{NAMESPACE}:{loc[0]}" if loc else NAMESPACE
    for part in loc[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


def _problems_from(err: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(StackConfig, loc)
            msg = f"unknown key; allowed here: {', '.join(allowed)}"
        else:  # in words, the value redacted (refusals.words)
            msg = refusals.words(e, _allowed_keys(StackConfig, loc + ("",)))
        problems.append((_path(loc), msg))
    return problems


def _cross_checks(cfg: StackConfig, region: Optional[str], config_keys: set[str],
                  secret_keys: set[str]) -> list[tuple[str, str]]:
    p: list[tuple[str, str]] = []
    g = cfg.gpu_nodes
    it = g.instance
    if g.efa and not it.has_efa:
        efa_types = [t for t, v in catalog.CATALOG.items() if v.has_efa]
        p.append((_path(("gpuNodes", "efa")),
                  f"{it.name} has no EFA devices; EFA types: {', '.join(efa_types)}"))
    cap = g.capacity
    if cap.type == "on-demand" and cap.reservation_id:
        p.append((_path(("gpuNodes", "capacity", "reservationId")),
                  "a reservation id needs capacity.type capacity-block or odcr (got on-demand)"))
    if cap.type != "on-demand" and not cap.reservation_id:
        p.append((_path(("gpuNodes", "capacity", "reservationId")),
                  f"capacity.type {cap.type} needs the reservation id (cr-...)"))

    c = cfg.cluster
    if not c.endpoint_public_access and c.public_access_cidrs:
        p.append((_path(("cluster", "publicAccessCidrs")),
                  "set while endpointPublicAccess is false (private-only endpoint); remove them"))
    if c.endpoint_public_access and not c.public_access_cidrs and not cfg.byo_cluster:
        p.append((_path(("cluster", "publicAccessCidrs")),
                  "required while endpointPublicAccess is true: list the CIDRs allowed to reach "
                  "the API server, or set endpointPublicAccess: false"))

    n = cfg.network
    if region and not cfg.byo_cluster and not n.existing:
        for i, az in enumerate(n.availability_zones):
            if not re.fullmatch(re.escape(region) + r"[a-z]", az):
                p.append((_path(("network", "availabilityZones", i)),
                          f"{az!r} is not an availability zone of region {region} "
                          f"(expected {region}a, {region}b, ...)"))
    if n.gpu_availability_zone and n.gpu_availability_zone not in n.availability_zones:
        p.append((_path(("network", "gpuAvailabilityZone")),
                  f"{n.gpu_availability_zone!r} is not one of availabilityZones "
                  f"({', '.join(n.availability_zones)}); GPU nodes and FSx must share one of them"))
    if n.existing and n.existing.gpu_subnet_id not in n.existing.private_subnet_ids:
        p.append((_path(("network", "existing", "gpuSubnetId")),
                  "must be one of privateSubnetIds"))

    s = cfg.storage
    if cfg.byo_cluster:
        if not (s.existing_claim or s.storage_class):
            p.append((_path(("storage",)),
                      "with cluster.existing no FSx file system is created: set existingClaim "
                      "or storageClass"))
        if c.existing and c.existing.kubeconfig_secret not in secret_keys:
            p.append((_path((c.existing.kubeconfig_secret,)),
                      "missing or not secret: pulumi config set --secret "
                      f"{NAMESPACE}:{c.existing.kubeconfig_secret} \"$(cat kubeconfig)\""))
    elif s.existing_claim or s.storage_class:
        p.append((_path(("storage", "existingClaim" if s.existing_claim else "storageClass")),
                  "only with cluster.existing; this stack creates its own FSx file system"))
    elif s.fsx is None:
        p.append((_path(("storage", "fsx")), "required unless cluster.existing is set"))
    if s.existing_claim and s.storage_class:
        p.append((_path(("storage", "storageClass")), "set either existingClaim or storageClass"))

    for env, key in cfg.training.secret_env.items():
        if key not in secret_keys:
            state = "is not secret" if key in config_keys else "is missing"
            p.append((_path((key,)),
                      f"{state} (named by training.secretEnv.{env}): "
                      f"pulumi config set --secret {NAMESPACE}:{key} VALUE"))
    ray_key = cfg.workloads.multi_node.ray_auth_token_secret
    if cfg.workloads.multi_node.enabled and ray_key and ray_key not in secret_keys:
        # Without this the program's require_secret fails while it runs (a traceback, not a key path).
        state = "is not secret" if ray_key in config_keys else "is missing"
        p.append((_path((ray_key,)),
                  f"{state} (named by workloads.multiNode.rayAuthTokenSecret): "
                  f"pulumi config set --secret {NAMESPACE}:{ray_key} VALUE"))

    w = cfg.workloads
    if w.multi_node.enabled and cfg.multi_node_count > g.count:
        p.append((_path(("workloads", "multiNode", "nodes")),
                  f"{cfg.multi_node_count} pods need {cfg.multi_node_count} GPU nodes, "
                  f"gpuNodes.count is {g.count}"))
    if w.multi_node.enabled and g.count < 2:
        p.append((_path(("workloads", "multiNode", "enabled")),
                  "multi-node training needs gpuNodes.count >= 2"))
    if w.nccl_test.enabled:
        if g.count < 2:
            p.append((_path(("workloads", "ncclTest", "enabled")),
                      "the NCCL test measures the network between nodes: gpuNodes.count >= 2"))
        if it.nccl_reference is None:
            p.append((_path(("workloads", "ncclTest", "enabled")),
                      f"no published bus bandwidth for {it.name} to check against; "
                      f"types with one: {', '.join(t for t, v in catalog.CATALOG.items() if v.nccl_reference)}"))
    p += _kueue_checks(cfg)
    p += _serving_checks(cfg)
    p += _embodied_evaluation_checks(cfg)
    p += _trainer_checks(cfg)
    try:
        check_pinned_image(w.nccl_test.image)
    except ValueError as e:
        p.append((_path(("workloads", "ncclTest", "image")), str(e)))
    return p


def _trainer_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """The trainer profile's configs, venvs and models (components/stack/trainers.py), refused
    here so a wrong name fails the preview instead of every retry of the run (SEED-DEFECTS D18)."""
    p: list[tuple[str, str]] = []
    w = cfg.workloads
    profile = w.profile
    if profile is None:
        return p
    tc = w.trainer_config
    if tc is None:
        p.append((_path(("workloads", "configName")),
                  f"{w.config_name!r} is not a config of trainer {profile.name} ({profile.source}); "
                  f"known: {', '.join(profile.configs)}"))
        return p
    if w.venv_name != tc.venv:
        p.append((_path(("workloads", "venvName")),
                  f"{w.venv_name!r}: config {w.config_name} runs in the image's venv {tc.venv!r} "
                  f"({profile.venv_bin(tc.venv)}); remove venvName or set it to {tc.venv!r}"))
    staged = [profile.stages[s].dest for s in tc.stages]
    if w.model_path not in staged:
        p.append((_path(("workloads", "modelPath")),
                  f"{w.model_path!r} is not a model config {w.config_name} is staged with; "
                  f"expected {tc.model_path} (remove modelPath for the default)"))
    if w.multi_node.enabled and not tc.spreads:
        multi = [n for n, c in profile.configs.items() if c.spreads]
        p.append((_path(("workloads", "configName")),
                  f"{w.config_name} places every component under one comma-joined key, which no "
                  f"override can spread over {cfg.multi_node_count} nodes (their GPUs would idle); "
                  f"for multi-node use one of: {', '.join(multi)}"))
    owned = {"PATH", "VIRTUAL_ENV", profile.overrides_env, profile.node_rank_env, profile.resume.checkpoint_env,
             *profile.asset_env}
    for name in sorted(owned & set(w.env)):
        p.append((_path(("workloads", "env", name)),
                  f"set by the program from trainer profile {profile.name} (venv, assets, placement, "
                  "checkpoints); remove it, or use workloads.trainer: none and set everything yourself"))
    return p


def _kueue_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    p: list[tuple[str, str]] = []
    k, w = cfg.kueue, cfg.workloads
    if k.install and k.cluster_queue:
        p.append((_path(("kueue", "install")), f"clusterQueue {k.cluster_queue!r} belongs to a Kueue already on the "
                  "cluster: do not install another (install: false)"))
    if k.install and k.enabled is False:
        p.append((_path(("kueue", "install")), "installs Kueue while queueing is off (enabled: false): set both "
                  "or neither"))
    if k.cluster_queue and not cfg.byo_cluster:
        p.append((_path(("kueue", "clusterQueue")), "only with cluster.existing: a created cluster gets the "
                  "stack's own ClusterQueue"))
    if cfg.kueue_enabled and w.multi_node.enabled and w.multi_node.form == "statefulset":
        p.append((_path(("workloads", "multiNode", "form")),
                  "statefulset cannot be queued whole (it never finishes: Kueue would hold its nodes forever "
                  "and every other run would queue behind it): use indexed-job, or set rltrain:kueue.enabled "
                  "false (pods are then admitted one at a time, partial admission possible)"))
    if w.training_after_checks and not (w.validation.enabled or w.nccl_test.enabled):
        p.append((_path(("workloads", "trainingAfterChecks")),
                  "waits for validation and the NCCL test, and neither is enabled"))
    return p


GPU_ALLOWANCE_GIB = 2


def _saved_step_checks(loc: tuple[Any, ...], step: Optional[int], saves: Optional[trainers.SaveFacts],
                       config_name: str) -> list[tuple[str, str]]:
    """A step the config saves: not after its last step, a multiple of its save interval."""
    if saves is None or step is None:
        return []
    if saves.last_step is not None and step > saves.last_step:
        return [(_path(loc), f"{step} is after the last step of {config_name} ({saves.last_step}): it is never saved")]
    if step < saves.save_interval or step % saves.save_interval:
        lo = max(saves.save_interval, step // saves.save_interval * saves.save_interval)
        return [(_path(loc), f"{step} is not a step {config_name} saves (runner.save_interval {saves.save_interval}: "
                             f"steps {saves.save_interval}, {2 * saves.save_interval}, ...); nearest: {lo}"
                             + (f" or {lo + saves.save_interval}" if step > saves.save_interval else ""))]
    return []


def _embodied_evaluation_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """The embodied evaluation: an embodied trainer profile's config, a run that exists, a saved step."""
    w = cfg.workloads
    ev, profile, tc = w.embodied_evaluation, w.profile, w.trainer_config
    key = ("workloads", "embodiedEvaluation")
    if not ev.enabled:
        return []
    embodied = [n for n, pr in trainers.PROFILES.items() if pr.family == "embodied"]
    if profile is None or tc is None or profile.family != "embodied":
        what = f"trainer {w.trainer}" + (f" ({profile.family} family)" if profile else "")
        hint = (": a reasoning model is evaluated through vLLM by workloads.serving.evaluation"
                if profile is not None and profile.family == "reasoning" else "")
        return [(_path((*key, "enabled")), f"RLinf's embodied evaluation needs an embodied trainer profile "
                 f"({', '.join(embodied)}) and one of its configs; {what}{hint}")]
    p: list[tuple[str, str]] = []
    run_on = {"single-node": w.single_node.enabled, "multi-node": w.multi_node.enabled}
    if not run_on[ev.run]:
        p.append((_path((*key, "run")), f"the {ev.run} run is not enabled (workloads.{'singleNode' if ev.run == 'single-node' else 'multiNode'}.enabled): "
                  f"its checkpoints are not written by this stack"))
    p += _saved_step_checks((*key, "step"), ev.step, tc.saves, w.config_name)
    return p




def _served_model_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """A run's step served, against the trainer profile's model and save facts: a family vLLM
    serves, a step the config saves, a tensor parallel size that divides the attention heads."""
    p: list[tuple[str, str]] = []
    sv, w = cfg.workloads.serving, cfg.workloads
    m, profile, tc = sv.model, w.profile, w.trainer_config
    key = ("workloads", "serving")
    if m.run is None or profile is None or tc is None or tc.model is None:
        return p
    if not tc.model.vllm_servable:
        servable = [f"{pr.name} {n} ({c.model.architecture})" for pr in trainers.PROFILES.values()
                    for n, c in pr.configs.items() if c.model and c.model.vllm_servable]
        p.append((_path((*key, "model", "run")),
                  f"trainer {profile.name} config {w.config_name} trains {tc.model.architecture} ({profile.family} "
                  f"family), which vLLM does not serve (not in vllm/model_executor/models/registry.py); "
                  f"servable: {', '.join(servable)}; evaluate an embodied policy in its simulator instead"))
        return p
    p += _saved_step_checks((*key, "model", "step"), m.step, tc.saves, w.config_name)
    # GPU memory: vLLM refuses to start when one max-length sequence's KV cache does not fit beside
    # the weights in gpu_memory_utilization (default 0.9: vllm v0.11.0 vllm/config/cache.py) of each
    # GPU (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory, once per worker). Per GPU:
    # ModelFacts.per_gpu_gib (weights split over the TP ranks, the KV heads too down to one per rank);
    # GPU_ALLOWANCE_GIB for the CUDA context, activations and CUDA graphs (an allowance, not measured).
    it = cfg.gpu_nodes.instance
    length = sv.max_model_len or tc.model.max_position
    weights, kv = tc.model.weights_gib(2), tc.model.kv_cache_gib(length)
    per_gpu = tc.model.per_gpu_gib(length, sv.tp)
    room = it.gpu_memory_gib * 0.9 - GPU_ALLOWANCE_GIB
    if per_gpu > room:
        p.append((_path((*key, "maxModelLen")),
                  f"{length} tokens: weights {weights:,.1f} GiB + one sequence's KV cache {kv:,.1f} GiB over "
                  f"{sv.tp} GPU(s) = {per_gpu:,.1f} GiB per GPU > {room:,.1f} GiB usable of a {it.gpu_memory_gib} GiB "
                  f"{it.gpu_model} (90 % gpu_memory_utilization, {GPU_ALLOWANCE_GIB} GiB runtime allowance); "
                  f"lower maxModelLen or raise gpusPerReplica"))
    heads = tc.model.attention_heads
    if heads % sv.tp:
        ok = [n for n in range(1, cfg.gpu_nodes.instance.gpu_count + 1)
              if heads % n == 0 and cfg.gpu_nodes.instance.gpu_count % n == 0]
        p.append((_path((*key, "gpusPerReplica")),
                  f"tensor parallel size {sv.tp} does not divide the {heads} attention heads of {tc.model.architecture} "
                  f"({tc.model.source}; vLLM shards heads evenly over the ranks); allowed: {', '.join(map(str, ok))}"))
    return p


def _serving_checks(cfg: StackConfig) -> list[tuple[str, str]]:
    """workloads.serving: the shape of a replica against the node, the model source, the flags."""
    p: list[tuple[str, str]] = []
    sv, it = cfg.workloads.serving, cfg.gpu_nodes.instance
    key = ("workloads", "serving")
    if sv.evaluation.enabled and not sv.enabled:
        p.append((_path((*key, "evaluation", "enabled")), "evaluates the serving endpoint, and serving.enabled is false"))
    if not sv.enabled:
        return p
    if sv.tensor_parallel_size is not None and sv.tensor_parallel_size != sv.gpus_per_replica:
        p.append((_path((*key, "tensorParallelSize")),
                  f"{sv.tensor_parallel_size} != gpusPerReplica {sv.gpus_per_replica}: vLLM shards the model over "
                  "exactly the GPUs of one replica (set both to the same value, or leave tensorParallelSize unset)"))
    if sv.gpus_per_replica > it.gpu_count or it.gpu_count % sv.gpus_per_replica:
        allowed = [n for n in range(1, it.gpu_count + 1) if it.gpu_count % n == 0]
        p.append((_path((*key, "gpusPerReplica")),
                  f"{sv.gpus_per_replica} does not divide the {it.gpu_count} GPUs of a {it.name} node; "
                  f"allowed: {', '.join(map(str, allowed))}"))
    g = cfg.gpu_nodes
    per_node = 1 if 2 * sv.gpus_per_replica > it.gpu_count else it.gpu_count // max(1, sv.gpus_per_replica)
    if sv.replicas > per_node * g.count:
        p.append((_path((*key, "replicas")),
                  f"{sv.replicas} replicas of {sv.gpus_per_replica} GPU(s) need more than the {g.count} GPU node(s) "
                  f"hold ({per_node} per node)"))
    # The checks take a whole pod on every GPU node: with serving holding GPUs on one of them (and the
    # queue's quota leaving those out) they are never admitted.
    for check, on in (("validation", cfg.workloads.validation.enabled), ("ncclTest", cfg.workloads.nccl_test.enabled)):
        if on:
            p.append((_path(("workloads", check, "enabled")),
                      "runs a whole-node pod on every GPU node, and serving (workloads.serving.enabled) holds GPUs "
                      "on one for good: it would never start. Run it before enabling serving, or disable it"))
    m = sv.model
    if (m.path is None) == (m.run is None):
        p.append((_path((*key, "model")), "set either run (with step) or path"))
    if m.run is not None and m.step is None:
        p.append((_path((*key, "model", "step")), f"required with run {m.run!r}: the checkpoint step to serve"))
    if m.path is not None and m.step is not None:
        p.append((_path((*key, "model", "step")), "only with run; path names the model directory itself"))
    p += _served_model_checks(cfg)
    for i, arg in enumerate(sv.extra_args):
        flag = arg.split("=", 1)[0].replace("_", "-")
        if flag in SERVING_PROGRAM_FLAGS:
            p.append((_path((*key, "extraArgs", i)),
                      f"{flag} is set by the program ({', '.join(SERVING_PROGRAM_FLAGS)}): use the serving key instead"))
        elif not arg.startswith("-"):
            p.append((_path((*key, "extraArgs", i)), "not a flag: write each flag as --name=value"))
    return p


def _monitoring_checks(cfg: StackConfig, config_keys: set[str], secret_keys: set[str], *,
                       program: bool) -> list[tuple[str, str]]:
    """`program`: called by the running program (from_pulumi), which reads the Grafana password:
    it must exist. A stack file check alone only refuses it in plain text."""
    p: list[tuple[str, str]] = []
    m = cfg.monitoring
    if m.storage_class and not cfg.byo_cluster:
        p.append((_path(("monitoring", "storageClass")),
                  "only with cluster.existing; this stack creates its own gp3 storage class"))
    if m.node_monitoring_agent and not cfg.byo_cluster:
        p.append((_path(("monitoring", "nodeMonitoringAgent")),
                  "only with cluster.existing; a created cluster always gets the EKS node monitoring agent add-on "
                  "and its DCGM exporter always uses the agent's host engine"))
    if not cfg.monitoring_enabled:
        return p
    if m.namespace == cfg.training.namespace:
        p.append((_path(("monitoring", "namespace")),
                  f"must differ from training.namespace ({m.namespace!r}): the monitoring namespace "
                  "enforces the privileged Pod Security level its DaemonSets need"))
    needed = [(GRAFANA_PASSWORD_KEY, "the Grafana admin password")]
    if m.alert_receiver:
        needed.append((m.alert_receiver.secret_key, f"monitoring.alertReceiver.secretKey ({m.alert_receiver.type})"))
    for key, what in needed:
        if key == GRAFANA_PASSWORD_KEY and key not in config_keys and not program:
            continue
        if key not in secret_keys:
            state = "is not secret" if key in config_keys else "is missing"
            p.append((_path((key,)), f"{state} ({what}, monitoring is on): "
                      f"pulumi config set --secret {NAMESPACE}:{key} VALUE"))
    r = m.alert_receiver
    if r and r.channel and r.type != "slack":
        p.append((_path(("monitoring", "alertReceiver", "channel")), f"only for type slack (got {r.type})"))
    return p


def parse_value(raw: Any) -> Any:
    """Pulumi hands structured config to the program as JSON text."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def load(values: Mapping[str, Any], *, secret_keys: set[str] | frozenset[str] = frozenset(),
         region: Optional[str] = None, program: bool = False) -> StackConfig:
    """Validate the `rltrain:` config of one stack.

    `values` maps keys without the `rltrain:` prefix to their (parsed or JSON) values;
    `secret_keys` are the keys (without prefix) that are Pulumi secrets.
    """
    problems: list[tuple[str, str]] = []
    data = {k: parse_value(v) for k, v in values.items() if k in SECTIONS}
    referenced = set()
    secret_env = (data.get("training") or {}).get("secretEnv") if isinstance(data.get("training"), dict) else None
    if isinstance(secret_env, dict):
        referenced |= {v for v in secret_env.values() if isinstance(v, str)}
    existing = (data.get("cluster") or {}).get("existing") if isinstance(data.get("cluster"), dict) else None
    if isinstance(existing, dict):
        referenced.add(existing.get("kubeconfigSecret", "kubeconfig"))
    referenced.add(GRAFANA_PASSWORD_KEY)
    receiver = (data.get("monitoring") or {}).get("alertReceiver") if isinstance(data.get("monitoring"), dict) else None
    if isinstance(receiver, dict) and isinstance(receiver.get("secretKey"), str):
        referenced.add(receiver["secretKey"])
    multi = (data.get("workloads") or {}).get("multiNode") if isinstance(data.get("workloads"), dict) else None
    if isinstance(multi, dict) and isinstance(multi.get("rayAuthTokenSecret"), str):
        referenced.add(multi["rayAuthTokenSecret"])
    for key in sorted(set(values) - set(SECTIONS)):
        if key in referenced:
            continue
        problems.append((_path((key,)),
                         f"unknown key; allowed: {', '.join(SECTIONS)}, or a secret named by "
                         "training.secretEnv / cluster.existing.kubeconfigSecret"))
    cfg = None
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as e:
        problems += _problems_from(e)
    # Secrets by value, in every string of every section (also when the model did not validate).
    scanned = {k: v for k, v in data.items() if isinstance(v, (dict, list, str))}
    problems += refusals.secret_values(scanned)
    if cfg is not None:
        # A key already refused (its value looks like a secret) gets no second message.
        refused = {path for path, _ in problems}
        problems += [(path, msg) for path, msg in _cross_checks(cfg, region, set(values), set(secret_keys))
                     if path not in refused]
        problems += _monitoring_checks(cfg, set(values), set(secret_keys), program=program)
        problems += refusals.stack_problems(cfg)
    if problems:
        # No message prints more than 4 characters of anything the scanner suspects.
        raise ConfigError(refusals.masked(problems, scanned))
    assert cfg is not None
    return cfg


def from_pulumi() -> StackConfig:
    """Read and validate the `rltrain:` config handed to the running program.

    The Pulumi CLI passes config through the environment (PULUMI_CONFIG); the offline render sets
    it in-process. Both are read, so unknown top-level keys are caught either way.
    """
    import pulumi
    from pulumi.runtime import config as rc

    prefix = f"{NAMESPACE}:"
    merged = {**rc.get_config_env(), **rc.CONFIG.get()}
    values = {k[len(prefix):]: v for k, v in merged.items() if k.startswith(prefix)}
    secret = set(rc.get_config_secret_keys_env()) | set(rc._SECRET_KEYS.get())
    secret_keys = {k[len(prefix):] for k in secret if k.startswith(prefix)}
    return load(values, secret_keys=secret_keys, region=pulumi.Config("aws").get("region"), program=True)
