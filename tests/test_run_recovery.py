"""The run comes back whole after a node failure (issue 31), through the mock engine: which pod
failures count against `workloads.retries`, what restarts the whole run, and the bound on
infrastructure restarts (`workloads.infrastructureRestarts`, Kueue's requeue limit).

The pod failure policy is evaluated here the way the Job controller does (Kubernetes v1.35
pkg/controller/job/pod_failure_policy.go matchPodFailurePolicy: the first rule that matches decides;
none matching is Count), on the pods a node failure and a trainer crash leave behind."""

from __future__ import annotations

import pytest
import yaml
from support import obj, rendered
from test_kueue_support import load_variant, variant

from components.k8s import kueue
from components.scripts import ray_launcher, resume_wrapper
from components.stack import validate

P5_RAYJOB = {"rltrain:workloads": {"multiNode": {"enabled": True, "form": "rayjob", "rayVersion": "2.60.0"}}}


def action(policy: dict, pod: dict) -> str:
    """The action the Job controller takes for a failed pod: `pod` has `conditions` (types that are
    True) and `exit` ({container: exit code})."""
    for rule in policy["rules"]:
        on = rule.get("onExitCodes")
        if on:
            codes = {c for name, c in pod["exit"].items() if c != 0
                     and on.get("containerName") in (None, name)}
            hit = codes & set(on["values"]) if on["operator"] == "In" else codes - set(on["values"])
            if hit:
                return rule["action"]
        for cond in rule.get("onPodConditions", ()):
            if cond["type"] in pod["conditions"] and cond.get("status", "True") == "True":
                return rule["action"]
    return "Count"


# What a node failure leaves: the pod GC marks the pods of a deleted node Failed with the
# DisruptionTarget condition (reason DeletionByPodGC), the taint manager those it evicts for a
# NoExecute taint (DeletionByTaintManager); the container's last exit code is whatever SIGKILL or
# the lost GPU made it.
NODE_LOST = {"conditions": {"DisruptionTarget"}, "exit": {"trainer": 137}}
TAINT_EVICTED = {"conditions": {"DisruptionTarget"}, "exit": {"trainer": 1}}
TRAINER_CRASH = {"conditions": set(), "exit": {"trainer": 1}}
HEAD_LOST = {"conditions": set(), "exit": {"trainer": ray_launcher.EXIT_HEAD_LOST}}
# The head's trainer failed on a worker's lost node: the head exits EXIT_PEER_LOST.
PEER_LOST = {"conditions": set(), "exit": {"trainer": ray_launcher.EXIT_PEER_LOST}}
USAGE_ERROR = {"conditions": set(), "exit": {"trainer": 2}}


def wait_for_pods_ready(r) -> dict:
    rel = next(x for x in r.resources if x["type"] == "kubernetes:helm.sh/v3:Release"
               and x["inputs"]["chart"] == kueue.chart_ref())
    text = rel["inputs"]["values"]["managerConfig"]["controllerManagerConfigYaml"]
    return yaml.safe_load("\n".join(text) if isinstance(text, list) else text)["waitForPodsReady"]


def job_spec(r, name: str) -> dict:
    return obj(r, "Job", name)["spec"]


@pytest.mark.parametrize("job", ["rltrain-multinode", "rltrain-training"])
def test_a_pod_lost_with_its_node_is_free_a_trainer_crash_counts(job):
    spec = job_spec(rendered("p5"), job)
    policy = spec["podFailurePolicy"]
    # A Job's pod failure policy needs restartPolicy Never (batch/v1 JobSpec.podFailurePolicy).
    assert spec["template"]["spec"]["restartPolicy"] == "Never"
    assert action(policy, NODE_LOST) == action(policy, TAINT_EVICTED) == "Ignore"
    assert action(policy, TRAINER_CRASH) == "Count"
    assert action(policy, USAGE_ERROR) == "FailJob"
    assert spec["backoffLimit"] == rendered("p5").cfg.workloads.retries


def test_the_multinode_run_restarts_whole_when_its_head_is_lost():
    """Indexed Job: the head's node fails (its pod Ignored and recreated); every worker then exits
    EXIT_HEAD_LOST (ray start --block loses its head), Ignored too and recreated: the whole Ray
    cluster starts again from the newest checkpoint and the failure budget is untouched."""
    spec = job_spec(rendered("p5"), "rltrain-multinode")
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    assert action(spec["podFailurePolicy"], HEAD_LOST) == "Ignore"
    # Not in the single-node Job: no Ray head there, so exit 6 is the trainer's own.
    assert action(job_spec(rendered("p5"), "rltrain-training")["podFailurePolicy"], HEAD_LOST) == "Count"


def test_the_multinode_run_restarts_whole_when_a_worker_is_lost_without_counting():
    """Indexed Job: a worker's node fails (its pod Ignored, DisruptionTarget); the trainer on the
    head fails on the lost peer and the head, finding fewer than NUM_NODES Ray nodes alive, exits
    EXIT_PEER_LOST: Ignored too, so the run restarts from its checkpoint with the budget untouched;
    the trainer's own crash on the head still counts."""
    policy = job_spec(rendered("p5"), "rltrain-multinode")["podFailurePolicy"]
    assert ray_launcher.EXIT_PEER_LOST == 9
    assert action(policy, NODE_LOST) == action(policy, PEER_LOST) == "Ignore"
    assert action(policy, TRAINER_CRASH) == "Count"
    # Not in the single-node Job: exit 9 is the trainer's own there.
    assert action(job_spec(rendered("p5"), "rltrain-training")["podFailurePolicy"], PEER_LOST) == "Count"


def test_kueue_restarts_a_run_that_does_not_recover_whole_and_bounds_it():
    w = wait_for_pods_ready(rendered("p5"))
    # A pod lost after admission (PodsReady turns False): the same time to be Ready again, then the
    # whole workload is evicted (its Job suspended: every pod deleted, none counted, since the Job
    # controller drops its tracking finalizer before deleting them, job_controller.go deleteJobPods)
    # and requeued; after backoffLimitCount requeues it is deactivated (RequeuingLimitExceeded).
    assert w["recoveryTimeout"] == w["timeout"]
    assert w["requeuingStrategy"]["backoffLimitCount"] == 3
    r = variant("p5", {"rltrain:workloads": {"infrastructureRestarts": 5}})
    assert wait_for_pods_ready(r)["requeuingStrategy"]["backoffLimitCount"] == 5
    # The trainer's failure budget is a separate number.
    assert job_spec(r, "rltrain-multinode")["backoffLimit"] == r.cfg.workloads.retries == 3


def test_infrastructure_restarts_out_of_range_is_refused_by_name():
    with pytest.raises(validate.ConfigError) as e:
        load_variant("p5", {"rltrain:workloads": {"infrastructureRestarts": 50}})
    assert "rltrain:workloads.infrastructureRestarts" in str(e.value)


def test_rayjob_retries_are_whole_ray_clusters():
    """RayJob: KubeRay has no pod failure policy; a Ray pod lost with its node is recreated by the
    RayCluster controller (restartPolicy Never) without failing the RayJob, a failed Ray job is a
    retry counted in backoffLimit, each retry a new Ray cluster that resumes from CKPT_DIR."""
    r = variant("p5", P5_RAYJOB)
    spec = next(m for m in r.manifests if m["kind"] == "RayJob")["spec"]
    assert spec["backoffLimit"] == r.cfg.workloads.retries
    cluster = spec["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    assert {p["spec"]["restartPolicy"] for p in pods} == {"Never"}
    assert {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}["RESUME"] == "auto"


NO_PROGRESS = {"conditions": set(), "exit": {"trainer": resume_wrapper.EXIT_NO_PROGRESS}}


def _env(container: dict) -> dict:
    return {e["name"]: e.get("value") for e in container["env"]}


@pytest.mark.parametrize("job", ["rltrain-multinode", "rltrain-training"])
def test_restarts_from_the_same_checkpoint_are_bounded_whatever_caused_them(job):
    """Kueue's count does not grow on its topology-aware NodeFailures evictions (kueue v0.19.2
    pkg/scheduler/scheduler.go evictWorkloadAfterFailedTASReplacement, pkg/controller/tas/
    node_controller.go evictWorkloadIfNeeded: only the PodsReady-timeout eviction calls
    workload.UpdateRequeueState) and the Job ignores pods lost with their node: the resume wrapper
    (on the single-node pod, on the Ray head) counts the starts from the same step in a ledger
    under the run's own checkpoint directory and exits EXIT_NO_PROGRESS over the bound, which
    fails the Job at once."""
    r = rendered("p5")
    spec = job_spec(r, job)
    e = _env(spec["template"]["spec"]["containers"][0])
    assert e["RESUME_LEDGER"] == f"{e['CKPT_PATH']}/.rltrain/starts.jsonl"
    assert e["RESUME_MAX_STALLED_RESTARTS"] == str(r.cfg.workloads.infrastructure_restarts) == "3"
    policy = spec["podFailurePolicy"]
    assert action(policy, NO_PROGRESS) == "FailJob"
    # After every Ignore rule, and in none of them (a node loss is still free, exit 10 never is).
    actions = [rule["action"] for rule in policy["rules"]]
    fail = next(rule for rule in policy["rules"] if rule["action"] == "FailJob")
    assert actions.index("FailJob") > max(i for i, a in enumerate(actions) if a == "Ignore")
    assert fail["onExitCodes"]["values"] == sorted(set(fail["onExitCodes"]["values"]))
    assert resume_wrapper.EXIT_NO_PROGRESS == 10 in fail["onExitCodes"]["values"]
    assert all(resume_wrapper.EXIT_NO_PROGRESS not in (rule.get("onExitCodes") or {}).get("values", [])
               for rule in policy["rules"] if rule["action"] == "Ignore")
    assert action(policy, NODE_LOST) == "Ignore"


def test_the_restart_bound_follows_the_key_and_holds_without_fail_fast_codes():
    r = variant("p5", {"rltrain:workloads": {"infrastructureRestarts": 5, "failFastExitCodes": []}})
    for job in ("rltrain-multinode", "rltrain-training"):
        spec = job_spec(r, job)
        assert _env(spec["template"]["spec"]["containers"][0])["RESUME_MAX_STALLED_RESTARTS"] == "5"
        fail = [rule for rule in spec["podFailurePolicy"]["rules"] if rule["action"] == "FailJob"]
        assert [rule["onExitCodes"]["values"] for rule in fail] == [[resume_wrapper.EXIT_NO_PROGRESS]]
    # Kueue's requeue limit is the same key.
    assert wait_for_pods_ready(r)["requeuingStrategy"]["backoffLimitCount"] == 5


def test_the_rayjob_head_runs_the_wrapper_with_the_bound():
    r = variant("p5", P5_RAYJOB)
    spec = next(m for m in r.manifests if m["kind"] == "RayJob")["spec"]
    e = _env(spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0])
    assert e["RESUME_LEDGER"] == f"{e['CKPT_PATH']}/.rltrain/starts.jsonl"
    assert e["RESUME_MAX_STALLED_RESTARTS"] == "3"
    assert spec["entrypoint"].startswith("python3 /scripts/resume_wrapper.py -- ")
