"""The head's view of the run's nodes through the Kubernetes API: which of them are going away.

A GPU fault (an XID) kills the trainer while every Ray node is still alive: Ray alone cannot tell
it from a bug in the trainer. The node monitoring agent can: it sets a condition on the node
(`AcceleratedHardwareReady=False`, reason `NvidiaXID<code>Error`, within its 15 s report interval:
aws/eks-node-monitoring-agent v1.7.0 pkg/manager/node_exporter.go reportInterval), which EKS node
repair acts on after 10 minutes (30 for the other conditions) by a reboot or a replacement (EKS
user guide, node-repair and node-health-nma). So the head asks the API about the nodes of its run's
pods, twice:

- before it starts the trainer (head.py): a node that is unhealthy is waited for, within
  RAY_NODE_WAIT_SECONDS, instead of starting a trainer that fails on it (each start counts in the
  start ledger): the repair takes the pod on that node down and it comes back on the repaired or
  replacement node;
- after the trainer failed (node_wait.check_peers): a node of the run unhealthy means the failure is
  the node's, exit EXIT_PEER_LOST, which the pod failure policy ignores, so the retry budget
  (workloads.retries) is left to the trainer's own failures.

Unhealthy, for a node that hosts a pod of this run that has not ended:
- gone (404: deleted, a replacement);
- `Ready` not True (NotReady or Unknown: rebooting, lost);
- cordoned (`spec.unschedulable`: drained before a repair or an update);
- a `NoExecute` taint (not-ready, unreachable, out-of-service: the taint manager evicts its pods);
- one of the agent's conditions (AGENT_CONDITIONS) False with a reason EKS repairs: every reason
  but the DCGM ones (`DCGMError`, `DCGMDiagnosticFailure`, `DCGMHealthCode<N>`), whose repair action is
  None (node-health-nma, "AcceleratedHardware node health issues"): no repair is due for those (and
  at agent v1.7.0 a DCGMError stays False after DCGM recovers, aws/eks-node-monitoring-agent#266), so
  waiting for one would hold the run for nothing, and a failure beside one is the trainer's.

The API is read with the pod's service-account token (the run's Role and ClusterRole allow listing
pods in the namespace and reading nodes: components/workloads/node_health_access.py). When it cannot
be read (no token mounted, refused, unreachable), the answer is "unknown" and the head behaves as
without this check: Ray's count alone decides. Standard library only.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Mapping, Optional

from .common import Launcher

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# The node monitoring agent's conditions (EKS user guide, node-health-nma; node-repair's table).
AGENT_CONDITIONS = ("AcceleratedHardwareReady", "ContainerRuntimeReady", "KernelReady", "NetworkingReady",
                    "StorageReady")
# Reasons of those conditions that EKS does not repair (repair action None in node-health-nma).
NOT_REPAIRED_REASON_PREFIXES = ("DCGMError", "DCGMDiagnosticFailure", "DCGMHealthCode")
# One API request's bound: the checks run inside the head's own bounded windows.
REQUEST_TIMEOUT_SECONDS = 5.0
# For running outside a pod (tests): replaces the in-cluster address; no token, no CA.
API_URL_ENV = "NODE_HEALTH_API_URL"
SELECTOR_ENV = "RUN_POD_SELECTOR"
NAMESPACE_ENV = "POD_NAMESPACE"


class ApiError(Exception):
    pass


class Api:
    def __init__(self, base: str, token: Optional[str], context: Optional[ssl.SSLContext]) -> None:
        self.base, self.token, self.context = base.rstrip("/"), token, context

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> "Api":
        """The API server as the pod sees it (KUBERNETES_SERVICE_HOST/PORT, set by the kubelet in
        every container), with its service-account token and CA; ApiError when there is none."""
        if env.get(API_URL_ENV):
            return cls(env[API_URL_ENV], None, None)
        host = env.get("KUBERNETES_SERVICE_HOST")
        if not host:
            raise ApiError("KUBERNETES_SERVICE_HOST is not set (not in a pod)")
        try:
            with open(os.path.join(SA_DIR, "token"), encoding="utf-8") as f:
                token = f.read().strip()
        except OSError as exc:
            raise ApiError(f"no service-account token mounted ({exc})") from None
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        port = env.get("KUBERNETES_SERVICE_PORT", "443")
        return cls(f"https://{host}:{port}", token, ssl.create_default_context(cafile=os.path.join(SA_DIR, "ca.crt")))

    def get(self, path: str) -> Optional[dict]:
        """The object at `path`, None when it does not exist (404); ApiError otherwise."""
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        request = urllib.request.Request(self.base + path, headers=headers)
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=REQUEST_TIMEOUT_SECONDS) as resp:
                return json.loads(resp.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise ApiError(f"GET {path}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise ApiError(f"GET {path}: {exc}") from None


def node_problem(node: dict) -> Optional[str]:
    """Why `node` is going away or will be repaired, or None."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready")
    if ready is None or ready.get("status") != "True":
        why = f" ({ready.get('reason')})" if ready and ready.get("reason") else ""
        return f"Ready={ready.get('status') if ready else 'missing'}{why}"
    for taint in spec.get("taints") or []:
        if taint.get("effect") == "NoExecute":
            return f"taint {taint.get('key')}:NoExecute"
    if spec.get("unschedulable"):
        return "cordoned (spec.unschedulable)"
    for kind in AGENT_CONDITIONS:
        c = conditions.get(kind)
        if c is None or c.get("status") != "False":
            continue
        reason = c.get("reason") or ""
        if reason.startswith(NOT_REPAIRED_REASON_PREFIXES):
            continue
        message = " ".join((c.get("message") or "").split())[:160]
        return f"{kind}=False ({reason}{': ' + message if message else ''})"
    return None


def run_nodes(api: Api, namespace: str, selector: str) -> dict[str, list[str]]:
    """Node -> the names of the run's pods on it that have not ended (a Failed pod of an earlier
    attempt stays behind on its old node, which may be long gone)."""
    query = urllib.parse.urlencode({"labelSelector": selector})
    pods = (api.get(f"/api/v1/namespaces/{urllib.parse.quote(namespace)}/pods?{query}") or {}).get("items") or []
    out: dict[str, list[str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            out.setdefault(node, []).append((pod.get("metadata") or {}).get("name", "?"))
    return out


def unhealthy_nodes(api: Api, namespace: str, selector: str) -> dict[str, str]:
    """Node -> why, for every unhealthy node hosting a pod of the run; {} when all are healthy."""
    out = {}
    for name, pods in sorted(run_nodes(api, namespace, selector).items()):
        node = api.get(f"/api/v1/nodes/{urllib.parse.quote(name)}")
        problem = "gone (the Node object was deleted: a replacement)" if node is None else node_problem(node)
        if problem:
            out[name] = f"{problem}; pods {', '.join(sorted(pods))}"
    return out


class NodeHealth:
    """What the head asks; never raises: None means the API could not tell."""

    def __init__(self, log: Launcher, env: Mapping[str, str]) -> None:
        self.log = log
        self.namespace = (env.get(NAMESPACE_ENV) or "").strip()
        self.selector = (env.get(SELECTOR_ENV) or "").strip()
        self.api: Optional[Api] = None
        self.problem: Optional[str] = None
        if not self.namespace or not self.selector:
            self.problem = f"{NAMESPACE_ENV} or {SELECTOR_ENV} not set"
            return
        try:
            self.api = Api.from_env(env)
        except ApiError as exc:
            self.problem = str(exc)

    @property
    def enabled(self) -> bool:
        return self.api is not None

    def describe(self) -> str:
        if self.enabled:
            return f"the nodes of the pods {self.selector} in {self.namespace}"
        return f"not checked ({self.problem})"

    def check(self) -> Optional[dict[str, str]]:
        """{node: why} of the run's unhealthy nodes ({}: all healthy), or None: cannot tell."""
        if self.api is None:
            return None
        try:
            return unhealthy_nodes(self.api, self.namespace, self.selector)
        except ApiError as exc:
            if str(exc) != self.problem:
                self.log.say(f"cannot read the run's nodes from the Kubernetes API ({exc}); "
                             "deciding on Ray's count alone")
            self.problem = str(exc)
            return None


def summary(unhealthy: Mapping[str, str]) -> str:
    return "; ".join(f"{node}: {why}" for node, why in sorted(unhealthy.items()))
