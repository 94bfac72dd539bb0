"""What a training run passes to the trainer, derived from its profile (components/stack/trainers.py).

- PATH and VIRTUAL_ENV: the image's venv first, on every container of a run (the single-node pod,
  the launcher forms' pods, the RayJob's head and workers; KubeRay copies the Ray container's env
  into its `wait-gcs-ready` init container, ray-project/kuberay v1.6.2
  ray-operator/controllers/ray/common/pod.go DefaultWorkerPodTemplate). Without it `ray`,
  `python3 -c 'import ray'` and the launcher's node-wait child resolve to the system Python, which
  has no Ray (exit 127, SEED-DEFECTS D17).
- The task assets' directory (MANISKILL_ASSET_DIR), staged on /fsx by the staging Job.
- The trainer's overrides (HYDRA_OVERRIDES for RLinf): the config's own, and for N nodes the
  placement over every GPU and the batch sizes scaled with it (D19).
- The resume contract in the trainer's terms: the run's own checkpoint directory in the trainer's
  variable (CKPT_PATH), and the command wrapped by /scripts/resume_wrapper.py, which appends the
  resume argument (runner.resume_dir=<newest complete global_step_N>) or starts fresh, and refuses
  (exit EXIT_NO_PROGRESS) a start that would be restart `workloads.infrastructureRestarts` + 1 from
  the same step, counted in its start ledger under the checkpoint directory.
"""

from __future__ import annotations

from typing import Optional

from components.stack import runs as runs_mod
from components.stack import trainers
from components.stack.config import StackConfig
from components.stack.runs import Run

WRAPPER = "resume_wrapper.py"
WRAPPER_PATH = f"/scripts/{WRAPPER}"
WARM = "warm_start.py"
WARM_PATH = f"/scripts/{WARM}"
# The one test of a complete checkpoint step (a module the wrapper, the export, the retention and
# the embodied evaluation import; mounted beside each of them).
COMPLETENESS = "checkpoint_complete.py"
# The wrapper's own variables (components/scripts/resume_wrapper.py).
WRAPPER_ENV = ("RESUME_STEPS_DIR", "RESUME_STEP_PREFIX", "RESUME_COMPLETE_MARKS", "RESUME_ENV", "RESUME_FORMAT",
               "RESUME_LEDGER", "RESUME_MAX_STALLED_RESTARTS", "RESUME_LEDGER_SCOPE")
# The ledger counts the starts of the current Job only (resume_wrapper.py RESUME_LEDGER_SCOPE): its
# UID from the pod's label, which the API server adds to every Job's pod template with the legacy
# `controller-uid` (Kubernetes v1.35.4 pkg/registry/batch/job/strategy.go generateSelector; the
# prefixed key is the one the Job's selector matches). A pod without it (a StatefulSet's, a RayJob's)
# gets an empty value (the downward API's value of a missing label): every entry counts there.
LEDGER_SCOPE_ENV = "RESUME_LEDGER_SCOPE"
LEDGER_SCOPE_FIELD = "metadata.labels['batch.kubernetes.io/controller-uid']"
# The wrapper's start ledger, inside the run's own checkpoint directory (so it lives exactly as long
# as the checkpoints it counts progress in) and outside the trainer's step directories.
LEDGER_UNDER = ".rltrain/starts.jsonl"


def resume_mapped(cfg: StackConfig) -> bool:
    """The training command is told where to write checkpoints and how to resume."""
    return cfg.workloads.resume_terms is not None


def warm(cfg: StackConfig, run: Optional[Run]) -> bool:
    """The run warm-starts from another run's step (resumeFrom) through components/scripts/warm_start.py."""
    return run is not None and run.resume_from is not None and resume_mapped(cfg)


def training_command(cfg: StackConfig, run: Optional[Run] = None) -> list[str]:
    """workloads.command, wrapped by the resume wrapper when the run has a resume mapping, and by the
    warm start in front of it for a run with resumeFrom (a program of its own, mounted only there:
    no other run's pod template changes)."""
    cmd = list(cfg.workloads.command)
    if not resume_mapped(cfg):
        return cmd
    wrapped = ["python3", WRAPPER_PATH, "--", *cmd]
    return ["python3", WARM_PATH, "--", *wrapped] if warm(cfg, run) else wrapped


def scripts(cfg: StackConfig, run: Optional[Run] = None) -> list[str]:
    return ([WRAPPER, COMPLETENESS] if resume_mapped(cfg) else []) + ([WARM] if warm(cfg, run) else [])


def steps_dir(cfg: StackConfig, checkpoint_dir: str) -> str:
    terms = cfg.workloads.resume_terms
    assert terms is not None
    tc = cfg.workloads.trainer_config
    under = terms.steps_under.format(experiment=cfg.workloads.experiment_name,
                                     config_experiment=tc.experiment_name if tc else "")
    return f"{checkpoint_dir}/{under}".rstrip("/")


def ledger_path(checkpoint_dir: str) -> str:
    return f"{checkpoint_dir}/{LEDGER_UNDER}"


def overrides(cfg: StackConfig, num_nodes: int) -> list[str]:
    """The trainer's overrides for a run over `num_nodes` whole GPU nodes."""
    tc = cfg.workloads.trainer_config
    if tc is None:
        return []
    return trainers.config_overrides(tc, num_nodes, cfg.gpu_nodes.instance.gpu_count)


def placement(cfg: StackConfig, num_nodes: int) -> Optional[dict[str, list[tuple[int, int]]]]:
    """Component -> GPU rank ranges of a run (the config's own on one node), None without a profile."""
    tc = cfg.workloads.trainer_config
    if tc is None or not tc.spreads:
        return None
    return trainers.placement(tc, num_nodes, cfg.gpu_nodes.instance.gpu_count)


def trainer_env(cfg: StackConfig, num_nodes: int, checkpoint_dir: str, *, run: Optional[Run] = None,
                warm_start: Optional[str] = None) -> dict[str, str]:
    """The env a training run's containers get from the trainer profile and resume mapping.

    The run's own overrides (`workloads.runs[].overrides`) come after the program's: the config
    refuses every key the program sets (program_keys), so none is overridden twice. `warm_start`
    (resumeFrom): another run's step directory, which the resume wrapper turns into the trainer's own
    resume setting (RESUME_FORMAT, runner.resume_dir=... for RLinf) while the run has no step of its own."""
    w = cfg.workloads
    out: dict[str, str] = {}
    profile = w.profile
    if profile is not None and w.venv_name:
        out["PATH"] = profile.path(w.venv_name)
        out["VIRTUAL_ENV"] = f"{profile.venv_root}/{w.venv_name}"
        out.update(profile.asset_env)
        extra = overrides(cfg, num_nodes) + loggers(cfg) + (runs_mod.hydra_overrides(run.override_map) if run else [])
        if extra:
            out[profile.overrides_env] = " ".join(extra)
    terms = w.resume_terms
    if terms is not None:
        out[terms.checkpoint_env] = checkpoint_dir
        out.update({
            "RESUME_STEPS_DIR": steps_dir(cfg, checkpoint_dir),
            "RESUME_STEP_PREFIX": terms.step_prefix,
            "RESUME_COMPLETE_MARKS": ",".join(terms.complete_marks),
            "RESUME_ENV": terms.resume_env,
            "RESUME_FORMAT": terms.resume_format,
            # The bound on restarts from the same checkpoint, whatever caused them (issue 31): Kueue's
            # requeue count (the same key, components/k8s/kueue.py) grows only on PodsReady-timeout
            # evictions, not on its topology-aware NodeFailures evictions nor on pods the Job's pod
            # failure policy ignores, so the wrapper counts the starts itself.
            "RESUME_LEDGER": ledger_path(checkpoint_dir),
            "RESUME_MAX_STALLED_RESTARTS": str(w.infrastructure_restarts),
        })
        if warm_start:
            out["RESUME_FROM"] = warm_start
    return out


def loggers(cfg: StackConfig) -> list[str]:
    """workloads.curves.loggerBackends as RLinf's override (a Hydra list: brackets, no spaces)."""
    backends = cfg.workloads.curves.logger_backends
    profile = cfg.workloads.profile
    if backends is None or profile is None or trainers.LOGGERS_KEY not in profile.output_keys:
        return []
    return [f"{trainers.LOGGERS_KEY}=[{','.join(backends)}]"]


def program_keys(cfg: StackConfig, num_nodes: int) -> dict[str, str]:
    """Hydra keys the program sets for a run of `num_nodes` (components/stack/trainers.py program_keys)."""
    w = cfg.workloads
    if w.profile is None or w.trainer_config is None:
        return {}
    return trainers.program_keys(w.profile, w.trainer_config, num_nodes, cfg.gpu_nodes.instance.gpu_count)


def node_rank_env(cfg: StackConfig) -> Optional[str]:
    profile = cfg.workloads.profile
    return profile.node_rank_env if profile else None
