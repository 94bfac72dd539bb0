"""ExportJob: the served step of a run's checkpoints as a Hugging Face directory vLLM loads.

`workloads.serving.export` (components/stack/lifecycle.py; on when serving a run's step of a
profiled trainer). RLinf writes `actor/dcp_checkpoint/` and `actor/model_state_dict/full_weights.pt`
(RLinf/RLinf v0.3 rlinf/hybrid_engines/fsdp/strategy/base.py), not a directory vLLM can load:
a Job `rltrain-export-step-<N>` runs /scripts/export_hf.py on it (the trainer image's venv has
torch and transformers) and writes `/fsx/exports/<the run's directory below /fsx/runs>/global_step_<N>`
(components/workloads/env.py export_dir): outside the steps directory the retention pass prunes, and
in the tree the FSx data repository association exports to S3 whenever a bucket is set
(components/stack/data_repository.py), with the marker `.rltrain-export.json` last. The serving pods wait for that marker (serving.py, init container `wait-for-export`).

The Job waits itself (bounded: `export.waitMinutes`, default the run's deadline) for the step to
be complete: a first `up` creates training, export and serving together. So `pulumi up` does not
wait for it (`pulumi.com/waitFor` the object's uid: created, deletion still awaited; runs.py).
CPU only, no GPU and no EFA: not queued by Kueue. It runs on a GPU node (where the large training
image already is) in the room beside the runs; memory from the model: the full state dict at the
actor's precision + the model at the export's dtype, +20 % and 2 GiB for the interpreter.
Nothing in, nothing out on the network (it reads and writes /fsx only; HF_HUB_OFFLINE).
"""

from __future__ import annotations

import math
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.scripts import export_hf
from components.stack import image_build
from components.stack.config import StackConfig
from components.stack.labels import EXPORT_COMPONENT
from components.k8s import security
from components.workloads import env, placement, runs, trainer, volumes
from components.k8s.options import child_opts

COMPONENT = EXPORT_COMPONENT
SCRIPT = "export_hf.py"
# The conversion itself after the wait: loading, a state dict copy and writing safetensors of a
# 7 B model on a few CPUs is minutes; an hour is the allowance.
CONVERT_SECONDS = 3600
TMP_SIZE = "2Gi"  # HOME and /tmp: transformers and torch caches
EXPORT_DTYPE_BYTES = 2  # bf16, what the export writes (export_hf.py --dtype)
SKIP_REASONS = security.Reasons(
    root="the trainer image runs as root; the export reads the root-owned checkpoints and writes on the shared volume",
    writable_root="torch and transformers write caches under $HOME and /tmp",
    pull_policy="a large image under a pinned tag, pulled once per node",
    tag="config accepts a specific tag (latest and untagged are refused) or a digest",
)


def enabled(cfg: StackConfig) -> bool:
    sv = cfg.workloads.serving
    tc = cfg.workloads.trainer_config
    if not (sv.enabled and sv.model.run and tc is not None and tc.model is not None):
        return False
    return sv.export.enabled is not False


def nodes(cfg: StackConfig) -> int:
    run = cfg.workloads.serving.model.run or ""
    found = cfg.run(run)
    return found.nodes if found is not None else 1 if run == "single-node" else cfg.multi_node_count


def name(cfg: StackConfig) -> str:
    return f"rltrain-export-step-{cfg.workloads.serving.model.step}"


def out_dir(cfg: StackConfig) -> str:
    terms = cfg.workloads.resume_terms
    assert terms is not None
    return f"{env.export_dir(cfg, cfg.workloads.serving.model.run or '')}/{terms.step_prefix}{cfg.workloads.serving.model.step}"


def marker(cfg: StackConfig) -> str:
    return f"{out_dir(cfg)}/{export_hf.MARKER}"


def wait_seconds(cfg: StackConfig) -> int:
    ex = cfg.workloads.serving.export
    if ex.wait_minutes is not None:
        return ex.wait_minutes * 60
    # The run's own deadline: a step can be written as late as the run may last, the restarts its
    # bounds allow included (runs.deadline_seconds).
    return runs.deadline_seconds(cfg)


def memory_gib(cfg: StackConfig) -> int:
    tc = cfg.workloads.trainer_config
    assert tc is not None and tc.model is not None and tc.saves is not None
    raw = tc.model.params * (tc.saves.param_bytes + EXPORT_DTYPE_BYTES) / 2**30
    return math.ceil(raw * 1.2 + 2)


def args(cfg: StackConfig) -> list[str]:
    w = cfg.workloads
    terms, profile = w.resume_terms, w.profile
    assert terms is not None and profile is not None
    return [f"--family={profile.family}", f"--steps-dir={trainer.steps_dir(cfg, env.dir_of(cfg, w.serving.model.run or ''))}",
            f"--prefix={terms.step_prefix}", f"--marks={','.join(terms.complete_marks)}",
            f"--step={w.serving.model.step}", f"--base-model={w.model_path}", f"--out={out_dir(cfg)}",
            f"--wait-seconds={wait_seconds(cfg)}", "--poll-seconds=60"]


def pod_template(cfg: StackConfig, claim_name: str, scripts: list) -> k8s.core.v1.PodTemplateSpecArgs:
    w = cfg.workloads
    profile = w.profile
    assert profile is not None and w.venv_name
    res = {"cpu": str(w.serving.export.cpu), "memory": f"{memory_gib(cfg)}Gi"}
    values = {"PATH": profile.path(w.venv_name), "VIRTUAL_ENV": f"{profile.venv_root}/{w.venv_name}",
              "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HOME": volumes.TMP_PATH}
    return k8s.core.v1.PodTemplateSpecArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(labels=runs.labels(COMPONENT, name(cfg)),
                                            annotations=volumes.scripts_annotation(scripts)),
        spec=k8s.core.v1.PodSpecArgs(
            restart_policy="Never",
            service_account_name=cfg.training.service_account,
            automount_service_account_token=False,
            affinity=placement.gpu_affinity(),  # as the staging Job (placement.py)
            tolerations=placement.gpu_tolerations(),
            security_context=security.pod_security_context(),
            containers=[k8s.core.v1.ContainerArgs(
                name=runs.CONTAINER,
                image=w.serving.export.image or image_build.pod_image(w.image),
                image_pull_policy="IfNotPresent",
                command=["python3", f"{volumes.SCRIPTS_PATH}/{SCRIPT}"],
                args=args(cfg),
                env=[k8s.core.v1.EnvVarArgs(name=k, value=v) for k, v in sorted(values.items())],
                resources=k8s.core.v1.ResourceRequirementsArgs(requests=res, limits=res),
                volume_mounts=[k8s.core.v1.VolumeMountArgs(name="fsx", mount_path=volumes.FSX_PATH),
                               volumes.scripts_mount(),
                               k8s.core.v1.VolumeMountArgs(name="tmp", mount_path=volumes.TMP_PATH)],
                security_context=security.container_security_context(),
            )],
            volumes=[k8s.core.v1.VolumeArgs(name="fsx", persistent_volume_claim=(
                         k8s.core.v1.PersistentVolumeClaimVolumeSourceArgs(claim_name=claim_name))),
                     volumes.scripts_volume(scripts),
                     k8s.core.v1.VolumeArgs(name="tmp", empty_dir=k8s.core.v1.EmptyDirVolumeSourceArgs(
                         size_limit=TMP_SIZE))],
        ),
    )


def job_args(cfg: StackConfig, claim_name: str, namespace: pulumi.Input[str],
             scripts: list) -> k8s.batch.v1.JobInitArgs:
    template = pod_template(cfg, claim_name, scripts)
    return k8s.batch.v1.JobInitArgs(
        metadata=runs.object_metadata(name(cfg), namespace, runs.labels(COMPONENT, name(cfg)),
                                      {**runs.AWAIT_CREATED, **security.annotate(template, SKIP_REASONS, kind="Job")}),
        spec=k8s.batch.v1.JobSpecArgs(
            completions=1, parallelism=1,
            # The program's refusals (2 usage, 3 a checkpoint that does not load, 4 not complete in
            # time) do not improve on a retry: fail at once; anything else is retried once.
            backoff_limit=1,
            pod_failure_policy=k8s.batch.v1.PodFailurePolicyArgs(rules=[
                k8s.batch.v1.PodFailurePolicyRuleArgs(action="FailJob", on_exit_codes=(
                    k8s.batch.v1.PodFailurePolicyOnExitCodesRequirementArgs(
                        container_name=runs.CONTAINER, operator="In",
                        values=[export_hf.EXIT_USAGE, export_hf.EXIT_BAD_CHECKPOINT, export_hf.EXIT_TIMEOUT])))]),
            active_deadline_seconds=wait_seconds(cfg) + CONVERT_SECONDS,
            template=template,
        ),
    )


def summary(cfg: StackConfig) -> list[str]:
    if not enabled(cfg):
        return []
    return [f"export: Job {name(cfg)} ({cfg.workloads.serving.export.cpu} CPU, {memory_gib(cfg)} GiB, no GPU) waits up to "
            f"{wait_seconds(cfg)} s for step {cfg.workloads.serving.model.step} of run {cfg.workloads.serving.model.run}, "
            f"writes {out_dir(cfg)} (marker {export_hf.MARKER})"]


class ExportJob(pulumi.ComponentResource):
    """The export Job of the served step and its NetworkPolicy."""

    def __init__(self, name_: str, args_: runs.WorkloadArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:ExportJob", name_, None, opts)
        cfg = args_.cfg
        netpol = k8s.networking.v1.NetworkPolicy(f"{name_}-netpol", runs.isolated_network_policy(name(cfg), COMPONENT, namespace),
                                                 child_opts(self, opts))
        # Replaced (a new step) delete first, like every Job here (policy rule run-replacement).
        self.job = k8s.batch.v1.Job(f"{name_}-job", job_args(cfg, args_.claim_name, namespace, [args_.scripts[SCRIPT], args_.scripts[trainer.COMPLETENESS]]),
                                    child_opts(self, opts, netpol, delete_before_replace=True,
                                                    replace_on_changes=runs.REPLACE_JOB_ON))
        self.register_outputs({"job": name(cfg), "path": out_dir(cfg)})
