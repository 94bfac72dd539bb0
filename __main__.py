"""rltrain: a GPU training environment on EKS and the RL workloads that run on it, in one stack.

Order: config -> network -> cluster -> GPU node group -> add-ons -> FSx -> namespace -> workloads.
With `rltrain:cluster.existing` only the Kubernetes part is deployed, onto that cluster.
"""

import pulumi
import pulumi_kubernetes as k8s

from components.stack import image_build, validate
from components.k8s.addons import ClusterAddons, ClusterAddonsArgs
from components.k8s.namespace import TrainingNamespace, training_namespace_args
from components.stack.outputs import cost_per_hour
from components.aws import iam
from components.aws.platform import build_aws_platform
from components.k8s.volumes import DynamicClaim, storage_claim_args
from components.k8s.kueue import build_kueue
from components.k8s.monitoring import build_monitoring
from components.workloads import serving
from components.workloads.build import build_workloads

cfg = validate.from_pulumi()  # every config problem is reported here, before any resource exists
rl = pulumi.Config("rltrain")
cluster_name = cfg.cluster.name or f"rltrain-{pulumi.get_stack()}"

if cfg.byo_cluster:
    existing = cfg.cluster.existing
    provider = k8s.Provider("existing-cluster", kubeconfig=rl.require_secret(existing.kubeconfig_secret),
                            context=existing.context, enable_server_side_apply=True)
    platform = None
else:
    platform = build_aws_platform(cfg, cluster_name)
    provider = platform.cluster.provider
    if platform.image:  # the runs use the image the stack builds, by digest
        image = image_build.named(cfg.workloads.image, platform.image.args.name, platform.image.reference)
        cfg = cfg.model_copy(update={"workloads": cfg.workloads.model_copy(update={"image": image})})
    pulumi.export("clusterName", platform.cluster.cluster_name)
    pulumi.export("kubeconfig", platform.cluster.kubeconfig)

k8s_opts = pulumi.ResourceOptions(provider=provider)
training = TrainingNamespace(
    "training", training_namespace_args(cfg, role_arn=platform.training_role_arn if platform else None),
    secret_values={k: rl.require_secret(k) for k in cfg.training_secret_keys}, opts=k8s_opts)
after_ns = pulumi.ResourceOptions(provider=provider, depends_on=[training])
addons = ClusterAddons("addons", ClusterAddonsArgs(
    instance_type=cfg.gpu_nodes.instance_type, efa=cfg.gpu_nodes.efa_enabled, device_plugins=cfg.device_plugins,
    kubernetes_version=None if cfg.byo_cluster else cfg.cluster.kubernetes_version),
    cluster=platform.cluster.cluster_name if platform else None,
    after=(platform.cluster.pod_identity_agent,) if platform else (),
    opts=pulumi.ResourceOptions(provider=provider, depends_on=platform.node_groups if platform else []))

claim = storage_claim_args(cfg)
volume = None  # an existing claim needs nothing created
if platform:
    volume = platform.attach_fsx(claim, after_ns)
elif cfg.storage.storage_class:
    volume = DynamicClaim("storage", claim, opts=after_ns)

# Kueue and the stack's queue: on a created cluster by default, opt-in on byo (rltrain:kueue). Its
# controller runs on the system nodes (not the GPU nodes); its webhooks must answer before a queued
# run is created.
queue = build_kueue(cfg, namespace=training.namespace, held=serving.reserved(cfg),
                    opts=pulumi.ResourceOptions(provider=provider,
                                                depends_on=[training] + ([platform.cluster.system_nodes]
                                                                         if platform else [])))

# Workloads start after the plugins that advertise GPUs/EFA, after their volume exists and after
# the queue they wait in.
workloads = build_workloads(cfg, namespace=training.namespace, claim_name=claim.claim_name,
                            secret_name=training.secret_name,
                            opts=pulumi.ResourceOptions(provider=provider,
                                                        depends_on=[training, addons] + ([volume] if volume else [])
                                                        + ([queue] if queue else [])))

# Prometheus, Grafana, exporters, rules, dashboards: on a created cluster by default, opt-in on byo.
build_monitoring(cfg, secret=rl.require_secret, cluster=platform.cluster.cluster_name if platform else None,
                 cluster_arn=platform.cluster.cluster_arn if platform else None,
                 after=(platform.cluster.pod_identity_agent,) if platform else (),
                 pod_identity_role=iam.pod_identity_role,
                 opts=pulumi.ResourceOptions(provider=provider,
                                             depends_on=[training] + (platform.node_groups if platform else [])))

pulumi.export("namespace", training.namespace)
pulumi.export("claimName", claim.claim_name)
pulumi.export("gpuNodes", {"instanceType": cfg.gpu_nodes.instance_type, "count": cfg.gpu_nodes.count,
                           "gpus": cfg.gpu_nodes.total_gpus, "efaDevicesPerNode": cfg.gpu_nodes.efa_devices_per_node})
pulumi.export("estimatedCostPerHour", cost_per_hour(cfg))
if "serving" in workloads:  # workloads.serving: where to send requests, and what is served
    pulumi.export("serving", {"endpoint": pulumi.Output.concat("http://rltrain-serving.", training.namespace, ".svc:8000"),
                              "modelPath": workloads["serving"].model_path})
