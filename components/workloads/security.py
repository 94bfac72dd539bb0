"""Hardened pod and container security contexts, and the checkov skips that are deliberate, each with its reason.
"""

from __future__ import annotations

from typing import Sequence

import pulumi_kubernetes as k8s

from components.stack.config import StackConfig


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


def pod_security_context() -> k8s.core.v1.PodSecurityContextArgs:
    return k8s.core.v1.PodSecurityContextArgs(
        seccomp_profile=k8s.core.v1.SeccompProfileArgs(type="RuntimeDefault"))


def image_is_digest(image: str) -> bool:
    return "@sha256:" in image


def checkov_skips(cfg: StackConfig, *, image: str, cpu_limit: bool = False, read_only_root: bool = False,
                  secrets: bool = False, extra: Sequence[tuple[str, str]] = ()) -> dict[str, str]:
    """Annotations for the checkov findings that are deliberate here, each with its reason.

    checkov (3.3.x) reads `checkov.io/skip<N>: CHECK=reason` from the metadata of the object it
    scans: for a Job or StatefulSet that is the object's own metadata, also for the graph checks on
    the pod inside it (CKV2_K8S_*); the pod template's annotations are not read (tested by
    experiment). So the workload object carries these (`skips_of(template)`), and the pod template
    too, for Pods scanned on their own. A reason may not contain "=" (checkov splits on it).
    """
    reasons = [
        ("CKV_K8S_8", "no liveness probe can tell a hung collective from a busy one (D3)"),
        ("CKV_K8S_9", "run-to-completion pod, no traffic to gate on readiness"),
        ("CKV_K8S_15", "IfNotPresent on purpose: large image with a pinned tag"),
        ("CKV_K8S_23", "the CUDA/EFA image runs as root; all capabilities dropped"),
        ("CKV_K8S_40", "the CUDA/EFA image runs as root; all capabilities dropped"),
    ]
    if not read_only_root:
        reasons.append(("CKV_K8S_22", "Python, Ray and model caches write to the root filesystem"))
    if not cpu_limit:
        reasons.append(("CKV_K8S_11", "no CPU limit: CFS throttling stalls data loaders"))
    if not image_is_digest(image):
        reasons.append(("CKV_K8S_43", "a specific tag is enforced by config, latest is rejected"))
    if secrets:
        reasons.append(("CKV_K8S_35", "secretKeyRef env is what the training code reads"))
    reasons += extra
    if any("=" in why or not why.strip() for _, why in reasons):
        raise ValueError(f"checkov skip reasons must be non-empty and free of '=': {reasons}")
    return {f"checkov.io/skip{i}": f"{check}={why}" for i, (check, why) in enumerate(sorted(reasons), 1)}


def skips_of(template: k8s.core.v1.PodTemplateSpecArgs) -> dict[str, str]:
    """The checkov skip annotations of a pod template, for the workload object that holds it."""
    annotations = template.metadata.annotations or {}
    return {k: v for k, v in annotations.items() if k.startswith("checkov.io/skip")}
