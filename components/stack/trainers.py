"""Trainer profiles: what the program must know about the trainer inside the image, in one place.

A profile is pure data (no Pulumi, no resources). The default, `rlinf`, describes the reference
image: aws-samples/sample-rlinf-on-eks at commit c8b5e3a39d89de783b5eb97eaa57dc30a6307f33 (called
SAMPLE below), whose examples/buildspec.yml builds RLinf/RLinf at UPSTREAM_REF
0505431899574619da86f551bad70b71e0ea2177 (the v0.3 tag; called RLINF below) and layers
examples/Dockerfile on it. Every value below names the file it was read from. Another trainer gets
another profile; `workloads.trainer: none` uses none (then `workloads.command` and `workloads.env`
are all the program passes, and nothing is checked or staged).

What the program derives from a profile (components/workloads/): PATH and VIRTUAL_ENV on every
container of a run (the venv is activated only in ~/.bashrc, which a container command never
reads), the config name and model checked in config validation, the models and task assets the
staging Job puts on /fsx, the placement overrides for N nodes x G GPUs, the node rank variable, and
the resume contract (where checkpoints go, how a resume is requested, what marks one complete).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Optional

SAMPLE_COMMIT = "c8b5e3a39d89de783b5eb97eaa57dc30a6307f33"
RLINF_COMMIT = "0505431899574619da86f551bad70b71e0ea2177"  # SAMPLE examples/buildspec.yml UPSTREAM_REF


@dataclass(frozen=True)
class Stage:
    """One thing the staging Job puts on the shared volume before training."""

    name: str  # short name, shown in logs and errors
    source: str  # "hf:<repo>" (model), "hf-dataset:<repo>", "s3://bucket/prefix", "file:///path"
    dest: str  # absolute path on the shared volume
    # Size on the volume for the volume budget (components/stack/volume_budget.py): None = the
    # config's model facts (parameters x the hub's bytes per parameter) when `dest` is its model;
    # a figure here is an allowance, not measured (say so where it is typed).
    size_gib: Optional[float] = None


@dataclass(frozen=True)
class ModelFacts:
    """What the program must know of a model: its size (checkpoint and volume budgets, serving
    requests) and its attention shape (tensor parallel sizes, KV cache). Read from the model's
    config.json on the Hugging Face hub (named in `source`; not downloaded here: check it against
    the staged copy)."""

    architecture: str  # config.json architectures[0]
    params: int  # parameters, total
    hidden_layers: int
    attention_heads: int
    kv_heads: int
    head_dim: int
    max_position: int
    dtype_bytes: int  # bytes per parameter of the hub's weights (config.json torch_dtype)
    source: str
    # Does the pinned vLLM serve this architecture (vllm/model_executor/models/registry.py of
    # versions.VLLM_OPENAI_IMAGE's release)? OpenVLA / Prismatic is not in it.
    vllm_servable: bool = False

    def weights_gib(self, dtype_bytes: Optional[int] = None) -> float:
        return self.params * (dtype_bytes or self.dtype_bytes) / 2**30

    def kv_cache_gib(self, tokens: int, dtype_bytes: int = 2) -> float:
        """KV cache of `tokens` tokens: a K and a V vector of kv_heads x head_dim per layer per token
        (vLLM's full-attention KV spec, vllm/v1/kv_cache_interface.py page_size_bytes, at bf16)."""
        return 2 * self.hidden_layers * self.kv_heads * self.head_dim * dtype_bytes * tokens / 2**30

    def per_gpu_gib(self, tokens: int, tp: int) -> float:
        """One GPU of a `tp`-way tensor-parallel replica: its share of the bf16 weights and the KV
        cache of one `tokens`-token sequence for the KV heads it holds. vLLM gives every rank
        max(1, kv_heads // tp) heads, copying them when there are fewer heads than ranks
        (vllm-project/vllm v0.11.0 vllm/config/model.py get_num_kv_heads), so past kv_heads ranks
        the KV cache per GPU stops shrinking."""
        kv_share = max(1, self.kv_heads // tp) / self.kv_heads
        return self.weights_gib(2) / tp + self.kv_cache_gib(tokens) * kv_share


@dataclass(frozen=True)
class SaveFacts:
    """What one checkpoint of the config holds, from the config's own keys (cited per config).

    RLINF rlinf/hybrid_engines/fsdp/strategy/base.py save_checkpoint: dcp.save of the training
    state (model parameters sharded + optimizer state + LR scheduler, full_state_dict False), then
    rank 0's torch.save of the full model state dict to model_state_dict/full_weights.pt (both at
    the actor's parameter dtype). Adam (actor.optim.optimizer adam) keeps two moments per trainable
    parameter, at the parameter's dtype (torch.optim.Adam: exp_avg and exp_avg_sq zeros_like the
    parameter)."""

    param_bytes: int  # actor.model.precision: fp32 4, bf16/fp16 2
    trainable_fraction: float  # 1.0 full fine-tune; LoRA: the adapters' share (an estimate, cited)
    save_interval: int  # runner.save_interval
    last_step: Optional[int]  # the config's last step; None when it depends on the data set's size

    def checkpoint_gib(self, m: ModelFacts) -> float:
        dcp = m.params * self.param_bytes * (1 + 2 * self.trainable_fraction)
        full = m.params * self.param_bytes
        return (dcp + full) / 2**30


@dataclass(frozen=True)
class TrainerConfig:
    """One Hydra config of the trainer and what it needs."""

    venv: str
    # The model directory the script checks ($MODEL_PATH/config.json) and passes as
    # actor/rollout model_path; staged from the profile's `stages`.
    model_path: str
    stages: tuple[str, ...]  # names of the profile's Stage entries this config needs
    # cluster.component_placement as the config ships it, per component: (first, last) GPU rank
    # on ONE node. Empty when the config places several components under one comma-joined key,
    # which a command-line override cannot address (the run is then single-node only).
    placement: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # Per-run batch keys whose value scales with the node count (per-process sizes unchanged).
    scaled: Mapping[str, int] = field(default_factory=dict)
    # Further overrides every run of this config gets (the sample's own manifest sets them).
    overrides: tuple[str, ...] = ()
    # runner.logger.experiment_name of the config: one directory level of RLinf's checkpoint path.
    experiment_name: str = ""
    # GPUs the config was written for on one node (its placement's highest rank + 1).
    gpus_per_node: int = 8
    # Does a single-node run of this config use EFA? RLinf on one node talks over NVLink (NCCL's
    # P2P/SHM transports); EFA carries only inter-node traffic.
    single_node_efa: bool = False
    # The components the config places on `all` GPUs under one key (`actor,rollout,reward: all`):
    # RLinf spreads them over every GPU of cluster.num_nodes nodes, so N nodes is one override.
    all_gpus: tuple[str, ...] = ()
    model: Optional[ModelFacts] = None
    saves: Optional[SaveFacts] = None

    @property
    def spreads(self) -> bool:
        """A run of this config can use N nodes (its placement is per component, or `all`)."""
        return bool(self.placement or self.all_gpus)


@dataclass(frozen=True)
class ResumeTerms:
    """How the trainer writes checkpoints and is told to resume, in its own terms."""

    checkpoint_env: str  # env var the run's checkpoint directory goes in
    # Where step directories appear under it; {experiment} = workloads.experimentName,
    # {config_experiment} = the config's runner.logger.experiment_name.
    steps_under: str
    step_prefix: str  # step directory name = prefix + step number
    complete_marks: tuple[str, ...]  # files (relative to a step dir) that exist once it is complete
    resume_env: str  # env var the resume argument is appended to
    resume_format: str  # the argument; {step_dir} = the newest complete step directory


@dataclass(frozen=True)
class TrainerProfile:
    name: str
    # "embodied" (an action policy in a simulator) or "reasoning" (a language model): what serving,
    # export and evaluation mean for its checkpoints.
    family: str
    # The training command a run gets unless workloads.command is set.
    command: tuple[str, ...]
    venv_root: str
    # The image's PATH after the venv's bin (a container env PATH replaces the image's; Kubernetes
    # expands $(VAR) only for variables of the same container spec, never the image's ENV).
    image_path: str
    configs: Mapping[str, TrainerConfig]
    stages: Mapping[str, Stage]
    asset_env: Mapping[str, str]  # env the trainer reads to find task assets
    overrides_env: str  # env var the script appends to its Hydra command line
    node_rank_env: str  # env var giving each node its rank, set before `ray start`
    resume: ResumeTerms
    default_config: str
    experiment_name: str  # workloads.experimentName unless set: names the run's checkpoint directory
    source: str  # where the profile's values come from (shown in errors and docs)
    # What the stack builds for this trainer (workloads.image: {build: ...}, components/aws/image.py):
    # RLinf docker/Dockerfile's BUILD_TARGET and the RLinf commit.
    image_target: str = ""
    image_revision: str = RLINF_COMMIT
    # Hydra keys the program (or the profile's command) sets for the checkpoint and log directories
    # and resume, with why: a run's overrides may not set them (components/workloads/trainer.py
    # program_keys adds the config's placement and staged paths).
    output_keys: Mapping[str, str] = field(default_factory=dict)
    # Where the trainer writes its TensorBoard event files, relative to the checkpoint directory
    # ({experiment}, {config_experiment} as in ResumeTerms.steps_under); "" = not known.
    tensorboard_under: str = ""
    # The headline scalars' TensorBoard tags: reward, loss, seconds per step (the Grafana panel).
    headline_tags: Mapping[str, str] = field(default_factory=dict)

    def venv_bin(self, venv: str) -> str:
        return f"{self.venv_root}/{venv}/bin"

    def path(self, venv: str) -> str:
        return f"{self.venv_bin(venv)}:{self.image_path}"


# RLINF docker/Dockerfile (base-image stage): ENV UV_PATH=/opt/venv; every model's venv is
# ${UV_PATH}/<name>, activated by `switch_env` or the `source .../activate` lines appended to
# ~/.bashrc. SAMPLE examples/scripts/run_training_eks.sh sources ${UV_PATH}/${VENV_NAME}/bin/activate
# itself, but the launcher, `ray start` and KubeRay's commands run before (or without) it.
VENV_ROOT = "/opt/venv"
# The image's PATH below the venv: SAMPLE examples/Dockerfile prepends
# /opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/opt/gdrcopy/bin to the base's PATH; the base is
# nvidia/cuda:12.4.1-cudnn-devel-ubuntu22.04 (RLINF docker/Dockerfile NVIDIA_BASE_IMAGE), whose
# PATH is /usr/local/nvidia/bin:/usr/local/cuda/bin and the Debian default.
IMAGE_PATH = ("/opt/amazon/openmpi/bin:/opt/amazon/efa/bin:/opt/gdrcopy/bin:/usr/local/nvidia/bin:"
              "/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")

MODELS = "/fsx/models"
# RLINF rlinf/utils/metric_logger.py MetricLogger: runner.logger.logger_backends, a list of
# tensorboard, wandb, swanlab; every run's, set from workloads.curves.loggerBackends.
LOGGERS_KEY = "runner.logger.logger_backends"
LOGGERS_WHY = "the loggers of every run: workloads.curves.loggerBackends"
ASSETS = "/fsx/assets"

_STAGES = {s.name: s for s in (
    # RLINF examples/embodiment/config/maniskill_ppo_openvlaoft.yaml actor.model.model_path comment
    # and SAMPLE examples/maniskill-openvlaoft-ppo/manifests/model-download.yaml.
    Stage("openvlaoft-base", "hf:RLinf/RLinf-OpenVLAOFT-ManiSkill-Base-Main",
          f"{MODELS}/RLinf-OpenVLAOFT-ManiSkill-Base-Main"),
    # The same config's actor.model.lora_path comment (is_lora: True). The sample's manifest
    # points lora_path at /fsx/models/rlinf-openvlaoft-maniskill-base-lora through HYDRA_OVERRIDES
    # but its download Job never fetches it: staged here.
    Stage("openvlaoft-lora", "hf:RLinf/RLinf-OpenVLAOFT-ManiSkill-Base-Lora",
          f"{MODELS}/RLinf-OpenVLAOFT-ManiSkill-Base-Lora", size_gib=1.0),  # allowance: r=32 adapters ~0.2 GiB
    # RLINF maniskill_ppo_openvla.yaml actor.model.model_path comment.
    Stage("openvla-warmup", "hf:gen-robot/openvla-7b-rlvla-warmup", f"{MODELS}/openvla-7b-rlvla-warmup"),
    # SAMPLE model-download.yaml download_dataset "RLinf/maniskill_assets" -> /fsx/assets/maniskill.
    Stage("maniskill-assets", "hf-dataset:RLinf/maniskill_assets", f"{ASSETS}/maniskill",
          size_gib=10.0),  # allowance, not measured: check `du -sh` after staging
)}

_OFT_OVERRIDES = (f"actor.model.lora_path={_STAGES['openvlaoft-lora'].dest}",)

# OpenVLA 7B: Prismatic (Llama 2 7B + DINOv2 + SigLIP), 7.54 B parameters, bf16 on the hub
# (openvla/openvla-7b model card; the OFT and RLinf variants keep the backbone). Not served by vLLM:
# no OpenVLA / Prismatic architecture in vllm/model_executor/models/registry.py (v0.11.0).
OPENVLA_7B = ModelFacts(architecture="OpenVLAForActionPrediction", params=7_541_237_184, hidden_layers=32,
                        attention_heads=32, kv_heads=32, head_dim=128, max_position=2048, dtype_bytes=2,
                        source="openvla/openvla-7b config.json (Llama 2 7B text backbone)")
# RLINF examples/embodiment/config/maniskill_ppo_openvlaoft.yaml: save_interval 40, max_epochs 1000
# (one global step per epoch: rlinf/runners/embodied_runner.py set_max_steps), is_lora True, lora_rank 32; the
# model's precision bf16 (examples/embodiment/config/model/openvla_oft.yaml). LoRA r=32 on every
# linear layer of the 32 Llama layers ~ 80 M trainable parameters, ~1.1 % of 7.54 B (an estimate:
# r x (in + out) per adapted matrix).
_OFT_SAVES = SaveFacts(param_bytes=2, trainable_fraction=0.011, save_interval=40, last_step=1000)

RLINF = TrainerProfile(
    name="rlinf",
    family="embodied",
    # SAMPLE examples/Dockerfile copies examples/scripts to /workspace/eks/scripts.
    command=("bash", "/workspace/eks/scripts/run_training_eks.sh"),
    venv_root=VENV_ROOT,
    image_path=IMAGE_PATH,
    configs={
        # RLINF examples/embodiment/config/maniskill_ppo_openvlaoft.yaml: cluster.component_placement
        # actor 0-7, env 0-3, rollout 4-7; env.train.total_num_envs 128; actor.global_batch_size 640
        # (micro_batch_size 40); runner.logger.experiment_name maniskill_ppo_openvlaoft. Venv
        # openvla-oft: SAMPLE maniskill-openvlaoft-ppo.yaml VENV_NAME.
        "maniskill_ppo_openvlaoft": TrainerConfig(
            venv="openvla-oft", model_path=_STAGES["openvlaoft-base"].dest,
            stages=("openvlaoft-base", "openvlaoft-lora", "maniskill-assets"),
            placement={"actor": (0, 7), "env": (0, 3), "rollout": (4, 7)},
            scaled={"env.train.total_num_envs": 128, "actor.global_batch_size": 640},
            overrides=_OFT_OVERRIDES, experiment_name="maniskill_ppo_openvlaoft", model=OPENVLA_7B, saves=_OFT_SAVES),
        # ..._quickstart.yaml: `actor,env,rollout: 0-0` (one key, one GPU), 8 envs, batch 40.
        "maniskill_ppo_openvlaoft_quickstart": TrainerConfig(
            venv="openvla-oft", model_path=_STAGES["openvlaoft-base"].dest,
            stages=("openvlaoft-base", "openvlaoft-lora", "maniskill-assets"),
            overrides=_OFT_OVERRIDES, experiment_name="maniskill_ppo_openvlaoft_quickstart", gpus_per_node=1,
            model=OPENVLA_7B, saves=_OFT_SAVES),
        # maniskill_ppo_openvla.yaml: actor 0-7, env 0-3, rollout 4-7; 128 envs; batch 640 (micro 80).
        "maniskill_ppo_openvla": TrainerConfig(
            venv="openvla", model_path=_STAGES["openvla-warmup"].dest,
            stages=("openvla-warmup", "maniskill-assets"),
            placement={"actor": (0, 7), "env": (0, 3), "rollout": (4, 7)},
            scaled={"env.train.total_num_envs": 128, "actor.global_batch_size": 640},
            experiment_name="maniskill_ppo_openvla", model=OPENVLA_7B, saves=_OFT_SAVES),
        # maniskill_ppo_openvla_quickstart.yaml: `actor,env,rollout: 0-1`.
        "maniskill_ppo_openvla_quickstart": TrainerConfig(
            venv="openvla", model_path=_STAGES["openvla-warmup"].dest,
            stages=("openvla-warmup", "maniskill-assets"),
            experiment_name="maniskill_ppo_openvla_quickstart", gpus_per_node=2, model=OPENVLA_7B,
            saves=_OFT_SAVES),
    },
    stages=_STAGES,
    # RLINF rlinf/envs/maniskill/tasks/put_on_in_scene_multi.py:38 reads MANISKILL_ASSET_DIR (else a
    # folder inside the installed package); SAMPLE maniskill-openvlaoft-ppo.yaml sets it to
    # /fsx/assets/maniskill.
    asset_env={"MANISKILL_ASSET_DIR": _STAGES["maniskill-assets"].dest},
    # SAMPLE examples/scripts/run_training_eks.sh appends ${HYDRA_OVERRIDES} to the Hydra command
    # line (it does not forward its own arguments).
    overrides_env="HYDRA_OVERRIDES",
    # RLINF rlinf/scheduler/cluster/cluster.py ClusterEnvVar.NODE_RANK, prefixed RLINF_; node.py
    # sorts nodes by it (all or none must set it), else by accelerator type and IP.
    node_rank_env="RLINF_NODE_RANK",
    resume=ResumeTerms(
        # run_training_eks.sh: CKPT_PATH (default /fsx/checkpoints); runner.logger.log_path=
        # ${CKPT_PATH}/${EXPERIMENT_NAME}. RLINF rlinf/runners/embodied_runner.py _save_checkpoint:
        # <log_path>/<runner.logger.experiment_name>/checkpoints/global_step_<N>/actor.
        checkpoint_env="CKPT_PATH",
        steps_under="{experiment}/{config_experiment}/checkpoints",
        step_prefix="global_step_",
        # RLINF rlinf/hybrid_engines/fsdp/strategy/base.py save_checkpoint: dcp.save writes the
        # shards, then its coordinator writes dcp_checkpoint/.metadata (torch's FileSystemWriter
        # writes .metadata.tmp and renames it); after a barrier rank 0 writes
        # model_state_dict/full_weights.pt (save_full_model_weights, default True) - the last
        # file of a checkpoint. Both present = complete.
        complete_marks=("actor/dcp_checkpoint/.metadata", "actor/model_state_dict/full_weights.pt"),
        # embodied_runner.py init_workers: runner.resume_dir = a .../global_step_N directory; the
        # step is parsed from the name and <dir>/actor must exist.
        resume_env="HYDRA_OVERRIDES",
        resume_format="runner.resume_dir={step_dir}",
    ),
    # The sample's own default (run_training_eks.sh CONFIG_NAME is the quickstart; its full
    # example manifest runs this one).
    default_config="maniskill_ppo_openvlaoft",
    experiment_name="maniskill-openvlaoft-ppo",
    source=f"RLinf/RLinf@{RLINF_COMMIT[:12]} (v0.3) in aws-samples/sample-rlinf-on-eks@{SAMPLE_COMMIT[:12]}",
    # SAMPLE examples/buildspec.yml BUILD_TARGET: ManiSkill + LIBERO with the openvla and openvla-oft
    # venvs (RLINF docker/Dockerfile embodied-maniskill_libero-image).
    image_target="embodied-maniskill_libero",
    # run_training_eks.sh passes runner.logger.log_path=${CKPT_PATH}/${EXPERIMENT_NAME}; RLINF
    # embodied_runner.py _save_checkpoint writes under <log_path>/<runner.logger.experiment_name>;
    # runner.resume_dir is the resume wrapper's (RLINF examples/embodiment/config/*.yaml runner:).
    output_keys={"runner.logger.log_path": "the run's checkpoint and log directory (run_training_eks.sh sets it from CKPT_PATH)",
                 "runner.logger.experiment_name": "a level of the checkpoint path the resume wrapper reads",
                 "runner.resume_dir": "resume (the resume wrapper sets it; a warm start is resumeFrom)",
                 LOGGERS_KEY: LOGGERS_WHY},
    # RLINF rlinf/utils/metric_logger.py MetricLogger: TensorBoard event files (torch.utils.tensorboard
    # SummaryWriter) in <runner.logger.log_path>/tensorboard; logger_backends ["tensorboard"] in the configs.
    tensorboard_under="{experiment}/tensorboard",
    # RLINF embodied_runner.py: rollout/<k> of metric_utils.compute_rollout_metrics ("rewards": the
    # mean reward), train/<k> of the actor's metrics (fsdp_actor_worker.py "actor/total_loss"),
    # time/<k> of the runner's timer ("step").
    headline_tags={"reward": "rollout/rewards", "loss": "train/actor/total_loss", "seconds per step": "time/step"},
)


# ---------------------------------------------------------------------------------------------
# RLinf's reasoning family: math GRPO on a Qwen2.5 model (RLINF examples/reasoning/), on RLinf's
# `reason-image` target (RLINF docker/Dockerfile: `install.sh agentic --venv reason`, ~/.bashrc
# sources /opt/venv/reason/bin/activate). The image's layout beyond RLinf's Dockerfile is the
# builder's: RLINF_REPO below is where this profile expects RLinf's source (examples/ is not
# copied by RLinf's Dockerfile); the image the stack builds puts it there
# (components/image/install_sources.sh), an image you bring must too.

RLINF_REPO = "/workspace/RLinf"
DATASETS = "/fsx/datasets"

_REASON_STAGES = {s.name: s for s in (
    # RLINF examples/reasoning/config/math/qwen2.5-1.5b-grpo-fsdp.yaml actor.model.model_path comment.
    Stage("deepseek-r1-distill-qwen-1.5b", "hf:deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
          f"{MODELS}/DeepSeek-R1-Distill-Qwen-1.5B"),
    # RLINF docs/source-en/rst_source/examples/agentic/reasoning.rst "Dataset": AReaL-boba-Data;
    # the configs read data.train_data_paths /dataset/boba/AReaL-boba-106k.jsonl.
    Stage("areal-boba", "hf-dataset:inclusionAI/AReaL-boba-Data", f"{DATASETS}/boba",
          size_gib=2.0),  # allowance, not measured: JSONL of ~106 k prompts and answers
)}

# deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B config.json: Qwen2ForCausalLM, hidden 1536, 28 layers,
# 12 attention heads, 2 KV heads (head_dim 1536/12 = 128), max_position_embeddings 131072, bfloat16;
# 1.78 B parameters (the hub's safetensors index total_size / 2). vLLM serves Qwen2ForCausalLM.
QWEN2_5_1_5B = ModelFacts(architecture="Qwen2ForCausalLM", params=1_777_088_000, hidden_layers=28,
                          attention_heads=12, kv_heads=2, head_dim=128, max_position=131072, dtype_bytes=2,
                          source="deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B config.json", vllm_servable=True)

_BOBA = f"{_REASON_STAGES['areal-boba'].dest}/AReaL-boba-106k.jsonl"
_Q15 = _REASON_STAGES["deepseek-r1-distill-qwen-1.5b"].dest
# The config's model and data paths are placeholders (/path/to/model/..., /dataset/boba/...): the
# staged copies instead. Hydra list values need brackets.
_REASON_OVERRIDES = (f"rollout.model.model_path={_Q15}", f"actor.model.model_path={_Q15}",
                     f"actor.tokenizer.tokenizer_model={_Q15}", f"data.train_data_paths=[{_BOBA}]",
                     f"data.val_data_paths=[{_BOBA}]")

RLINF_REASONING = TrainerProfile(
    name="rlinf-reasoning",
    family="reasoning",
    # RLINF examples/reasoning/run_main_grpo_math.sh: python examples/reasoning/main_grpo.py
    # --config-path examples/reasoning/config/math --config-name $CONFIG_NAME (a Hydra main that
    # takes overrides as arguments). bash only expands the program's variables at run time (no
    # templating of the manifest, SEED-DEFECTS D1); `set -f` keeps Hydra's [..] lists unglobbed.
    # runner.output_dir: RLINF rlinf/runners/reasoning_runner.py _save_checkpoint writes
    # <output_dir>/<experiment_name>/checkpoints/global_step_N.
    command=("bash", "-c", "set -f; exec python3 " + RLINF_REPO + "/examples/reasoning/main_grpo.py --config-path "
             + RLINF_REPO + '/examples/reasoning/config/math --config-name "$CONFIG_NAME" '
             'runner.output_dir="$CKPT_PATH" $HYDRA_OVERRIDES'),
    venv_root=VENV_ROOT,
    # The reason target of RLINF docker/Dockerfile under the stack's EFA overlay (components/image/
    # Dockerfile puts the EFA installer's and GDRCopy's directories before the CUDA base's PATH, as
    # the sample's layer does): the same PATH as the embodied image. On RLinf's image without the
    # overlay the first three directories do not exist, which PATH lookups skip.
    image_path=IMAGE_PATH,
    configs={
        # RLINF examples/reasoning/config/math/qwen2.5-1.5b-grpo-fsdp.yaml: cluster.num_nodes 1,
        # component_placement `actor,rollout,reward: all`; actor.training_backend fsdp,
        # actor.model.precision fp32, optim adam (full fine-tune); runner.save_interval 50,
        # max_epochs 5, max_steps -1 (the last step = 5 x steps per epoch of the data set: unknown
        # here); runner.experiment_name grpo-1.5b; rollout.tensor_parallel_size 2.
        "qwen2.5-1.5b-grpo-fsdp": TrainerConfig(
            venv="reason", model_path=_Q15, stages=("deepseek-r1-distill-qwen-1.5b", "areal-boba"),
            all_gpus=("actor", "rollout", "reward"), overrides=_REASON_OVERRIDES, experiment_name="grpo-1.5b",
            gpus_per_node=8, model=QWEN2_5_1_5B,
            saves=SaveFacts(param_bytes=4, trainable_fraction=1.0, save_interval=50, last_step=None)),
    },
    stages=_REASON_STAGES,
    asset_env={},
    overrides_env="HYDRA_OVERRIDES",
    node_rank_env="RLINF_NODE_RANK",
    resume=ResumeTerms(
        checkpoint_env="CKPT_PATH",
        steps_under="{config_experiment}/checkpoints",
        step_prefix="global_step_",
        # reasoning_runner.py _save_checkpoint: the actor (FSDP save_checkpoint, as above: DCP, then
        # full_weights.pt), then data/data.pt (the dataloader state, torch.save) last.
        complete_marks=("actor/dcp_checkpoint/.metadata", "actor/model_state_dict/full_weights.pt", "data/data.pt"),
        # reasoning_runner.py: runner.resume_dir = .../global_step_N (the step parsed from the name;
        # actor/ and data/data.pt loaded from it).
        resume_env="HYDRA_OVERRIDES",
        resume_format="runner.resume_dir={step_dir}",
    ),
    default_config="qwen2.5-1.5b-grpo-fsdp",
    experiment_name="math-grpo",
    source=f"RLinf/RLinf@{RLINF_COMMIT[:12]} (v0.3) examples/reasoning, reason-image target",
    image_target="reason",
    # The command passes runner.output_dir="$CKPT_PATH"; RLINF qwen2.5-1.5b-grpo-fsdp.yaml runner:
    # logger.log_path ${runner.output_dir}/${runner.experiment_name}; reasoning_runner.py
    # _save_checkpoint writes <output_dir>/<experiment_name>/checkpoints; resume_dir is the wrapper's.
    output_keys={"runner.output_dir": "the run's checkpoint directory (the command sets it from CKPT_PATH)",
                 "runner.experiment_name": "a level of the checkpoint path the resume wrapper reads",
                 "runner.logger.log_path": "where the curves are written (TensorBoard serves them from there)",
                 "runner.resume_dir": "resume (the resume wrapper sets it; a warm start is resumeFrom)",
                 LOGGERS_KEY: LOGGERS_WHY},
    # RLINF metric_logger.py: <log_path>/tensorboard = <output_dir>/<experiment_name>/tensorboard.
    tensorboard_under="{config_experiment}/tensorboard",
    # RLINF reasoning_runner.py: rollout/<k> of utils/distributed.py compute_rollout_metrics
    # ("reward_scores"), actor/training/<k> of fsdp_actor_worker.py's ("actor/final_loss"),
    # time/<k> of the runner's timer ("step").
    headline_tags={"reward": "rollout/reward_scores", "loss": "actor/training/actor/final_loss",
                   "seconds per step": "time/step"},
)

PROFILES: dict[str, TrainerProfile] = {RLINF.name: RLINF, RLINF_REASONING.name: RLINF_REASONING}
NO_TRAINER = "none"


def get(name: str) -> Optional[TrainerProfile]:
    return PROFILES.get(name)


# ---------------------------------------------------------------------------------------------
# placement


def _span(first: int, last: int) -> str:
    return f"{first}-{last}"


def placement(tc: TrainerConfig, nodes: int, gpus: int) -> dict[str, list[tuple[int, int]]]:
    """Component -> the GPU rank ranges it occupies on `nodes` x `gpus`.

    The config's single-node layout repeated on every node: node k's ranks are k*gpus + the
    config's ranks (RLinf ranks are cluster-global, RLINF rlinf/scheduler/placement/placement.py
    ComponentPlacement docstring), so each node keeps the layout the config was tuned for and
    env and rollout workers of one node stay on its NVLink. A config written for another GPU count
    per node is first scaled to the node's GPUs (ranks a-b of P become a*G/P .. (b+1)*G/P - 1, at
    least one GPU): on a 4-GPU node, 0-7/0-3/4-7 become 0-3/0-1/2-3.
    """
    out: dict[str, list[tuple[int, int]]] = {}
    if tc.all_gpus:
        return {",".join(tc.all_gpus): [(0, nodes * gpus - 1)]}
    per = tc.gpus_per_node or gpus
    for comp, (a, b) in tc.placement.items():
        a, b = a * gpus // per, (b + 1) * gpus // per - 1
        b = max(a, min(b, gpus - 1))
        out[comp] = [(k * gpus + a, k * gpus + b) for k in range(nodes)]
    return out


def merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def placement_text(ranges: list[tuple[int, int]]) -> str:
    return ",".join(_span(a, b) for a, b in merged(ranges))


def placement_overrides(tc: TrainerConfig, nodes: int, gpus: int) -> list[str]:
    """Hydra overrides for a run of `nodes` x `gpus`: placement and scaled batch sizes.

    A value with a comma is quoted: Hydra's override grammar reads an unquoted a,b as a list.
    """
    if tc.all_gpus:  # `all`: RLinf spreads the components over cluster.num_nodes x the node's GPUs
        return [f"cluster.num_nodes={nodes}"]
    out = []
    for comp, ranges in placement(tc, nodes, gpus).items():
        text = placement_text(ranges)
        out.append(f"cluster.component_placement.{comp}=" + (f"'{text}'" if "," in text else text))
    out += [f"{key}={value * nodes}" for key, value in tc.scaled.items()]
    return out


def parse_placement(text: str) -> list[tuple[int, int]]:
    """RLinf's resource-rank list `0-3,8-11` (or a single rank) as ranges."""
    out = []
    for part in text.strip().strip("'\"").split(","):
        part = part.split(":")[0].strip()
        if not part:
            continue
        a, _, b = part.partition("-")
        out.append((int(a), int(b or a)))
    return out


def idle_nodes(ranks: Mapping[str, list[tuple[int, int]]], nodes: int, gpus: int) -> list[int]:
    """Nodes none of whose GPUs any component uses."""
    used = {r for ranges in ranks.values() for a, b in ranges for r in range(a, b + 1)}
    return [k for k in range(nodes) if not any(k * gpus + g in used for g in range(gpus))]


def summary_text(ranks: Mapping[str, list[tuple[int, int]]]) -> str:
    """`actor 0-15, env 0-3,8-11, rollout 4-7,12-15`."""
    return ", ".join(f"{comp} {placement_text(r)}" for comp, r in ranks.items())


def config_overrides(tc: TrainerConfig, nodes: int, gpus: int) -> list[str]:
    """The overrides every run of `tc` over `nodes` x `gpus` gets: the config's own (staged model and
    data paths), then placement and scaled batch sizes when they differ from the config's."""
    out = list(tc.overrides)
    if tc.all_gpus or (tc.placement and (nodes > 1 or gpus != tc.gpus_per_node)):
        out += placement_overrides(tc, nodes, gpus)
    return out


def program_keys(profile: TrainerProfile, tc: TrainerConfig, nodes: int, gpus: int) -> dict[str, str]:
    """Hydra keys the program sets for a run of `tc` over `nodes` x `gpus`, each with why: the
    checkpoint and log directories and resume (the profile's output_keys), the staged model and data
    paths, the placement and the batch sizes scaled with the nodes. A run's overrides may not repeat
    them: Hydra keeps the last value, so the run would silently undo what placement, resume or the
    checkpoint contract depend on."""
    out = dict(profile.output_keys)
    for text in config_overrides(tc, nodes, gpus):
        key = text.split("=", 1)[0]
        out.setdefault(key, f"placement over the run's {nodes * gpus} GPUs" if key.startswith("cluster.")
                       or key in tc.scaled else "a model or data path the staging Job puts on /fsx")
    if tc.placement or tc.all_gpus:
        out.setdefault("cluster.component_placement", f"placement over the run's {nodes * gpus} GPUs")
    return out
