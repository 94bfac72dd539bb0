"""GPU failures as they really happen (issue 45), through the render: what the pods a reboot repair,
a replacement, an XID crash and a genuine crash leave behind do to the run's budgets, the waits
derived from a repair, the deadline's room for the restarts the bounds allow, the head's access to
its nodes, the ledger's scope and the kubelet's graceful shutdown on the GPU nodes.

The pod failure policy is evaluated the way the Job controller does (Kubernetes v1.35.4
pkg/controller/job/pod_failure_policy.go: the first rule that matches decides, none matching is
Count) by test_run_recovery.action."""

from __future__ import annotations

import base64

import pytest
import yaml
from support import obj, objects, rendered
from test_kueue_support import variant
from test_run_recovery import action

from components.aws import gpu_nodes
from components.k8s import kueue
from components.scripts import ray_launcher, resume_wrapper
from components.scripts._ray_launcher import node_health
from components.stack import node_repair, validate
from components.workloads import node_health_access, runs, trainer

REPAIR = 30 * 60 + 10 * 60  # EKS's longest repair wait (node-repair.adoc) + the project's cold-pull margin


def pod(code: int, *conditions: str) -> dict:
    return {"conditions": set(conditions), "exit": {"trainer": code}}


# What each failure leaves on the run's pods.
# A reboot repair with graceful node shutdown: the kubelet marks the pods Failed, DisruptionTarget
# (TerminationByKubelet) before stopping them; the trainer's code on SIGTERM is whatever it is.
REBOOTED = pod(143, "DisruptionTarget")
# A replacement: the pod garbage collector marks the pods of the deleted node (DeletionByPodGC).
REPLACED = pod(137, "DisruptionTarget")
# A reboot without graceful shutdown (or a hard reboot before the kubelet could write the
# condition): ContainerStatusUnknown, exit 137, no condition (pkg/kubelet/kubelet_pods.go).
REBOOTED_HARD = pod(137)
# The launcher's node-loss exits: a head whose trainer failed on an unhealthy node or lost peer (9),
# a worker that lost its head (6), waits that ran out (3 the head, 4 a worker).
NODE_LOSS_EXITS = {"peer lost or node unhealthy": ray_launcher.EXIT_PEER_LOST, "head lost": ray_launcher.EXIT_HEAD_LOST,
                   "nodes did not come": ray_launcher.EXIT_NODES_TIMEOUT,
                   "head unreachable": ray_launcher.EXIT_HEAD_UNREACHABLE}


def policy(r, name: str) -> dict:
    return obj(r, "Job", name)["spec"]["podFailurePolicy"]


def env(c: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def trainer_container(doc: dict) -> dict:
    return next(c for c in doc["spec"]["template"]["spec"]["containers"] if c["name"] == "trainer")


@pytest.mark.parametrize("what", sorted(NODE_LOSS_EXITS))
def test_the_node_loss_exits_are_not_counted_a_genuine_exit_1_is(what):
    p = policy(rendered("p5"), "rltrain-multinode")
    assert action(p, pod(NODE_LOSS_EXITS[what])) == "Ignore"
    assert action(p, pod(1)) == "Count"  # a trainer bug: within workloads.retries
    assert action(p, pod(resume_wrapper.EXIT_NO_PROGRESS)) == "FailJob"  # the ledger's bound


@pytest.mark.parametrize("job", ["rltrain-multinode", "rltrain-training"])
def test_a_repair_costs_no_retry_when_the_pods_carry_disruption_target(job):
    p = policy(rendered("p5"), job)
    assert action(p, REBOOTED) == action(p, REPLACED) == "Ignore"
    # Without the condition a lost container is indistinguishable from an OOM kill (137): counted.
    # Graceful node shutdown on the GPU nodes (below) is what gives a reboot its condition.
    assert action(p, REBOOTED_HARD) == "Count"


def test_the_waits_are_ignored_only_where_the_start_ledger_bounds_them():
    """Exits 3 and 4 mean a peer that did not come within the time a repair takes; the head records
    its own in the start ledger. A run without a resume mapping has no ledger: they count there."""
    cfg = validate.load({"gpuNodes": {"instanceType": "p5.48xlarge", "count": 2}, "cluster": {"endpointPublicAccess": False},
                         "workloads": {"image": "repo/img:1", "trainer": "none", "command": ["python", "train.py"],
                                       "multiNode": {"enabled": True}}}, region=None)
    assert not trainer.resume_mapped(cfg)
    rules = runs.pod_failure_policy(cfg, ray=True).rules
    ignored = next(r for r in rules if r.action == "Ignore" and r.on_exit_codes).on_exit_codes.values
    assert ignored == [6, 9]
    assert runs.ray_ignored_exit_codes(rendered("p5").cfg) == {3, 4, 6, 9}


def test_the_launcher_waits_last_as_long_as_a_repair():
    r = rendered("p5")
    e = env(trainer_container(obj(r, "Job", "rltrain-multinode")))
    assert e["RAY_NODE_WAIT_SECONDS"] == e["RAY_JOIN_DEADLINE_SECONDS"] == str(REPAIR) == "2400"
    assert node_repair.repair_bound_seconds() == REPAIR
    # A set nodeWaitSeconds still wins for the head's wait.
    v = variant("p5", {"rltrain:workloads": {"multiNode": {"nodeWaitSeconds": 900}}})
    assert env(trainer_container(obj(v, "Job", "rltrain-multinode")))["RAY_NODE_WAIT_SECONDS"] == "900"
    # Kueue evicts a gang that is not whole again within its recovery timeout: longer than a repair,
    # so a repair within EKS's documented time never costs a requeue.
    assert kueue.PODS_READY_TIMEOUT_SECONDS >= node_repair.repair_bound_seconds()


@pytest.mark.parametrize("restarts", [3, 0])
def test_the_deadline_leaves_room_for_the_restarts_it_allows(restarts):
    r = rendered("p5") if restarts == 3 else variant("p5", {"rltrain:workloads": {"infrastructureRestarts": 0}})
    w = r.cfg.workloads
    expected = w.max_run_minutes * 60 + 600 + restarts * REPAIR
    for name in ("rltrain-multinode", "rltrain-training"):
        assert obj(r, "Job", name)["spec"]["activeDeadlineSeconds"] == expected


def test_only_the_launcher_pods_get_the_api_token_and_only_to_read_pods_and_nodes():
    r = rendered("p5")
    multinode, single = obj(r, "Job", "rltrain-multinode"), obj(r, "Job", "rltrain-training")
    assert multinode["spec"]["template"]["spec"]["automountServiceAccountToken"] is True
    assert single["spec"]["template"]["spec"]["automountServiceAccountToken"] is False
    assert "CKV_K8S_38=automountServiceAccountToken true" in " ".join(multinode["metadata"]["annotations"].values())
    sa = r.cfg.training.service_account
    [role] = [o for o in objects(r, "Role") if o["metadata"]["name"] == "rltrain-multinode-node-health"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    [cluster_role] = objects(r, "ClusterRole")
    assert cluster_role["metadata"]["name"] == node_health_access.cluster_role_name(r.cfg) == "rltrain-run-node-reader"
    assert cluster_role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    for kind, name in (("RoleBinding", role["metadata"]["name"]), ("ClusterRoleBinding", "rltrain-run-node-reader")):
        [b] = [o for o in objects(r, kind) if o["metadata"]["name"] == name]
        assert b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": "rltrain"}]
    # The selector names exactly the run's pods.
    e = env(trainer_container(multinode))
    key, _, value = e["RUN_POD_SELECTOR"].partition("=")
    assert multinode["spec"]["template"]["metadata"]["labels"][key] == value == "rltrain-multinode"
    # What the launcher reads: the agent's conditions EKS repairs, by the same names.
    assert set(node_health.AGENT_CONDITIONS) == set(node_repair.REPAIR_WAIT_SECONDS) - {"Ready"}


def test_the_ledger_counts_the_current_jobs_starts_by_its_uid():
    r = rendered("p5")
    for name in ("rltrain-multinode", "rltrain-training"):
        e = env(trainer_container(obj(r, "Job", name)))
        assert e["RESUME_LEDGER_SCOPE"] == {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/controller-uid']"}}
        assert e["RESUME_LEDGER"].endswith("/.rltrain/starts.jsonl")


def node_config(user_data_mime: str) -> dict:
    part = user_data_mime.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("\n--", 1)[0]
    return yaml.safe_load(part)


def test_the_gpu_nodes_shut_down_gracefully_longer_than_any_trainer_grace():
    """A reboot repair becomes a disruption: the kubelet's graceful node shutdown, in the nodeadm
    config of the managed group and of Karpenter's EC2NodeClass (the same document)."""
    r = rendered("p5")
    [lt] = [x for x in r.resources if x["type"] == "aws:ec2/launchTemplate:LaunchTemplate"
            and x["inputs"].get("userData")]
    kubelet = node_config(base64.b64decode(lt["inputs"]["userData"]).decode())["spec"]["kubelet"]["config"]
    assert kubelet["shutdownGracePeriod"] == "3630s" and kubelet["shutdownGracePeriodCriticalPods"] == "30s"
    # Non-critical pods (the training PriorityClass is below system-node-critical) get the difference,
    # at least the largest terminationGracePeriodSeconds a run may set.
    pods_part = int(kubelet["shutdownGracePeriod"][:-1]) - int(kubelet["shutdownGracePeriodCriticalPods"][:-1])
    assert pods_part >= node_repair.training_grace_upper_bound() >= r.cfg.workloads.termination_grace_period_seconds
    elastic = rendered("p5-elastic")
    [nc] = [o for o in elastic.manifests if o["kind"] == "EC2NodeClass" and o["metadata"]["name"] == "rltrain-gpu"]
    assert node_config(nc["spec"]["userData"])["spec"]["kubelet"]["config"] == kubelet
    # Every GPU node group gets it, whatever else its NodeConfig holds.
    args = gpu_nodes.GpuNodeGroupArgs(cluster_name="c", instance_type="g6.12xlarge", count=1, efa=False,
                                      root_volume_gib=100, root_volume_throughput=125, root_volume_iops=3000,
                                      local_storage_raid0=False, fast_image_pull=False)
    assert "shutdownGracePeriod: 3630s" in gpu_nodes.node_config_yaml(args)
