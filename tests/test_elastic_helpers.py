"""Elastic mode where the simulated cluster cannot look (issue 44): the namespace quota, the repair
alert on an idle stack, and where the CPU-only pods go. Through the mock engine (the render)."""

from __future__ import annotations

from support import obj, objects, rendered
from test_kueue_support import variant

from components.k8s import monitoring

STACK = "p5-elastic"
# maxNodes above count: the case the committed stack hides (count = maxNodes = 2).
WIDER = {"rltrain:gpuNodes": {"elastic": {"enabled": True, "maxNodes": 3, "idleMinutes": 10}}}


def _gpu_quota(r) -> str:
    return obj(r, "ResourceQuota", "gpu-quota")["spec"]["hard"]["requests.nvidia.com/gpu"]


def _cluster_queue_gpus(r) -> int:
    [cq] = objects(r, "ClusterQueue")
    return next(res["nominalQuota"] for g in cq["spec"]["resourceGroups"] for f in g["flavors"]
                for res in f["resources"] if res["name"] == "nvidia.com/gpu")


def test_namespace_gpu_quota_is_the_maximum_as_kueue_admits_up_to_it():
    """Item 3: Kueue's quota is maxNodes' GPUs; the namespace quota was gpuNodes.count's, so the API
    server refused the pods of a second run Kueue had admitted ("exceeded quota")."""
    r = variant(STACK, WIDER)
    assert _cluster_queue_gpus(r) == "24"
    assert _gpu_quota(r) == "24"
    # The fixed stack keeps count x GPUs; the committed elastic one (max = count) too.
    assert _gpu_quota(rendered("p5")) == "16" and _gpu_quota(rendered(STACK)) == "16"


def test_no_repair_in_progress_alert_on_an_elastic_stack():
    """Item 4: `count(gpu nodes) < gpuNodes.count` fired on every idle elastic stack (zero nodes is
    its normal state), blaming node repair. The fixed stack keeps the alert."""
    def alerts(stack):
        return [r.get("alert") for g in obj(rendered(stack), "PrometheusRule", "rltrain")["spec"]["groups"]
                for r in g["rules"]]
    assert "RltrainGpuNodeRepairInProgress" not in alerts(STACK) and "RltrainGpuNodeUnhealthy" in alerts(STACK)
    assert "RltrainGpuNodeRepairInProgress" in alerts("p5")
    assert monitoring.rules_args(monitoring.monitoring_args(rendered(STACK).cfg)).gpu_node_count == 0


# --- item 2: where the CPU-only pods of an elastic stack go ---------------------------------------

from components.offline import deploy_model as dm  # noqa: E402


def _landing(r, owner: str) -> set[str]:
    rows = r.resources
    eps = dm.endpoints(rows)
    [t] = [t for t in dm.pod_templates(rows) if t.owner == owner]
    return {ep.name for role in ("system nodes", "GPU nodes", "CPU nodes") for ep in eps.get(role, []) if
            dm.lands_on(t.spec, ep)}


def test_elastic_staging_lands_on_the_cpu_node_pool_never_on_a_gpu_node():
    """Item 2: the staging Job (2 CPU) required the GPU role, so Karpenter launched a p5.48xlarge
    (~$55/h) for a download and `up` waited for it (or failed with no p5 in the AZ)."""
    r = rendered(STACK)
    tmpl = obj(r, "Job", "rltrain-staging")["spec"]["template"]
    [term] = tmpl["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "role", "operator": "In", "values": ["rltrain-cpu"]}]
    assert tmpl["spec"]["tolerations"] == [{"key": "rltrain/cpu-only", "operator": "Exists", "effect": "NoSchedule"}]
    assert tmpl["metadata"]["annotations"]["karpenter.sh/do-not-disrupt"] == "true"
    assert _landing(r, "Job/rltrain-staging") == {"NodePool rltrain-cpu"}
    # A fixed stack keeps staging on its GPU nodes (they exist; the image pulled there serves training).
    assert _landing(rendered("p5"), "Job/rltrain-staging") == {"gpu-nodes"}


def test_on_an_elastic_stack_only_queued_runs_can_bring_up_a_gpu_node():
    """`up` never waits on a GPU launch that is not a queued run's: every pod template that can land
    on the GPU NodePool carries Kueue's queue label (or is a DaemonSet, which launches nothing)."""
    r = rendered(STACK)
    rows = r.resources
    [gpu_pool] = [ep for ep in dm.endpoints(rows)["GPU nodes"]]
    queued = {f"{o['kind']}/{o['metadata']['name']}" for o in r.manifests
              if "kueue.x-k8s.io/queue-name" in (o["metadata"].get("labels") or {})}
    on_gpu = {t.owner for t in dm.pod_templates(rows) if dm.lands_on(t.spec, gpu_pool)}
    assert on_gpu and all(o.split("/")[0] == "DaemonSet" or "/".join(o.split("/")[:2]) in queued for o in on_gpu), on_gpu


def test_cpu_node_pool_and_its_class():
    r = rendered(STACK)
    pool = obj(r, "NodePool", "rltrain-cpu")["spec"]
    t = pool["template"]
    assert t["metadata"]["labels"] == {"role": "rltrain-cpu"}
    assert t["spec"]["taints"] == [{"key": "rltrain/cpu-only", "value": "true", "effect": "NoSchedule"}]
    req = {x["key"]: (x["operator"], x["values"]) for x in t["spec"]["requirements"]}
    assert req["karpenter.k8s.aws/instance-category"] == ("In", ["c", "m", "r"])
    assert req["karpenter.sh/capacity-type"] == ("In", ["on-demand"])
    assert req["topology.kubernetes.io/zone"] == ("In", ["us-east-1a"])
    assert pool["limits"] == {"cpu": "32"} and pool["disruption"] == {"consolidationPolicy": "WhenEmpty",
                                                                      "consolidateAfter": "1m"}
    assert t["spec"]["nodeClassRef"] == {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "rltrain-cpu"}
    spec = obj(r, "EC2NodeClass", "rltrain-cpu")["spec"]
    # The cluster's security group only (FSx admits it; no EFA rules needed), the GPU subnet.
    assert spec["securityGroupSelectorTerms"] == [
        {"id": "[known after deploy: cluster-eks.eksCluster.vpcConfig.clusterSecurityGroupId]"}]
    assert spec["subnetSelectorTerms"] == [{"id": "[known after deploy: network-private-us-east-1a.id]"}]
    assert "networkInterfaces" not in spec and "placementGroupSelector" not in spec and "userData" not in spec
    assert spec["blockDeviceMappings"][0]["ebs"]["volumeSize"] == "200Gi"
    # A fixed stack has none.
    assert not [m for m in rendered("p5").manifests if m["kind"] == "NodePool"]


def test_serving_on_an_elastic_stack_is_refused():
    from components.stack import validate
    cfg = rendered(STACK).cfg
    w = cfg.workloads.model_copy(update={"serving": cfg.workloads.serving.model_copy(update={"enabled": True})})
    problems = validate._elastic(cfg.model_copy(update={"workloads": w}))
    [(key, message)] = [(k, m) for k, m in problems if "serving" in k]
    assert key == "rltrain:workloads.serving.enabled" and "outside the Kueue queue" in message
    assert validate._elastic(cfg) == [] and validate._elastic(rendered("dev-reasoning").cfg) == []
