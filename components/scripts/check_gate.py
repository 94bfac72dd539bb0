#!/usr/bin/env python3
"""Wait for a check run that Pulumi cannot await to a failure (an MPIJob) and end like it.

Runs as the only container of the gate Job beside the NCCL test's MPIJob when training waits for the
checks (workloads.trainingAfterChecks). pulumi-kubernetes awaits a custom resource only through a
`pulumi.com/waitFor` condition, which never reports failure: a failed MPIJob held `pulumi up` for the
whole timeout. It does fail a batch Job at once on BackoffLimitExceeded, and shows its pod's
termination message (FACTS "Kueue operations and the reference trainer"). So this script polls the
MPIJob through the Kubernetes API and:

- exits 0 when the MPIJob has the condition Succeeded=True,
- exits 1 when it has Failed=True, after writing the reason (the MPIJob's condition and the
  launcher's `NCCL CHECK` lines, or its last log lines) to stdout and /dev/termination-log,
- keeps waiting while it is queued (suspended by Kueue) or running; the gate Job's
  activeDeadlineSeconds bounds the wait (time in the queue included).

Exit 2: the MPIJob does not exist or the API refuses the service account.

Environment: KUBERNETES_SERVICE_HOST/PORT (set by the kubelet), GATE_NAMESPACE, GATE_NAME,
GATE_GROUP_VERSION (kubeflow.org/v2beta1), GATE_PLURAL (mpijobs), GATE_LAUNCHER_SELECTOR (label
selector of the launcher pod), GATE_POLL_SECONDS. GATE_API_URL and GATE_TERMINATION_LOG replace the in-cluster API address (no
token, no CA) and the termination log path: for running it outside a pod (tests).
Standard library only; Python 3.8+.
"""

import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
TERMINATION_LOG = "/dev/termination-log"
EXIT_PASS, EXIT_FAIL, EXIT_ERROR = 0, 1, 2
# The termination message is capped at 4096 bytes by the kubelet; keep well under it.
MESSAGE_LIMIT = 3000
MARK = "NCCL CHECK"


class Api:
    def __init__(self, base, token, context):
        self.base, self.token, self.context = base, token, context

    @classmethod
    def in_cluster(cls, env):
        host, port = env["KUBERNETES_SERVICE_HOST"], env.get("KUBERNETES_SERVICE_PORT", "443")
        if ":" in host:
            host = f"[{host}]"
        with open(os.path.join(SA_DIR, "token")) as f:
            token = f.read().strip()
        return cls(f"https://{host}:{port}", token, ssl.create_default_context(cafile=os.path.join(SA_DIR, "ca.crt")))

    def get(self, path, raw=False):
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        req = urllib.request.Request(self.base + path, headers=headers)
        with urllib.request.urlopen(req, context=self.context, timeout=30) as resp:
            body = resp.read().decode("utf-8", "replace")
        return body if raw else json.loads(body)


def condition(obj, kind):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


def launcher_lines(api, namespace, selector):
    """The launcher's verdict lines (NCCL CHECK ...) or, without them, its last log lines."""
    q = urllib.parse.urlencode({"labelSelector": selector})
    pods = api.get(f"/api/v1/namespaces/{namespace}/pods?{q}").get("items") or []
    if not pods:
        return ["(no launcher pod: it never started)"]
    pods.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
    name = pods[-1]["metadata"]["name"]
    log = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}/log?tailLines=200", raw=True)
    lines = [line for line in log.splitlines() if line.strip()]
    marked = [line for line in lines if MARK in line]
    return [f"launcher {name}:"] + (marked or lines[-15:])


def failure_message(obj, extra):
    cond = condition(obj, "Failed") or {}
    head = f"{obj.get('kind', 'run')} {obj['metadata']['name']} failed: [{cond.get('reason', '?')}] {cond.get('message', '')}"
    text = "\n".join([head, *extra])
    return text[-MESSAGE_LIMIT:]


def write_termination(text, path=None):
    path = path or os.environ.get("GATE_TERMINATION_LOG") or TERMINATION_LOG
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        pass  # not in a pod: stdout carries it


def run(env, api=None, sleep=time.sleep, out=sys.stdout):
    namespace, name = env["GATE_NAMESPACE"], env["GATE_NAME"]
    path = f"/apis/{env['GATE_GROUP_VERSION']}/namespaces/{namespace}/{env['GATE_PLURAL']}/{name}"
    poll = float(env.get("GATE_POLL_SECONDS", "10"))
    if api is None:
        api = Api(env["GATE_API_URL"], "", None) if env.get("GATE_API_URL") else Api.in_cluster(env)
    last = None
    while True:
        try:
            obj = api.get(path)
        except urllib.error.HTTPError as exc:
            if exc.code in (401, 403, 404):
                msg = f"GATE ERROR: cannot read {path}: HTTP {exc.code}"
                print(msg, file=out, flush=True)
                write_termination(msg)
                return EXIT_ERROR
            obj = None  # a transient API error: try again
        except (urllib.error.URLError, OSError):
            obj = None
        if obj is not None:
            if condition(obj, "Succeeded"):
                print(f"GATE PASS: {name} succeeded", file=out, flush=True)
                return EXIT_PASS
            if condition(obj, "Failed"):
                try:
                    extra = launcher_lines(api, namespace, env.get("GATE_LAUNCHER_SELECTOR", ""))
                except (urllib.error.URLError, OSError, ValueError) as exc:
                    extra = [f"(launcher log not readable: {exc})"]
                msg = failure_message(obj, extra)
                print("GATE FAIL: " + msg, file=out, flush=True)
                write_termination(msg)
                return EXIT_FAIL
            spec = obj.get("spec") or {}
            state = "queued (suspended)" if (spec.get("runPolicy") or {}).get("suspend") else "running"
            if state != last:
                print(f"GATE WAIT: {name} {state}", file=out, flush=True)
                last = state
        sleep(poll)


if __name__ == "__main__":
    sys.exit(run(os.environ))
