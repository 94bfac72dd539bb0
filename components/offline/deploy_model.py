"""Deploy model: what the engine, AWS and the kubelet will do with the recorded resources.

The policy rules check what the program declares; these rules check what happens when it is
deployed, from the same resource view (a row of `rendered/<stack>/resources.json`):

- **Order** (`deploy-order`): the engine creates a resource only after everything it depends on:
  its `dependsOn` (explicit `depends_on` and property dependencies, as sent in RegisterResource),
  its `provider` and its `parent`. Whatever acts on the cluster must reach the cluster through
  those edges, and every GPU workload must reach the GPU node group, the device plugins it needs
  and its volume; otherwise `pulumi up` may create it first and it fails or hangs.
- **Reachability** (`network-flows`): from the recorded security groups and rules, plus what EKS
  documents for the groups it creates itself, every flow a working cluster needs is derived and
  checked; the render summary prints the table.
- **Privilege** (`least-privilege`): no role holds a `*FullAccess` managed policy or a wildcard
  action on a wildcard resource unless `PRIVILEGE_EXCEPTIONS` (and docs/offline-render.md, Privilege) say why.

Memory (allocatable minus the EFA huge pages, every GPU pod fits, EFA pods take huge pages) is
checked by the `pod-fits-node` and `efa-hugepages` rules in `policy.py`.
"""

from __future__ import annotations

import collections
import dataclasses
import ipaddress
import json
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional

from components.offline.mock_engine import UNKNOWN
from components.offline.resources import (LAUNCH_TEMPLATE, POD_TEMPLATES, Reads, Violation, inputs_of, k8s_objects,
                                          pods, policy_rule, spec_of)
from components.stack.labels import EFA, GPU

Resource = dict[str, Any]
_PLACEHOLDER = re.compile(r"^\[known after deploy: (?P<res>.+)\.(?P<out>[^.\]]+)\]$")

CLUSTER_TYPES = ("eks:index:Cluster", "aws:eks/cluster:Cluster")
# Resources that act on the cluster: they need it to exist first.
ACTS_ON_CLUSTER = ("aws:eks/addon:Addon", "aws:eks/accessEntry:AccessEntry",
                   "aws:eks/podIdentityAssociation:PodIdentityAssociation", "aws:eks/nodeGroup:NodeGroup",
                   "eks:index:ManagedNodeGroup", "pulumi:providers:kubernetes")


def ref(r: Resource) -> str:
    return f"{r['type']}::{r['name']}"


# The engine's ordering edges: the pack's view always carries `dependsOn` (pulumi-policy
# PolicyResource.dependencies), the render records it; a view without it cannot be judged.
DEPENDENCIES = Reads("the engine's dependencies of the resources (dependsOn)", lambda r: True,
                     lambda r: "dependsOn" in r, every=False)


# --- order ----------------------------------------------------------------------------------------


class Graph:
    """The engine's ordering edges: dependsOn, provider and parent (a child waits for its parent)."""

    def __init__(self, resources: list[Resource]):
        self.rows = {ref(r): r for r in resources}
        # The view names a parent by name only; two components of one name (of different types)
        # are both kept as the parent, never whichever came last.
        components: dict[str, set[str]] = collections.defaultdict(set)
        for r in resources:
            if not r.get("custom"):
                components[r["name"]].add(ref(r))
        self.edges: dict[str, set[str]] = collections.defaultdict(set)
        for r in resources:
            me = ref(r)
            self.edges[me].update(r.get("dependsOn") or [])
            if r.get("provider"):
                self.edges[me].add(r["provider"])
            if r.get("parent") and r["parent"] in components:
                self.edges[me].update(components[r["parent"]] - {me})

    def reaches(self, start: str, targets: set[str]) -> bool:
        seen, todo = {start}, [start]
        while todo:
            node = todo.pop()
            for nxt in self.edges.get(node, ()):
                if nxt in targets:
                    return True
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return False

    def order(self) -> list[list[str]]:
        """Creation waves: each resource after everything it depends on (docs/offline-render.md)."""
        known = set(self.rows)
        depth: dict[str, int] = {}

        def level(node: str, stack: frozenset = frozenset()) -> int:
            if node in depth:
                return depth[node]
            deps = [d for d in self.edges.get(node, ()) if d in known and d not in stack]
            depth[node] = 1 + max((level(d, stack | {node}) for d in deps), default=-1)
            return depth[node]

        for node in known:
            level(node)
        waves: dict[int, list[str]] = collections.defaultdict(list)
        for node, d in depth.items():
            waves[d].append(node)
        return [sorted(waves[d]) for d in sorted(waves)]


def _cluster_refs(resources: list[Resource]) -> set[str]:
    refs = {ref(r) for r in resources if r["type"] in CLUSTER_TYPES}
    # The aws.eks.Cluster pulumi-eks hands back by reference is part of the component.
    for r in resources:
        for d in r.get("dependsOn") or []:
            if d.split("::", 1)[0] in CLUSTER_TYPES:
                refs.add(d)
    return refs


def _is_gpu_node_group(r: Resource) -> bool:
    return r["type"] == "aws:eks/nodeGroup:NodeGroup" and any(
        t.get("key") == GPU for t in (r["inputs"].get("taints") or []))


def releases(resources: list[Resource], chart: str) -> set[str]:
    """Every Helm release of `chart` (a workload ordered after any of them is ordered after the
    chart: never "the first one in the list")."""
    return {ref(r) for r in resources if r["type"] == "kubernetes:helm.sh/v3:Release"
            and r["inputs"].get("chart") == chart}


@policy_rule("deploy-order", "everything acting on the cluster comes after it; GPU workloads after the GPU "
                      "nodes, the device plugins and their volume", reads=(DEPENDENCIES, POD_TEMPLATES))
def _order(resources, ctx):
    if not any("dependsOn" in r for r in resources):
        return  # a view without the engine's edges (an older record) cannot be judged
    graph = Graph(resources)
    clusters = _cluster_refs(resources)
    if clusters:
        for r in resources:
            acts = r["type"] in ACTS_ON_CLUSTER or (r["type"].startswith("kubernetes:") and r.get("custom"))
            if acts and ref(r) not in clusters and not graph.reaches(ref(r), clusters):
                yield Violation("deploy-order", f"{r['type']} {r['name']}",
                                "has no path to the EKS cluster through dependsOn, provider or parent: "
                                "`pulumi up` may create it before the cluster exists",
                                "take the cluster name from the cluster's output (EksCluster.cluster_name) "
                                "or add depends_on=[the cluster]", r["name"])
    gpu_groups = {ref(r) for r in resources if _is_gpu_node_group(r)}
    nvidia = releases(resources, "nvidia-device-plugin")
    efa = releases(resources, "aws-efa-k8s-device-plugin")
    claims = {(o.get("metadata") or {}).get("name"): ref(r) for r, o in k8s_objects(resources)
              if o.get("kind") == "PersistentVolumeClaim"}
    for p in pods(resources):
        if not p.requests_gpu():
            continue
        # The row the pod was found in (names repeat across types: never the first row of that name).
        owner = graph.rows[p.row]
        need: list[tuple[str, set[str]]] = []
        if gpu_groups:
            need.append(("the GPU node group", gpu_groups))
        if nvidia:
            need.append(("the NVIDIA device plugin", nvidia))
        requests_efa = any(EFA in ((c.get("resources") or {}).get("limits") or {}) for c in p.containers)
        if requests_efa and efa:
            need.append(("the EFA device plugin", efa))
        for v in p.spec.get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim in claims:
                need.append((f"its volume claim {claim}", {claims[claim]}))
        for what, targets in need:
            if not graph.reaches(ref(owner), targets):
                yield Violation("deploy-order", p.owner, f"is not ordered after {what}: created first, its pods "
                                "stay Pending (or fail their deadline) until it exists",
                                f"add depends_on on {what}", owner["name"])


# --- what AWS validates at create time -----------------------------------------------------------

LUSTRE_PORTS = ((988, 988), (1018, 1023))


def _eks_cluster_groups(resources: list[Resource]) -> set[str]:
    """The security group EKS creates with each cluster (as the render names it)."""
    return {f"[known after deploy: {r['name']}.eksCluster.vpcConfig.clusterSecurityGroupId]"
            for r in resources if r["type"] == "eks:index:Cluster"}


def _lustre_rules(resources: list[Resource], fsx: Resource) -> list[SgRule]:
    """The rules FSx for Lustre needs before it is created: on the file system's own groups (which
    CreateFileSystem validates), and on any group that admits the file system's groups (the
    clients' Lustre rules). Except those of the group EKS creates with the cluster: the file system
    would wait for the cluster, and `destroy --exclude-protected` keeps whatever the protected file
    system depends on (destroy_plan), the cluster with it. CreateFileSystem validates the file
    system's own group admitting itself (aws-parallelcluster PR #1198: the race was the rule "to
    allow access within the security group"), which these keep."""
    groups = set(_as_list(fsx["inputs"].get("securityGroupIds")))
    if not groups or groups & {UNKNOWN, None, ""}:
        return []  # first preview: group ids unknown, judged in the render (placeholders)
    eks = _eks_cluster_groups(resources)
    out = []
    for r in security_rules(resources):
        lustre = any(r.admits("tcp", lo, hi) for lo, hi in LUSTRE_PORTS)
        if lustre and (r.sg in groups or r.peer_sg in groups) and not {r.sg, r.peer_sg} & eks:
            out.append(r)
    return out


# type -> (what AWS checks when the resource is created, the rows it checks). A resource AWS
# validates at create time must wait for what it validates: created in parallel, it races it and
# the create fails (FSx: 400 InvalidNetworkSettings "do not permit Lustre LNET network traffic on
# port 988", FSx for Lustre guide "cannot create a file system"; aws-parallelcluster#6181).
VALIDATED_AT_CREATE: dict[str, tuple[str, Any]] = {
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("its security groups' Lustre rules (TCP 988, 1018-1023)",
                                                  _lustre_rules),
}


@policy_rule("create-time-validation", "a resource AWS validates at create time waits for what it validates", reads=(
    DEPENDENCIES, inputs_of(*VALIDATED_AT_CREATE, what="the properties of every FSx file system (securityGroupIds)")))
def _create_time_validation(resources, ctx):
    if not any("dependsOn" in r for r in resources):
        return
    graph = Graph(resources)
    # The rules by name (a name is unique per type only: never whichever row of that name came last).
    by_name = {r["name"]: ref(r) for r in resources if r["type"] in SG_RULE_TYPES}
    for r in resources:
        if r["type"] not in VALIDATED_AT_CREATE:
            continue
        what, find = VALIDATED_AT_CREATE[r["type"]]
        for dep in find(resources, r):
            target = by_name.get(dep.name)
            if target and not graph.reaches(ref(r), {target}):
                yield Violation("create-time-validation", f"{r['type'].split(':')[-1]} {r['name']}",
                                f"AWS checks {what} when it is created, and it is not ordered after rule "
                                f"{dep.name}: created in parallel, the create fails (InvalidNetworkSettings)",
                                f"add depends_on=[the rule {dep.name}] (or all of them)", r["name"])


# EKS installs self-managed CoreDNS, kube-proxy and VPC CNI when it creates a cluster
# (bootstrapSelfManagedAddons, which pulumi-eks sends as `?? true`, nodejs/eks/cluster/cluster.ts);
# CreateAddon over them with another version fails with ConfigurationConflict unless conflicts are
# resolved (eksctl PR #5880). Turning the bootstrap off replaces a running cluster (pulumi-aws
# eks.Cluster docstring: "Changing this value will force a new cluster"), so the stack resolves
# conflicts instead, the same way on every add-on, on create and on update, as pulumi-eks does
# for the add-ons it creates (its options default both to OVERWRITE, pulumi_eks/_inputs.py).
ADDON_CONFLICTS = "OVERWRITE"
PULUMI_EKS_ADDON_OPTIONS = {"vpcCniOptions": "vpc-cni", "kubeProxyAddonOptions": "kube-proxy",
                            "corednsAddonOptions": "coredns"}


def _addon_conflict_settings(resources: list[Resource]) -> Iterable[tuple[str, str, dict[str, Any]]]:
    """(what, pulumi name, the add-on's settings) for every EKS add-on the stack creates."""
    for r in resources:
        if r["type"] == "aws:eks/addon:Addon":
            yield f"add-on {r['inputs'].get('addonName')} ({r['name']})", r["name"], r["inputs"]
        elif r["type"] == "eks:index:Cluster":
            for key, addon in PULUMI_EKS_ADDON_OPTIONS.items():
                opts = r["inputs"].get(key)
                if isinstance(opts, dict) and opts.get("enabled", True) is not False:
                    yield f"add-on {addon} (pulumi-eks {key})", r["name"], opts


@policy_rule("addon-conflicts", "every EKS add-on resolves conflicts with what EKS bootstrapped, on create and update",
      reads=(inputs_of("aws:eks/addon:Addon", what="the properties of every EKS add-on (resolveConflictsOn*)"),))
def _addon_conflicts(resources, ctx):
    for what, name, settings in _addon_conflict_settings(resources):
        for key in ("resolveConflictsOnCreate", "resolveConflictsOnUpdate"):
            if settings.get(key) != ADDON_CONFLICTS:
                yield Violation("addon-conflicts", what,
                                f"{key} is {settings.get(key) or 'unset (NONE)'}: EKS installed self-managed CoreDNS, "
                                "kube-proxy and VPC CNI when it created the cluster, and an add-on call that meets "
                                "their fields fails with ConfigurationConflict; every add-on resolves the same way",
                                f"resolve_conflicts_on_create and resolve_conflicts_on_update={ADDON_CONFLICTS!r}",
                                name)


# --- IAM before use --------------------------------------------------------------------------------

# What takes a role and must come after the role's policies, and be deleted before them: EKS cannot
# terminate a node group's instances or delete their interfaces once the node role's policies are
# gone (terraform-provider-aws docs, eks_node_group), and an add-on or Pod Identity association
# without its permissions starts pods that fail their first AWS call.
USES_ROLE = ("aws:eks/nodeGroup:NodeGroup", "eks:index:ManagedNodeGroup", "aws:eks/addon:Addon",
             "aws:eks/podIdentityAssociation:PodIdentityAssociation")
_ROLE_REF = re.compile(r"^\[(?:known after deploy: (?P<res>.+)\.arn|resource (?P<obj>.+))\]$")


_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d+:role/.+$")


def _role_values(r: Resource) -> list[Any]:
    i = r["inputs"]
    return [i.get("nodeRoleArn"), i.get("nodeRole"), i.get("roleArn"),
            *[(a or {}).get("roleArn") for a in i.get("podIdentityAssociations") or [] if isinstance(a, dict)]]


def _names_a_role(r: Resource) -> Optional[bool]:
    values = [v for v in _role_values(r) if v]
    if any(v == UNKNOWN for v in values):
        return None
    return any(_ROLE_REF.match(str(v)) or _ROLE_ARN.match(str(v)) for v in values)


def roles_by_value(resources: list[Resource]) -> dict[str, str]:
    """A role's real ARN, name and id (its outputs in a preview) -> its Pulumi name. The render
    links by placeholder (`[known after deploy: <role>.arn]`); a preview hands the real values."""
    out = {}
    for r in resources:
        if r["type"] == "aws:iam/role:Role":
            for key in ("arn", "name", "id"):
                v = r["inputs"].get(key)
                if isinstance(v, str) and v and v != UNKNOWN and not v.startswith("["):
                    out[v] = r["name"]
    return out


def _roles_used(r: Resource, by_value: Optional[dict[str, str]] = None) -> set[str]:
    out = set()
    for v in _role_values(r):
        m = _ROLE_REF.match(str(v)) if v else None
        if m:
            out.add(m.group("res") or m.group("obj"))
        elif isinstance(v, str) and by_value and v in by_value:
            out.add(by_value[v])
    return out


def role_policies(resources: list[Resource]) -> dict[str, list[Resource]]:
    """role name -> its policy attachments and inline policies (the role each belongs to is recorded:
    `role` is the role's name or id placeholder)."""
    out: dict[str, list[Resource]] = collections.defaultdict(list)
    by_value = roles_by_value(resources)
    for r in resources:
        if r["type"] in ("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "aws:iam/rolePolicy:RolePolicy"):
            role = str(r["inputs"].get("role", ""))
            m = _PLACEHOLDER.match(role)
            if m and m.group("out") in ("name", "id"):
                out[m.group("res")].append(r)
            elif role in by_value:  # a preview: the role's real name
                out[by_value[role]].append(r)
    return out


# At least one of them names a role of the record (an add-on may use none); a preview names it by
# its real ARN, the render by a placeholder: both resolve (_roles_used).
ROLE_REFS = Reads("the role a node group, add-on or Pod Identity association uses (nodeRoleArn, roleArn, ...)",
                  lambda r: r["type"] in USES_ROLE, _names_a_role, every=False)


@policy_rule("iam-before-use", "node groups, add-ons and Pod Identity associations come after their role's policies",
      reads=(DEPENDENCIES, ROLE_REFS))
def _iam_before_use(resources, ctx):
    if not any("dependsOn" in r for r in resources):
        return
    graph = Graph(resources)
    policies = role_policies(resources)
    by_value = roles_by_value(resources)
    for r in resources:
        if r["type"] not in USES_ROLE:
            continue
        for role in sorted(_roles_used(r, by_value)):
            for p in policies.get(role, []):
                if not graph.reaches(ref(r), {ref(p)}):
                    yield Violation("iam-before-use", f"{r['type'].split(':')[-1]} {r['name']}",
                                    f"uses role {role} but is not ordered after its policy {p['name']}: created "
                                    "without its permissions, and on destroy the policy can go first (EKS then "
                                    "cannot delete the instances and network interfaces)",
                                    "take the role through iam.AttachedRole (its arn waits for the attachments) "
                                    "or add depends_on=[the attachments]", r["name"])


# --- reachability ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SgRule:
    direction: str  # "ingress" | "egress"
    sg: str  # the group the rule sits on (its placeholder id)
    peer_sg: Optional[str]
    cidr: Optional[str]
    protocol: str  # "-1", "tcp", "udp"
    lo: int
    hi: int
    name: str

    def admits(self, protocol: str, lo: int, hi: int) -> bool:
        if self.protocol == "-1":
            return True
        return self.protocol == protocol and self.lo <= lo and hi <= self.hi


@dataclass
class Endpoint:
    name: str
    sgs: list[str]
    # Every network interface's groups (EFA traffic uses all of them); the primary's otherwise.
    interfaces: list[list[str]] = field(default_factory=list)
    # A node group's: the labels its nodes carry and its taints (key, value, effect), what decides
    # which pods land on it (lands_on).
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Flow:
    name: str
    src: str
    dst: str
    protocol: str
    ports: tuple[int, int]
    # EFA's SRD traffic is carried only by a rule that references the group (not a CIDR rule):
    # memory registration fails otherwise (KNOWN-FAILURES F4).
    sg_reference_only: bool = False
    all_interfaces: bool = False
    # Derived flows: only these endpoints (by name) of the source / destination role, the node
    # groups the pods in question can land on (empty: every endpoint of the role).
    src_only: tuple[str, ...] = ()
    dst_only: tuple[str, ...] = ()
    # Why a derived flow is needed (the pods behind it), for the violation's message.
    why: str = ""


@dataclass(frozen=True)
class FlowResult:
    flow: Flow
    ok: bool
    via: str  # the rules that carry it, or what is missing


INTERNET = "internet"


SG_RULE_TYPES = ("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
                 "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule")


def _sg_id_of(r: Resource) -> str:
    return f"[known after deploy: {r['name']}.id]"


def security_rules(resources: list[Resource]) -> list[SgRule]:
    out = []
    for r in resources:
        i = r["inputs"]
        if r["type"] in SG_RULE_TYPES:
            direction = "ingress" if "Ingress" in r["type"] else "egress"
            proto = str(i.get("ipProtocol", "-1"))
            lo, hi = (0, 65535) if proto == "-1" else (int(i.get("fromPort", 0)), int(i.get("toPort", 65535)))
            out.append(SgRule(direction, i.get("securityGroupId"), i.get("referencedSecurityGroupId"),
                              i.get("cidrIpv4"), proto, lo, hi, r["name"]))
    return out


# The labels every node of the stack carries whatever its group: the AL2023 x86_64 AMIs
# (gpu_nodes.AMI_TYPE; the system group's default), set by the kubelet (kubernetes.io/os, /arch).
NODE_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
NODEPOOL_LABEL = "karpenter.sh/nodepool"
_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute", "PREFER_NO_SCHEDULE": "PreferNoSchedule"}


def _taints(raw: Any) -> tuple[tuple[str, str, str], ...]:
    """(key, value, effect) of a node group's taints, EKS's effect names in Kubernetes' words."""
    out = []
    for t in raw or []:
        if isinstance(t, dict):
            out.append((str(t.get("key", "")), str(t.get("value") or ""),
                        _EFFECTS.get(str(t.get("effect")), str(t.get("effect")))))
    return tuple(sorted(out))


def _group_labels(labels: Any, instance_types: Any = None, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    out = dict(NODE_LABELS)
    types = [t for t in (instance_types or []) if isinstance(t, str)]
    if len(types) == 1:
        out[INSTANCE_TYPE_LABEL] = types[0]
    out.update(extra or {})
    out.update({k: str(v) for k, v in (labels or {}).items()})
    return out


def _node_pools(resources: list[Resource]) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(name, NodePool spec, its EC2NodeClass spec) of every Karpenter NodePool of the record."""
    classes = {(o.get("metadata") or {}).get("name"): o.get("spec") or {} for _, o in k8s_objects(resources)
               if o.get("kind") == "EC2NodeClass"}
    out = []
    for _, o in k8s_objects(resources):
        if o.get("kind") != "NodePool":
            continue
        spec = o.get("spec") or {}
        ref = ((spec.get("template") or {}).get("spec") or {}).get("nodeClassRef") or {}
        if ref.get("name") in classes:
            out.append(((o.get("metadata") or {}).get("name", "?"), spec, classes[ref["name"]]))
    return sorted(out, key=lambda x: x[0])


def _pool_endpoint(name: str, pool: dict[str, Any], node_class: dict[str, Any]) -> Endpoint:
    """A NodePool's nodes: the EC2NodeClass's security groups on every interface (Karpenter puts
    the selected groups on each: karpenter-provider-aws v1.14.0 pkg/providers/launchtemplate/
    launchtemplate.go generateNetworkInterfaces), the template's labels and taints, and the labels its
    single-valued `In` requirements and the pool itself give every node (karpenter.sh/nodepool)."""
    t = pool.get("template") or {}
    tspec = t.get("spec") or {}
    sgs = [str(term.get("id")) for term in node_class.get("securityGroupSelectorTerms") or [] if term.get("id")]
    fixed = {r["key"]: str(r["values"][0]) for r in tspec.get("requirements") or []
             if r.get("operator") == "In" and len(r.get("values") or []) == 1}
    nics = node_class.get("networkInterfaces") or []
    labels = _group_labels((t.get("metadata") or {}).get("labels"), extra={**fixed, NODEPOOL_LABEL: name})
    return Endpoint(f"NodePool {name}", sgs, [list(sgs) for _ in nics] or [list(sgs)], labels,
                    _taints(tspec.get("taints")))


def endpoints(resources: list[Resource]) -> dict[str, list[Endpoint]]:
    """Control plane, system nodes, GPU nodes, Karpenter CPU nodes and FSx with the security groups
    each carries: every resource of each role (two GPU node groups are two endpoints, each checked;
    never the last one in the list), by name. A Karpenter NodePool is the nodes it launches (GPU
    nodes when it carries the GPU taint). The control plane's endpoints carry each cluster's EKS
    cluster security group."""
    eps: dict[str, list[Endpoint]] = collections.defaultdict(list)
    clusters = sorted((r for r in resources if r["type"] == "eks:index:Cluster"), key=lambda r: r["name"])
    if not clusters:
        return {}
    for cluster in clusters:
        eks_sg = f"[known after deploy: {cluster['name']}.eksCluster.vpcConfig.clusterSecurityGroupId]"
        eps["control plane"].append(Endpoint(cluster["name"], [eks_sg]))
    # A node group without its own groups gets the cluster security group (EKS user guide, launch
    # templates); with several clusters any of theirs.
    default = [g for e in eps["control plane"] for g in e.sgs]
    templates = {_sg_id_of(r): r for r in resources if r["type"] == LAUNCH_TEMPLATE}
    for r in sorted(resources, key=lambda r: r["name"]):
        i = r["inputs"]
        if r["type"] == "eks:index:ManagedNodeGroup":
            # EKS gives managed nodes the cluster security group unless their launch template sets
            # security groups of its own (EKS user guide, launch templates).
            # Its inputs in the render; in a preview only its outputs, where `nodeGroup` holds them.
            group = i.get("nodeGroup") or {}
            given = i.get("launchTemplate") or group.get("launchTemplate")
            lt = templates.get(str((given or {}).get("id")))
            own = list((lt or {}).get("inputs", {}).get("vpcSecurityGroupIds") or [])
            eps["system nodes"].append(Endpoint(
                r["name"], own or default, labels=_group_labels(i.get("labels") or group.get("labels"),
                                                                i.get("instanceTypes") or group.get("instanceTypes")),
                taints=_taints(i.get("taints") or group.get("taints"))))
        elif _is_gpu_node_group(r):
            labels, taints = _group_labels(i.get("labels"), i.get("instanceTypes")), _taints(i.get("taints"))
            lt = templates.get(str((i.get("launchTemplate") or {}).get("id")))
            if lt is None:
                eps["GPU nodes"].append(Endpoint(r["name"], default, labels=labels, taints=taints))
                continue
            nics = lt["inputs"].get("networkInterfaces") or []
            interfaces = [list(n.get("securityGroups") or []) for n in nics]
            primary = interfaces[0] if interfaces else list(lt["inputs"].get("vpcSecurityGroupIds") or [])
            eps["GPU nodes"].append(Endpoint(r["name"], primary, interfaces or [primary], labels, taints))
        elif r["type"] == "aws:fsx/lustreFileSystem:LustreFileSystem":
            eps["FSx"].append(Endpoint(r["name"], list(i.get("securityGroupIds") or [])))
    for name, pool, node_class in _node_pools(resources):
        ep = _pool_endpoint(name, pool, node_class)
        eps["GPU nodes" if any(t[0] == GPU for t in ep.taints) else "CPU nodes"].append(ep)
    return dict(eps)


# --- where pods land: the flows the render itself needs ----------------------------------------------

FSX_CSI_DRIVER = "fsx.csi.aws.com"


@dataclass(frozen=True)
class PodTemplate:
    """A pod template of any workload kind (CronJob and DaemonSet included), with its namespace."""

    owner: str
    namespace: str
    spec: dict[str, Any]
    labels: dict[str, str]


def pod_templates(resources: list[Resource]) -> list[PodTemplate]:
    """Every pod template of the record: what `pods` finds (Jobs, Deployments, StatefulSets, MPIJob
    and RayJob roles), and CronJobs' and DaemonSets' too: a CronJob that mounts a volume needs it as
    much as a Job does."""
    out = []
    found = {(p.row, p.owner): p for p in pods(resources)}
    rows = {}
    for r, o in k8s_objects(resources):
        rows[f"{r['type']}::{r['name']}"] = (o.get("metadata") or {}).get("namespace", "")
        kind, spec = o.get("kind"), o.get("spec") or {}
        tmpl = None
        if kind == "CronJob":
            tmpl = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        elif kind == "DaemonSet":
            tmpl = spec.get("template") or {}
        if tmpl is not None:
            out.append(PodTemplate(f"{kind}/{(o.get('metadata') or {}).get('name', '?')}", rows[f"{r['type']}::{r['name']}"],
                                   tmpl.get("spec") or {}, (tmpl.get("metadata") or {}).get("labels") or {}))
    for (row, owner), p in found.items():
        out.append(PodTemplate(owner, rows.get(row, ""), p.spec, p.labels))
    return sorted(out, key=lambda t: t.owner)


def tolerates(tolerations: list[dict[str, Any]], taint: tuple[str, str, str]) -> bool:
    """Kubernetes' toleration matching (k8s.io/api core/v1 Toleration.ToleratesTaint): an empty key
    with Exists tolerates every taint; otherwise the key, then Exists or the value, then the effect
    (empty: all)."""
    key, value, effect = taint
    for t in tolerations or []:
        if t.get("effect") and t["effect"] != effect:
            continue
        op = t.get("operator") or "Equal"
        if not t.get("key"):
            if op == "Exists":
                return True
            continue
        if t["key"] == key and (op == "Exists" or str(t.get("value") or "") == value):
            return True
    return False


def _expression_holds(e: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = e.get("key"), e.get("operator"), [str(v) for v in e.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return True  # Gt / Lt: on labels no node group here sets; not a reason to rule the group out


def lands_on(spec: dict[str, Any], ep: Endpoint) -> bool:
    """Whether the scheduler may put a pod of this spec on the group's nodes: every NoSchedule /
    NoExecute taint tolerated, the nodeSelector held by the group's labels, and one term of the
    required node affinity (its terms are ORed, their expressions ANDed)."""
    if any(effect in ("NoSchedule", "NoExecute") and not tolerates(spec.get("tolerations") or [], (k, v, effect))
           for k, v, effect in ep.taints):
        return False
    if any(ep.labels.get(k) != str(v) for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {})
              .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    return not terms or any(all(_expression_holds(e, ep.labels) for e in term.get("matchExpressions") or [])
                            for term in terms)


def fsx_claims(resources: list[Resource]) -> set[tuple[str, str]]:
    """(namespace, claim) of every claim bound to an FSx for Lustre volume: by the claim's
    volumeName, or by the volume's claimRef."""
    objs = [o for _, o in k8s_objects(resources)]
    volumes = {(o.get("metadata") or {}).get("name"): o for o in objs if o.get("kind") == "PersistentVolume"
               and ((o.get("spec") or {}).get("csi") or {}).get("driver") == FSX_CSI_DRIVER}
    out = set()
    for v in volumes.values():
        ref = (v.get("spec") or {}).get("claimRef") or {}
        if ref.get("name"):
            out.add((ref.get("namespace", ""), ref["name"]))
    for o in objs:
        if o.get("kind") == "PersistentVolumeClaim" and (o.get("spec") or {}).get("volumeName") in volumes:
            out.add(((o.get("metadata") or {}).get("namespace", ""), (o.get("metadata") or {}).get("name")))
    return out


def _node_endpoints(eps: dict[str, list[Endpoint]]) -> list[tuple[str, Endpoint]]:
    return [(role, ep) for role in ("system nodes", "GPU nodes", "CPU nodes") for ep in eps.get(role) or []]


def fsx_clients(resources: list[Resource], eps: Optional[dict[str, list[Endpoint]]] = None
                ) -> dict[tuple[str, str], list[str]]:
    """(role, node group) -> the pod templates mounting an FSx claim that can land there: every
    group any of them can land on must reach the file system both ways (FSx for Lustre guide,
    limit-access-security-groups; KNOWN-FAILURES F19)."""
    eps = endpoints(resources) if eps is None else eps
    claims = fsx_claims(resources)
    out: dict[tuple[str, str], list[str]] = collections.defaultdict(list)
    if not claims or not eps.get("FSx"):
        return {}
    for t in pod_templates(resources):
        mounts = {(v.get("persistentVolumeClaim") or {}).get("claimName") for v in t.spec.get("volumes") or []}
        if not any((t.namespace, c) in claims for c in mounts if c):
            continue
        for role, ep in _node_endpoints(eps):
            if lands_on(t.spec, ep):
                out[(role, ep.name)].append(t.owner)
    return dict(out)


def _selects_labels(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def _service_hosts(name: str, namespace: str) -> re.Pattern:
    """The names a pod reaches a Service by: its DNS name, short or qualified, and a pod's name under
    a headless one (`<pod>.<service>.<namespace>.svc...`; Kubernetes DNS specification)."""
    return re.compile(rf"(?<![A-Za-z0-9-]){re.escape(name)}(\.{re.escape(namespace)}(\.svc(\.cluster\.local)?)?)?"
                      r"(?=[:/\"\s]|$)")


def service_clients(resources: list[Resource]) -> list[tuple[str, str, int, list[PodTemplate], list[PodTemplate]]]:
    """(service, namespace, port, clients, backends) of every Service with a selector: its backends
    are the pod templates it selects, its clients the templates that name it (env, command, args)."""
    templates = pod_templates(resources)
    out = []
    for _, o in k8s_objects(resources):
        if o.get("kind") != "Service":
            continue
        meta, spec = o.get("metadata") or {}, o.get("spec") or {}
        name, ns = meta.get("name", "?"), meta.get("namespace", "")
        backends = [t for t in templates if t.namespace == ns and _selects_labels(spec.get("selector") or {}, t.labels)]
        host = _service_hosts(name, ns)
        clients = [t for t in templates if host.search(json.dumps(
            [[c.get("env"), c.get("command"), c.get("args")] for c in (t.spec.get("containers") or [])
             + (t.spec.get("initContainers") or [])]))]
        for port in spec.get("ports") or []:
            target = port.get("targetPort", port.get("port"))
            if isinstance(target, str):  # a named port: the backends' container port of that name
                target = next((cp.get("containerPort") for t in backends for c in t.spec.get("containers") or []
                               for cp in c.get("ports") or [] if cp.get("name") == target), port.get("port"))
            if isinstance(target, int) and backends and clients:
                out.append((name, ns, target, clients, backends))
    return out


def derived_flows(resources: list[Resource], eps: dict[str, list[Endpoint]]) -> list[Flow]:
    """The flows the render's own pods need (DESIGN: "derive from the render"): Lustre both ways
    between FSx and every node group an FSx client can land on, and each Service's port from every
    group its clients can land on to every group its backends can."""
    flows = []
    by_role: dict[str, list[str]] = collections.defaultdict(list)
    owners: dict[str, set[str]] = collections.defaultdict(set)
    for (role, name), pods_there in sorted(fsx_clients(resources, eps).items()):
        by_role[role].append(name)
        owners[role] |= set(pods_there)
    for role, names in by_role.items():
        why = f"{', '.join(sorted(owners[role]))} mount FSx and can land on {role} ({', '.join(names)})"
        for lo, hi in LUSTRE_PORTS:
            flows += [Flow(f"{role} -> FSx Lustre {lo}-{hi}", role, "FSx", "tcp", (lo, hi), src_only=tuple(names),
                           why=why),
                      Flow(f"FSx -> {role} Lustre {lo}-{hi}", "FSx", role, "tcp", (lo, hi), dst_only=tuple(names),
                           why=why)]
    groups = _node_endpoints(eps)
    for svc, _ns, port, clients, backends in service_clients(resources):
        src = [(role, ep) for role, ep in groups if any(lands_on(t.spec, ep) for t in clients)]
        dst = [(role, ep) for role, ep in groups if any(lands_on(t.spec, ep) for t in backends)]
        for s_role, s_ep in src:
            for d_role, d_ep in dst:
                flows.append(Flow(f"Service {svc}: {s_role} -> {d_role} (tcp {port})", s_role, d_role, "tcp",
                                  (port, port), src_only=(s_ep.name,), dst_only=(d_ep.name,),
                                  why=f"{', '.join(sorted({t.owner for t in clients}))} call Service {svc}, served by "
                                      f"{', '.join(sorted({t.owner for t in backends}))}"))
    return flows


def fsx_client_table(resources: list[Resource]) -> list[str]:
    """The FSx clients by node group, as the render prints them under the flow table."""
    clients = fsx_clients(resources)
    if not clients:
        return []
    lines = ["FSx clients (pods mounting an FSx claim) by the node groups they can land on:"]
    for (role, name), owners in sorted(clients.items()):
        lines.append(f"  {role} ({name}): {', '.join(sorted(set(owners)))}")
    return lines


def required_flows(eps: dict[str, list[Endpoint]], resources: Optional[list[Resource]] = None) -> list[Flow]:
    flows = []
    if eps.get("GPU nodes"):
        flows += [
            Flow("GPU nodes -> API server", "GPU nodes", "control plane", "tcp", (443, 443)),
            Flow("control plane -> GPU kubelet", "control plane", "GPU nodes", "tcp", (10250, 10250)),
            Flow("GPU node <-> GPU node, all traffic (EFA, NCCL)", "GPU nodes", "GPU nodes", "-1", (0, 65535),
                 sg_reference_only=True, all_interfaces=True),
            Flow("GPU nodes -> registries, S3, AWS APIs", "GPU nodes", INTERNET, "tcp", (443, 443)),
        ]
        if eps.get("system nodes"):
            flows += [
                Flow("GPU pods -> CoreDNS on system nodes (udp)", "GPU nodes", "system nodes", "udp", (53, 53)),
                Flow("GPU pods -> CoreDNS on system nodes (tcp)", "GPU nodes", "system nodes", "tcp", (53, 53)),
                # Without Kueue the MPI launcher (no GPU) lands on a system node (with Kueue the
                # flavor's node labels put it on a GPU node): ssh and OpenMPI's out-of-band TCP to
                # the workers, and back; operators and webhooks likewise.
                Flow("system nodes -> GPU nodes, all TCP (MPI launcher, operators)", "system nodes", "GPU nodes",
                     "tcp", (0, 65535)),
                Flow("GPU nodes -> system nodes, all TCP (MPI ranks, webhooks)", "GPU nodes", "system nodes",
                     "tcp", (0, 65535)),
            ]
    if eps.get("CPU nodes"):
        flows += [
            Flow("CPU nodes -> API server", "CPU nodes", "control plane", "tcp", (443, 443)),
            Flow("control plane -> CPU kubelet", "control plane", "CPU nodes", "tcp", (10250, 10250)),
            Flow("CPU nodes -> registries, S3, AWS APIs", "CPU nodes", INTERNET, "tcp", (443, 443)),
        ]
        if eps.get("system nodes"):
            flows += [Flow("CPU pods -> CoreDNS on system nodes (udp)", "CPU nodes", "system nodes", "udp", (53, 53)),
                      Flow("CPU pods -> CoreDNS on system nodes (tcp)", "CPU nodes", "system nodes", "tcp", (53, 53))]
    if eps.get("system nodes"):
        flows += [Flow("system nodes -> API server", "system nodes", "control plane", "tcp", (443, 443)),
                  Flow("system nodes -> registries, S3, AWS APIs", "system nodes", INTERNET, "tcp", (443, 443))]
    if resources is not None:
        flows += derived_flows(resources, eps)
    return flows


def _vpc_cidrs(resources: list[Resource]) -> list[ipaddress.IPv4Network]:
    """Every VPC's CIDR (a CIDR rule admits "the VPC" only when it covers each of them)."""
    out = []
    for vpc in resources:
        if vpc["type"] != "aws:ec2/vpc:Vpc":
            continue
        try:
            out.append(ipaddress.ip_network(vpc["inputs"]["cidrBlock"]))
        except (KeyError, ValueError, TypeError):
            continue
    return sorted(out)


def _cidr_covers(cidr: Optional[str], vpcs: list[ipaddress.IPv4Network], internet: bool) -> bool:
    if not cidr:
        return False
    try:
        net = ipaddress.ip_network(cidr, strict=False)
    except ValueError:
        return False
    if net.prefixlen == 0:
        return True
    return not internet and bool(vpcs) and all(vpc.subnet_of(net) for vpc in vpcs)


def _rules_for(rules: list[SgRule], eks_sgs: list[str]) -> list[SgRule]:
    implicit = []
    for eks_sg in eks_sgs:
        implicit += [SgRule("ingress", eks_sg, eks_sg, None, "-1", 0, 65535, "EKS cluster SG (documented): self"),
                     SgRule("egress", eks_sg, None, "0.0.0.0/0", "-1", 0, 65535, "EKS cluster SG (documented): all out")]
    return rules + implicit


def _pairs(flow: Flow, eps: dict[str, list[Endpoint]]) -> list[tuple[Endpoint, Optional[Endpoint]]]:
    """(source, destination) endpoints a flow is checked between: each source with each
    destination; a node group's traffic to itself (all_interfaces) within each group."""
    srcs = [s for s in eps.get(flow.src) or [] if not flow.src_only or s.name in flow.src_only]
    if flow.dst == INTERNET:
        return [(s, None) for s in srcs]
    if flow.all_interfaces and flow.src == flow.dst:
        return [(s, s) for s in srcs]
    dsts = [d for d in eps.get(flow.dst) or [] if not flow.dst_only or d.name in flow.dst_only]
    return [(s, d) for s in srcs for d in dsts]


def evaluate_flows(resources: list[Resource]) -> list[FlowResult]:
    eps = endpoints(resources)
    if not eps:
        return []
    eks_sgs = [g for e in eps["control plane"] for g in e.sgs]
    rules = _rules_for(security_rules(resources), eks_sgs)
    vpcs = _vpc_cidrs(resources)
    results = []
    unknown = {UNKNOWN, None, ""}
    for flow in required_flows(eps, resources):
        pairs = _pairs(flow, eps)
        for src, dst in pairs:
            # One pair: the flow as it always read; several (two GPU node groups): each named.
            name = flow.name if len(pairs) == 1 else \
                f"{flow.name} ({src.name}" + (f" -> {dst.name})" if dst is not None and dst is not src else ")")
            shown = dataclasses.replace(flow, name=name)
            results.append(_evaluate_pair(shown, src, dst, rules, vpcs, unknown))
    return results


def _evaluate_pair(flow: Flow, src: Endpoint, dst: Optional[Endpoint], rules: list[SgRule],
                   vpcs: list[ipaddress.IPv4Network], unknown: set) -> FlowResult:
    involved = [*src.sgs, *[g for i in src.interfaces for g in i], *(dst.sgs if dst is not None else [])]
    if any(g in unknown for g in involved) or any(r.sg in unknown for r in rules):
        # First preview: ids not known yet; judged on the next preview or in the render.
        return FlowResult(flow, True, "not judged: security group ids unknown before deploy")
    src_sets = src.interfaces if flow.all_interfaces else [src.sgs]
    via, missing = [], []
    for sgs in src_sets:
        internet = dst is None
        dst_sgs = [] if internet else (sgs if flow.all_interfaces and flow.src == flow.dst else dst.sgs)
        lo, hi = flow.ports
        out = [r for r in rules if r.direction == "egress" and r.sg in sgs and r.admits(flow.protocol, lo, hi)
               and ((r.peer_sg in dst_sgs) or (not flow.sg_reference_only
                                               and _cidr_covers(r.cidr, vpcs, internet)))]
        inn = [] if internet else [
            r for r in rules if r.direction == "ingress" and r.sg in dst_sgs and r.admits(flow.protocol, lo, hi)
            and ((r.peer_sg in sgs) or (not flow.sg_reference_only and _cidr_covers(r.cidr, vpcs, False)))]
        if not out:
            missing.append(f"no egress rule on {_short(sgs)} to {flow.dst} {_ports(flow)}")
        if not internet and not inn:
            missing.append(f"no ingress rule on {_short(dst_sgs)} from {flow.src} {_ports(flow)}")
        # The rule that carries it: the first by name, not by its place in the record.
        via += [r.name for r in sorted(out, key=lambda r: r.name)[:1] + sorted(inn, key=lambda r: r.name)[:1]]
    ok = not missing
    return FlowResult(flow, ok, ", ".join(sorted(set(via))) if ok else "; ".join(sorted(set(missing))))


def _short(sgs: Iterable[str]) -> str:
    names = []
    for s in sgs:
        m = _PLACEHOLDER.match(str(s))
        if m and m.group("out") == "id":
            names.append(m.group("res"))
        elif m and m.group("out") == "clusterSecurityGroupId":
            names.append("EKS cluster SG" if ".eksCluster" in m.group("res") else "pulumi-eks control-plane SG")
        else:
            names.append(str(s))
    return "[" + ", ".join(names) + "]"


def _ports(flow: Flow) -> str:
    if flow.protocol == "-1":
        return "(all traffic, by security-group reference)" if flow.sg_reference_only else "(all traffic)"
    lo, hi = flow.ports
    return f"({flow.protocol} {lo})" if lo == hi else f"({flow.protocol} {lo}-{hi})"


def _has_security_groups(resources: list[Resource]) -> bool:
    return any(r["type"] in SG_RULE_TYPES for r in resources)


@policy_rule("network-flows", "every flow a working cluster needs is allowed by the security groups", reads=(
    inputs_of(*SG_RULE_TYPES, what="the properties of every security group rule (securityGroupId, ipProtocol, ports)"),
    # The derived flows: where the pods that mount FSx or call a Service can land; read where the
    # stack has security groups at all (a bring-your-own cluster's are its owners').
    *(dataclasses.replace(r, applies=_has_security_groups) for r in (
        POD_TEMPLATES, spec_of("PersistentVolume", "PersistentVolumeClaim", "Service", "NodePool", "EC2NodeClass")))))
def _flows(resources, ctx):
    for res in evaluate_flows(resources):
        if not res.ok:
            yield Violation("network-flows", f"flow {res.flow.name}", f"not allowed: {res.via}"
                            + (f" ({res.flow.why})" if res.flow.why else ""),
                            "add the security-group rule named (EKS adds no cluster security group to a "
                            "launch template that sets its own groups)")


def flow_table(resources: list[Resource]) -> list[str]:
    results = evaluate_flows(resources)
    if not results:
        return []
    width = max(len(r.flow.name) for r in results)
    lines = ["network flows (security groups as recorded + what EKS documents for its cluster SG; FSx and "
             "Service flows derived from where their pods can land):"]
    lines += [f"  {'ok ' if r.ok else 'MISSING'} {r.flow.name:<{width}}  {_ports(r.flow)}  {r.via}"
              for r in results]
    return lines + fsx_client_table(resources)


# --- privilege ------------------------------------------------------------------------------------

# Managed policies or statements allowed despite the rule, each with its reason in docs/offline-render.md (Privilege).
PRIVILEGE_EXCEPTIONS: dict[str, str] = {}


def _statements(policy: Any) -> list[dict[str, Any]]:
    if isinstance(policy, list):  # a multi-line JSON string recorded as lines
        policy = "\n".join(policy)
    if isinstance(policy, str):
        try:
            policy = json.loads(policy)
        except ValueError:
            return []
    stmts = (policy or {}).get("Statement") or []
    return [stmts] if isinstance(stmts, dict) else list(stmts)


def _as_list(v: Any) -> list[str]:
    return [v] if isinstance(v, str) else list(v or [])


@policy_rule("least-privilege", "no *FullAccess managed policy and no wildcard action on a wildcard resource", reads=(
    inputs_of("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "aws:iam/rolePolicy:RolePolicy",
              "aws:iam/policy:Policy", what="the properties of every policy and attachment (policyArn, policy)"),))
def _privilege(resources, ctx):
    for r in resources:
        i = r["inputs"]
        if r["type"] == "aws:iam/rolePolicyAttachment:RolePolicyAttachment":
            arn = str(i.get("policyArn", ""))
            if arn.endswith("FullAccess") and arn not in PRIVILEGE_EXCEPTIONS:
                yield Violation("least-privilege", f"role policy attachment {r['name']}",
                                f"attaches {arn.rsplit('/', 1)[-1]}, which allows every action of the service on "
                                "every resource (e.g. deleting any file system)",
                                "attach only the actions the role uses (or none: a static FSx volume needs no "
                                "AWS API), or list it in PRIVILEGE_EXCEPTIONS with its reason", r["name"])
        if r["type"] in ("aws:iam/rolePolicy:RolePolicy", "aws:iam/policy:Policy"):
            for st in _statements(i.get("policy")):
                actions, res = _as_list(st.get("Action")), _as_list(st.get("Resource"))
                if st.get("Effect") == "Allow" and "*" in res and any(a == "*" or a.endswith(":*") for a in actions) \
                        and r["name"] not in PRIVILEGE_EXCEPTIONS:
                    yield Violation("least-privilege", f"policy {r['name']}",
                                    f"allows {actions} on every resource", "name the actions and resources", r["name"])


# --- run replacement --------------------------------------------------------------------------------

# Built-in kinds for which pulumi-kubernetes' skipAwait also skips the wait for deletion
# (provider/pkg/metadata/overrides.go, allowsSkipAwaitWithDelete; issues #1232, #3154).
SKIP_AWAIT_SKIPS_DELETE = {"Job", "StatefulSet", "Deployment", "DaemonSet", "Pod", "Namespace",
                           "ReplicationController"}
RUN_KINDS = ("Job", "StatefulSet", "MPIJob", "RayJob")


def replacement_sequence(r: Resource) -> list[str]:
    """The provider's steps when a run object is replaced, as `pulumi up` performs them."""
    obj = r["inputs"]
    kind = obj.get("kind")
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    fixed = bool(meta.get("name")) and not meta.get("generateName")
    dbr = bool((r.get("options") or {}).get("deleteBeforeReplace"))
    skip_delete_wait = annotations.get("pulumi.com/skipAwait") == "true" and kind in SKIP_AWAIT_SKIPS_DELETE
    if not fixed:
        return ["create the new object (generated name)", "delete the old one at the end of the update"]
    if not dbr:
        return ["create the new object with the same name -> AlreadyExists: the update fails, the old run stays"]
    steps = ["delete the old object (its pods get SIGTERM and their grace period)"]
    if skip_delete_wait:
        steps += ["do not wait for the deletion (skipAwait on a built-in kind)",
                  "create the new object while the old one is still terminating -> AlreadyExists, not retried "
                  "(pulumi-kubernetes >= 4.29 creates client-side): the old run is killed and no new one exists"]
    else:
        steps += ["wait until the old object is gone", "create the new object"]
    return steps


@policy_rule("run-replacement", "replacing a run never leaves it killed without a successor",
      reads=(spec_of(*RUN_KINDS, what="metadata"),))
def _run_replacement(resources, ctx):
    for r in resources:
        if not r["type"].startswith("kubernetes:") or r["inputs"].get("kind") not in RUN_KINDS:
            continue
        steps = replacement_sequence(r)
        if "AlreadyExists" in steps[-1]:
            yield Violation("run-replacement", f"{r['inputs']['kind']}/{(r['inputs'].get('metadata') or {}).get('name')}",
                            "on replacement: " + "; ".join(steps),
                            "keep the fixed name with delete_before_replace and replace pulumi.com/skipAwait by "
                            "pulumi.com/waitFor (the deletion is then awaited)", r["name"])


# --- network isolation -------------------------------------------------------------------------


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items()) and \
        not selector.get("matchExpressions")


def enforcement(resources: list[Resource]) -> Optional[bool]:
    """Whether something enforces NetworkPolicy: the VPC CNI's policy agent on a created cluster
    (FACTS "NetworkPolicy on EKS"); None on a bring-your-own cluster (the cluster's business)."""
    clusters = sorted((r for r in resources if r["type"] == "eks:index:Cluster"), key=lambda r: r["name"])
    if not clusters:
        return None
    # A real preview hands the rules outputs: the component's `vpcCniOptions` input is not among
    # them; its child aws.eks.Addon `vpc-cni` carries the setting as input and output alike, in
    # `configurationValues` (a JSON string; pulumi-eks nodejs/eks/addons/cni-addon.ts v4.3.0,
    # mergeConfigurationValues: enableNetworkPolicy as "true"/"false"). Every such add-on is read:
    # enforced only when each of them enforces (never the first one in the list).
    found = []
    for r in sorted(resources, key=lambda r: r["name"]):
        if r["type"] == "aws:eks/addon:Addon" and r["inputs"].get("addonName") == "vpc-cni":
            try:
                values = json.loads(r["inputs"].get("configurationValues") or "{}")
            except (TypeError, ValueError) as e:
                raise ValueError(f"vpc-cni add-on {r['name']}: configurationValues unreadable: "
                                 f"{r['inputs'].get('configurationValues')!r}") from e
            found.append(str(values.get("enableNetworkPolicy")).lower() == "true")
    if found:
        return all(found)
    given = [c for c in clusters if "vpcCniOptions" in c["inputs"]]
    if given:  # the offline render: the components' recorded inputs
        return all(str((c["inputs"].get("vpcCniOptions") or {}).get("enableNetworkPolicy")).lower() == "true"
                   for c in given)
    # Nothing to read is an error, not "not enforced" (nor a pass).
    raise LookupError(f"cluster {clusters[0]['name']}: neither a vpc-cni aws:eks/addon:Addon nor the component's "
                      "vpcCniOptions to read NetworkPolicy enforcement from")


@policy_rule("network-policy", "every GPU pod is selected by a NetworkPolicy, and policies exist only where enforced",
      reads=(POD_TEMPLATES, spec_of("NetworkPolicy")))
def _network_policy(resources, ctx):
    policies = [(o.get("metadata") or {}, o.get("spec") or {}) for _, o in k8s_objects(resources)
                if o.get("kind") == "NetworkPolicy"]
    if policies and enforcement(resources) is False:
        yield Violation("network-policy", "VPC CNI", f"{len(policies)} NetworkPolicies but no enforcement: the "
                        "VPC CNI's network policy agent is off, every pod can reach every other",
                        "vpc_cni_options enable_network_policy=True (pulumi-eks)")
    for p in pods(resources):
        if not p.requests_gpu():
            continue
        if not any(_selects(spec.get("podSelector") or {}, p.labels) for _, spec in policies):
            yield Violation("network-policy", p.owner, "no NetworkPolicy selects its pods: reachable from any pod",
                            "a default deny in the namespace and a policy for the run", p.pulumi_name)


def isolation_summary(resources: list[Resource]) -> list[str]:
    on = enforcement(resources)
    policies = sorted(f"{(o.get('metadata') or {}).get('name')}" for _, o in k8s_objects(resources)
                      if o.get("kind") == "NetworkPolicy")
    state = {True: "enforced (VPC CNI network policy agent on)", False: "NOT enforced",
             None: "enforcement is the cluster's (bring-your-own): check its CNI"}[on]
    return [f"network policies: {state}; {', '.join(policies) or 'none'}"]


# --- cluster-wide objects ----------------------------------------------------------------------------

CLUSTER_SCOPED = {"Namespace", "PriorityClass", "PersistentVolume", "ClusterRole", "ClusterRoleBinding",
                  "CustomResourceDefinition", "StorageClass", "ValidatingWebhookConfiguration",
                  "MutatingWebhookConfiguration", "ResourceFlavor", "ClusterQueue", "Topology"}


def owned_cluster_wide(resources: list[Resource]) -> list[str]:
    """What the stack owns beyond its namespace: cluster-scoped objects, Helm releases (installed
    cluster-wide), operator manifests. Two stacks on one cluster must share none of these."""
    out = []
    for r in resources:
        i = r["inputs"]
        if r["type"].startswith("kubernetes:") and i.get("kind") in CLUSTER_SCOPED:
            out.append(f"{i['kind']} {(i.get('metadata') or {}).get('name')}")
        elif r["type"] == "kubernetes:helm.sh/v3:Release":
            out.append(f"Helm release {i.get('namespace')}/{i.get('name')} ({i.get('chart')} {i.get('version')})")
        elif r["type"].startswith("kubernetes:yaml/"):
            out.append(f"manifest {i.get('file') or i.get('files')}")
    return sorted(out)


def cluster_wide(resources: list[Resource]) -> list[str]:
    owned = owned_cluster_wide(resources)
    return ["cluster-wide objects this stack owns: " + (", ".join(owned) if owned else "none")]


# --- destroy ----------------------------------------------------------------------------------------


def destroy_plan(resources: list[Resource]) -> tuple[list[list[str]], list[str]]:
    """(waves, kept) of `pulumi destroy --exclude-protected`: the engine deletes in reverse creation
    order (a resource before what it depends on); protected resources are skipped, and so is
    everything they depend on (pulumi/pulumi step.go DeleteStep, #8158; FACTS "AWS: first up and
    day two"), which keeps e.g. the FSx subnet and security group: a retained file system holds its
    network interfaces there, and deleting them would fail with DependencyViolation."""
    graph = Graph(resources)
    protected = {ref(r) for r in resources if (r.get("options") or {}).get("protect")}
    kept = set(protected)
    todo = list(protected)
    while todo:
        node = todo.pop()
        for nxt in graph.edges.get(node, ()):
            if nxt in graph.rows and nxt not in kept:
                kept.add(nxt)
                todo.append(nxt)
    # Our components delete nothing themselves; pulumi-eks's remote components own AWS resources.
    real = {ref(r) for r in resources if r.get("custom", True) or r["type"].startswith("eks:")}
    waves = [[n for n in wave if n not in kept and n in real] for wave in reversed(graph.order())]
    return [w for w in waves if w], sorted(kept & real)


def _ebs_claims_left(resources: list[Resource]) -> list[str]:
    """Helm releases whose values name a storage class of the EBS CSI driver: the claims their
    StatefulSets create (volumeClaimTemplates) are not Pulumi resources and survive the release's
    uninstall; once the driver is gone their EBS volumes are never deleted. Not listed: a release
    whose claims go with their StatefulSet (persistentVolumeClaimRetentionPolicy whenDeleted
    Delete) in a namespace that is deleted before the driver (it depends on the driver's add-on):
    `pulumi destroy` waits for the namespace, claims included, before the add-on goes."""
    classes = [(o.get("metadata") or {}).get("name") for _, o in k8s_objects(resources)
               if o.get("kind") == "StorageClass" and o.get("provisioner") == "ebs.csi.aws.com"]
    ebs_addons = {ref(r) for r in resources if r["type"] == "aws:eks/addon:Addon"
                  and r["inputs"].get("addonName") == "aws-ebs-csi-driver"}
    before_driver = {(r["inputs"].get("metadata") or {}).get("name") for r in resources
                     if r["type"] == "kubernetes:core/v1:Namespace" and ebs_addons & set(r.get("dependsOn") or ())}
    out = []
    for r in resources:
        if r["type"] == "kubernetes:helm.sh/v3:Release":
            text = json.dumps(r["inputs"].get("values") or {})
            if any(c and f'"{c}"' in text for c in classes):
                deleted = '"whenDeleted": "Delete"' in text and r["inputs"].get("namespace") in before_driver
                if not deleted:
                    out.append(f"{r['inputs'].get('namespace')}/{r['inputs'].get('name')}")
    return sorted(out)


def destroy_summary(resources: list[Resource]) -> list[str]:
    waves, kept = destroy_plan(resources)
    if not waves:
        return []
    lines = [f"destroy order (`pulumi destroy --exclude-protected`, reverse of creation, {len(waves)} waves):"]
    for n, wave in enumerate(waves, 1):
        counts = collections.Counter(w.split("::", 1)[0].split(":")[-1] for w in wave)
        lines.append(f"  {n}. " + ", ".join(f"{t} x{c}" if c > 1 else t for t, c in sorted(counts.items())))
    if kept:
        lines.append("  kept (protected, and what they depend on): " + ", ".join(k.split("::", 1)[1] for k in kept))
    claims = _ebs_claims_left(resources)
    if claims:
        lines.append("  before destroy: delete the claims of " + ", ".join(claims) + " (StatefulSet volumeClaimTemplates "
                     "outlive the release; after the EBS CSI driver is gone their volumes are orphaned): "
                     "docs/aws-operations.md \"Destroy\"")
    return lines
