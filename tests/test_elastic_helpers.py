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
