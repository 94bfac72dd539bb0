"""Karpenter: the controller of elastic GPU capacity on a cluster the stack creates, and its GPU nodes.

What a created-cluster stack with `rltrain:gpuNodes.elastic.enabled` gets instead of the managed
GPU node group (components/stack/elastic.py), following the getting-started guide of
aws/karpenter-provider-aws v1.14.0 (website/content/en/v1.14/getting-started/
getting-started-with-karpenter/: cloudformation.yaml, scripts/step08-apply-helm-chart.sh):

- the controller's role, handed to its service account by EKS Pod Identity, with the template's
  policies scoped to this cluster (components/aws/karpenter_policy.py);
- the interruption queue (SQS, server-side encrypted) and the EventBridge rules that feed it;
- the GPU node role (the managed group's policies, iam.NODE_POLICIES) and its EKS access entry
  (EC2_LINUX: EKS maps the role to system:nodes itself);
- the CRDs (chart karpenter-crd) and the controller (chart karpenter), on the system nodes;
- the EC2NodeClass, NodePool and NodeOverlay (pure builders: karpenter_node_class.py,
  components/k8s/karpenter_nodes.py), after the controller's CRDs.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict, Field

from components.aws import iam, karpenter_node_class, karpenter_policy
from components.stack import versions

# EC2_LINUX: EKS adds the role to system:nodes with the node username itself; no access policy can
# be attached to that type (EKS user guide, creating-access-entries; API CreateAccessEntry `type`).
NODE_ACCESS_ENTRY_TYPE = "EC2_LINUX"
# The template's MessageRetentionPeriod: an interruption older than 5 minutes is stale (a Spot
# warning gives 2 minutes, a Capacity Block's end 30).
QUEUE_RETENTION_SECONDS = 300
SYSTEM_NODE_SELECTOR = {"kubernetes.io/os": "linux", "role": "system"}


class KarpenterArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    cluster_name: str
    region: str
    replicas: int = Field(2, ge=1)


def partition_and_account(cluster_arn: str) -> tuple[str, str]:
    """(partition, account) of arn:PARTITION:eks:REGION:ACCOUNT:cluster/NAME; the ARN itself for both
    while it is unknown (the offline render's placeholder)."""
    parts = cluster_arn.split(":")
    if cluster_arn.startswith("arn:") and len(parts) > 4:
        return parts[1], parts[4]
    return "aws", cluster_arn


# The pod annotation that carries the Pod Identity association's id: a new association is a new pod
# template, so the controller's pods are created again and mutated with its credentials.
ASSOCIATION_ANNOTATION = "rltrain/pod-identity-association"


def release_values(a: KarpenterArgs, queue_name: pulumi.Input[str],
                   association_id: Optional[pulumi.Input[str]] = None) -> dict[str, Any]:
    """The karpenter chart's values (charts/karpenter/values.yaml at v1.14.0)."""
    values: dict[str, Any] = {
        "settings": {
            "clusterName": a.cluster_name,
            # Interruption handling is off unless the queue is named (values.yaml settings.interruptionQueue).
            "interruptionQueue": queue_name,
            # NodeOverlay is alpha and off by default (settings.featureGates.nodeOverlay): the GPU
            # NodeOverlay adds the huge pages the runs request (karpenter_nodes.node_overlay).
            "featureGates": {"nodeOverlay": True},
        },
        # The Pod Identity association names this service account (the chart's default is its fullname).
        "serviceAccount": {"name": versions.KARPENTER_SERVICE_ACCOUNT},
        # On the system nodes (the cluster's managed CPU group, label role=system; untainted, so the
        # chart's tolerations need nothing more). The chart's default affinity already keeps it off
        # nodes Karpenter launched (karpenter.sh/nodepool DoesNotExist), and its required
        # anti-affinity puts the replicas on different hosts: two replicas for two system nodes,
        # one leader and a standby (the chart's default, values.yaml replicas: 2).
        "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
        "replicas": a.replicas,
        # The guide's requests (step08-apply-helm-chart.sh: 1 CPU, 1 GiB), memory limited to the
        # request; no CPU limit (throttling slows the scheduling simulation, nothing else needs the CPU).
        # The region as an environment variable (the chart's own example, values.yaml controller.env):
        # without AWS_REGION the controller asks IMDS for it and exits when that fails (v1.14.0
        # pkg/operator/operator.go NewOperator: lo.Must0 "unable to determine region from IMDS"), and
        # the system nodes' hop limit of 1 refuses a pod's IMDS call (aws/cluster.py). Pod Identity
        # injects AWS_REGION too, but only into a pod created after its webhook sees the association.
        "controller": {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
                       "env": [{"name": "AWS_REGION", "value": a.region}]},
    }
    if association_id is not None:
        values["podAnnotations"] = {ASSOCIATION_ANNOTATION: association_id}
    return values


class Karpenter(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    node_role: iam.AttachedRole

    def __init__(self, name: str, args: KarpenterArgs, *, cluster: tuple[pulumi.Input[str], pulumi.Input[str]],
                 pod_identity_agent: pulumi.Resource, system_nodes: pulumi.Resource,
                 k8s_provider: k8s.Provider, opts: Optional[pulumi.ResourceOptions] = None):
        """`cluster`: the cluster's (name, ARN) as outputs of the cluster; `pod_identity_agent` the
        EKS add-on that hands the controller its role; `system_nodes` where the controller runs."""
        super().__init__("rltrain:index:Karpenter", name, None, opts)
        self._prefix = name
        child = pulumi.ResourceOptions(parent=self)
        cluster_name, cluster_arn = cluster

        # The interruption queue: the template's name (the cluster's), SSE with SQS-managed keys.
        # A fixed name: deleted before a replacement is created.
        self.queue = aws.sqs.Queue(f"{name}-interruption", name=args.cluster_name,
                                   message_retention_seconds=QUEUE_RETENTION_SECONDS, sqs_managed_sse_enabled=True,
                                   opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))
        aws.sqs.QueuePolicy(f"{name}-interruption-policy", queue_url=self.queue.id,
                            policy=self.queue.arn.apply(lambda arn: json.dumps(karpenter_policy.queue_policy(arn),
                                                                               sort_keys=True)),
                            opts=child)
        self.rules = []
        for rule in karpenter_policy.EVENT_RULES:
            # Named after the cluster (one stack per cluster), so the rules of a cluster are found by
            # its name; fixed names: deleted before a replacement is created.
            r = aws.cloudwatch.EventRule(f"{name}-{rule}", name=f"{args.cluster_name}-{rule}"[:64],
                                         event_pattern=karpenter_policy.event_pattern(rule),
                                         description=f"{args.cluster_name}: Karpenter interruption events",
                                         opts=pulumi.ResourceOptions(parent=self, delete_before_replace=True))
            aws.cloudwatch.EventTarget(f"{name}-{rule}-target", rule=r.name, arn=self.queue.arn,
                                       target_id="KarpenterInterruptionQueueTarget", opts=child)
            self.rules.append(r)

        # The GPU nodes' role: what the managed group's node role has, nothing for pods.
        self.node_role = iam.node_role(f"{name}-node-role", self)
        self.access_entry = aws.eks.AccessEntry(
            f"{name}-node-access", cluster_name=cluster_name, principal_arn=self.node_role.arn,
            type=NODE_ACCESS_ENTRY_TYPE, opts=child)

        # The controller's role: trusted by this cluster's kube-system/karpenter only.
        controller = iam.pod_identity_role(f"{name}-controller-role", [], self, cluster=cluster,
                                           namespace=versions.KARPENTER_NAMESPACE,
                                           service_account=versions.KARPENTER_SERVICE_ACCOUNT)
        scope = pulumi.Output.all(cluster_arn, self.node_role.arn, self.queue.arn).apply(lambda v: _scope(args, *v))
        policies = [aws.iam.RolePolicy(f"{name}-controller-{which}", role=controller.id,
                                       policy=scope.apply(lambda s, w=which: karpenter_policy.policy_json(w, s)),
                                       opts=child)
                    for which in karpenter_policy.POLICIES]
        # Pod Identity associations are eventually consistent: "may take several seconds to be
        # effective" (EKS API reference, CreatePodIdentityAssociation), and the webhook injects the
        # credentials and AWS_REGION only into a pod created after it sees the association
        # (aws/amazon-eks-pod-identity-webhook pkg/handler); a container restart is not mutated again.
        # A controller pod created first has no credentials, fails its EC2 connectivity check and
        # exits (operator.go CheckEC2Connectivity: os.Exit(1)), for good. So the association is
        # created as soon as the cluster and the role's policies exist, beside the system node
        # group, and the controller only after the system nodes, the Pod Identity agent and the
        # CRD chart: on a first `up` the node group's creation (minutes) lies between the two.
        association = aws.eks.PodIdentityAssociation(
            f"{name}-controller-association", cluster_name=cluster_name, namespace=versions.KARPENTER_NAMESPACE,
            service_account=versions.KARPENTER_SERVICE_ACCOUNT, role_arn=controller.arn,
            opts=pulumi.ResourceOptions(parent=self, depends_on=policies))

        k8s_child = pulumi.ResourceOptions(parent=self, provider=k8s_provider)
        self.crds = k8s.helm.v3.Release(
            f"{name}-crd", name=versions.KARPENTER_CRD.chart,
            chart=f"{versions.KARPENTER_CRD.repo}/{versions.KARPENTER_CRD.chart}",
            version=versions.KARPENTER_CRD.version, namespace=versions.KARPENTER_NAMESPACE,
            opts=pulumi.ResourceOptions.merge(k8s_child, pulumi.ResourceOptions(depends_on=[system_nodes])))
        # Waits for the controller: the NodePool is created once something reconciles it. The
        # CRDs are karpenter-crd's (skip_crds: the controller chart's crds/ would be installed once
        # and never upgraded, versions.KARPENTER_CRD).
        self.release = k8s.helm.v3.Release(
            f"{name}-controller", name=versions.KARPENTER.chart,
            chart=f"{versions.KARPENTER.repo}/{versions.KARPENTER.chart}", version=versions.KARPENTER.version,
            namespace=versions.KARPENTER_NAMESPACE, skip_crds=True, skip_await=False, timeout=600,
            values=release_values(args, args.cluster_name, association.id),
            opts=pulumi.ResourceOptions.merge(k8s_child, pulumi.ResourceOptions(
                depends_on=[self.crds, association, pod_identity_agent, self.access_entry, system_nodes])))
        self.node_role_name = pulumi.Output.all(self.node_role.name, self.node_role.arn).apply(lambda v: v[0])
        self.register_outputs({"interruptionQueue": self.queue.name, "nodeRoleArn": self.node_role.arn})

    def apply_nodes(self, node_class: pulumi.Input[dict], node_pool: dict, node_overlay: Optional[dict],
                    k8s_provider: k8s.Provider, prefix: str = "") -> list[k8s.apiextensions.CustomResource]:
        """The EC2NodeClass, NodePool and NodeOverlay (if any), after the controller and its CRDs.
        The node class holds outputs (subnet, security groups, role), hence an Input. `prefix`
        names a second set's resources (the CPU NodePool's: "cpu-")."""
        opts = pulumi.ResourceOptions(parent=self, provider=k8s_provider, depends_on=[self.crds, self.release])

        def cr(res: str, doc: pulumi.Input[dict], api_version: str, kind: str, name: str):
            return k8s.apiextensions.CustomResource(
                f"{self._prefix}-{prefix}{res}", api_version=api_version, kind=kind,
                metadata=k8s.meta.v1.ObjectMetaArgs(name=name),
                spec=pulumi.Output.from_input(doc).apply(lambda d: d["spec"]), opts=opts)

        class_name = node_pool["spec"]["template"]["spec"]["nodeClassRef"]["name"]
        out = [cr("node-class", node_class, karpenter_node_class.API_VERSION, karpenter_node_class.KIND, class_name)]
        for res, doc in (("node-pool", node_pool), ("node-overlay", node_overlay)):
            if doc is not None:
                out.append(cr(res, doc, doc["apiVersion"], doc["kind"], doc["metadata"]["name"]))
        return out

def _scope(args: KarpenterArgs, cluster_arn: str, node_role_arn: str, queue_arn: str) -> karpenter_policy.Scope:
    partition, account = partition_and_account(cluster_arn)
    return karpenter_policy.Scope(partition=partition, region=args.region, account=account,
                                  cluster=args.cluster_name, node_role_arn=node_role_arn, queue_arn=queue_arn)

