"""What the Ray launcher's head needs to ask the Kubernetes API about its run's nodes.

The head tells a GPU fault from a trainer bug by the nodes of its run's pods
(components/scripts/_ray_launcher/node_health.py: the node monitoring agent's conditions, NotReady,
cordoned, a NoExecute taint, deleted). For that the launcher forms' pods (the Indexed Job and the
StatefulSet; KubeRay's RayJob runs no launcher) get:

- the training service account's token, mounted in those pods only (`automountServiceAccountToken`
  on the pod; the account itself keeps it off for every other pod: components/k8s/namespace.py);
- a Role in the training namespace: list pods (the run's, by its label) - nothing else;
- a ClusterRole: get nodes - read-only, cluster-scoped because Nodes are. Named after the training
  namespace, as the PriorityClass is (runs.priority_class): two stacks sharing a cluster must use
  different namespaces, so they never own the same cluster-wide object;
- RUN_POD_SELECTOR (the run's label) and POD_NAMESPACE (already in every training pod, env.py).

The token lets the trainer's own code read the same (the run's pods, the cluster's nodes): status
that holds no secret. It reaches the API server through the run's egress on TCP 443 (multinode.py
network_policy_args: the `kubernetes` Service's ClusterIP is DNAT'd to the control plane's
endpoints on 443 on EKS).
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.stack.config import StackConfig
from components.k8s.options import child_opts
from components.workloads import runs

COMPONENT = "node-health"
SELECTOR_ENV = "RUN_POD_SELECTOR"
# checkov CKV_K8S_38 (a service-account token mounted): the launcher forms' pods carry this reason.
TOKEN_SKIP = ("CKV_K8S_38", "automountServiceAccountToken true: the Ray launcher's head reads its run's pods and "
              "their nodes through the API to tell a node fault from a trainer failure, with a Role and a "
              "ClusterRole allowing only that")


def selector(run: str) -> str:
    return f"{runs.RUN_LABEL}={run}"


def env(run: str) -> dict[str, str]:
    """The launcher's variables naming the run's pods (ray_launcher.py RUN_POD_SELECTOR)."""
    return {SELECTOR_ENV: selector(run)}


def role_name(run: str) -> str:
    return f"{run}-node-health"


def cluster_role_name(cfg: StackConfig) -> str:
    return f"{cfg.training.namespace}-run-node-reader"


def role_args(run: str, namespace: pulumi.Input[str]) -> k8s.rbac.v1.RoleInitArgs:
    return k8s.rbac.v1.RoleInitArgs(
        metadata=runs.object_metadata(role_name(run), namespace, runs.labels(COMPONENT, run)),
        rules=[k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["pods"], verbs=["list"])])


def role_binding_args(cfg: StackConfig, run: str, namespace: pulumi.Input[str]) -> k8s.rbac.v1.RoleBindingInitArgs:
    return k8s.rbac.v1.RoleBindingInitArgs(
        metadata=runs.object_metadata(role_name(run), namespace, runs.labels(COMPONENT, run)),
        role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="Role", name=role_name(run)),
        subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=cfg.training.service_account,
                                          namespace=namespace)])


def cluster_role_args(cfg: StackConfig) -> k8s.rbac.v1.ClusterRoleInitArgs:
    name = cluster_role_name(cfg)
    return k8s.rbac.v1.ClusterRoleInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, labels=runs.labels(COMPONENT, name)),
        rules=[k8s.rbac.v1.PolicyRuleArgs(api_groups=[""], resources=["nodes"], verbs=["get"])])


def cluster_role_binding_args(cfg: StackConfig, namespace: pulumi.Input[str]
                              ) -> k8s.rbac.v1.ClusterRoleBindingInitArgs:
    name = cluster_role_name(cfg)
    return k8s.rbac.v1.ClusterRoleBindingInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(name=name, labels=runs.labels(COMPONENT, name)),
        role_ref=k8s.rbac.v1.RoleRefArgs(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name),
        subjects=[k8s.rbac.v1.SubjectArgs(kind="ServiceAccount", name=cfg.training.service_account,
                                          namespace=namespace)])


def build(name: str, cfg: StackConfig, run: str, namespace: pulumi.Input[str], parent: pulumi.Resource,
          opts: Optional[pulumi.ResourceOptions]) -> list[pulumi.Resource]:
    """The Role, ClusterRole and their bindings; the run's pods depend on them (created first)."""
    return [
        k8s.rbac.v1.Role(f"{name}-node-health-role", role_args(run, namespace), child_opts(parent, opts)),
        k8s.rbac.v1.RoleBinding(f"{name}-node-health-binding", role_binding_args(cfg, run, namespace),
                                child_opts(parent, opts)),
        k8s.rbac.v1.ClusterRole(f"{name}-node-reader", cluster_role_args(cfg), child_opts(parent, opts)),
        k8s.rbac.v1.ClusterRoleBinding(f"{name}-node-reader-binding", cluster_role_binding_args(cfg, namespace),
                                       child_opts(parent, opts)),
    ]
