"""What a real `pulumi preview` hands the policy pack: every resource's OUTPUTS, pulumi-eks's own
child resources included, in no particular order.

The engine sends `AnalyzeStack` the resources' final outputs (pulumi/pulumi step_generator.go;
pulumi-policy `PolicyResource.props` are outputs) and iterates them from a sync.Map, so their order
is unspecified (FACTS "PR review as GitHub runs it"). The offline render records the program's
INPUTS, and pulumi-eks's components have no children under the mock engine. A pack tested only on
the render therefore never saw what a preview sends: `eks:index:Cluster` without its endpoint inputs,
the system node group's `aws:eks/nodeGroup:NodeGroup` (labels `role: system`) beside the GPU one.

`records(stack)` gives the rows in the render's row shape (type, name, parent, custom, inputs = the
properties as the engine sends them, options, dependsOn, provider), from one of two sources:

- a RECORDING, `tests/fixtures/preview/<stack>.json` when it exists: the same row shape, written
  from the AnalyzeStack request of a real preview (e.g. on the simulated cluster: a later issue).
  It replaces the synthesis below without any change to the tests;
- otherwise a SYNTHESIS from the committed render, `rendered/<stack>/resources.json`: each custom
  resource's outputs are its inputs (pulumi-aws and pulumi-kubernetes echo their inputs among the
  outputs) plus its `id`; pulumi-eks's components are reduced to their schema outputs (pulumi-eks
  v4.3.0 provider/cmd/pulumi-resource-eks/schema.json: `eks:index:Cluster` outputs kubeconfig,
  eksCluster, core, ... and no endpoint setting; `eks:index:ManagedNodeGroup` outputs nodeGroup and
  placementGroupName) and get the children pulumi-eks creates (nodejs/eks/cluster/cluster.ts:
  `<name>-eksCluster` aws.eks.Cluster with vpcConfig.endpointPublicAccess/publicAccessCidrs,
  `<name>-eksClusterSecurityGroup`, `<name>-eksRole`; nodejs/eks/addons/cni-addon.ts: the
  `<name>-vpc-cni` VpcCniAddon with its aws.eks.Addon, configurationValues a JSON string;
  nodejs/eks/nodes/nodegroup.ts: the ManagedNodeGroup's aws.eks.NodeGroup of the same name).
  Our own components (`rltrain:`) register no outputs the rules read: empty.

`shuffled(rows, seed)` gives them in another order, as the engine may.
"""

from __future__ import annotations

import copy
import json
import random
from typing import Any

from components.offline.mock_engine import ROOT

Row = dict[str, Any]
RECORDINGS = ROOT / "tests" / "fixtures" / "preview"

CLUSTER_COMPONENT = "eks:index:Cluster"
MANAGED_NODE_GROUP = "eks:index:ManagedNodeGroup"
# pulumi-eks v4.3.0 schema.json, resources["eks:index:Cluster"].properties (its outputs).
CLUSTER_OUTPUTS = ("autoModeNodeRoleName", "awsProvider", "clusterIngressRuleId", "clusterSecurityGroup",
                   "clusterSecurityGroupId", "core", "defaultNodeGroup", "defaultNodeGroupAsgName", "eksCluster",
                   "eksClusterIngressRule", "fargateProfileId", "fargateProfileStatus", "instanceRoles",
                   "kubeconfig", "kubeconfigJson", "nodeSecurityGroup", "nodeSecurityGroupId", "oidcIssuer",
                   "oidcProviderArn", "oidcProviderUrl")


def committed(stack: str) -> list[Row]:
    return json.loads((ROOT / "rendered" / stack / "resources.json").read_text())


def records(stack: str) -> list[Row]:
    """The resources of `stack` as a real preview hands them to the pack (a recording if there is one)."""
    recorded = RECORDINGS / f"{stack}.json"
    if recorded.is_file():
        return json.loads(recorded.read_text())
    return synthesize(committed(stack))


def shuffled(rows: list[Row], seed: int) -> list[Row]:
    out = list(rows)
    random.Random(seed).shuffle(out)
    return out


def _row(type_: str, name: str, parent: str | None, inputs: dict[str, Any], custom: bool = True,
         depends_on: list[str] | None = None, provider: str | None = None) -> Row:
    return {"type": type_, "name": name, "parent": parent, "custom": custom, "dependsOn": depends_on or [],
            "provider": provider, "inputs": inputs,
            "options": {"protect": False, "deleteBeforeReplace": False}}


def _id(name: str) -> str:
    return f"[known after deploy: {name}.id]"


def _cluster(r: Row) -> list[Row]:
    """pulumi-eks's Cluster: its outputs, and the children that hold what the program passed in."""
    name, given = r["name"], r["inputs"]
    eks = f"{name}-eksCluster"
    subnets = [*(given.get("privateSubnetIds") or []), *(given.get("publicSubnetIds") or [])]
    outputs = {
        "kubeconfig": f"[known after deploy: {eks}.kubeconfig]",
        "kubeconfigJson": f"[known after deploy: {eks}.kubeconfigJson]",
        "eksCluster": f"[known after deploy: {eks}.urn]",
        "clusterSecurityGroupId": f"[known after deploy: {name}-eksClusterSecurityGroup.id]",
        "nodeSecurityGroupId": f"[known after deploy: {eks}.vpcConfig.clusterSecurityGroupId]",
        "oidcProviderArn": f"[known after deploy: {name}-oidcProvider.arn]",
        "core": {"vpcId": given.get("vpcId"), "subnetIds": subnets,
                 "endpoint": f"[known after deploy: {eks}.endpoint]"},
    }
    assert set(outputs) <= set(CLUSTER_OUTPUTS)
    component = {**r, "inputs": outputs}
    cni = given.get("vpcCniOptions") or {}
    cni_values = {"env": {}, "init": {"env": {}}}
    if "enableNetworkPolicy" in cni:  # cni-addon.ts mergeConfigurationValues: stringified bool
        cni_values["enableNetworkPolicy"] = str(bool(cni["enableNetworkPolicy"])).lower()
    cluster = _row("aws:eks/cluster:Cluster", eks, name, {
        "id": _id(eks), "name": given.get("name"), "version": given.get("version"),
        "arn": f"[known after deploy: {eks}.arn]", "roleArn": f"[known after deploy: {name}-eksRole.arn]",
        "enabledClusterLogTypes": given.get("enabledClusterLogTypes"),
        "vpcConfig": {"subnetIds": subnets, "endpointPrivateAccess": given.get("endpointPrivateAccess", False),
                      "endpointPublicAccess": given.get("endpointPublicAccess", True),
                      "publicAccessCidrs": given.get("publicAccessCidrs") or ["0.0.0.0/0"],
                      "securityGroupIds": [f"[known after deploy: {name}-eksClusterSecurityGroup.id]"],
                      "clusterSecurityGroupId": f"[known after deploy: {eks}.vpcConfig.clusterSecurityGroupId]",
                      "vpcId": given.get("vpcId")},
    }, depends_on=[f"aws:iam/role:Role::{name}-eksRole"])
    return [component, cluster,
            _row("aws:iam/role:Role", f"{name}-eksRole", name, {
                "id": _id(f"{name}-eksRole"),
                "assumeRolePolicy": json.dumps({"Version": "2012-10-17", "Statement": [
                    {"Effect": "Allow", "Principal": {"Service": "eks.amazonaws.com"},
                     "Action": "sts:AssumeRole"}]})}),
            _row("aws:ec2/securityGroup:SecurityGroup", f"{name}-eksClusterSecurityGroup", name, {
                "id": _id(f"{name}-eksClusterSecurityGroup"), "vpcId": given.get("vpcId"),
                "description": "Managed by Pulumi"}),
            _row("eks:index:VpcCniAddon", f"{name}-vpc-cni", name, {}, custom=False),
            _row("aws:eks/addon:Addon", f"{name}-vpc-cni", f"{name}-vpc-cni", {
                "id": _id(f"{name}-vpc-cni"), "addonName": "vpc-cni", "clusterName": given.get("name"),
                "addonVersion": cni.get("addonVersion"), "configurationValues": json.dumps(cni_values),
                # pulumi-eks passes the options' conflict settings to its add-on, OVERWRITE unless set
                # (VpcCniOptionsArgs docstrings, pulumi_eks/_inputs.py at 4.4.0).
                "resolveConflictsOnCreate": cni.get("resolveConflictsOnCreate", "OVERWRITE"),
                "resolveConflictsOnUpdate": cni.get("resolveConflictsOnUpdate", "OVERWRITE")},
                depends_on=[f"aws:eks/cluster:Cluster::{eks}"])]


def _managed_node_group(r: Row) -> list[Row]:
    """pulumi-eks's ManagedNodeGroup: outputs nodeGroup and placementGroupName; its aws.eks.NodeGroup."""
    name, given = r["name"], r["inputs"]
    group = {"id": _id(name), "clusterName": "[known after deploy: cluster-eks.eksCluster.name]",
             "nodeGroupName": f"[known after deploy: {name}.nodeGroupName]",
             "labels": given.get("labels") or {}, "scalingConfig": given.get("scalingConfig"),
             "instanceTypes": given.get("instanceTypes"), "subnetIds": given.get("subnetIds"),
             "nodeRoleArn": f"[known after deploy: {name}.nodeRoleArn]",
             "launchTemplate": given.get("launchTemplate"), "amiType": "AL2023_x86_64_STANDARD",
             "capacityType": "ON_DEMAND"}
    group = {k: v for k, v in group.items() if v is not None}
    return [{**r, "inputs": {"nodeGroup": group, "placementGroupName": ""}},
            _row("aws:eks/nodeGroup:NodeGroup", name, name, group, depends_on=list(r.get("dependsOn") or []))]


def synthesize(rendered: list[Row]) -> list[Row]:
    """Output-shaped rows of a preview, from the render's input-shaped ones (see the module docstring)."""
    out: list[Row] = []
    for r in copy.deepcopy(rendered):
        if r["type"] == CLUSTER_COMPONENT:
            out += _cluster(r)
        elif r["type"] == MANAGED_NODE_GROUP:
            out += _managed_node_group(r)
        elif not r["custom"]:
            out.append({**r, "inputs": {}})
        elif r["type"].startswith("kubernetes:") or r["type"].startswith("pulumi:providers:"):
            out.append(r)  # the object as applied (status only after deploy); providers: their config
        else:
            out.append({**r, "inputs": {"id": _id(r["name"]), **r["inputs"]}})
    return out
