"""EmbodiedEvaluationJob: RLinf's own evaluation of an embodied checkpoint in the simulator, a GPU
Job through the Kueue queue (`workloads.embodiedEvaluation`, off by default; config in
components/stack/embodied_evaluation.py).

vLLM does not serve an action policy (no OpenVLA / Prismatic architecture in its registry), so the
embodied family is evaluated where it acts: the Job runs /scripts/embodied_eval.py in the training
image (the sample's image holds RLinf at /workspace/RLinf: aws-samples/sample-rlinf-on-eks
examples/scripts/run_training_eks.sh `cd /workspace/RLinf`), which runs RLinf's
evaluations/eval_embodied_agent.py (RLinf/RLinf@0505431899574619) with the training config
(`--config-name` = workloads.configName, whose `env.eval` section is RLinf's evaluation setting:
examples/embodiment/config/maniskill_ppo_openvlaoft.yaml `env/maniskill_ood_template@env.eval`,
16 envs, 80 steps) on the step's `actor/model_state_dict/full_weights.pt` (`runner.ckpt_path`).
The overrides the training run gets (the sample's run_training_eks.sh model paths and
`cluster.num_nodes`, the profile's own, the placement scaled to the node) keep the policy and its
placement those of training; the evaluation launches only the env and rollout groups.

- **GPUs**: the config's env and rollout ranks on one node, so a whole node for a config that
  places them over 8 GPUs (scaled to the node's GPUs, trainers.placement), the config's own count
  for a single-key quickstart (1 or 2). A whole-node pod is sized as the training pod without EFA;
  a smaller one gets the GPUs' share of it.
- **Queue**: the Kueue queue label; Kueue suspends the Job at creation and admits it whole when
  the GPUs are free, so it never takes GPUs a run holds; its PriorityClass is 100 below training's
  and never preempts (a run waiting with it is admitted first). `pulumi up` waits only for it to exist.
- **Result**: `eval-step-<N>-<UTC>.json` in `<the run's checkpoint dir>/eval` (the math
  evaluation's directory and file form), RLinf's logs and videos under `eval/embodied/`; the
  eval-metrics Deployment serves it as rltrain_eval_success_rate{step=...} (evaluation.py).
- **Failures**: the script's refusals (usage, no complete step, RLinf failed) fail the Job at once;
  disruptions are retried free.
- **Name**: `rltrain-embodied-eval-step-<N>` (`-newest` without a step): a new step is a new Job
  (the old one deleted first); a finished Job stays, so `up` does not evaluate the same step twice.
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.k8s import kueue, security
from components.scripts import embodied_eval as script
from components.stack import trainers
from components.stack.config import IMAGE_PULL_MARGIN_SECONDS, StackConfig
from components.workloads import env, evaluation, placement, pod, runs, sizing, trainer, volumes
from components.k8s.options import child_opts

COMPONENT = "embodied-evaluation"
SCRIPT = "embodied_eval.py"
SKIP_REASONS = security.Reasons(
    root="the trainer image runs as root; the result is written beside the root-owned checkpoints",
    writable_root="RLinf, Ray and the simulator write caches under $HOME and /tmp",
    no_cpu_limit="the training pod's sizing: CFS throttling stalls the simulator's env workers",
    pull_policy="the training image under its pinned tag, pulled once per node and reused by training",
    tag="the training image as configured (latest and untagged are refused)",
)


def enabled(cfg: StackConfig) -> bool:
    return cfg.workloads.embodied_evaluation.enabled


def name(cfg: StackConfig) -> str:
    step = cfg.workloads.embodied_evaluation.step
    return f"rltrain-embodied-eval-{'newest' if step is None else f'step-{step}'}"


def run_nodes(cfg: StackConfig) -> int:
    run = cfg.run(cfg.workloads.embodied_evaluation.run)
    return run.nodes if run is not None else 1 if cfg.workloads.embodied_evaluation.run == "single-node" \
        else cfg.multi_node_count


def checkpoint_dir(cfg: StackConfig) -> str:
    return env.dir_of(cfg, cfg.workloads.embodied_evaluation.run)


def out_dir(cfg: StackConfig) -> str:
    """The run's `eval` directory, where the math evaluation writes its results (evaluation.py)."""
    return f"{checkpoint_dir(cfg)}/eval"


def gpus(cfg: StackConfig) -> int:
    """The GPUs one node's env and rollout workers take (module docstring)."""
    tc = cfg.workloads.trainer_config
    node = cfg.gpu_nodes.instance.gpu_count
    assert tc is not None
    if not tc.spreads:
        return min(tc.gpus_per_node, node)
    ranks = trainers.placement(tc, 1, node)
    used = [b for comp, spans in ranks.items() if comp in ("env", "rollout") or "," in comp for _, b in spans]
    return (max(used) + 1) if used else node


def pod_sizing(cfg: StackConfig) -> sizing.PodSizing:
    it, g = cfg.gpu_nodes.instance, gpus(cfg)
    whole = sizing.pod_sizing(cfg, efa=False)
    if g >= it.gpu_count:
        return whole
    return sizing.PodSizing(cpu=max(1, whole.cpu * g // it.gpu_count),
                            memory_mib=whole.memory_mib * g // it.gpu_count,
                            shm_gib=max(1, whole.shm_gib * g // it.gpu_count), gpus=g, efa=0)


def hydra_overrides(cfg: StackConfig) -> list[str]:
    """What the training run's command line gets (run_training_eks.sh: the model paths and
    cluster.num_nodes; the profile's overrides and the placement for one node), then the user's."""
    w = cfg.workloads
    out = [f"actor.model.model_path={w.model_path}", f"rollout.model.model_path={w.model_path}",
           "cluster.num_nodes=1", *trainer.overrides(cfg, 1)]
    return out + list(w.embodied_evaluation.overrides)


def args(cfg: StackConfig) -> list[str]:
    w = cfg.workloads
    terms = w.resume_terms
    assert terms is not None
    step = w.embodied_evaluation.step
    return [f"--steps-dir={trainer.steps_dir(cfg, checkpoint_dir(cfg))}", f"--prefix={terms.step_prefix}",
            f"--marks={','.join(terms.complete_marks)}", *([f"--step={step}"] if step is not None else []),
            f"--out-dir={out_dir(cfg)}", f"--config-name={w.config_name}", f"--rlinf-repo={trainers.RLINF_REPO}",
            "--", *hydra_overrides(cfg)]


def deadline_seconds(cfg: StackConfig) -> int:
    return cfg.workloads.embodied_evaluation.deadline_minutes * 60 + IMAGE_PULL_MARGIN_SECONDS


def pod_template(cfg: StackConfig, claim_name: str, scripts: list) -> k8s.core.v1.PodTemplateSpecArgs:
    w = cfg.workloads
    profile = w.profile
    assert profile is not None and w.venv_name
    extra = {"PATH": profile.path(w.venv_name), "VIRTUAL_ENV": f"{profile.venv_root}/{w.venv_name}",
             # Models and assets come from /fsx (the staging Job): no hub access from the Job.
             "HF_HUB_OFFLINE": "1", **profile.asset_env}
    return pod.training_pod_template(
        cfg, claim_name=claim_name, secret_name=None, include_secrets=False,
        pod_labels=runs.labels(COMPONENT, name(cfg)),
        command=["python3", f"{volumes.SCRIPTS_PATH}/{SCRIPT}", *args(cfg)],
        num_nodes=1, extra_env=extra, sizing=pod_sizing(cfg), scripts=scripts, checkpoints=False,
        affinity=placement.gpu_affinity(),
        # Below training in the queue, never preempting (runs.EVALUATION_PRIORITY_BELOW).
        priority_class_name=runs.check_priority_class(cfg, runs.EMBODIED_EVALUATION))


def job_args(cfg: StackConfig, claim_name: str, namespace: pulumi.Input[str], scripts: list) -> k8s.batch.v1.JobInitArgs:
    template = pod_template(cfg, claim_name, scripts)
    obj_labels = runs.labels(COMPONENT, name(cfg))
    return k8s.batch.v1.JobInitArgs(
        metadata=runs.object_metadata(name(cfg), namespace, {**obj_labels, **kueue.queue_labels(cfg)},
                                      {**runs.AWAIT_CREATED, **security.annotate(template, SKIP_REASONS, kind="Job")}),
        spec=k8s.batch.v1.JobSpecArgs(
            completions=1, parallelism=1,
            backoff_limit=1,
            pod_failure_policy=k8s.batch.v1.PodFailurePolicyArgs(rules=[
                k8s.batch.v1.PodFailurePolicyRuleArgs(action="Ignore", on_pod_conditions=[
                    k8s.batch.v1.PodFailurePolicyOnPodConditionsPatternArgs(type="DisruptionTarget", status="True")]),
                k8s.batch.v1.PodFailurePolicyRuleArgs(action="FailJob", on_exit_codes=(
                    k8s.batch.v1.PodFailurePolicyOnExitCodesRequirementArgs(
                        container_name=runs.CONTAINER, operator="In",
                        values=[script.EXIT_USAGE, script.EXIT_NO_STEP, script.EXIT_EVAL])))]),
            active_deadline_seconds=deadline_seconds(cfg),
            template=template,
        ),
    )


def summary(cfg: StackConfig) -> list[str]:
    if not enabled(cfg):
        return []
    ev, w = cfg.workloads.embodied_evaluation, cfg.workloads
    what = f"step {ev.step}" if ev.step is not None else "the newest complete step"
    return [f"embodied evaluation: Job {name(cfg)} (queued, {gpus(cfg)} GPU) runs RLinf's {script.ENTRY} "
            f"--config-name {w.config_name} on {what} of run {ev.run}; success rate ({script.SUCCESS_KEY}) -> "
            f"{out_dir(cfg)}/eval-step-<N>-<time>.json (rltrain_eval_success_rate)"]


class EmbodiedEvaluationJob(pulumi.ComponentResource):
    """The embodied evaluation Job, its NetworkPolicy and the eval-metrics exporter of its results."""

    def __init__(self, name_: str, args_: runs.WorkloadArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:EmbodiedEvaluationJob", name_, None, opts)
        cfg = args_.cfg
        netpol = k8s.networking.v1.NetworkPolicy(f"{name_}-netpol", runs.isolated_network_policy(name(cfg), COMPONENT, namespace),
                                                 child_opts(self, opts))
        self.job = k8s.batch.v1.Job(f"{name_}-job", job_args(cfg, args_.claim_name, namespace, [args_.scripts[SCRIPT], args_.scripts[trainer.COMPLETENESS]]),
                                    child_opts(self, opts, netpol, delete_before_replace=True,
                                                    replace_on_changes=runs.REPLACE_JOB_ON))
        self.metrics = evaluation.eval_metrics(self, name_, cfg, args_.claim_name, namespace,
                                               [args_.scripts[evaluation.METRICS_SCRIPT]], opts, out_dir(cfg))
        self.register_outputs({"job": name(cfg), "results": out_dir(cfg)})
