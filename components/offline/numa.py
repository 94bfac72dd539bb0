"""The GPU nodes' kubelet Topology Manager policy against the pods that run on them (rule `numa-policy-admits`).

The policy is read from the GPU launch template's nodeadm NodeConfig (`spec.kubelet.config`,
components/aws/gpu_nodes.py); the pods from the record (every pod template that requests GPUs or
selects the GPU nodes). `single-numa-node` admits a pod only when one NUMA node holds all its
aligned resources, and rejects it otherwise (TopologyAffinityError; Kubernetes documentation,
"Control Topology Management Policies on a node", section "single-numa-node policy"):
- device hints apply to every pod: more GPUs than one NUMA node has (a whole-node p5/p4de pod: 8
  GPUs, 4 per NUMA node) is never admitted;
- CPU hints apply to Guaranteed pods with integer CPUs under the `static` CPU manager ("Control CPU
  Management Policies on the Node", "Static policy"): more CPUs than one NUMA node has is never
  admitted.
`none`, `best-effort` and `restricted` admit a whole-node pod: best-effort always, restricted when
the preferred (smallest) NUMA set is possible, and for 8 GPUs that set is both NUMA nodes.
A bring-your-own cluster records no launch template: its nodes' policies are not known here.
"""

from __future__ import annotations

import base64
import re
from typing import Any, Optional

from components.offline.resources import (INSTANCE_TYPE, LAUNCH_TEMPLATE, POD_TEMPLATES, Reads, Violation,
                                          gpu_node_groups, of_types, pod_requests, pods, policy_rule)
from components.stack import topology
from components.stack.labels import GPU

_SETTING = re.compile(r"^\s*(cpuManagerPolicy|topologyManagerPolicy):\s*(\S+)\s*$", re.M)
# Elastic mode (components/aws/karpenter.py): no GPU launch template; Karpenter's EC2NodeClass
# carries the same nodeadm NodeConfig in spec.userData, as plain text (karpenter_node_class.py).
EC2_NODE_CLASS = "kubernetes:karpenter.k8s.aws/v1:EC2NodeClass"


def _node_class_user_data(r: dict[str, Any]) -> Any:
    """The node class's userData as text; the record holds a multi-line string as its lines."""
    data = ((r["inputs"].get("spec") or {}).get("userData")) if r["type"] == EC2_NODE_CLASS else None
    if isinstance(data, list) and all(isinstance(x, str) for x in data):
        return "\n".join(data)
    return data


def _settings(lt: dict[str, Any]) -> dict[str, str]:
    if lt["type"] == EC2_NODE_CLASS:
        text = _node_class_user_data(lt)
        return dict(_SETTING.findall(text)) if isinstance(text, str) else {}
    data = lt["inputs"].get("userData")
    if not isinstance(data, str):
        return {}
    try:
        text = base64.b64decode(data, validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return {}
    return dict(_SETTING.findall(text))


def gpu_templates(resources: list[dict[str, Any]]) -> Optional[list[dict[str, Any]]]:
    """The launch templates of the GPU node groups, by name: each group's `launchTemplate.id`
    names its template (the render's `[known after deploy: <template>.id]`, a preview's real id).
    A group whose template cannot be matched leaves every template in play (never one picked by
    its place in the list). None when the record has no launch template (a bring-your-own cluster)."""
    classes = [r for r in resources if r["type"] == EC2_NODE_CLASS]
    templates = [r for r in resources if r["type"] == LAUNCH_TEMPLATE]
    if classes and not gpu_node_groups(resources):
        return sorted(classes, key=lambda r: r["name"])
    if not templates:
        return None
    by_id: dict[str, dict[str, Any]] = {}
    for lt in templates:
        by_id[f"[known after deploy: {lt['name']}.id]"] = lt
        if isinstance(lt["inputs"].get("id"), str):
            by_id[lt["inputs"]["id"]] = lt
    linked: dict[str, dict[str, Any]] = {}
    for g in gpu_node_groups(resources):
        lt = by_id.get(str((g["inputs"].get("launchTemplate") or {}).get("id")))
        if lt is None:
            return sorted(templates, key=lambda r: r["name"])
        linked[lt["name"]] = lt
    return [linked[k] for k in sorted(linked)] or sorted(templates, key=lambda r: r["name"])


def template_policies(resources: list[dict[str, Any]]) -> Optional[dict[str, dict[str, str]]]:
    """{launch template: {setting: value}} of the GPU node groups' templates (their nodeadm
    NodeConfig); None when the record has no launch template (a bring-your-own cluster)."""
    templates = gpu_templates(resources)
    return None if templates is None else {lt["name"]: _settings(lt) for lt in templates}


def _guaranteed_cpus(spec: dict[str, Any]) -> float:
    """Integer CPUs of a pod whose every container has CPU limit == request (0 otherwise)."""
    total = 0.0
    for c in spec.get("containers") or []:
        res = c.get("resources") or {}
        req, lim = (res.get("requests") or {}).get("cpu"), (res.get("limits") or {}).get("cpu")
        if lim is None or (req is not None and str(req) != str(lim)):
            return 0.0
        try:
            cpus = float(str(lim))
        except ValueError:
            return 0.0
        if cpus != int(cpus):
            return 0.0
        total += cpus
    return total


# The kubelet settings: in the userData of a launch template (the GPU group's sets them; a template
# without userData, e.g. the system group's, is fine). Unknown until deploy: not an error.
USER_DATA = Reads("the kubelet settings (a launch template's userData, nodeadm NodeConfig)",
                  of_types(LAUNCH_TEMPLATE, EC2_NODE_CLASS),
                  lambda r: isinstance(r["inputs"].get("userData"), str) or isinstance(_node_class_user_data(r), str),
                  every=False)


@policy_rule("numa-policy-admits", "the GPU nodes' Topology Manager policy admits every pod that runs there "
                            "(single-numa-node rejects a pod wider than one NUMA node)",
      reads=(POD_TEMPLATES, INSTANCE_TYPE, USER_DATA))
def _numa_policy(resources, ctx):
    per = template_policies(resources)
    if not per or ctx.instance is None:
        return
    # Each GPU node group's template on its own: two groups may set different policies.
    for template, settings in sorted(per.items()):
        yield from _numa_checks(resources, ctx, template if len(per) > 1 else "", settings)


def _numa_checks(resources, ctx, template: str, settings: dict[str, str]):
    policy = settings.get("topologyManagerPolicy", "none")
    if policy != "single-numa-node":
        return
    it = ctx.instance
    where = f" (launch template {template})" if template else ""
    per_numa = topology.gpus_per_numa_node(it)
    cpus_per_numa = it.vcpu / topology.numa_nodes(it)
    static = settings.get("cpuManagerPolicy") == "static"
    for p in pods(resources):
        selector = p.node_selector
        on_gpu = p.requests_gpu() or ctx.on_gpu_nodes(selector)
        if not on_gpu:
            continue
        gpus = pod_requests(p).get(GPU, 0)
        if gpus > per_numa:
            yield Violation("numa-policy-admits", p.owner,
                            f"topologyManagerPolicy single-numa-node{where} on {it.name} ({topology.numa_nodes(it)} NUMA "
                            f"nodes, {per_numa} GPUs each) rejects this pod's {gpus:g} GPUs at admission "
                            f"(TopologyAffinityError; {topology.DOCS})",
                            "leave rltrain:gpuNodes.topology.topologyManagerPolicy unset (derived: best-effort) or "
                            "use best-effort / restricted")
            continue
        cpus = _guaranteed_cpus(p.spec) if static else 0.0
        if cpus > cpus_per_numa:
            yield Violation("numa-policy-admits", p.owner,
                            f"topologyManagerPolicy single-numa-node{where} with cpuManagerPolicy static rejects this "
                            f"Guaranteed pod's {cpus:g} exclusive CPUs: one NUMA node of {it.name} has "
                            f"{cpus_per_numa:g} ({topology.DOCS})",
                            "leave rltrain:gpuNodes.topology unset, or use best-effort")
