"""checkov skips derived from the pod they sit on (components/k8s/security.py), on typed pod specs.

tests/test_checkov.py holds the same skips to checkov itself and re-checks every claim on the renders;
these are the generator's cases that no render exercises (several containers, a non-root user, envFrom).
"""

from __future__ import annotations

import pulumi_kubernetes as k8s
import pytest

from components.k8s import security
from components.workloads import nccl

IMAGE = "r/i:1"
WHY = security.Reasons(root="r", writable_root="w", no_cpu_limit="c", no_liveness="l", no_readiness="n",
                       pull_policy="p", tag="t", secret_env="s", added_capabilities="a")


def container(name="main", *, add=(), cpu_limit=None, image=IMAGE, pull="IfNotPresent", read_only=False,
              run_as_user=None, probes=False, env=None, env_from=None):
    return k8s.core.v1.ContainerArgs(
        name=name, image=image, image_pull_policy=pull, env=env, env_from=env_from,
        resources=k8s.core.v1.ResourceRequirementsArgs(limits={"cpu": cpu_limit} if cpu_limit else {"memory": "1Gi"}),
        security_context=k8s.core.v1.SecurityContextArgs(
            allow_privilege_escalation=False, read_only_root_filesystem=True if read_only else None,
            run_as_user=run_as_user, capabilities=k8s.core.v1.CapabilitiesArgs(drop=["ALL"], add=list(add) or None)),
        liveness_probe=k8s.core.v1.ProbeArgs(period_seconds=10) if probes else None,
        readiness_probe=k8s.core.v1.ProbeArgs(period_seconds=10) if probes else None)


def spec(*containers, **kw):
    return k8s.core.v1.PodSpecArgs(containers=list(containers), **kw)


def skips(pod_spec, kind="Pod", reasons=WHY):
    return dict(security.skips(pod_spec, reasons, kind=kind))


def test_capabilities_listed_as_added():
    s = skips(spec(container(add=nccl.SSHD_CAPABILITIES)))
    caps = ", ".join(sorted(nccl.SSHD_CAPABILITIES))
    assert s["CKV_K8S_25"] == f"adds capabilities {caps}: a"
    assert s["CKV_K8S_23"] == f"no runAsUser or runAsNonRoot, every capability dropped but {caps}: r"
    # checkov's CKV_K8S_37 passes whenever ALL is dropped: no skip for it
    assert "CKV_K8S_37" not in s
    assert skips(spec(container()))["CKV_K8S_23"] == "no runAsUser or runAsNonRoot, every capability dropped: r"


def test_no_skip_for_what_the_pod_passes():
    hardened = container(cpu_limit="1", image="r/i@sha256:" + "0" * 64, read_only=True, run_as_user=10001,
                         probes=True)
    assert skips(spec(hardened)) == {}
    # a non-root UID below 10000 fails only the high-UID check, saying which UID
    assert skips(spec(container(cpu_limit="1", image="r/i@sha256:" + "0" * 64, read_only=True, run_as_user=1000,
                                probes=True))) == {"CKV_K8S_40": "runAsUser 1000, runAsNonRoot unset, "
                                                                 "every capability dropped: r"}
    # Jobs are not checked for probes
    assert not {"CKV_K8S_8", "CKV_K8S_9"} & set(skips(spec(container()), kind="Job"))
    assert {"CKV_K8S_8", "CKV_K8S_9"} <= set(skips(spec(container()), kind="StatefulSet"))


def test_only_the_failing_containers_are_named():
    s = skips(spec(container("a", cpu_limit="1"), container("b")), kind="Job")
    assert s["CKV_K8S_11"] == "no CPU limit (in containers b): c"
    assert s["CKV_K8S_22"] == "writable root filesystem: w"


def test_secret_env_names():
    env = [k8s.core.v1.EnvVarArgs(name="B_TOKEN", value_from=k8s.core.v1.EnvVarSourceArgs(
               secret_key_ref=k8s.core.v1.SecretKeySelectorArgs(name="s", key="b"))),
           k8s.core.v1.EnvVarArgs(name="PLAIN", value="x")]
    env_from = [k8s.core.v1.EnvFromSourceArgs(secret_ref=k8s.core.v1.SecretEnvSourceArgs(name="s"))]
    assert skips(spec(container(env=env, env_from=env_from)), kind="Job")["CKV_K8S_35"] == \
        "Secret values in env B_TOKEN, envFrom[0]: s"
    assert "CKV_K8S_35" not in skips(spec(container(env=env[1:])), kind="Job")


def test_a_failure_without_a_reason_is_refused():
    with pytest.raises(ValueError, match=r"CKV_K8S_25 \(adds capabilities NET_ADMIN\).*added_capabilities"):
        security.skips(spec(container(add=["NET_ADMIN"])), security.TRAINING, kind="Job")
    # checkov splits on "="; "|" separates pod sets on a custom resource
    for bad in ("a=b", "a | b", " "):
        with pytest.raises(ValueError, match="free of"):
            security.Reasons(root=bad)


def test_custom_resource_carries_every_pod_sets_skips():
    def template(c):
        return k8s.core.v1.PodTemplateSpecArgs(metadata=k8s.meta.v1.ObjectMetaArgs(annotations={"keep": "1"}),
                                               spec=spec(c))
    launcher, worker = template(container()), template(container(add=["CHOWN"], cpu_limit="1"))
    annotations = security.annotate_pods({"Launcher": launcher, "Worker": worker}, {"Launcher": WHY, "Worker": WHY})
    owner = security.parse(annotations)
    assert owner["CKV_K8S_22"] == "writable root filesystem: w"  # both, same reason
    assert owner["CKV_K8S_11"] == "[Launcher] no CPU limit: c"
    assert owner["CKV_K8S_25"] == "[Worker] adds capabilities CHOWN: a"
    assert owner["CKV_K8S_23"] == ("[Launcher] no runAsUser or runAsNonRoot, every capability dropped: r | "
                                   "[Worker] no runAsUser or runAsNonRoot, every capability dropped but CHOWN: r")
    # each pod set's part, as the scan gives it to that template's Pod
    worker_part = security.pod_set_skips(annotations, "Worker")
    assert worker_part == dict(security.skips(worker.spec, WHY, kind="Pod"))
    assert "CKV_K8S_25" not in security.pod_set_skips(annotations, "Launcher")
    # the templates stay as they were: a reason's wording never changes a pod template
    assert launcher.metadata.annotations == worker.metadata.annotations == {"keep": "1"}
