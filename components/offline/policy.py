"""Policy rules: pure functions over the resources a stack registers.

One implementation, run in three places: by the offline render (which refuses to write a stack that
breaks a rule), by the test suite, and by the CrossGuard pack in `policy/` for
`pulumi preview --policy-pack policy`. Every rule sees the same resource view: a dict with `type`,
`name`, `inputs` (engine wire form, camelCase) and `options` (`protect`, ...) — a row of
`rendered/<stack>/resources.json` (components/offline/resources.py).

This module holds the pod and AWS rules, and `RULES`: every rule of the rule modules it lists (this
one, deploy_model.py, schedule.py, numa.py), which `evaluate` runs.

The instance type the workloads are sized for is read from the training Namespace annotation
(`rltrain/gpu-instance-type`), so the rules hold on a bring-your-own cluster too.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import re
from typing import Any, Iterable, Iterator, Optional

from components.stack import catalog, trainers
from components.offline.mock_engine import UNKNOWN as UNKNOWN_VALUE
from components.stack.secrets_scan import SECRET_LIKE

from components.offline import deploy_model, numa, schedule
from components.offline.resources import (GPU_TAINT, INSTANCE_TYPE, LAUNCH_TEMPLATE, NODE_GROUP, POD_TEMPLATES, Pod,
                                          PolicyRule, Reads, Resource, Violation, _ref, _resources, context, inputs_of,
                                          k8s_objects, of_types, pod_requests, pods, policy_rule, quantity, spec_of,
                                          unknown, unread)
from components.stack.labels import EFA, GPU, HUGEPAGES

_EFA_ENV = re.compile(r"^(FI_PROVIDER|FI_EFA_.*)$")
STATEFUL = ("aws:fsx/lustreFileSystem:LustreFileSystem", "aws:kms/key:Key")

# What the rules below read besides the pod templates (resources.py: POD_TEMPLATES, INSTANCE_TYPE).
# The node groups' labels and taints (both inputs and outputs of aws.eks.NodeGroup): at least one
# node group sends them (a node group without a GPU taint is reported by the rule itself).
NODE_GROUPS = Reads("the labels and taints of the node groups", of_types(NODE_GROUP),
                    lambda r: isinstance(r["inputs"].get("labels"), dict)
                    or isinstance(r["inputs"].get("taints"), list), every=False)
# The engine sends every resource's options (pulumi-policy PolicyResource.opts); the view keeps `protect`.
PROTECT = Reads("the protect option", of_types(*STATEFUL), lambda r: "protect" in (r.get("options") or {}))


def _device_requests(resources: list[Resource], device: str) -> Iterator[tuple[str, Any, Any]]:
    """(container ref, limit, request) of every container that names `device`."""
    for p in pods(resources):
        for c in p.containers:
            res = _resources(c)
            lim, req = (res.get("limits") or {}).get(device), (res.get("requests") or {}).get(device)
            if lim is not None or req is not None:
                yield f"{p.owner}/{c.get('name')}", lim, req


@policy_rule("gpu-count", "GPU containers: nvidia.com/gpu limit = request = the instance's GPUs (a Deployment's "
                   "serving replica: a divisor of them)", reads=(POD_TEMPLATES, INSTANCE_TYPE))
def _gpu_count(resources, ctx):
    if ctx.instance is None:
        return
    want = ctx.instance.gpu_count
    for ref, lim, req in _device_requests(resources, GPU):
        # A serving replica takes a share of a node (components/workloads/serving.py): whole
        # replicas per node, so no GPU is left over between them.
        fraction = ref.startswith("Deployment/") and lim is not None and 0 < quantity(lim) <= want \
            and want % int(quantity(lim)) == 0
        if lim is None or (int(quantity(lim)) != want and not fraction) or (req is not None and quantity(req) != quantity(lim)):
            yield Violation("gpu-count", ref, f"nvidia.com/gpu limit {lim}, request {req}; {ctx.instance.name} has {want}",
                            f"request and limit {want} GPUs (derived from the catalog, never typed)")


@policy_rule("efa-count", "EFA devices requested = the instance's EFA devices", reads=(POD_TEMPLATES, INSTANCE_TYPE))
def _efa_count(resources, ctx):
    if ctx.instance is None:
        return
    want = ctx.instance.efa_devices
    for ref, lim, req in _device_requests(resources, EFA):
        got = quantity(lim if lim is not None else req)
        if got != want or (req is not None and lim is not None and quantity(req) != quantity(lim)):
            yield Violation("efa-count", ref, f"{EFA} limit {lim}, request {req}; {ctx.instance.name} has {want}",
                            f"request all {want} EFA devices of the instance (a p5 copy of a p4de "
                            "manifest uses 4 of 32)")


@policy_rule("efa-env-needs-efa", "EFA/NCCL-over-EFA environment only where EFA devices are requested",
      reads=(POD_TEMPLATES,))
def _efa_env(resources, ctx):
    for p in pods(resources):
        for c in p.containers:
            env = {e.get("name", "") for e in c.get("env") or []}
            efa_env = sorted(n for n in env if _EFA_ENV.match(n))
            has_efa = EFA in ((_resources(c).get("limits") or {}) | (_resources(c).get("requests") or {}))
            if efa_env and not has_efa and p.requests_gpu():
                yield Violation("efa-env-needs-efa", f"{p.owner}/{c.get('name')}",
                                f"sets {', '.join(efa_env)} without requesting {EFA}: NCCL silently falls "
                                "back to TCP (~3 GB/s instead of ~440)",
                                f"request {EFA} or drop the EFA variables")


@policy_rule("shm-memory", "every GPU pod mounts a memory-backed /dev/shm", reads=(POD_TEMPLATES,))
def _shm(resources, ctx):
    for p in pods(resources):
        if not p.requests_gpu():
            continue
        mem_volumes = {v.get("name") for v in p.spec.get("volumes") or []
                       if (v.get("emptyDir") or {}).get("medium") == "Memory"}
        mounted = any(m.get("mountPath") == "/dev/shm" and m.get("name") in mem_volumes
                      for c in p.containers for m in c.get("volumeMounts") or [])
        if not mounted:
            yield Violation("shm-memory", p.owner, "no memory-backed emptyDir at /dev/shm: DataLoader "
                            "workers and NCCL fail with 'Bus error'",
                            "mount an emptyDir with medium: Memory at /dev/shm")


@policy_rule("image-pinned", "a specific image tag or digest; no imagePullPolicy: Always", reads=(POD_TEMPLATES,))
def _image(resources, ctx):
    for p in pods(resources):
        for c in p.containers + list(p.spec.get("initContainers") or []):
            image = str(c.get("image", ""))
            last = image.rsplit("/", 1)[-1]
            # Unknown before deploy: the image the stack builds (repository:tag@digest, composed by
            # components/aws/image.py once the build's digest exists): pinned by construction.
            pinned = "@sha256:" in image or (":" in last and not last.endswith(":latest"))
            if not pinned and not unknown(image):
                yield Violation("image-pinned", f"{p.owner}/{c.get('name')}", f"image {image!r} is not pinned",
                                "use a specific tag or @sha256 digest (rltrain:workloads.image)")
            if c.get("imagePullPolicy") == "Always":
                yield Violation("image-pinned", f"{p.owner}/{c.get('name')}",
                                "imagePullPolicy Always re-pulls a 15-20 GB image on every start",
                                "use IfNotPresent with a pinned tag")


@policy_rule("pod-fits-node", "the pod's requests plus the node's DaemonSets fit the node's allocatable",
      reads=(POD_TEMPLATES, INSTANCE_TYPE))
def _fits(resources, ctx):
    if ctx.instance is None:
        return
    for p in pods(resources):
        if not p.requests_gpu():
            continue
        for problem in fit_problems(p, ctx.instance, efa=ctx.efa):
            yield Violation("pod-fits-node", p.owner, problem,
                            "lower the request, or let the pod builder size it from the catalog")


def fit_problems(p: Pod, it: catalog.InstanceType, *, efa: bool = False) -> list[str]:
    """What does not fit: CPU and memory with the DaemonSets against the kubelet's allocatable,
    which on EFA nodes is net of the driver's pre-allocated huge pages (a separate resource the
    pod requests from the pool); GPUs and EFA devices against the instance's."""
    alloc = it.allocatable(efa=efa)
    req = pod_requests(p)
    problems = []
    cpu = req.get("cpu", 0.0) + catalog.DAEMONSET_CPU_MILLI / 1000
    if cpu > alloc.cpu:
        problems.append(f"CPU {cpu:.2f} (with DaemonSets) > allocatable {alloc.cpu:.2f}")
    mem_mib = req.get("memory", 0.0) / 2**20 + catalog.DAEMONSET_MEMORY_MIB
    if mem_mib > alloc.memory_mib_conservative:
        problems.append(f"memory {mem_mib / 1024:.1f} GiB (with DaemonSets) > allocatable "
                        f"{alloc.memory_gib_conservative:.1f} GiB"
                        + (f" (after {alloc.hugepages_2mi_mib} MiB of EFA huge pages)" if alloc.hugepages_2mi_mib else ""))
    huge_mib = req.get(HUGEPAGES, 0.0) / 2**20
    if huge_mib > alloc.hugepages_2mi_mib:
        problems.append(f"{HUGEPAGES} {huge_mib:g} MiB > the node's pool of {alloc.hugepages_2mi_mib} MiB"
                        + ("" if efa else " (huge pages are pre-allocated only with the EFA driver)"))
    for res, have in ((GPU, it.gpu_count), (EFA, it.efa_devices)):
        if req.get(res, 0) > have:
            problems.append(f"{res} {req[res]:g} > {have} on {it.name}")
    return problems


@policy_rule("efa-hugepages", "pods using EFA request hugepages-2Mi for libfabric or switch huge pages off",
      reads=(POD_TEMPLATES,))
def _efa_hugepages(resources, ctx):
    for p in pods(resources):
        for c in p.containers:
            res = _resources(c)
            if EFA not in {**(res.get("limits") or {}), **(res.get("requests") or {})}:
                continue
            env = {e.get("name"): e.get("value") for e in c.get("env") or []}
            asks = HUGEPAGES in (res.get("limits") or {})
            if not asks and env.get("FI_EFA_USE_HUGE_PAGE") != "0":
                yield Violation("efa-hugepages", f"{p.owner}/{c.get('name')}",
                                f"requests {EFA} but no {HUGEPAGES}: libfabric's EFA provider maps huge pages "
                                "for its buffers and fails in a pod whose huge-page limit is 0",
                                f"request {HUGEPAGES}: {catalog.EFA_POD_HUGEPAGES_MIB}Mi (the pod builder does), "
                                "or set FI_EFA_USE_HUGE_PAGE=0")


def _required_hostname_anti_affinity(p: Pod) -> bool:
    terms = (((p.spec.get("affinity") or {}).get("podAntiAffinity") or {})
             .get("requiredDuringSchedulingIgnoredDuringExecution") or [])
    return any(t.get("topologyKey") == "kubernetes.io/hostname" for t in terms)


@policy_rule("one-pod-per-node", "multi-node runs place one pod per node", reads=(POD_TEMPLATES, INSTANCE_TYPE))
def _one_per_node(resources, ctx):
    for p in pods(resources):
        # A Deployment's replicas are independent servers, not ranks of one run (serving.py).
        if p.replicas < 2 or not p.requests_gpu() or p.kind == "Deployment":
            continue
        whole_node = ctx.instance is not None and pod_requests(p).get(GPU, 0) == ctx.instance.gpu_count
        if not (_required_hostname_anti_affinity(p) or whole_node):
            yield Violation("one-pod-per-node", p.owner, f"{p.replicas} GPU pods may share a node",
                            "required podAntiAffinity on kubernetes.io/hostname, or request every GPU")


def run_placement(p: Pod) -> Optional[tuple[int, int, dict[str, list[tuple[int, int]]]]]:
    """(nodes, GPUs per node, component -> GPU rank ranges) of a multi-node run of a profiled
    trainer config (components/stack/trainers.py), from its pod env: the placement overrides in
    the profile's overrides variable, else the config's own single-node placement. None for
    anything else."""
    for c in p.containers:
        env = {e.get("name"): e.get("value") for e in c.get("env") or [] if isinstance(e.get("value"), str)}
        try:
            nodes, gpus = int(env.get("NUM_NODES", "1")), int(env.get("NUM_GPUS", "0"))
        except ValueError:
            continue
        tc = trainers.RLINF.configs.get(env.get("CONFIG_NAME", ""))
        ray_run = p.kind == "RayJob" or "RAY_HEAD_HOST" in env  # a training run, not a per-node check
        if not ray_run or nodes < 2 or gpus < 1 or tc is None or not tc.placement:
            continue
        ranks = {comp: [r] for comp, r in tc.placement.items()}
        prefix = "cluster.component_placement."
        for word in (env.get(trainers.RLINF.overrides_env) or "").split():
            key, _, value = word.partition("=")
            if key.startswith(prefix):
                ranks[key[len(prefix):]] = trainers.parse_placement(value)
        return nodes, gpus, ranks
    return None


@policy_rule("placement-uses-every-node", "a multi-node run's component placement uses a GPU of every node",
      reads=(POD_TEMPLATES,))
def _placement(resources, ctx):
    seen = set()
    for p in pods(resources):
        found = run_placement(p)
        # One verdict per run object (a RayJob's head and workers carry the same env): keyed by the
        # row, not the run's name, which two objects in different namespaces or kinds may share.
        if found is None or p.row in seen:
            continue
        seen.add(p.row)
        nodes, gpus, ranks = found
        idle = trainers.idle_nodes(ranks, nodes, gpus)
        if idle:
            yield Violation("placement-uses-every-node", p.owner,
                            f"placement {trainers.summary_text(ranks)} on {nodes} x {gpus} GPUs leaves node(s) "
                            f"{', '.join(map(str, idle))} idle (RLinf ranks are cluster-global)",
                            "derive the placement from nodes x GPUs (components/workloads/trainer.py); do not "
                            "override cluster.component_placement by hand", p.pulumi_name)


@policy_rule("schedules-on-gpu-nodes", "node selector (nodeSelector, required node affinity) and tolerations match a GPU "
      "node group of the stack",
      reads=(POD_TEMPLATES, NODE_GROUPS))
def _scheduling(resources, ctx):
    for p in pods(resources):
        if not p.requests_gpu():
            continue
        if not ctx.gpu_nodes_found:
            names = sorted(r["name"] for r in resources if r["type"] == NODE_GROUP)
            yield Violation("schedules-on-gpu-nodes", p.owner,
                            f"no node group of the stack carries the GPU taint {GPU_TAINT} (node groups: "
                            f"{', '.join(names)}): nothing to check its nodeSelector and tolerations against",
                            f"give the GPU node group the taint {GPU_TAINT}=true:NoSchedule "
                            "(components/aws/gpu_nodes.py does)")
            continue
        selector = p.node_selector
        tolerated = {t.get("key") for t in p.spec.get("tolerations") or []
                     if t.get("effect") in (None, "", "NoSchedule")}
        # Checked against every GPU node group: the pod is placeable when one of them takes it.
        problems = {g.name: _placement_problems(g, selector, tolerated) for g in ctx.gpu_groups}
        if any(not found for found in problems.values()):
            continue
        if len(problems) == 1:
            [(_, found)] = problems.items()
            for message, fix in found:
                yield Violation("schedules-on-gpu-nodes", p.owner, message, fix)
            continue
        yield Violation("schedules-on-gpu-nodes", p.owner, "fits none of the GPU node groups: " + "; ".join(
                        f"{name}: " + ", ".join(m for m, _ in found) for name, found in sorted(problems.items())),
                        "select on the labels of one GPU node group and tolerate its taints")


def _placement_problems(group, selector: dict[str, Any], tolerated: set) -> list[tuple[str, str]]:
    """(message, fix) of what keeps a pod with this nodeSelector and these tolerations off `group`."""
    out = []
    extra = {k: v for k, v in selector.items() if group.labels.get(k) != v}
    if extra:
        out.append((f"node selector {extra} matches no GPU node group (labels {group.labels})",
                    "select on the node group's labels (role: gpu-training)"))
    for taint in group.taints:
        if taint not in tolerated:
            out.append((f"does not tolerate taint {taint}",
                        f"add toleration {{key: {taint}, operator: Exists, effect: NoSchedule}}"))
    return out


@policy_rule("job-deadline", "every Job has a deadline", reads=(spec_of("Job", "MPIJob"),))
def _deadline(resources, ctx):
    for _, obj in k8s_objects(resources):
        spec = obj.get("spec") or {}
        if obj.get("kind") == "Job" and not spec.get("activeDeadlineSeconds"):
            yield Violation("job-deadline", _ref(obj), "no activeDeadlineSeconds: a hung collective burns "
                            "GPUs forever", "set a deadline (rltrain:workloads.maxRunMinutes + 10 min)")
        if obj.get("kind") == "MPIJob" and not (spec.get("runPolicy") or {}).get("activeDeadlineSeconds"):
            yield Violation("job-deadline", _ref(obj), "no runPolicy.activeDeadlineSeconds",
                            "set runPolicy.activeDeadlineSeconds")


@policy_rule("no-plain-secret-env", "secrets never appear as plain env values", reads=(POD_TEMPLATES,))
def _secret_env(resources, ctx):
    for p in pods(resources):
        for c in p.containers:
            for e in c.get("env") or []:
                if "value" in e and SECRET_LIKE.search(e.get("name", "")):
                    yield Violation("no-plain-secret-env", f"{p.owner}/{c.get('name')}",
                                    f"{e['name']} is a plain value in the pod spec",
                                    "use rltrain:training.secretEnv (a secretKeyRef)")


@policy_rule("stateful-protected", "FSx file systems and KMS keys are protected", reads=(PROTECT,))
def _protected(resources, ctx):
    for r in resources:
        if r["type"] in STATEFUL and not (r.get("options") or {}).get("protect"):
            yield Violation("stateful-protected", f"{r['type']} {r['name']}", "not protected: a destroy or a "
                            "replacement deletes it and its data", "set protect=True (and retain_on_delete)",
                            r["name"])


@policy_rule("pv-retain", "PersistentVolumes reclaim with Retain; the FSx claim is ReadWriteMany",
      reads=(spec_of("PersistentVolume", "PersistentVolumeClaim"),))
def _pv(resources, ctx):
    for _, obj in k8s_objects(resources):
        spec = obj.get("spec") or {}
        if obj.get("kind") == "PersistentVolume" and spec.get("persistentVolumeReclaimPolicy") != "Retain":
            yield Violation("pv-retain", _ref(obj), "reclaim policy is not Retain: deleting the claim "
                            "deletes the data", "persistentVolumeReclaimPolicy: Retain")
        if obj.get("kind") == "PersistentVolumeClaim" and "ReadWriteMany" not in (spec.get("accessModes") or []):
            yield Violation("pv-retain", _ref(obj), "not ReadWriteMany: pods on other nodes cannot mount it",
                            "accessModes: [ReadWriteMany]")


@policy_rule("imdsv2", "instance metadata requires IMDSv2", reads=(
    inputs_of(LAUNCH_TEMPLATE, what="the properties of every launch template (metadataOptions)"),))
def _imds(resources, ctx):
    for r in resources:
        if r["type"] == LAUNCH_TEMPLATE and \
                (r["inputs"].get("metadataOptions") or {}).get("httpTokens") != "required":
            yield Violation("imdsv2", f"launch template {r['name']}", "IMDSv1 allowed",
                            "metadata_options.http_tokens = required", r["name"])


EKS_CLUSTER = "aws:eks/cluster:Cluster"
EKS_COMPONENT = "eks:index:Cluster"


def endpoint_settings(resources: list[Resource]) -> list[tuple[str, str, Any, Any]]:
    """(resource label, pulumi name, endpointPublicAccess, publicAccessCidrs) of every EKS cluster.

    A real preview hands a stack policy the resources' outputs (pulumi/pulumi step_generator.go;
    pulumi-policy `PolicyResource.props`): pulumi-eks's `eks:index:Cluster` outputs hold none of
    these inputs, its child `aws:eks/cluster:Cluster` holds them in `vpcConfig` as input and output
    alike (pulumi-eks nodejs/eks/cluster/cluster.ts v4.3.0 sets vpcConfig.endpointPublicAccess and
    publicAccessCidrs). The offline render has no children of the remote component (FACTS "Pulumi
    facts that bite"); there the component's recorded inputs carry them.
    """
    found = []
    for r in resources:
        if r["type"] == EKS_CLUSTER:
            vpc = r["inputs"].get("vpcConfig") or {}
            if isinstance(vpc, dict) and ("endpointPublicAccess" in vpc or "publicAccessCidrs" in vpc):
                found.append((f"{EKS_CLUSTER} {r['name']}", r["name"], vpc.get("endpointPublicAccess", True),
                              vpc.get("publicAccessCidrs")))
    if not found:
        for r in resources:
            if r["type"] == EKS_COMPONENT and "endpointPublicAccess" in r["inputs"]:
                found.append((f"cluster {r['name']}", r["name"], r["inputs"].get("endpointPublicAccess"),
                              r["inputs"].get("publicAccessCidrs")))
    return found


def _has_endpoint_settings(r: Resource) -> Optional[bool]:
    if r["type"] == EKS_CLUSTER:
        vpc = r["inputs"].get("vpcConfig")
        return None if vpc == UNKNOWN_VALUE else isinstance(vpc, dict) and (
            "endpointPublicAccess" in vpc or "publicAccessCidrs" in vpc)
    return "endpointPublicAccess" in r["inputs"]


# Outputs of the component only (a real preview): reading them as "no CIDRs, so open" fired on every
# EKS stack; its child aws:eks/cluster:Cluster carries them (endpoint_settings).
ENDPOINT_SETTINGS = Reads(f"the endpoint settings (vpcConfig.endpointPublicAccess / publicAccessCidrs of an "
                          f"{EKS_CLUSTER}, or the {EKS_COMPONENT} inputs)", of_types(EKS_COMPONENT, EKS_CLUSTER),
                          _has_endpoint_settings, every=False)


@policy_rule("endpoint-not-open", "the cluster endpoint is not open to the world", reads=(ENDPOINT_SETTINGS,))
def _endpoint(resources, ctx):
    for label, name, public, cidrs in endpoint_settings(resources):
        if public is False:
            continue
        if cidrs == UNKNOWN_VALUE or (isinstance(cidrs, list) and UNKNOWN_VALUE in cidrs):
            continue  # not known before deploy (the pack reports it as unseen); never guessed open or closed
        if not cidrs or any(ipaddress.ip_network(c, strict=False).prefixlen == 0 for c in cidrs):
            yield Violation("endpoint-not-open", label,
                            f"public endpoint open to {cidrs or 'the internet (no CIDRs)'}",
                            "rltrain:cluster.publicAccessCidrs = your office/VPN CIDRs", name)


# The GPU node group's own guard (components/aws/gpu_nodes.py ignores ROLL_INPUTS and tags ALLOW_NODE_ROLL_TAG).
from components.stack.labels import ALLOW_NODE_ROLL_TAG, ROLL_INPUTS  # noqa: E402


def _gpu_node_group(r: Resource) -> bool:
    return r["type"] == NODE_GROUP and any(isinstance(t, dict) and t.get("key") == GPU_TAINT
                                           for t in (r["inputs"].get("taints") or []))


def _roll_guard_read(r: Resource) -> Optional[bool]:
    # The engine sends every resource's options (an empty ignoreChanges is no key in the view):
    # only a tag unknown before deploy is not read.
    return None if r["inputs"].get("tags") == UNKNOWN_VALUE else True


ROLL_GUARD = Reads("the GPU node groups' ignoreChanges option and tags", _gpu_node_group, _roll_guard_read)


@policy_rule("gpu-roll-opt-in", "a GPU node group rolls only with rltrain:gpuNodes.allowNodeRoll: without it, it ignores "
                         "a new launch template version and Kubernetes version", reads=(ROLL_GUARD,))
def _roll_opt_in(resources, ctx):
    for r in resources:
        if not _gpu_node_group(r):
            continue
        tags = r["inputs"].get("tags")
        if isinstance(tags, dict) and tags.get(ALLOW_NODE_ROLL_TAG) == "true":
            continue
        missing = [p for p in ROLL_INPUTS if p not in ((r.get("options") or {}).get("ignoreChanges") or ())]
        if missing:
            yield Violation("gpu-roll-opt-in", f"{r['type']} {r['name']}",
                            f"not opted in to node rolls, yet {', '.join(missing)} not in ignoreChanges: `pulumi up` "
                            "would roll every GPU node (and kill the runs on them) on a template or version change",
                            "ignore_changes=[launchTemplate.version, version] unless rltrain:gpuNodes.allowNodeRoll "
                            f"(which tags the group {ALLOW_NODE_ROLL_TAG}: true)", r["name"])


def evaluate(resources: list[Resource], rules: Optional[Iterable[str]] = None) -> list[Violation]:
    """Every violation of the rules (all, or those named), in an order that does not depend on the
    order of `resources`: by rule, then resource and message. A rule that finds nothing to read of
    what applies to the stack is itself a violation (`unread`)."""
    ctx = context(resources)
    out: list[Violation] = []
    # The registered resource of each violation, for CrossGuard's URN. A ref two rows share (a
    # name in two namespaces) names neither: attributing it to whichever came last would depend on
    # the order.
    rows: dict[str, set[str]] = {}
    for p in pods(resources):
        rows.setdefault(p.owner, set()).add(p.pulumi_name)
    for r, obj in k8s_objects(resources):
        rows.setdefault(_ref(obj), set()).add(r["name"])
    owners = {ref: next(iter(names)) if len(names) == 1 else "" for ref, names in rows.items()}
    for name in rules or RULES:
        rule = RULES[name]
        found = []
        for v in rule(resources, ctx):
            if not v.pulumi_name:
                key = next((o for o in sorted(owners, key=lambda o: (-len(o), o)) if v.resource.startswith(o)), None)
                v = dataclasses.replace(v, pulumi_name=owners.get(key, "") if key else "")
            found.append(v)
        found += unread(resources, rule)
        out += sorted(found, key=lambda v: (v.resource, v.message, v.pulumi_name, v.fix))
    return out


def fit_report(resources: list[Resource]) -> list[str]:
    """Per GPU pod: allocatable beside requests plus DaemonSets, with the headroom."""
    ctx = context(resources)
    it, a = ctx.instance, ctx.allocatable()
    if it is None or a is None:
        return []
    huge = (f", EFA huge pages {a.hugepages_2mi_mib} MiB taken out ({catalog.EFA_HUGEPAGES_2MI} x 2 MiB, "
            "EKS user guide; unverified on AL2023)") if a.hugepages_2mi_mib else ""
    lines = [f"fit on {it.name}: allocatable {a.cpu:.2f} CPU, {a.memory_gib_conservative:.1f} GiB "
             f"(nodeadm formula, after 7.5 % VM overhead{huge}), {it.gpu_count} GPU, {it.efa_devices} EFA; "
             f"DaemonSets {catalog.DAEMONSET_CPU_MILLI}m CPU, {catalog.DAEMONSET_MEMORY_MIB} MiB"]
    # By owner: the engine registers resources concurrently, so record order varies run to run.
    for p in sorted(pods(resources), key=lambda p: p.owner):
        if not p.requests_gpu():
            continue
        req = pod_requests(p)
        cpu = req.get("cpu", 0.0) + catalog.DAEMONSET_CPU_MILLI / 1000
        mem = req.get("memory", 0.0) / 2**30 + catalog.DAEMONSET_MEMORY_MIB / 1024
        lines.append(f"  {p.owner}: {req.get('cpu', 0):g} CPU, {req.get('memory', 0) / 2**30:.1f} GiB, "
                     f"{req.get(HUGEPAGES, 0) / 2**20:g} MiB huge pages, {req.get(GPU, 0):g} GPU, "
                     f"{req.get(EFA, 0):g} EFA -> headroom {a.cpu - cpu:.2f} CPU, "
                     f"{a.memory_gib_conservative - mem:.1f} GiB, "
                     f"{a.hugepages_2mi_mib - req.get(HUGEPAGES, 0) / 2**20:g} MiB huge pages")
    # Over time: which workload runs now, which waits behind which (components/offline/schedule.py).
    return lines + schedule.report(resources)


# --- every rule ----------------------------------------------------------------------------------


def rules_of(*namespaces: dict[str, Any]) -> dict[str, PolicyRule]:
    """name -> PolicyRule of every rule defined in the namespaces (a module's vars()), in their order
    and in definition order within each; one name for two rules is an error."""
    found: dict[str, PolicyRule] = {}
    for namespace in namespaces:
        for value in namespace.values():
            if isinstance(value, PolicyRule) and found.setdefault(value.name, value) is not value:
                raise ValueError(f"two policy rules named {value.name!r}")
    return found


# The rule modules, listed: this module's pod and AWS rules, the deploy model's (order, reachability,
# privilege), the schedule's (whole runs over time, what Kueue needs of a queued run) and the GPU
# nodes' Topology Manager policy. Their order is the order the rules run and the CrossGuard pack
# lists them (policy/pack.py).
RULES: dict[str, PolicyRule] = rules_of(globals(), vars(deploy_model), vars(schedule), vars(numa))
