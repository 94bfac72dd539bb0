"""A stand-in for the reference trainer: the interface of aws-samples/sample-rlinf-on-eks
examples/scripts/run_training_eks.sh running RLinf v0.3, nothing else.

- Checkpoints go under $CKPT_PATH/$EXPERIMENT_NAME/<config experiment>/checkpoints/global_step_N
  (the script's runner.logger.log_path=${CKPT_PATH}/${EXPERIMENT_NAME}; RLinf embodied_runner.py
  _save_checkpoint adds runner.logger.experiment_name, here $CONFIG_NAME as in the reference configs).
- Each step directory is written as RLinf's FSDP strategy writes it: actor/dcp_checkpoint shards,
  then actor/dcp_checkpoint/.metadata (a pickle, as DCP writes it), then
  actor/model_state_dict/full_weights.pt last (a zip archive in torch.save's layout, its directory
  last), so the completeness test (components/scripts/checkpoint_complete.py) sees real formats.
- A resume is requested by `runner.resume_dir=<.../global_step_N>` in $HYDRA_OVERRIDES: the step
  is parsed from the name and <dir>/actor must exist (embodied_runner.py init_workers).

Test knobs: STANDIN_LAST_STEP (default 6), STANDIN_HANG_AT (write that step's shards and
.metadata, not full_weights.pt, then sleep until killed), STANDIN_REPORT (a file the trainer
appends `python=`, `PATH=`, and RLINF_/MANISKILL_ variables to).
Output lines: `resume: fresh` / `resume: from step N`, `step N value=V`, `finished at step N value=V`.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
import zipfile

MODULUS = 1_000_000_007


def advance(value: int, step: int) -> int:
    return (value * 31 + step * 7 + 3) % MODULUS


def main() -> int:
    env = os.environ
    report = env.get("STANDIN_REPORT")
    if report:
        with open(report, "a", encoding="utf-8") as f:
            f.write(f"python={sys.executable}\nPATH={env.get('PATH', '')}\n")
            for k in sorted(env):
                if k.startswith(("RLINF_", "MANISKILL_")):
                    f.write(f"{k}={env[k]}\n")
    steps_dir = os.path.join(env["CKPT_PATH"], env["EXPERIMENT_NAME"], env["CONFIG_NAME"], "checkpoints")
    resume_dir = None
    for word in env.get("HYDRA_OVERRIDES", "").split():
        if word.startswith("runner.resume_dir="):
            resume_dir = word.split("=", 1)[1]
    step, value = 0, 1
    if resume_dir:
        actor = os.path.join(resume_dir, "actor")
        assert os.path.exists(actor), f"resume_dir {actor} does not exist."
        with open(os.path.join(actor, "dcp_checkpoint", ".metadata"), "rb") as f:
            value = pickle.load(f)["value"]
        step = int(resume_dir.split("global_step_")[-1])
        print(f"resume: from step {step}", flush=True)
    else:
        print("resume: fresh", flush=True)
    last = int(env.get("STANDIN_LAST_STEP", "6"))
    hang = int(env.get("STANDIN_HANG_AT", "0"))
    while step < last:
        step += 1
        value = advance(value, step)
        print(f"step {step} value={value}", flush=True)
        actor = os.path.join(steps_dir, f"global_step_{step}", "actor")
        os.makedirs(os.path.join(actor, "dcp_checkpoint"), exist_ok=True)
        with open(os.path.join(actor, "dcp_checkpoint", "__0_0.distcp"), "w", encoding="utf-8") as f:
            f.write(str(value))
        with open(os.path.join(actor, "dcp_checkpoint", ".metadata"), "wb") as f:
            pickle.dump({"value": value}, f)
        if step == hang:
            print(f"hanging in the save of step {step}", flush=True)
            while True:
                time.sleep(1)
        os.makedirs(os.path.join(actor, "model_state_dict"), exist_ok=True)
        with zipfile.ZipFile(os.path.join(actor, "model_state_dict", "full_weights.pt"), "w") as z:
            z.writestr("full_weights/data.pkl", pickle.dumps({"value": value}))
    print(f"finished at step {step} value={value}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
