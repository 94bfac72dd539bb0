"""What `pulumi up` does when a check run it waits for fails: end at once with the reason, or wait out
the whole timeout. An offline model, from the sources:

- The Job controller (Kubernetes, pkg/controller/job): a failed pod is matched against
  spec.podFailurePolicy rules in order: `Ignore` (not counted), `FailJob` (the Job fails with reason
  PodFailurePolicy), `Count` or no match (counted); more counted failures than backoffLimit fail it
  with reason BackoffLimitExceeded; activeDeadlineSeconds with DeadlineExceeded.
- pulumi-kubernetes's await (provider/pkg/await): a batch Job without await overrides is awaited by
  its own logic, which returns an error at once only for a Failed condition with reason
  BackoffLimitExceeded or DeadlineExceeded (checker/job/check.go collectJobConditionErrors), with the
  pods' messages (a terminated container's termination message, checker/pod/check.go); any other
  failure runs into `pulumi.com/timeoutSeconds`. `pulumi.com/waitFor` replaces that logic with
  conditions that are only ever satisfied or timed out (condition/custom.go); `pulumi.com/skipAwait`
  does not wait.

Test code (tests/test_gate.py), not the product's: the simulated cluster (tests/sim) runs the Job
controller and the provider's await for real.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

FAILS_AT_ONCE = "fails at once"
WAITS_TIMEOUT = "waits out the timeout"
NOT_AWAITED = "not awaited"
FAST_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded")


@dataclass(frozen=True)
class Outcome:
    verdict: str
    reason: str = ""  # the Job's Failed reason
    message: str = ""  # what the error carries from the pod


def _rule_matches(rule: dict[str, Any], container: str, exit_code: int, disrupted: bool) -> bool:
    for pattern in rule.get("onPodConditions") or []:
        if pattern.get("type") == "DisruptionTarget" and str(pattern.get("status", "True")) == "True" and disrupted:
            return True
    codes = rule.get("onExitCodes")
    if codes and not disrupted:
        if codes.get("containerName") not in (None, container):
            return False
        values = [int(v) for v in codes.get("values") or []]
        return (exit_code in values) if codes.get("operator") == "In" else (exit_code not in values)
    return False


def job_failure_reason(job: dict[str, Any], exit_codes: list[int], *, container: Optional[str] = None,
                       disrupted: bool = False) -> Optional[str]:
    """The Job's Failed reason after its pods fail with `exit_codes` in turn (None: not failed yet)."""
    spec = job["spec"]
    container = container or spec["template"]["spec"]["containers"][0]["name"]
    rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
    counted = 0
    for code in exit_codes:
        action = next((r["action"] for r in rules if _rule_matches(r, container, code, disrupted)), "Count")
        if action == "Ignore":
            continue
        if action == "FailJob":
            return "PodFailurePolicy"
        counted += 1
        if counted > int(spec.get("backoffLimit", 6)):
            return "BackoffLimitExceeded"
    return None


def await_outcome(obj: dict[str, Any], failed_reason: Optional[str], pod_message: str = "") -> Outcome:
    """What the provider does with `obj` (a manifest) once it has failed with `failed_reason`."""
    ann = (obj.get("metadata") or {}).get("annotations") or {}
    if ann.get("pulumi.com/skipAwait") == "true":
        return Outcome(NOT_AWAITED)
    if "pulumi.com/waitFor" in ann or obj.get("kind") != "Job" or obj.get("apiVersion") != "batch/v1":
        return Outcome(WAITS_TIMEOUT, failed_reason or "")
    if failed_reason in FAST_REASONS:
        return Outcome(FAILS_AT_ONCE, failed_reason, pod_message)
    return Outcome(WAITS_TIMEOUT, failed_reason or "")


def termination_message(container: dict[str, Any], log: str, file_text: str = "") -> str:
    """The kubelet's termination message of a failed container: the file's text, or with
    FallbackToLogsOnError and an empty file the log's tail (the last 80 lines / 2048 bytes)."""
    if file_text:
        return file_text
    if container.get("terminationMessagePolicy") == "FallbackToLogsOnError":
        return "\n".join(log.splitlines()[-80:])[-2048:]
    return ""
