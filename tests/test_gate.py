"""The checks that gate training fail fast (issue 20): a failed validation or NCCL run ends `pulumi up`
with its reason within a bounded time, not after the full timeout (components/workloads/validation.py,
nccl.py, gate.py, components/scripts/check_gate.py; the provider's behaviour modelled in
tests/await_model.py: test code, the simulated cluster runs both for real)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from test_kueue_support import variant

import await_model as am
from components.scripts import nccl_check
from components.k8s import security
from components.workloads import build, gate, nccl, runs, validation

GATED = {"rltrain:workloads": {"trainingAfterChecks": True}}
GATE_SCRIPT = Path(gate.__file__).resolve().parents[1] / "scripts" / gate.SCRIPT


def manifest(r, kind, name):
    [m] = [m for m in r.manifests if m["kind"] == kind and m["metadata"]["name"] == name]
    return m


# --- validation: the provider's own Job await, failing at once with the reason ----------------------


def test_a_failing_validation_run_ends_up_at_once_with_its_reason():
    r = variant("p5", GATED)
    job = manifest(r, "Job", validation.NAME)
    # Every way validate_node.py can fail (including the configured fail-fast exit codes) is
    # BackoffLimitExceeded on the first failed pod...
    for code in sorted({1, 2, *r.cfg.workloads.fail_fast_exit_codes} - {0}):
        reason = am.job_failure_reason(job, [code])
        assert reason == "BackoffLimitExceeded", code
        # ...which the provider reports at once, with the pod's termination message: the log tail,
        # ending in validate_node.py's summary line.
        log = ("CHECK gpus FAIL: nvidia-smi sees 7 GPUs, expected 8\n"
               "VALIDATION node=ip-10-0-1-5 RESULT=FAIL failed=gpus\n")
        container = job["spec"]["template"]["spec"]["containers"][0]
        message = am.termination_message(container, log)
        outcome = am.await_outcome(job, reason, message)
        assert outcome.verdict == am.FAILS_AT_ONCE
        assert "RESULT=FAIL failed=gpus" in outcome.message
    # A drained or preempted pod is still a free retry, not a failure.
    assert am.job_failure_reason(job, [137], disrupted=True) is None


def test_the_model_catches_a_gate_that_waits_out_its_timeout():
    """The test of the test: the previous validation Job (a FailJob rule for the fail-fast exit codes)
    failed with reason PodFailurePolicy, which the provider does not report: `up` waited the timeout."""
    r = variant("p5", GATED)
    job = json.loads(json.dumps(manifest(r, "Job", validation.NAME)))
    codes = sorted(c for c in r.cfg.workloads.fail_fast_exit_codes if c)
    job["spec"]["podFailurePolicy"]["rules"].append(
        {"action": "FailJob", "onExitCodes": {"containerName": runs.CONTAINER, "operator": "In", "values": codes}})
    job["spec"]["template"]["spec"]["containers"][0]["name"] = runs.CONTAINER
    reason = am.job_failure_reason(job, [codes[0]])
    assert reason == "PodFailurePolicy"
    assert am.await_outcome(job, reason).verdict == am.WAITS_TIMEOUT
    # And a custom resource awaited by a waitFor condition never fails.
    assert am.await_outcome({"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {
        "annotations": {"pulumi.com/waitFor": "condition=Succeeded"}}}, "Failed").verdict == am.WAITS_TIMEOUT


def test_every_check_training_waits_for_fails_at_once():
    r = variant("p5", GATED)
    rows = {x["name"]: x for x in r.resources}
    waited = [rows["workloads-validation-job"], rows["workloads-nccl-test-gate-job"]]
    for row in waited:
        obj = {"apiVersion": row["inputs"]["apiVersion"], "kind": row["inputs"]["kind"], **row["inputs"]}
        outcome = am.await_outcome(obj, am.job_failure_reason(obj, [1]))
        assert outcome.verdict == am.FAILS_AT_ONCE, row["name"]
    # The MPIJob itself is not awaited; what the training runs wait for is its gate.
    mpi = manifest(r, "MPIJob", nccl.NAME)
    assert am.await_outcome(mpi, "Failed").verdict == am.NOT_AWAITED
    assert manifest(r, "Job", nccl.GATE_NAME)["spec"]["backoffLimit"] == 0


def test_bounds_add_the_time_queued():
    r = variant("p5", GATED)
    bounds = build.gate_seconds(r.cfg)
    queued = build.queue_allowance_seconds(r.cfg)
    assert queued == r.cfg.monitoring.queued_alert_minutes * 60
    assert bounds == {validation.COMPONENT: queued + validation.DEADLINE_SECONDS,
                      nccl.COMPONENT: queued + validation.DEADLINE_SECONDS + nccl.DEADLINE_SECONDS}
    # The runs' own deadlines count from admission (unchanged); the gate Job is not queued, so its
    # deadline is the whole bound, and Pulumi gives it a little more to start its pod.
    assert manifest(r, "Job", validation.NAME)["spec"]["activeDeadlineSeconds"] == validation.DEADLINE_SECONDS
    g = manifest(r, "Job", nccl.GATE_NAME)
    assert g["spec"]["activeDeadlineSeconds"] == bounds[nccl.COMPONENT]
    assert g["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == str(
        bounds[nccl.COMPONENT] + gate.AWAIT_MARGIN_SECONDS)
    assert "kueue.x-k8s.io/queue-name" not in g["metadata"].get("labels", {})


def test_gate_job_is_least_privilege_and_follows_its_run():
    r = variant("p5", GATED)
    role = manifest(r, "Role", nccl.GATE_NAME)
    assert role["rules"][0] == {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"],
                                "resourceNames": [nccl.NAME], "verbs": ["get"]}
    assert {v for rule in role["rules"] for v in rule["verbs"]} == {"get", "list"}
    pol = manifest(r, "NetworkPolicy", nccl.GATE_NAME)["spec"]
    assert pol["egress"] == [{"ports": [{"port": 443, "protocol": "TCP"}]}] and "ingress" not in pol
    job = manifest(r, "Job", nccl.GATE_NAME)
    # checkov 3 on it: 99 passed, one skipped with its reason (the token it needs).
    assert list(security.parse(job["metadata"]["annotations"])) == ["CKV_K8S_38"]
    pod = job["spec"]["template"]
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    # A new NCCL image is a new MPIJob, hence a new gate Job (its template carries the fingerprint).
    other = variant("p5", {**GATED, "rltrain:workloads": {"trainingAfterChecks": True, "ncclTest": {
        "image": "public.ecr.aws/hpc-cloud/nccl-tests:other-tag"}}})
    fp = gate.FINGERPRINT_ANNOTATION
    assert (pod["metadata"]["annotations"][fp]
            != manifest(other, "Job", nccl.GATE_NAME)["spec"]["template"]["metadata"]["annotations"][fp])
    # Without the gate: no gate Job, nothing mounts the script.
    plain = variant("p5", {})
    assert not [m for m in plain.manifests if m["metadata"]["name"] == nccl.GATE_NAME]


# --- check_gate.py as a program, against a stand-in API server ------------------------------------


class FakeApi:
    """Serves an MPIJob whose status follows `states` (one per GET), and the launcher's pod and log."""

    def __init__(self, states, log=""):
        self.states, self.log, self.gets = list(states), log, 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if "/mpijobs/" in self.path:
                    state = api.states[min(api.gets, len(api.states) - 1)]
                    api.gets += 1
                    if state == "missing":
                        return self._send(404, {"kind": "Status", "code": 404})
                    return self._send(200, api.mpijob(state))
                if self.path.endswith("/log?tailLines=200"):
                    body = api.log.encode()
                    self.send_response(200)
                    self.end_headers()
                    self.wfile.write(body)
                    return None
                if "/pods?" in self.path:
                    return self._send(200, {"items": [{"metadata": {"name": "rltrain-nccl-test-launcher-x",
                                                                    "creationTimestamp": "2026-12-01T10:00:00Z"}}]})
                return self._send(404, {})

            def _send(self, code, doc):
                body = json.dumps(doc).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @staticmethod
    def mpijob(state):
        conds, suspend = [], False
        if state == "queued":
            suspend = True
        elif state in ("Succeeded", "Failed"):
            conds = [{"type": "Running", "status": "False"}, {"type": state, "status": "True",
                      "reason": "MPIJobFailed" if state == "Failed" else "MPIJobSucceeded",
                      "message": f"MPIJob rltrain/rltrain-nccl-test {state.lower()}."}]
        else:
            conds = [{"type": "Running", "status": "True"}]
        return {"kind": "MPIJob", "metadata": {"name": nccl.NAME}, "spec": {"runPolicy": {"suspend": suspend}},
                "status": {"conditions": conds}}

    def __enter__(self):
        self.thread.start()
        return f"http://127.0.0.1:{self.server.server_port}"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def run_gate(url, tmp_path):
    env = {**os.environ, "GATE_API_URL": url, "GATE_NAMESPACE": "rltrain", "GATE_NAME": nccl.NAME,
           "GATE_GROUP_VERSION": "kubeflow.org/v2beta1", "GATE_PLURAL": "mpijobs",
           "GATE_LAUNCHER_SELECTOR": nccl.LAUNCHER_SELECTOR, "GATE_POLL_SECONDS": "0.05",
           "GATE_TERMINATION_LOG": str(tmp_path / "termination-log")}
    return subprocess.run([sys.executable, str(GATE_SCRIPT)], env=env, capture_output=True, text=True, timeout=60)


def test_gate_fails_with_the_bandwidth_verdict(tmp_path):
    log = ("#  out-of-place  in-place\n 2147483648 536870912 float sum -1 11000 195.2 180.1 0\n"
           "NCCL CHECK FAIL: busbw 180.10 GB/s < 394.02 GB/s at 2147483648 B (2x p5.48xlarge)\n")
    with FakeApi(["queued", "queued", "running", "running", "Failed"], log) as url:
        proc = run_gate(url, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "GATE WAIT: rltrain-nccl-test queued (suspended)" in proc.stdout
    assert "GATE WAIT: rltrain-nccl-test running" in proc.stdout
    message = (tmp_path / "termination-log").read_text()
    assert "rltrain-nccl-test failed: [MPIJobFailed]" in message
    assert "NCCL CHECK FAIL: busbw 180.10 GB/s < 394.02 GB/s" in message
    assert len(message) <= 3000


def test_gate_passes_when_the_run_succeeds(tmp_path):
    with FakeApi(["queued", "running", "Succeeded"]) as url:
        proc = run_gate(url, tmp_path)
    assert proc.returncode == 0 and "GATE PASS" in proc.stdout


def test_gate_errors_when_the_run_is_missing(tmp_path):
    with FakeApi(["missing"]) as url:
        proc = run_gate(url, tmp_path)
    assert proc.returncode == 2 and "HTTP 404" in (tmp_path / "termination-log").read_text()


# --- the NCCL launcher: ssh start-up retried, a bandwidth failure fails at once ------------------


def test_launcher_waits_for_ssh_then_a_bandwidth_failure_fails_the_check():
    r = variant("p5", GATED)
    mpi = manifest(r, "MPIJob", nccl.NAME)
    script = mpi["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["command"][2]
    wait, _, rest = script.partition("; mpirun ")
    assert wait.startswith("set -o pipefail; for h in $(awk '{print $1}' /etc/mpi/hostfile)")
    assert f"-ge {nccl.SSH_ATTEMPTS} ]" in wait and f"exit {nccl.EXIT_SSH}" in wait
    assert "| python3 /scripts/nccl_check.py" in rest
    # No retry of the measurement: one launcher attempt; nccl_check.py's FAIL is the check's verdict.
    assert mpi["spec"]["runPolicy"]["backoffLimit"] == 0
    assert nccl_check.EXIT_FAIL == 1 and nccl.EXIT_SSH == nccl_check.EXIT_ERROR


@pytest.mark.parametrize("up_after,expect", [(3, 0), (None, nccl.EXIT_SSH)])
def test_ssh_wait_retries_then_gives_up(tmp_path, up_after, expect):
    """The launcher's ssh wait as a program: a stand-in `ssh` that fails until its Nth call."""
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("w-0.svc slots=8\nw-1.svc slots=8\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    count = tmp_path / "count"
    count.write_text("0")
    limit = up_after if up_after is not None else 10**6
    (bin_dir / "ssh").write_text(f"#!/bin/sh\nn=$(cat {count}); n=$((n+1)); echo $n > {count}; "
                                 f"[ $n -ge {limit} ]\n")
    (bin_dir / "ssh").chmod(0o755)
    (bin_dir / "sleep").write_text("#!/bin/sh\nexit 0\n")
    (bin_dir / "sleep").chmod(0o755)
    script = nccl.ssh_wait_script().replace(nccl.HOSTFILE, str(hostfile)) + "; echo READY"
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert proc.returncode == expect, proc.stdout + proc.stderr
    if expect == 0:
        assert "READY" in proc.stdout and int(count.read_text()) == up_after + 1  # w-1 answers at once
    else:
        assert f"NCCL CHECK ERROR: ssh to w-0.svc failed {nccl.SSH_ATTEMPTS} times" in proc.stdout
        assert int(count.read_text()) == nccl.SSH_ATTEMPTS
