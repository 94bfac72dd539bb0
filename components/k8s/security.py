"""Hardened pod and container security contexts, and checkov skips derived from the pod they are for.

A checkov finding is either fixed in the builder or skipped on purpose with a
`checkov.io/skip<N>: CHECK=reason` annotation. The skips here are not a fixed list: `skips` looks at
the built pod spec, finds the checks it fails (the same conditions checkov 3.3.x tests, below), and
writes each reason as `<what the pod does>: <why>`. The first part is generated from the spec (e.g.
"adds capabilities AUDIT_WRITE, CHOWN", "every capability dropped", "no CPU limit"), so it is true of
that pod; the second is the workload's own (`Reasons`, written beside the workload). A pod that fails
a check its workload gives no reason for is an error at build time; a pod that passes a check gets
no skip for it. tests/test_checkov.py holds the generator to checkov itself: on copies of the renders
with every skip annotation removed, each object fails exactly the checks it skips, and it verifies
every generated claim against the rendered object.

checkov reads the skips from the metadata of the object it scans: for a Job, StatefulSet or
DaemonSet the object's own (the pod template's are not read, also not for the graph checks). So the
skips go on that object only (`annotate`), never on its pod template: a reason's wording is then an
in-place patch of the object's metadata, not a new pod template (which would restart a run). checkov
does not look inside custom resources (MPIJob, RayJob): components/offline/scan_report.py scans their
pod templates as Pods, each carrying its pod set's part of the custom resource's skips
(`annotate_pods`: every check any pod set fails, the reason prefixed with the pod set it is true of
where they differ; `pod_set_skips` reads one pod set's back).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping, Optional, Sequence, Union

import pulumi_kubernetes as k8s


SKIP_PREFIX = "checkov.io/skip"
# Kinds whose pods checkov does not expect probes of (LivenessProbe.py, ReadinessProbe.py).
NO_PROBE_CHECK_KINDS = ("Job", "CronJob")
# checkov's high-UID check (RootContainersHighUID.py).
HIGH_UID = 10000
# Separates the pod sets' reasons on a custom resource holding several templates.
PART_SEPARATOR = " | "


def container_security_context(add_capabilities: Sequence[str] = (), *,
                               read_only_root: bool = False) -> k8s.core.v1.SecurityContextArgs:
    """No privilege escalation, every capability dropped but `add_capabilities`.

    readOnlyRootFilesystem only where the command is known not to write outside its volumes (the
    validation pod). Training runs the user's command in the user's image, and Python, Ray, Hugging
    Face, Triton and the training code write caches and outputs under $HOME, /tmp and the working
    directory.
    """
    return k8s.core.v1.SecurityContextArgs(
        allow_privilege_escalation=False,
        capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"], add=list(add_capabilities) or None),
        read_only_root_filesystem=True if read_only_root else None,
    )


def pod_security_context(*, run_as: Optional[int] = None) -> k8s.core.v1.PodSecurityContextArgs:
    """The runtime's default seccomp profile; with `run_as`, also a non-root user and group of that id
    (the check gate runs as nobody). Without it the image's own user is kept."""
    return k8s.core.v1.PodSecurityContextArgs(
        run_as_non_root=True if run_as is not None else None, run_as_user=run_as, run_as_group=run_as,
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"))


# ---------------------------------------------------------------------------------------------
# checkov skips


@dataclass(frozen=True)
class Reasons:
    """A workload's reasons for the checkov checks its pods fail on purpose (None: no reason; a pod
    failing that check is refused). Each is the *why*; what the pod does is read from its spec."""

    root: Optional[str] = None                # CKV_K8S_23 root, CKV_K8S_40 UID below 10000
    writable_root: Optional[str] = None       # CKV_K8S_22 readOnlyRootFilesystem
    no_cpu_limit: Optional[str] = None        # CKV_K8S_11 CPU limit
    no_liveness: Optional[str] = None         # CKV_K8S_8 (not checked for Jobs)
    no_readiness: Optional[str] = None        # CKV_K8S_9 (not checked for Jobs)
    pull_policy: Optional[str] = None         # CKV_K8S_15 imagePullPolicy Always
    tag: Optional[str] = None                 # CKV_K8S_43 image by digest
    secret_env: Optional[str] = None          # CKV_K8S_35 Secret values in env
    added_capabilities: Optional[str] = None  # CKV_K8S_25 capabilities added

    def __post_init__(self) -> None:
        for f in fields(self):
            why = getattr(self, f.name)
            if why is None:
                continue
            # checkov splits the annotation on "="; "|" separates pod sets on a custom resource.
            if not why.strip() or any(ch in why for ch in "=|"):
                raise ValueError(f"checkov skip reason {f.name} must be non-empty and free of '=' and '|': {why!r}")


# The training pod of pod.training_pod_template (the user's image and command): what holds for
# every workload built on it. Probes are the workload's own (multinode.py, for the StatefulSet form).
TRAINING = Reasons(
    root="the user's training image runs as root and rltrain keeps its user",
    writable_root="Python, Ray, Hugging Face and Triton write caches under $HOME, /tmp and the working directory",
    no_cpu_limit="CFS throttling stalls data loaders",
    pull_policy="a large image under a pinned tag, pulled once per node",
    tag="config accepts a specific tag (latest and untagged are refused) or a digest",
    secret_env="the training code reads its tokens from the environment (training.secretEnv)",
)


# The Reasons entry that explains each check.
FIELDS = {
    "CKV_K8S_8": "no_liveness", "CKV_K8S_9": "no_readiness", "CKV_K8S_11": "no_cpu_limit",
    "CKV_K8S_15": "pull_policy", "CKV_K8S_22": "writable_root", "CKV_K8S_23": "root", "CKV_K8S_25": "added_capabilities",
    "CKV_K8S_35": "secret_env", "CKV_K8S_40": "root", "CKV_K8S_43": "tag",
}


@dataclass(frozen=True)
class Finding:
    """A check the pod fails: `fact` is what the spec shows, `field` the Reasons entry that explains it."""

    check: str
    fact: str
    field: str


def _get(obj: Any, name: str) -> Any:
    return None if obj is None else getattr(obj, name, None)


def _names(items: Sequence[str]) -> str:
    return ", ".join(items)


def _which(failing: Sequence[Any], containers: Sequence[Any]) -> str:
    """" (in containers c1, c2)" when only some containers fail a check; "" when all do."""
    if len(failing) == len(containers):
        return ""
    return f" (in containers {_names([c.name for c in failing])})"


def _capability_fact(containers: Sequence[Any]) -> str:
    drops_all = all("ALL" in (_get(_get(_get(c, "security_context"), "capabilities"), "drop") or [])
                    for c in containers)
    added = sorted({a for c in containers
                    for a in (_get(_get(_get(c, "security_context"), "capabilities"), "add") or [])})
    if drops_all and not added:
        return "every capability dropped"
    if drops_all:
        return f"every capability dropped but {_names(added)}"
    return f"capabilities not all dropped{', adds ' + _names(added) if added else ''}"


def _user(spec: Any, container: Any) -> tuple[Optional[bool], Optional[int]]:
    """(runAsNonRoot, runAsUser) in effect for a container: its own, else the pod's."""
    pod, own = _get(spec, "security_context"), _get(container, "security_context")
    non_root = _get(own, "run_as_non_root")
    uid = _get(own, "run_as_user")
    return (non_root if non_root is not None else _get(pod, "run_as_non_root"),
            uid if uid is not None else _get(pod, "run_as_user"))


def _user_fact(users: Sequence[tuple[Optional[bool], Optional[int]]]) -> str:
    uids = sorted({"unset" if uid is None else str(uid) for _, uid in users})
    non_root = sorted({"unset" if n is None else str(n).lower() for n, _ in users})
    if uids == non_root == ["unset"]:
        return "no runAsUser or runAsNonRoot"
    return f"runAsUser {_names(uids)}, runAsNonRoot {_names(non_root)}"


def findings(spec: k8s.core.v1.PodSpecArgs, *, kind: str) -> list[Finding]:
    """The checkov checks a pod spec fails, inside an object of `kind` (checkov 3.3.x conditions)."""
    containers = list(spec.containers or [])
    out: list[Finding] = []

    def check(check_id: str, failing: Sequence[Any], fact: str) -> None:
        if failing:
            out.append(Finding(check_id, fact + _which(failing, containers), FIELDS[check_id]))

    if kind not in NO_PROBE_CHECK_KINDS:
        check("CKV_K8S_8", [c for c in containers if not c.liveness_probe], "no liveness probe")
        check("CKV_K8S_9", [c for c in containers if not c.readiness_probe], "no readiness probe")
    check("CKV_K8S_11", [c for c in containers if not (_get(c.resources, "limits") or {}).get("cpu")],
          "no CPU limit")
    # An image that is not a string is the image the stack built, referenced by digest
    # (stack/image_build.py pod_image: `<repository URL>:<tag>@<digest>`, known once built).
    tagged = [c for c in containers if isinstance(c.image, str) and "@" not in c.image]
    pulls = [c for c in tagged if c.image_pull_policy != "Always"]
    check("CKV_K8S_15", pulls,
          f"imagePullPolicy {_names(sorted({c.image_pull_policy or 'unset' for c in pulls}))}, image by tag")
    check("CKV_K8S_22", [c for c in containers if not _get(c.security_context, "read_only_root_filesystem")],
          "writable root filesystem")
    users = {c.name: _user(spec, c) for c in containers}
    root = [c for c in containers if users[c.name][0] is not True and not (users[c.name][1] or 0) >= 1]
    check("CKV_K8S_23", root, f"{_user_fact([users[c.name] for c in root])}, {_capability_fact(root)}")
    if _get(spec, "host_users") is not False:
        low = [c for c in containers if not (users[c.name][1] or 0) >= HIGH_UID]
        check("CKV_K8S_40", low, f"{_user_fact([users[c.name] for c in low])}, {_capability_fact(low)}")
    check("CKV_K8S_43", tagged, "image by tag, not digest")
    secret_env = {c.name: sorted([e.name for e in (c.env or []) if _get(e.value_from, "secret_key_ref")]
                                 + [f"envFrom[{i}]" for i, s in enumerate(c.env_from or []) if _get(s, "secret_ref")])
                  for c in containers}
    check("CKV_K8S_35", [c for c in containers if secret_env[c.name]],
          f"Secret values in env {_names(sorted({n for names in secret_env.values() for n in names}))}")
    added = [c for c in containers if _get(_get(c.security_context, "capabilities"), "add")]
    check("CKV_K8S_25", added,
          f"adds capabilities {_names(sorted({a for c in added for a in c.security_context.capabilities.add}))}")
    return out


def skips(spec: k8s.core.v1.PodSpecArgs, reasons: Reasons, *, kind: str) -> list[tuple[str, str]]:
    """(check, reason) for every check the pod fails; a failure without a reason is refused."""
    out = []
    for f in findings(spec, kind=kind):
        why = getattr(reasons, f.field)
        if why is None:
            raise ValueError(f"the pod fails checkov {f.check} ({f.fact}) in a {kind} and its workload gives no "
                             f"reason (security.Reasons.{f.field}): fix the pod or give one")
        out.append((f.check, f"{f.fact}: {why}"))
    return out


def annotations(pairs: Sequence[tuple[str, str]]) -> dict[str, str]:
    return {f"{SKIP_PREFIX}{i}": f"{check}={why}" for i, (check, why) in enumerate(sorted(pairs), 1)}


def parse(annotations_: Optional[Mapping[str, str]]) -> dict[str, str]:
    """{check: reason} of the skip annotations in `annotations_`."""
    out = {}
    for key, value in (annotations_ or {}).items():
        if key.startswith(SKIP_PREFIX):
            check, _, why = value.partition("=")
            out[check] = why
    return out


def annotate(template: k8s.core.v1.PodTemplateSpecArgs, reasons: Reasons, *, kind: str) -> dict[str, str]:
    """The skip annotations for the object of `kind` holding `template`, from the template's pod
    (the template itself is left as it is: see the module docstring)."""
    return annotations(skips(template.spec, reasons, kind=kind))


def annotate_pods(templates: Mapping[str, k8s.core.v1.PodTemplateSpecArgs],
                  reasons: Union[Reasons, Mapping[str, Reasons]], *, kind: str = "Pod") -> dict[str, str]:
    """The skip annotations for a custom resource holding several pod templates (MPIJob replicas,
    Ray groups), keyed by pod set name as the resource names them (the replica type, "head", the
    worker group's name): every check any pod set fails, with the reason where all share it, else
    "[set] reason" for each pod set that fails it, joined by " | ". Templates are left as they are."""
    per_set = {name: dict(skips(t.spec, reasons if isinstance(reasons, Reasons) else reasons[name], kind=kind))
               for name, t in templates.items()}
    merged = []
    for check in sorted({c for s in per_set.values() for c in s}):
        having = [(name, s[check]) for name, s in per_set.items() if check in s]
        if len(having) == len(per_set) and len({why for _, why in having}) == 1:
            merged.append((check, having[0][1]))
        else:
            merged.append((check, PART_SEPARATOR.join(f"[{name}] {why}" for name, why in having)))
    return annotations(merged)


def pod_set_skips(annotations_: Optional[Mapping[str, str]], pod_set: str) -> dict[str, str]:
    """{check: reason} of one pod set in a custom resource's skips (`annotate_pods`)."""
    out = {}
    for check, reason in parse(annotations_).items():
        if not reason.startswith("["):
            out[check] = reason
            continue
        for part in reason.split(PART_SEPARATOR):
            name, _, why = part[1:].partition("] ")
            if name == pod_set:
                out[check] = why
    return out
