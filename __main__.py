"""rltrain: a GPU training environment on EKS and the RL workloads that run on it, in one stack."""

import pulumi
import pulumi_kubernetes as k8s

from components import config
from components.cluster import EksCluster, EksClusterArgs
from components.namespace import TrainingNamespace, TrainingNamespaceArgs
from components.network import ExistingNetwork, Network, NetworkArgs
from components.outputs import cost_per_hour

cfg = config.from_pulumi()  # every config problem is reported here, before any resource exists
stack = pulumi.get_stack()
rl = pulumi.Config("rltrain")
cluster_name = cfg.cluster.name or f"rltrain-{stack}"

if cfg.byo_cluster:
    existing = cfg.cluster.existing
    provider = k8s.Provider("existing-cluster", kubeconfig=rl.require_secret(existing.kubeconfig_secret),
                            context=existing.context, enable_server_side_apply=True)
else:
    net_cfg = cfg.network
    if net_cfg.existing:
        network = ExistingNetwork(net_cfg.existing.vpc_id, net_cfg.existing.private_subnet_ids,
                                  net_cfg.existing.gpu_subnet_id)
    else:
        network = Network("network", NetworkArgs(
            vpc_cidr=net_cfg.vpc_cidr, availability_zones=net_cfg.availability_zones,
            gpu_availability_zone=net_cfg.gpu_az, cluster_name=cluster_name))
    cluster = EksCluster("cluster", EksClusterArgs(
        cluster_name=cluster_name, kubernetes_version=cfg.cluster.kubernetes_version,
        endpoint_public_access=cfg.cluster.endpoint_public_access,
        public_access_cidrs=cfg.cluster.public_access_cidrs, admin_role_arns=cfg.cluster.admin_role_arns,
        system_instance_type=cfg.cluster.system_nodes.instance_type,
        system_node_count=cfg.cluster.system_nodes.count,
    ), vpc_id=network.vpc_id, private_subnet_ids=network.private_subnet_ids,
        public_subnet_ids=network.public_subnet_ids)
    provider = cluster.provider
    pulumi.export("clusterName", cluster.cluster_name)
    pulumi.export("kubeconfig", cluster.kubeconfig)

k8s_opts = pulumi.ResourceOptions(provider=provider)
training = TrainingNamespace("training", TrainingNamespaceArgs(
    namespace=cfg.training.namespace, service_account=cfg.training.service_account,
    pod_security=cfg.training.pod_security, kubernetes_version=cfg.cluster.kubernetes_version,
    gpu_quota=cfg.gpu_nodes.total_gpus, secret_keys=tuple(sorted(set(cfg.training.secret_env.values()))),
), secret_values={k: rl.require_secret(k) for k in set(cfg.training.secret_env.values())}, opts=k8s_opts)

pulumi.export("namespace", training.namespace)
pulumi.export("gpuNodes", {"instanceType": cfg.gpu_nodes.instance_type, "count": cfg.gpu_nodes.count,
                           "gpus": cfg.gpu_nodes.total_gpus})
pulumi.export("estimatedCostPerHour", cost_per_hour(cfg))
