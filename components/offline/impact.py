"""Update impact: what a change does to what is running, by the providers' own rules.

The render compares the new record with the base one (the committed `rendered/<stack>/resources.json`,
or the base branch's in a pull request) and classifies every changed resource:

- *replace* (the engine deletes and recreates it; *with data loss* for FSx and the cluster),
- *node roll* (every node of a group is replaced: a new launch template version, fewer nodes; a
  Karpenter NodePool template or EC2NodeClass change, which drifts the nodes launched from it),
- *run restart* (the running run gets SIGTERM and its grace period, then starts over),
- *check re-runs* (a validation or NCCL check Job is replaced and runs again: it loses no work,
  so it needs no opt-in),
- *serving restart* (the serving Deployment's pods are replaced by a rolling update; no training
  run is touched: a new served checkpoint is this and only this),
- *in place* (updated without touching what runs),
- *refused* (the change cannot be applied at all: AWS or the Kubernetes API server refuses it),
- *never finishes* (the deploy would hang: e.g. a Kueue flavor deleted under its fixed name while a
  ClusterQueue names it waits on Kueue's finalizer for ever),
- *create* / *delete*.

A replaced resource changes every output that others read: the placeholders
`[known after deploy: X.out]` in a downstream resource stand for values that change, so the
classification is propagated along them (a VPC replaced replaces its subnets, which moves FSx and
the node group). Data loss, GPU node rolls and run restarts are refused unless the stack opts in.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Optional

from components.aws import image_build_run
from components.offline.mock_engine import UNKNOWN
from components.offline.resources import quantity
from components.stack.config import StackConfig
# The check runs' components (replacing one re-runs a check, no work is lost); a Job's immutable fields
# outside the provider's forceNew list (a change is refused unless the program replaces the Job on it);
# the GPU node group's roll guard.
from components.stack.labels import CHECK_COMPONENTS, JOB_IMMUTABLE, ROLL_INPUTS, SERVING_COMPONENT

Resource = dict[str, Any]

CREATE, DELETE, IN_PLACE = "create", "delete", "in place"
REPLACE, DATA_LOSS, NODE_ROLL, RUN_RESTART, REFUSED = (
    "replace", "replace (data loss)", "node roll", "run restart", "refused")
SERVING_RESTART = "serving restart"
CHECK_RERUN = "check re-runs"
NEVER_FINISHES = "never finishes"
# Worst first, for the table and for the one verdict per resource.
SEVERITY = [REFUSED, NEVER_FINISHES, DATA_LOSS, NODE_ROLL, RUN_RESTART, SERVING_RESTART, CHECK_RERUN, REPLACE, DELETE,
            CREATE, IN_PLACE]
CHANGED = "[changes on deploy]"  # a value that changes because what it is read from is replaced
_PLACEHOLDER = re.compile(r"\[known after deploy: ([^\]]+?)\.([A-Za-z0-9_.]+)\]")


@dataclass(frozen=True)
class Impact:
    type: str
    name: str
    kind: str
    why: str
    # The config key that accepts it, or "" when it needs none (or none can accept it).
    opt_in: str = ""
    allowed: bool = True

    @property
    def refused(self) -> bool:
        return not self.allowed

    def message(self) -> str:
        base = f"{self.kind}: {self.type.split(':')[-1]} {self.name}: {self.why}"
        if self.allowed:
            return base + (f" (accepted by {self.opt_in})" if self.opt_in else "")
        return base + (f". To accept that, set {self.opt_in}: true" if self.opt_in else ". It cannot be applied as is")

    def line(self) -> str:
        verdict = "" if self.allowed else (f" REFUSED: set {self.opt_in}: true to accept" if self.opt_in
                                          else " REFUSED: cannot be applied")
        return f"{self.kind:<19} {self.type.split(':')[-1]} {self.name}: {self.why}{verdict}"


# --- diffing --------------------------------------------------------------------------------------


def changed_paths(a: Any, b: Any, path: str = "") -> list[str]:
    """Dotted paths (list items as [i]) where two recorded input trees differ."""
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for k in sorted(set(a) | set(b)):
            out += changed_paths(a.get(k), b.get(k), f"{path}.{k}" if path else k)
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += changed_paths(x, y, f"{path}[{i}]")
        return out
    if b == CHANGED or (isinstance(b, str) and CHANGED in b):
        return [path]
    if a != b and _same_quantity(path, a, b):
        return []
    return [] if a == b else [path]


_QUANTITY_PATH = re.compile(r"(^|\.)resources\.(limits|requests)\.[^.\[]+$")


def _same_quantity(path: str, a: Any, b: Any) -> bool:
    """A container's request or limit written another way for the same amount (5120Mi, 5Gi): the
    API server stores one canonical form and the provider diffs against it, so nothing changes
    (seen on the simulated cluster, docs/simulated-cluster.md)."""
    if not (isinstance(a, (str, int, float)) and isinstance(b, (str, int, float)) and _QUANTITY_PATH.search(path)):
        return False
    try:
        return quantity(a) == quantity(b)
    except (TypeError, ValueError):
        return False


def _under(path: str, prefixes: Iterable[str]) -> bool:
    return any(path == p or path.startswith(p + ".") or path.startswith(p + "[") for p in prefixes)


def _mark_changed(value: Any, upstream: set[str]) -> Any:
    """Replace every placeholder read from a replaced resource by CHANGED."""
    if isinstance(value, dict):
        return {k: _mark_changed(v, upstream) for k, v in value.items()}
    if isinstance(value, list):
        return [_mark_changed(v, upstream) for v in value]
    if isinstance(value, str):
        def repl(m: re.Match) -> str:
            res, out = m.group(1), m.group(2)
            return CHANGED if res in upstream or f"{res}.{out}" in upstream else m.group(0)
        return _PLACEHOLDER.sub(repl, value)
    return value


def kept_by_engine(changes: list[str], now: Resource) -> list[str]:
    """`changes` less what the engine keeps at its deployed value: an input the program leaves unset
    and ignores (ignore_changes) takes its old value before the provider sees it (pulumi/pulumi
    pkg/resource/deploy/step_generator.go processIgnoreChanges). How a resource newly autonamed keeps
    the fixed name it was created with (aws/gpu_nodes.py AUTONAMED_KEEP): no change, no replacement.
    An ignored input the program still sets is left to the type's rule (the node group's held roll)."""
    ignored = tuple((now.get("options") or {}).get("ignoreChanges") or ())
    return [p for p in changes if not (_under(p, ignored) and _get(now["inputs"], p) is None)]


def _get(inputs: dict[str, Any], path: str) -> Any:
    value: Any = inputs
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


# --- the providers' rules, per type ---------------------------------------------------------------

# What a change of a resource's inputs does, by the rules of its provider: (before, after, the
# changed input paths, the stack) -> (kind, why, the opt-in that allows it, allowed).
Classifier = Callable[[Resource, Resource, list[str], StackConfig], tuple[str, str, str, bool]]
# type token -> its classifier; a type without one is updated in place (Kubernetes: _kubernetes).
CLASSIFIERS: dict[str, Classifier] = {}


def classifies(*types: str) -> Callable[[Classifier], Classifier]:
    """The function below classifies a change of a resource of `types` (CLASSIFIERS)."""
    def register(fn: Classifier) -> Classifier:
        for t in types:
            CLASSIFIERS[t] = fn
        return fn
    return register


def _paths(changes: list[str], limit: int = 3) -> str:
    return ", ".join(changes[:limit]) + (f" (+{len(changes) - limit} more)" if len(changes) > limit else "")


# FSx for Lustre: pulumi-aws marks these ForceNew; storage capacity can only grow (FACTS "FSx").
FSX_REPLACE = ("deploymentType", "subnetIds", "securityGroupIds", "storageType", "kmsKeyId", "driveCacheType",
               "importPath", "exportPath", "importedFileChunkSize", "backupId", "efaEnabled", "fileSystemTypeVersion")


@classifies("aws:fsx/lustreFileSystem:LustreFileSystem")
def _fsx(before, after, changes, cfg):
    forced = [p for p in changes if _under(p, FSX_REPLACE)]
    a, b = before["inputs"].get("storageCapacity"), after["inputs"].get("storageCapacity")
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b < a:
        forced.append(f"storageCapacity {a} -> {b} (cannot shrink)")
    if forced:
        return (DATA_LOSS, f"{_paths(forced)}: a new, empty file system, its data is lost",
                "rltrain:storage.allowReplacement",
                cfg.storage.allow_replacement)
    return IN_PLACE, _paths(changes), "", True


# An FSx data repository association (components/aws/storage.py): its file system and both paths are
# ForceNew (hashicorp/terraform-provider-aws internal/service/fsx/data_repository_association.go, which
# pulumi-aws bridges); its export and import policies update in place. It is a resource of its own: a
# change never reaches the file system. The program deletes an association before its replacement
# exists (AWS refuses overlapping paths: FSx API reference, DataRepositoryAssociation FileSystemPath)
# and never with the files (deleteDataInFilesystem false); automatic export sends files "as files are
# created, modified, or deleted" (Lustre guide, export-changed-data-meta-dra): what is already on the
# volume under a new path reaches S3 when it next changes, or with an export data repository task.
DRA_REPLACE = ("fileSystemId", "fileSystemPath", "dataRepositoryPath")
DRA_KEEPS = ("the file system is untouched; its files stay on the volume (deleteDataInFilesystem false) and what "
             "was exported stays in S3")


@classifies("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")
def _data_repository_association(before, after, changes, cfg):
    forced = [p for p in changes if _under(p, DRA_REPLACE)]
    if forced:
        moved = "; ".join(f"{k} {before['inputs'].get(k)} -> {after['inputs'].get(k)}" for k in DRA_REPLACE[1:]
                          if before["inputs"].get(k) != after["inputs"].get(k))
        return (REPLACE, f"{moved or _paths(forced)}: a new association, the old one deleted first; {DRA_KEEPS}; "
                "files already under the new path reach S3 when they next change (or with an export data "
                "repository task: aws fsx create-data-repository-task --type EXPORT_TO_REPOSITORY)", "", True)
    return IN_PLACE, _paths(changes), "", True


# EKS managed node group: ForceNew in pulumi-aws (FACTS "EKS managed node group is replaced").
NODE_GROUP_REPLACE = ("amiType", "capacityType", "diskSize", "instanceTypes", "launchTemplate.id",
                      "launchTemplate.name", "nodeGroupName", "nodeGroupNamePrefix", "nodeRoleArn",
                      "remoteAccess", "subnetIds")


def how_a_roll_proceeds(r: Resource) -> str:
    """How EKS replaces the nodes of a managed node group, from its recorded update settings
    (EKS user guide, managed-node-update-behavior; pulumi-aws NodeGroupUpdateConfigArgs)."""
    i = r["inputs"]
    cfg = i.get("updateConfig") or {}
    step = cfg.get("maxUnavailable") or (f"{cfg['maxUnavailablePercentage']}%" if cfg.get("maxUnavailablePercentage")
                                         else 1)
    count = _get(i, "scalingConfig.desiredSize")
    nodes = f"{count} node(s)" if isinstance(count, int) else "every node"
    if cfg.get("updateStrategy") == "MINIMAL":
        how = (f"MINIMAL strategy: EKS cordons, drains and terminates {step} old node(s) first, then launches the "
               f"replacement, until {nodes} are new; no surge, so no spare GPU instance is needed")
    else:
        how = (f"DEFAULT strategy: EKS first launches new nodes (surge, up to 2 in one AZ), then drains {step} old "
               "node(s) at a time; a replacement that cannot launch (InsufficientInstanceCapacity) leaves the old "
               "nodes running and the update failed (the quota must cover the surge: preflight)")
    if i.get("capacityType") == "CAPACITY_BLOCK":
        how += ("; Capacity Block: the EKS guide asks for desired size 0 while the group is upgraded "
                "(capacity-blocks-mng)")
    return how + "; the runs on each node are killed, or the roll stops on their PodDisruptionBudgets"


def _version_pinned(before: Resource, after: Resource, changes: list[str]) -> bool:
    """`version` newly recorded where the base had none: the nodes already run the cluster's version
    (EKS set it at creation), so a real update sees no change."""
    return "version" in changes and before["inputs"].get("version") is None \
        and after["inputs"].get("version") not in (None, CHANGED)


@classifies("aws:eks/nodeGroup:NodeGroup")
def _node_group(before, after, changes, cfg):
    forced = [p for p in changes if _under(p, NODE_GROUP_REPLACE)]
    if forced:
        return (NODE_ROLL, f"{_paths(forced)}: the node group is replaced, every GPU node and the runs on it "
                f"killed{' (deleted before the new group exists)' if after['options'].get('deleteBeforeReplace') else ''}",
                "rltrain:gpuNodes.allowReplacement", cfg.gpu_nodes.allow_replacement)
    if "version" in changes and not _version_pinned(before, after, changes):
        return (NODE_ROLL, f"Kubernetes {before['inputs'].get('version')} -> {_version_text(after)}: after the "
                f"control plane, {how_a_roll_proceeds(after)}{_held(after)}",
                "rltrain:gpuNodes.allowNodeRoll", cfg.gpu_nodes.allow_node_roll)
    if any(_under(p, ("launchTemplate.version",)) for p in changes):
        return (NODE_ROLL, f"new launch template version: {how_a_roll_proceeds(after)}{_held(after)}",
                "rltrain:gpuNodes.allowNodeRoll", cfg.gpu_nodes.allow_node_roll)
    a = _get(before["inputs"], "scalingConfig.desiredSize")
    b = _get(after["inputs"], "scalingConfig.desiredSize")
    if isinstance(a, int) and isinstance(b, int) and b < a:
        return (NODE_ROLL, f"scaling {a} -> {b}: {a - b} node(s) removed with whatever runs on them",
                "rltrain:gpuNodes.allowNodeRoll", cfg.gpu_nodes.allow_node_roll)
    if isinstance(a, int) and isinstance(b, int) and b > a and after["inputs"].get("capacityType") == "ON_DEMAND":
        return IN_PLACE, (f"scaling {a} -> {b} On-Demand: {b - a} more instance(s) into the existing cluster "
                          "placement group, which EC2 may not have room for: a later launch into a cluster group can fail "
                          "with InsufficientInstanceCapacity (EC2 user guide, limitations-placement-groups: reserve "
                          "capacity in the group with an On-Demand Capacity Reservation). `pulumi up` succeeds once EKS accepts the size; "
                          "the new nodes may never join, while the queue's quota follows gpuNodes.count in the same `up` "
                          "and admits runs for them: check `kubectl get nodes -l role=gpu-training` and the node "
                          "group's health before queueing (docs/aws-operations.md)"), "", True
    if _version_pinned(before, after, changes):
        return IN_PLACE, (f"{_paths(changes)}; version now follows the cluster ({after['inputs']['version']}, "
                          "what the nodes run since creation: no roll)"), "", True
    if any(_under(p, ("nodeRepairConfig",)) for p in changes):
        return IN_PLACE, f"{_paths(changes)}; {repair_effect(after)}", "", True
    return IN_PLACE, _paths(changes), "", True


def repair_effect(r: Resource) -> str:
    """What node auto repair, as configured on the node group, does to a running run."""
    c = r["inputs"].get("nodeRepairConfig") or {}
    if not c.get("enabled"):
        return "node auto repair off: a broken GPU node stays until a person replaces it"
    parallel = c.get("maxParallelNodesRepairedCount") or c.get("maxParallelNodesRepairedPercentage")
    stop = c.get("maxUnhealthyNodeThresholdCount")
    return ("no node changes now; from now on EKS replaces or reboots a node whose condition (NotReady, or "
            "AcceleratedHardwareReady/NetworkingReady=False from the node monitoring agent) stays bad past its "
            f"repair wait, {parallel or 'any number of'} node(s) at a time"
            + (f", none while more than {stop} are unhealthy" if stop else "")
            + ": the run pods on that node are lost and the run restarts from its newest complete checkpoint "
            "(docs/gpu-failure-runbook.md)")


def _held(r: Resource) -> str:
    """The program's own guard (labels.ROLL_INPUTS): without the opt-in the node group ignores a
    new launch template or Kubernetes version, so `pulumi up` would not roll the nodes either."""
    held = set((r.get("options") or {}).get("ignoreChanges") or ()) & set(ROLL_INPUTS)
    return (f" (without the opt-in the program holds {', '.join(sorted(held))} at the deployed value: "
            "`pulumi up` leaves the nodes as they are)") if held else ""


def _version_text(r: Resource) -> str:
    v = r["inputs"].get("version")
    return "the cluster's new version" if v in (None, CHANGED) else str(v)


@classifies("aws:ec2/launchTemplate:LaunchTemplate")
def _launch_template(before, after, changes, cfg):
    # Any argument change is a new version (description included); the template itself stays.
    if any(_under(p, ("name", "namePrefix")) for p in changes):
        return REPLACE, "name changed: a new launch template", "", True
    return IN_PLACE, f"new version ({_paths(changes)}); the node group following it rolls", "", True


def _minor(v: Any) -> Optional[tuple[int, int]]:
    m = re.fullmatch(r"(\d+)\.(\d+)", str(v or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def version_change(before: Any, after: Any) -> tuple[bool, str]:
    """(allowed, why) for a control-plane version change: EKS upgrades one minor at a time and
    never downgrades (EKS user guide, update-cluster: "you can only update one minor version at a
    time"; a cluster cannot be downgraded)."""
    a, b = _minor(before), _minor(after)
    if a is None or b is None:
        return True, f"Kubernetes {before} -> {after}"
    if b < a:
        return False, (f"Kubernetes {before} -> {after} goes down a version, which EKS cannot do: keep {before} "
                       "(or create a new cluster in a new stack)")
    if b[0] != a[0] or b[1] - a[1] > 1:
        nxt = f"{a[0]}.{a[1] + 1}"
        return False, (f"Kubernetes {before} -> {after} skips a minor, which EKS refuses (one minor per upgrade): "
                       f"set {nxt} first, `up`, then {after}")
    return True, (f"control plane Kubernetes {before} -> {after}, updated in place by EKS first (the API server "
                  "stays available); pulumi-eks's vpc-cni and kube-proxy add-ons take the new minor's pinned "
                  "versions with it; then the node groups roll, then the other add-ons")


@classifies("eks:index:Cluster")
def _cluster(before, after, changes, cfg):
    if any(_under(p, ("vpcId",)) for p in changes) or (
            any(_under(p, ("privateSubnetIds", "publicSubnetIds")) for p in changes)
            and _moves_vpc(before, after)):
        # pulumi-aws updates vpc_config.subnet_ids in place and EKS refuses subnets of another VPC:
        # a cluster cannot move VPCs (FACTS "Moving an EKS cluster to another VPC").
        return (REFUSED, "its subnets move to another VPC, which EKS refuses: create a new cluster (new stack) "
                "and move the workloads", "", False)
    forced = [p for p in changes if _under(p, ("name", "encryptionConfigKeyArn"))]
    if forced:
        return (DATA_LOSS, f"{_paths(forced)}: a new cluster, every in-cluster object recreated",
                "rltrain:cluster.allowReplacement", cfg.cluster.allow_replacement)
    if "version" in changes:
        allowed, why = version_change(before["inputs"].get("version"), after["inputs"].get("version"))
        return (IN_PLACE if allowed else REFUSED), why, "", allowed
    return IN_PLACE, _paths(changes), "", True


def _moves_vpc(before: Resource, after: Resource) -> bool:
    subnets = [*(after["inputs"].get("privateSubnetIds") or []), *(after["inputs"].get("publicSubnetIds") or [])]
    return any(s == CHANGED or CHANGED in str(s) for s in subnets)


@classifies("eks:index:ManagedNodeGroup")
def _system_nodes(before, after, changes, cfg):
    pinned = _version_pinned(before, after, changes)
    rolling = [p for p in changes if not _under(p, ("scalingConfig", "labels", "taints"))
               and not (p == "version" and pinned)]
    if rolling:
        what = (f"Kubernetes {before['inputs'].get('version')} -> {_version_text(after)}, after the control plane"
                if "version" in rolling else _paths(rolling))
        return NODE_ROLL, f"{what}: the system nodes are replaced (operators restart; runs stay)", "", True
    if pinned:
        return IN_PLACE, (f"{_paths(changes)}; version now follows the cluster ({after['inputs']['version']}, "
                          "what the nodes run since creation: no roll)"), "", True
    return IN_PLACE, _paths(changes), "", True


@classifies("aws:eks/addon:Addon")
def _addon(before, after, changes, cfg):
    if any(_under(p, ("addonName", "clusterName")) for p in changes):
        return REPLACE, f"{_paths(changes)}: a new add-on", "", True
    if "addonVersion" in changes:
        return IN_PLACE, (f"add-on {after['inputs'].get('addonName')} {before['inputs'].get('addonVersion')} -> "
                          f"{after['inputs'].get('addonVersion')} (its pods restart)"), "", True
    return IN_PLACE, _paths(changes), "", True


@classifies("pulumi:providers:aws")
def _aws_provider(before, after, changes, cfg):
    if "region" in changes:
        return (REPLACE, f"region {before['inputs'].get('region')} -> {after['inputs'].get('region')}: a new "
                "provider; every regional resource created through it is created anew in the new region and "
                "the old ones deleted", "", True)
    return IN_PLACE, _paths(changes), "", True


# Global AWS services: a region move keeps them (IAM roles, policies and their attachments).
GLOBAL_TYPES = ("aws:iam/",)


# Plain AWS resources whose listed inputs are ForceNew in pulumi-aws (their Terraform schema): a
# change replaces them, harmless on its own (they carry no data and nothing runs on them).
FORCE_NEW: dict[str, tuple[str, ...]] = {
    "aws:ec2/routeTable:RouteTable": ("vpcId",),
    "aws:ec2/routeTableAssociation:RouteTableAssociation": ("subnetId", "gatewayId"),
    "aws:ec2/natGateway:NatGateway": ("subnetId", "allocationId", "connectivityType"),
    "aws:ec2/internetGateway:InternetGateway": (),
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule": ("securityGroupId",),
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule": ("securityGroupId",),
    "aws:ec2/placementGroup:PlacementGroup": ("name", "strategy"),
    "aws:iam/role:Role": ("name", "namePrefix"),
    "aws:kms/key:Key": ("customerMasterKeySpec", "keyUsage", "multiRegion"),
    # The training image (components/aws/image.py): a new repository or project name is a new one;
    # the build's own diff replaces it on these inputs (a new tag is a new build, and its new digest
    # restarts the runs that reference it: their pod templates read it).
    "aws:ecr/repository:Repository": ("name",),
    "aws:codebuild/project:Project": ("name",),
    image_build_run.TYPE: image_build_run.REPLACE_ON,
}


def _force_new(before, after, changes, cfg):
    forced = [p for p in changes if _under(p, FORCE_NEW[after["type"]])]
    if forced:
        return REPLACE, f"{_paths(forced)}: a new {after['type'].split(':')[-1]}", "", True
    return IN_PLACE, _paths(changes), "", True


for _t in FORCE_NEW:
    CLASSIFIERS[_t] = _force_new


@classifies("aws:ec2/vpc:Vpc")
def _vpc(before, after, changes, cfg):
    if any(_under(p, ("cidrBlock",)) for p in changes):
        return REPLACE, "cidrBlock changed: a new VPC", "", True
    return IN_PLACE, _paths(changes), "", True


@classifies("aws:ec2/subnet:Subnet")
def _subnet(before, after, changes, cfg):
    if any(_under(p, ("cidrBlock", "vpcId", "availabilityZone")) for p in changes):
        return REPLACE, f"{_paths(changes)}: a new subnet", "", True
    return IN_PLACE, _paths(changes), "", True


@classifies("aws:ec2/securityGroup:SecurityGroup")
def _sg(before, after, changes, cfg):
    if any(_under(p, ("vpcId", "name", "description")) for p in changes):
        return REPLACE, f"{_paths(changes)}: a new security group", "", True
    return IN_PLACE, _paths(changes), "", True


# pulumi-kubernetes provider/pkg/provider/diff.go (forceNewProperties): a Job is replaced when
# .spec.completions, .parallelism, .selector or .template change; a StatefulSet rolls its pods on a
# template change (its forced properties are the selector, serviceName, volumeClaimTemplates).
_POD_TEMPLATE_KINDS = {"Job": ("spec.template", "spec.completions", "spec.parallelism", "spec.selector"),
                       "StatefulSet": ("spec.template", "spec.selector", "spec.serviceName",
                                       "spec.volumeClaimTemplates")}


# Kueue objects with the `kueue.x-k8s.io/resource-in-use` finalizer while something names them (a
# ResourceFlavor named by a ClusterQueue, a Topology named by a flavor: kueue v0.19.2
# pkg/controller/core/resourceflavor_controller.go, pkg/controller/tas/topology_controller.go), and
# their immutable fields (CRD validation rules at v0.19.2; a flavor's only once it has a topologyName).
_KUEUE_IN_USE = {"ResourceFlavor": ("spec.nodeLabels", "spec.tolerations", "spec.topologyName"),
                 "Topology": ("spec.levels",)}


def _kueue_object(before, after, changes):
    kind = after["inputs"].get("kind")
    if any(_under(p, ("metadata.name",)) for p in changes):
        return (REPLACE, f"a new {kind} under a new name (content-named): created first, what names it is "
                "updated to it, the old one deleted once nothing names it", "", True)
    if any(_under(p, after["options"].get("replaceOnChanges") or ()) for p in changes):
        # Pulumi does not replace the ClusterQueue with it (linked by name and dependsOn only:
        # pkg/resource/deploy/step_generator.go calculateDependentReplacements).
        return (NEVER_FINISHES, f"{_paths(changes)}: replaced under its fixed name while in use: the delete "
                "waits on Kueue's resource-in-use finalizer for ever", "", False)
    immutable = _KUEUE_IN_USE[kind]
    if kind == "ResourceFlavor" and not (before["inputs"].get("spec") or {}).get("topologyName"):
        immutable = ()
    forced = [p for p in changes if _under(p, immutable)]
    if forced:
        return (REFUSED, f"{_paths(forced)}: immutable (Kueue's CRD validation): the API server refuses the "
                "update", "", False)
    return IN_PLACE, _paths(changes), "", True


# Immutable after creation (Kubernetes v1.35.4 pkg/apis/scheduling/validation/validation.go
# ValidatePriorityClassUpdate). The program names a class after its value (workloads/runs.py).
_PRIORITY_CLASS_IMMUTABLE = ("value", "preemptionPolicy")


def _priority_class(before, after, changes):
    if any(_under(p, ("metadata.name",)) for p in changes):
        return (REPLACE, "a new class under a new name (the value is in the name): created first, the runs that "
                "name it are replaced with it (their pod template changes: below), the old class deleted after; "
                "runs take the new priority only because they are recreated (a pod's and a Kueue Workload's "
                "priority are set when they are created)", "", True)
    forced = [p for p in changes if _under(p, _PRIORITY_CLASS_IMMUTABLE)]
    if forced:
        return (REFUSED, f"{_paths(forced)}: immutable: the API server refuses the update (\"may not be changed "
                "in an update\"); a new value needs a new name", "", False)
    return IN_PLACE, _paths(changes), "", True


# Karpenter's GPU nodes (elastic mode, components/k8s/karpenter_nodes.py). A changed NodePool or
# EC2NodeClass drifts the nodes launched from it and Karpenter replaces them (sigs.k8s.io/karpenter
# v1.14.0 pkg/controllers/nodeclaim/disruption/drift.go: NodePoolDrifted when the NodePool's hash
# annotation differs from the NodeClaim's, RequirementsDrifted when the node's labels no longer meet
# spec.template.spec.requirements). The hash is of spec.template only (pkg/apis/v1/nodepool.go
# NodePool.Hash), so spec.disruption (budgets also `hash:"ignore"`), spec.limits and spec.weight
# change no node. On AWS every EC2NodeClass spec field drifts: the hashed ones by the node class hash,
# the selector terms (`hash:"ignore"`) by their resolved AMI, subnets, security groups, capacity
# reservations (karpenter-provider-aws v1.14.0 pkg/apis/v1/ec2nodeclass.go Hash, pkg/cloudprovider/drift.go).
KARPENTER_KINDS = {("karpenter.sh/v1", "NodePool"), ("karpenter.k8s.aws/v1", "EC2NodeClass")}
NODEPOOL_IN_PLACE = ("spec.disruption", "spec.limits", "spec.weight")


def _karpenter_roll(how: str) -> str:
    return (f"{how}: Karpenter marks every node launched from it Drifted and replaces them, one at a time (the "
            "NodePool's disruption budget), each once no pod annotated karpenter.sh/do-not-disrupt (every GPU pod "
            "of an elastic stack) runs on it; an idle node at once. A queued run then waits for the new nodes")


def _karpenter_object(before, after, changes, cfg):
    kind = after["inputs"].get("kind")
    if any(_under(p, ("metadata.name",)) for p in changes):
        return (NODE_ROLL, f"a new {kind} under a new name: the old one is deleted with every node launched from "
                "it (its NodeClaims are owned by it), the runs on them killed", "rltrain:gpuNodes.allowReplacement",
                cfg.gpu_nodes.allow_replacement)
    rolling = [p for p in changes if not (kind == "NodePool" and _under(p, NODEPOOL_IN_PLACE))
               and _under(p, ("spec",))]
    if rolling:
        return (NODE_ROLL, _karpenter_roll(_paths(rolling)), "rltrain:gpuNodes.allowNodeRoll",
                cfg.gpu_nodes.allow_node_roll)
    if kind == "NodePool" and changes:
        return (IN_PLACE, f"{_paths(changes)}: read by Karpenter's provisioner and disruption controller, outside "
                "the NodePool hash: no node is drifted", "", True)
    return IN_PLACE, _paths(changes), "", True


def _is_karpenter(r: Resource) -> bool:
    i = r.get("inputs") or {}
    return (i.get("apiVersion"), i.get("kind")) in KARPENTER_KINDS


def _kubernetes(before, after, changes, cfg):
    return _run_or_check(before, after, _kubernetes_object(before, after, changes, cfg))


def _kubernetes_object(before, after, changes, cfg):
    kind = after["inputs"].get("kind")
    if _is_karpenter(after):
        return _karpenter_object(before, after, changes, cfg)
    if kind in _KUEUE_IN_USE and after["type"].startswith("kubernetes:kueue.x-k8s.io/"):
        return _kueue_object(before, after, changes)
    if kind == "PriorityClass":
        return _priority_class(before, after, changes)
    moved = [p for p in changes if _under(p, ("metadata.name", "metadata.namespace"))]
    if kind == "PersistentVolumeClaim" and moved and claim_owns_its_volume(before):
        return (DATA_LOSS, f"{_paths(moved)}: a new claim, and the old one deleted: {claim_volume_fate(before)}",
                "rltrain:storage.allowReplacement", cfg.storage.allow_replacement)
    if kind == "PersistentVolume" and moved:
        return (REPLACE, f"{_paths(moved)}: a new volume naming the new claim (claimRef), so the new claim binds it; "
                "the old one is deleted, and its reclaim policy Retain keeps the data", "", True)
    if moved:
        what = RUN_RESTART if kind in ("Job", "StatefulSet", "MPIJob", "RayJob") else REPLACE
        return (what, "name or namespace changed: a new object", *(_run_opt_in(cfg) if what == RUN_RESTART
                                                                     else ("", True)))
    if kind in _POD_TEMPLATE_KINDS:
        # Immutable Job fields (pod template, completions, parallelism) force a replacement; a
        # StatefulSet rolls its pods on a template change (pulumi-kubernetes diff, Kubernetes API).
        # Plus what the program replaces on (a run's labels: Kueue refuses a queue label change).
        forced = [p for p in changes if _under(p, (*_POD_TEMPLATE_KINDS[kind],
                                                   *(after["options"].get("replaceOnChanges") or ())))]
        immutable = [p for p in changes if kind == "Job" and _under(p, JOB_IMMUTABLE) and p not in forced]
        if immutable:
            # The provider patches them (not in its forceNew list) and the API server refuses the
            # update: "field is immutable" (the key sweep on the simulated cluster, issue 34).
            return (REFUSED, f"{_paths(immutable)}: immutable (Kubernetes Job validation): the API server refuses "
                    "the update, and the provider does not replace the Job on it", "", False)
        if forced:
            return (RUN_RESTART, f"{_paths(forced)}: the run is stopped and started anew{_fresh_dir(before, after)}",
                    *_run_opt_in(cfg))
        return IN_PLACE, _paths(changes), "", True
    if kind == "Deployment" and any(_under(p, ("spec.template",)) for p in changes):
        # A Deployment rolls its pods on a template change (Kubernetes API; the provider patches it
        # in place): the serving replicas restart one rollout step at a time (serving.py). Any other
        # Deployment (TensorBoard, the metrics exporters) serves no model: its rollout is an update.
        paths = _paths([p for p in changes if _under(p, ("spec.template",))])
        component = ((after["inputs"].get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component")
        if component != SERVING_COMPONENT:
            return (IN_PLACE, f"{paths}: its pods ({component or 'Deployment'}) are replaced by a rolling update; "
                    "no training run or serving replica is touched", "", True)
        return (SERVING_RESTART, f"{paths}: the serving replicas are replaced by a rolling update; no training "
                "run is touched", "", True)
    if after["type"].startswith("kubernetes:") and kind in ("MPIJob", "RayJob"):
        # A custom resource is replaced only on name/namespace, unless replace_on_changes says
        # otherwise (pulumi-kubernetes provider/pkg/provider/diff.go); a patched finished run never
        # runs again.
        if any(_under(p, after["options"].get("replaceOnChanges") or ()) for p in changes):
            return RUN_RESTART, f"{_paths(changes)}: the run is replaced", *_run_opt_in(cfg)
        return IN_PLACE, f"{_paths(changes)}: patched onto the existing object, which does not run again", "", True
    if (kind == "PodDisruptionBudget" and after["inputs"].get("apiVersion") == "policy/v1beta1"
            and any(_under(p, ("spec",)) for p in changes)):
        # Only policy/v1beta1 lists .spec as forcing replacement; a policy/v1 budget (the program's)
        # is patched in place (pulumi-kubernetes provider/pkg/provider/diff.go; the real preview on
        # the simulated cluster said `update` where this model said `replace`: issue 18 scenario 9).
        return REPLACE, f"{_paths(changes)}: a new PodDisruptionBudget (its .spec forces replacement)", "", True
    if kind == "ConfigMap" and any(_under(p, ("data", "binaryData")) for p in changes):
        return REPLACE, "data changed: a new ConfigMap (created before the old one is deleted)", "", True
    if kind == "PersistentVolumeClaim" and any(_under(p, ("spec.resources",)) for p in changes):
        # The API server resizes only dynamically provisioned claims ("only dynamically provisioned
        # pvc can be resized"); a claim bound by volumeName to a static PV is refused, and
        # pulumi-kubernetes patches spec.resources in place, so `up` fails (FACTS "AWS: first up").
        ignored = any(_under("spec.resources", (p,)) or _under(p, ("spec.resources",))
                      for p in after["options"].get("ignoreChanges") or ())
        if _get(after["inputs"], "spec.volumeName"):
            if ignored:
                return IN_PLACE, ("spec.resources ignored (ignore_changes): the statically bound claim keeps its "
                                  "size, which the API server would refuse to change"), "", True
            return (REFUSED, f"{_paths(changes)}: the claim is statically bound (volumeName) and the API server "
                    "refuses to resize it; keep its size (ignore_changes on spec.resources)", "", False)
        return _claim_resize(before, after, changes, cfg)
    if kind == "PersistentVolume" and any(_under(p, ("spec",)) for p in changes):
        return REPLACE, f"{_paths(changes)}: the volume is re-created (reclaim Retain keeps the data)", "", True
    return IN_PLACE, _paths(changes), "", True


def claim_owns_its_volume(r: Resource) -> bool:
    """A claim provisioned from a storage class (no volumeName: not bound to a static volume): its
    volume goes with it unless the class says Retain, which the program cannot read (a
    bring-your-own cluster's class). A dynamically provisioned volume takes its class's
    reclaimPolicy, "Delete" when the class sets none (Kubernetes docs, storage classes: "Reclaim
    policy ... defaults to Delete"; k8s.io/api storage/v1 StorageClass.ReclaimPolicy), and the
    external provisioner deletes the backing volume (an FSx file system for fsx.csi.aws.com) when
    the claim is gone (kubernetes-csi/external-provisioner, controller Delete)."""
    spec = (r.get("inputs") or {}).get("spec") or {}
    return bool(spec.get("storageClassName")) and not spec.get("volumeName")


def claim_volume_fate(r: Resource) -> str:
    cls = ((r.get("inputs") or {}).get("spec") or {}).get("storageClassName")
    return (f"its volume was provisioned from storage class {cls}, whose reclaim policy is Delete unless the "
            "class says Retain: the file system and every checkpoint on it go with the old claim")


def _claim_resize(before, after, changes, cfg):
    """A bound claim from a storage class (bring your own cluster). Measured on the simulated
    cluster's API server (Kubernetes v1.35, issue 18 scenario 5): a larger request is refused unless
    the claim's StorageClass sets allowVolumeExpansion ("only dynamically provisioned pvc can be
    resized and the storageclass that provisions the pvc must support resize": admission plugin
    PersistentVolumeClaimResize, which reads only the class); a request not above status.capacity is
    refused whatever the class ("field can not be less than status.capacity"). The program cannot
    read the class, so growing takes the opt-in that says the class allows it."""
    old, new = (_get(r["inputs"], "spec.resources.requests.storage") for r in (before, after))
    sizes = f"{old} -> {new}"
    try:
        shrinks = quantity(new) < quantity(old)
    except (TypeError, ValueError):  # a size unknown before deploy
        shrinks = False
    if shrinks:
        return (REFUSED, f"{_paths(changes)}: {sizes}: the API server never shrinks a bound "
                "claim (field can not be less than status.capacity)", "", False)
    return (IN_PLACE if cfg.storage.allow_claim_expansion else REFUSED,
            f"{_paths(changes)}: {sizes}: the API server grows a bound claim only when its "
            "StorageClass sets allowVolumeExpansion: true (its CSI driver then resizes the volume)",
            "rltrain:storage.allowClaimExpansion", cfg.storage.allow_claim_expansion)


def checkpoint_dirs(r: Resource, var: str = "CKPT_DIR") -> set[str]:
    found: set[str] = set()

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            if v.get("name") == var and isinstance(v.get("value"), str):
                found.add(v["value"])
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(r["inputs"])
    return found


def _fresh_dir(before: Resource, after: Resource) -> str:
    """The resume contract: a run whose identity changes starts from step 0 in a new directory (or
    from the step its resumeFrom names); one whose directory stays resumes its newest complete step."""
    old, new = checkpoint_dirs(before), checkpoint_dirs(after)
    if old and new and old != new:
        return f"; CKPT_DIR {sorted(old)[0]} -> {sorted(new)[0]}: a fresh checkpoint directory, {_start(after)}"
    if old and new:
        return f"; CKPT_DIR {sorted(new)[0]} unchanged: it resumes its newest complete step there"
    return ""


def _start(r: Resource) -> str:
    """How a new run starts: fresh, or from another run's step (RESUME_FROM, components/scripts/warm_start.py)."""
    warm = checkpoint_dirs(r, "RESUME_FROM")
    if warm:
        step = sorted(warm)[0]
        return f"resumes step {step.rsplit('_', 1)[-1]} of another run ({step}), then its own"
    return "nothing resumed (a fresh start)"


def _run_opt_in(cfg: StackConfig) -> tuple[str, bool]:
    return "rltrain:workloads.allowRunRestart", cfg.workloads.allow_run_restart


def _component(r: Resource) -> str:
    return (((r.get("inputs") or {}).get("metadata") or {}).get("labels") or {}).get("app.kubernetes.io/component", "")


def _is_check(r: Resource) -> bool:
    return _component(r) in CHECK_COMPONENTS


def _run_or_check(before: Resource, after: Resource, verdict: tuple) -> tuple:
    """A run restart of a check is a re-run: nothing to lose, no opt-in (issue 18: scaling the GPU
    nodes re-runs validation and the NCCL test, whose pod counts follow the node count)."""
    if verdict[0] == RUN_RESTART and _is_check(after) and _is_check(before):
        what = "the export runs again" if _component(after) == "export" else "the check runs again"
        return (CHECK_RERUN, verdict[1].replace("the run is stopped and started anew", what)
                .replace("the run is replaced", what), "", True)
    return verdict


_REPLACING = {REPLACE, DATA_LOSS, RUN_RESTART, CHECK_RERUN}


def classify(before_rows: Optional[list[Resource]], after_rows: list[Resource], cfg: StackConfig) -> list[Impact]:
    """Every change between the two records, worst first; nothing to compare without a base."""
    if before_rows is None:
        return []
    old = {(r["type"], r["name"]): r for r in before_rows}
    new = {(r["type"], r["name"]): r for r in after_rows}
    replaced: set[str] = set()  # names of resources whose outputs change
    verdict: dict[tuple[str, str], Impact] = {}
    # Propagate to a fixpoint: a replacement changes what downstream resources read from it.
    for _ in range(8):
        before_count = len(replaced)
        for key, now in new.items():
            was = old.get(key)
            if was is None or key[0].startswith("rltrain:"):
                continue
            seen = _mark_changed(now["inputs"], replaced)
            changes = kept_by_engine(changed_paths(was["inputs"], seen), now)
            if not changes:
                continue
            fn = CLASSIFIERS.get(key[0]) or (_kubernetes if key[0].startswith("kubernetes:") else None)
            kind, why, opt_in, allowed = fn(was, {**now, "inputs": seen}, changes, cfg) if fn else (
                IN_PLACE, _paths(changes), "", True)
            if key[0] == "aws:ec2/launchTemplate:LaunchTemplate" and kind == IN_PLACE:
                replaced.add(f"{key[1]}.latestVersion")
            verdict[key] = Impact(key[0], key[1], kind, why, opt_in, allowed)
            if kind in _REPLACING or kind == NODE_ROLL and "replaced" in why:
                replaced.add(key[1])
        if len(replaced) == before_count:
            break
    _new_cluster(old, new, verdict, cfg)
    for key in sorted(set(new) - set(old)):
        if new[key].get("custom", True) and not key[0].startswith("rltrain:"):
            dirs = checkpoint_dirs(new[key])
            verdict[key] = Impact(key[0], key[1], CREATE, f"new run: CKPT_DIR {sorted(dirs)[0]}, {_start(new[key])}"
                                  if dirs else "new")
    disabled = {run.resource_name: run.name for run in cfg.training_runs if not run.enabled}
    for key in sorted(set(old) - set(new)):
        r = old[key]
        if not r.get("custom", True) or key[0].startswith("rltrain:"):
            continue
        if key[0] == "aws:fsx/lustreFileSystem:LustreFileSystem":
            verdict[key] = Impact(key[0], key[1], DATA_LOSS, "removed from the stack: the file system is deleted "
                                  "(protected: `up` stops until it is unprotected)", "rltrain:storage.allowReplacement",
                                  cfg.storage.allow_replacement)
        elif key[0] == "aws:eks/nodeGroup:NodeGroup":
            verdict[key] = Impact(key[0], key[1], NODE_ROLL, "removed from the stack: every GPU node is deleted",
                                  "rltrain:gpuNodes.allowReplacement", cfg.gpu_nodes.allow_replacement)
        elif _is_karpenter(r):
            verdict[key] = Impact(key[0], key[1], NODE_ROLL, f"removed from the stack: every GPU node launched "
                                  f"from the {r['inputs'].get('kind')} is deleted with the runs on it",
                                  "rltrain:gpuNodes.allowReplacement", cfg.gpu_nodes.allow_replacement)
        elif key[0] == "aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation":
            verdict[key] = Impact(key[0], key[1], DELETE, f"removed from the stack: {r['inputs'].get('fileSystemPath')} "
                                  f"is no longer exported to {r['inputs'].get('dataRepositoryPath')}; {DRA_KEEPS}")
        elif r["inputs"].get("kind") == "PersistentVolumeClaim" and claim_owns_its_volume(r):
            verdict[key] = Impact(key[0], key[1], DATA_LOSS, f"removed from the stack: {claim_volume_fate(r)}",
                                  "rltrain:storage.allowReplacement", cfg.storage.allow_replacement)
        elif r["inputs"].get("kind") in ("Job", "StatefulSet", "MPIJob", "RayJob"):
            dirs = checkpoint_dirs(r)
            off = disabled.get((r["inputs"].get("metadata") or {}).get("name"))
            if off:
                why = f"run {off} disabled (enabled: false): the run is stopped and its Job deleted"
                kept = "still pruned to the newest workloads.checkpoints.keep and counted in the volume budget"
            else:
                why = "removed from the stack: the run is stopped and deleted"
                kept = ("pruned by nothing now (the summary counts them in the volume budget: delete them, or keep "
                        "the run's entry with enabled: false)")
            verdict[key] = Impact(key[0], key[1], DELETE,
                                  why + (f"; its checkpoints stay in {sorted(dirs)[0]}, {kept}" if dirs else ""))
        else:
            verdict[key] = Impact(key[0], key[1], DELETE, "removed from the stack")
    return sorted(verdict.values(), key=lambda i: (SEVERITY.index(i.kind), i.type, i.name))


def _region(rows: dict[tuple[str, str], Resource]) -> Optional[str]:
    p = rows.get(("pulumi:providers:aws", "default"))
    return (p or {}).get("inputs", {}).get("region")


def _new_cluster(old: dict, new: dict, verdict: dict, cfg: StackConfig) -> None:
    """A region move recreates every regional resource (a new default provider; AWS resources are
    regional except IAM), the cluster included; a new cluster recreates every object in it."""
    was, now = _region(old), _region(new)
    moved = was is not None and now is not None and was != now
    if moved:
        for key, r in new.items():
            remote = key[0].startswith("eks:")  # pulumi-eks components own real AWS resources
            if key not in old or not (r.get("custom", True) or remote) or key[0].startswith(
                    ("rltrain:", "pulumi:providers:aws")):
                continue
            if not key[0].startswith(("aws:", "eks:")) or key[0].startswith(GLOBAL_TYPES):
                continue
            where = f"region {was} -> {now}: "
            if key[0] == "eks:index:Cluster":
                imp = Impact(key[0], key[1], DATA_LOSS, where + "a new cluster in the new region (every in-cluster "
                             "object recreated; the old cluster deleted)", "rltrain:cluster.allowReplacement",
                             cfg.cluster.allow_replacement)
            elif key[0] == "aws:fsx/lustreFileSystem:LustreFileSystem":
                imp = Impact(key[0], key[1], DATA_LOSS, where + "a new, empty file system (copy the data through S3 "
                             "first)", "rltrain:storage.allowReplacement", cfg.storage.allow_replacement)
            elif key[0] == "aws:eks/nodeGroup:NodeGroup":
                imp = Impact(key[0], key[1], NODE_ROLL, where + "a new node group, every GPU node replaced",
                             "rltrain:gpuNodes.allowReplacement", cfg.gpu_nodes.allow_replacement)
            else:
                imp = Impact(key[0], key[1], REPLACE, where + f"a new {key[0].split(':')[-1]} in the new region")
            cur = verdict.get(key)
            if cur is None or SEVERITY.index(imp.kind) <= SEVERITY.index(cur.kind):
                verdict[key] = imp
    cluster = next((v for k, v in verdict.items() if k[0] == "eks:index:Cluster"), None)
    if cluster is None or cluster.kind != DATA_LOSS:
        return
    for key, r in new.items():
        if key not in old or not key[0].startswith(("kubernetes:", "pulumi:providers:kubernetes")):
            continue
        cur = verdict.get(key)
        run = r["inputs"].get("kind") in ("Job", "StatefulSet", "MPIJob", "RayJob")
        imp = Impact(key[0], key[1], RUN_RESTART if run else REPLACE, "re-created in the new cluster",
                     *(_run_opt_in(cfg) if run else ("", True)))
        if cur is None or SEVERITY.index(imp.kind) <= SEVERITY.index(cur.kind):
            verdict[key] = imp


def sequence(impacts: list[Impact], after_rows: list[Resource]) -> list[str]:
    """The order `pulumi up` applies the changes in: each change after the changes it depends on
    (dependsOn, provider, parent, as the engine orders its steps), in waves."""
    from components.offline.deploy_model import Graph  # offline reads offline; no cycle at import time

    changed = {f"{i.type}::{i.name}": i for i in impacts if i.kind not in (CREATE, DELETE)
               and not (i.kind == IN_PLACE and not i.why)}
    if len(changed) < 2:
        return []
    graph = Graph(after_rows)
    wave: dict[str, int] = {}

    def level(node: str) -> int:
        if node not in wave:
            wave[node] = 0
            deps = [d for d in changed if d != node and graph.reaches(node, {d})]
            wave[node] = 1 + max((level(d) for d in deps), default=-1)
        return wave[node]

    for node in changed:
        level(node)
    lines = ["order of the update (each step after what it depends on):"]
    for n, w in enumerate(sorted(set(wave.values())), 1):
        for node in sorted(k for k, v in wave.items() if v == w):
            i = changed[node]
            lines.append(f"  {n}. {i.kind}: {i.type.split(':')[-1]} {i.name}: {i.why}")
    return lines


def table(impacts: list[Impact], markdown: bool = False) -> list[str]:
    if not impacts:
        return ["impact: no change against the base record"]
    if markdown:
        rows = ["| impact | resource | why | verdict |", "|---|---|---|---|"]
        for i in impacts:
            kind = f"**{i.kind}**" if i.kind in (DATA_LOSS, NODE_ROLL, RUN_RESTART, REFUSED, NEVER_FINISHES) else i.kind
            verdict = "ok" if i.allowed else (f"refused: set `{i.opt_in}: true`" if i.opt_in else "refused")
            rows.append(f"| {kind} | `{i.type.split(':')[-1]} {i.name}` | {i.why.replace('|', '/')} | {verdict} |")
        return rows
    return ["impact against the base record:"] + ["  " + i.line() for i in impacts]


@dataclass
class Check:
    refused: list[Impact] = field(default_factory=list)
    allowed: list[Impact] = field(default_factory=list)


def check(before: Optional[list[Resource]], after: list[Resource], cfg: StackConfig) -> Check:
    impacts = classify(before, after, cfg)
    notable = [i for i in impacts if i.kind in (DATA_LOSS, NODE_ROLL, RUN_RESTART, REFUSED, NEVER_FINISHES)]
    return Check(refused=[i for i in notable if not i.allowed], allowed=[i for i in notable if i.allowed])


__all__ = ["Impact", "classify", "check", "table", "UNKNOWN"]
