#!/usr/bin/env python3
"""Export one RLinf checkpoint step to a Hugging Face directory that vLLM and transformers load.

Usage (the export Job's command; components/workloads/export.py sets every flag):

    python3 /scripts/export_hf.py --family reasoning --steps-dir DIR --prefix global_step_ \
        --marks actor/dcp_checkpoint/.metadata,actor/model_state_dict/full_weights.pt,data/data.pt \
        [--step N] --base-model /fsx/models/BASE --out DIR [--dtype bf16] [--wait-seconds S]

1. The step: `--step N`, else the newest complete one. It is waited for (bounded by
   `--wait-seconds`, polled) until it is complete: every mark loads (the shared test of
   components/scripts/checkpoint_complete.py, mounted beside this file: a torch.save archive with
   its zip directory, DCP metadata that parses to its end). A first `up` creates training, the
   export and serving together, long before training has written the step. A newer step that is
   not complete (a torn full_weights.pt) is skipped, named with the reason; an explicit step that
   has every mark but is still torn when the wait ends is refused (exit 3).
2. Idempotent: when `--out` holds the marker `.rltrain-export.json` of this step and the
   checkpoint's full_weights.pt has not changed since (size and mtime recorded), nothing is done.
3. `actor/model_state_dict/full_weights.pt` must load. RLinf writes it in place with torch.save
   (RLinf/RLinf v0.3 rlinf/hybrid_engines/fsdp/strategy/base.py save_checkpoint), not atomically:
   a save killed mid-write leaves a truncated zip, which step 1 never picks. Then torch.load on the
   CPU. A file that does not load is refused (exit 3), and an earlier export is kept.
4. Reasoning family: the base model (its config and tokenizer) with transformers, the full state
   dict loaded into it (strict, except weights the model ties), `save_pretrained` (safetensors)
   with the tokenizer. RLinf's own convertor (rlinf/utils/ckpt_convertor/fsdp_convertor/
   convert_pt_to_hf.py) builds the model through rlinf.models.get_model, whose registry
   (rlinf/models/__init__.py) has builders for the embodied model types only, not qwen2.5.
   Embodied family: that convertor, run as a module (`--config-name fsdp_model_convertor`,
   convertor.ckpt_path / convertor.save_path / model.model_path overrides).
5. Written to a temporary directory beside `--out`, the marker last, then renamed onto `--out`
   (a previous export of the same path is moved aside first and removed only after the rename):
   whoever sees the marker sees a whole directory.

Exit codes: 0 exported or already current, 2 usage, 3 the checkpoint does not load (named),
4 the step did not become complete in time (named), 5 the conversion failed. CPU only: torch
and transformers are the trainer image's (the reason venv).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from typing import Optional, Sequence

# The shared completeness test, mounted beside this file (see resume_wrapper.py for the two ways in).
if __package__:
    from .checkpoint_complete import incomplete_reason, mark_problem, newest_complete
else:
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if _HERE not in sys.path:
        sys.path.insert(0, _HERE)
    from checkpoint_complete import incomplete_reason, mark_problem, newest_complete

PREFIX = "[export]"
MARKER = ".rltrain-export.json"
FULL_WEIGHTS = "actor/model_state_dict/full_weights.pt"
EXIT_USAGE, EXIT_BAD_CHECKPOINT, EXIT_TIMEOUT, EXIT_CONVERT = 2, 3, 4, 5
DTYPES = ("bf16", "fp16", "fp32")


def say(message: str) -> None:
    print(f"{PREFIX} {message}", flush=True)


def wait_for_step(args: argparse.Namespace, marks: Sequence[str]) -> tuple[Optional[str], Optional[str]]:
    """(the step directory once complete, None) or, when the wait ends first, (None, why: the
    last reason the step, or the newest one, was not complete)."""
    deadline = time.monotonic() + args.wait_seconds
    said: set[str] = set()
    while True:
        if args.step is not None:
            path = os.path.join(args.steps_dir, f"{args.prefix}{args.step}")
            why = incomplete_reason(path, marks) if os.path.isdir(path) else "no such directory yet"
            if why is None:
                return path, None
        else:
            path, skipped = newest_complete(args.steps_dir, args.prefix, marks)
            for torn, reason in skipped:
                if torn not in said:
                    say(f"skipping {torn}: incomplete, {reason}")
                    said.add(torn)
            if path:
                return path, None
            why = skipped[0][1] if skipped else "no step directory yet"
        if time.monotonic() >= deadline:
            return None, why
        time.sleep(args.poll_seconds)


def source_stamp(step_dir: str) -> dict:
    st = os.stat(os.path.join(step_dir, FULL_WEIGHTS))
    return {"step_dir": step_dir, "full_weights_size": st.st_size, "full_weights_mtime": st.st_mtime}


def current(out: str, stamp: dict) -> bool:
    try:
        with open(os.path.join(out, MARKER), encoding="utf-8") as f:
            marker = json.load(f)
    except (OSError, ValueError):
        return False
    return all(marker.get(k) == v for k, v in stamp.items())


def check_loadable(path: str):
    """The state dict of full_weights.pt (complete by wait_for_step), or raise ValueError naming the
    file and why."""
    try:
        import torch  # the trainer image's; imported only once the cheap check passed
    except ImportError as exc:
        raise RuntimeError(f"torch is not importable ({exc}): run in the trainer image's venv") from exc
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # torch raises RuntimeError / UnpicklingError / EOFError for a bad file
        raise ValueError(f"{path} does not load with torch.load: {type(exc).__name__}: {exc}") from exc


def _strip_prefix(sd: dict) -> dict:
    """Key segments FSDP and torch.compile wrappers add (`_fsdp_wrapped_module`, `_orig_mod`, a
    leading `module`) removed: the names the Hugging Face model has."""
    out = {}
    for k, v in sd.items():
        parts = [p for p in k.split(".") if p not in ("_fsdp_wrapped_module", "_orig_mod")]
        if parts and parts[0] == "module":
            parts = parts[1:]
        out[".".join(parts)] = v
    return out


def export_reasoning(state_dict: dict, base: str, tmp: str, dtype: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch_dtype, low_cpu_mem_usage=True)
    missing, unexpected = model.load_state_dict(_strip_prefix(state_dict), strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or []) if model.config.tie_word_embeddings else set()
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise ValueError(f"the checkpoint does not match {base}: missing {missing[:5]} "
                         f"({len(missing)}), unexpected {list(unexpected)[:5]} ({len(unexpected)})")
    model.save_pretrained(tmp, safe_serialization=True)
    AutoTokenizer.from_pretrained(base).save_pretrained(tmp)


def export_embodied(weights: str, base: str, tmp: str, dtype: str, rlinf_repo: str) -> None:
    """RLinf's convert_pt_to_hf with its fsdp_model_convertor config (OpenVLA-OFT)."""
    cmd = [sys.executable, "-m", "rlinf.utils.ckpt_convertor.fsdp_convertor.convert_pt_to_hf",
           "--config-path", f"{rlinf_repo}/rlinf/utils/ckpt_convertor/fsdp_convertor/config",
           "--config-name", "fsdp_model_convertor", f"convertor.ckpt_path={weights}", f"convertor.save_path={tmp}",
           f"convertor.torch_dtype={dtype}", f"model.model_path={base}"]
    say("running " + " ".join(cmd))
    # The config's hydra.searchpath reads ${oc.env:REPO_PATH}.
    subprocess.run(cmd, check=True, env={**os.environ, "REPO_PATH": rlinf_repo}, cwd=rlinf_repo)


def publish(tmp: str, out: str) -> None:
    """Rename tmp onto out; a previous out is moved aside first and removed after."""
    old = None
    if os.path.exists(out):
        old = f"{out}.old-{os.getpid()}"
        os.rename(out, old)
    os.rename(tmp, out)
    if old:
        shutil.rmtree(old, ignore_errors=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=("reasoning", "embodied"), required=True)
    ap.add_argument("--steps-dir", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--marks", required=True)
    ap.add_argument("--step", type=int)
    ap.add_argument("--base-model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=DTYPES, default="bf16")
    ap.add_argument("--wait-seconds", type=float, default=0)
    ap.add_argument("--poll-seconds", type=float, default=60)
    ap.add_argument("--rlinf-repo", default="/workspace/RLinf")
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else 0
    marks = [m.strip() for m in args.marks.split(",") if m.strip()]
    if FULL_WEIGHTS not in marks:
        marks.append(FULL_WEIGHTS)
    what = f"step {args.step}" if args.step is not None else "the newest complete step"
    say(f"waiting up to {args.wait_seconds:,.0f} s for {what} under {args.steps_dir} (marks: {', '.join(marks)})")
    step_dir, why = wait_for_step(args, marks)
    if step_dir is None:
        explicit = os.path.join(args.steps_dir, f"{args.prefix}{args.step}") if args.step is not None else None
        if explicit and os.path.isdir(explicit) and all(mark_problem(explicit, m) != "missing" for m in marks):
            # Every mark is there but one does not load: a torn step, not one still to come.
            kept = " (the previous export there is kept)" if os.path.isdir(args.out) else ""
            say(f"refused: {what} under {args.steps_dir} is not a complete checkpoint ({why}). "
                f"Not exported to {args.out}{kept}")
            return EXIT_BAD_CHECKPOINT
        say(f"{what} under {args.steps_dir} was not complete after {args.wait_seconds:,.0f} s ({why}; marks: "
            f"{', '.join(marks)}); the export Job's waitMinutes bounds this")
        return EXIT_TIMEOUT
    say(f"exporting {step_dir}")
    stamp = source_stamp(step_dir)
    if current(args.out, stamp):
        say(f"{args.out} is already the export of {step_dir}: nothing to do")
        return 0
    weights = os.path.join(step_dir, FULL_WEIGHTS)
    try:
        state_dict = check_loadable(weights)
    except RuntimeError as exc:
        say(str(exc))
        return EXIT_CONVERT
    except ValueError as exc:
        kept = " (the previous export there is kept)" if os.path.isdir(args.out) else ""
        say(f"refused: {exc}. Not exported to {args.out}{kept}")
        return EXIT_BAD_CHECKPOINT
    parent = os.path.dirname(os.path.abspath(args.out))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".tmp-{os.path.basename(args.out)}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        if args.family == "reasoning":
            export_reasoning(state_dict, args.base_model, tmp, args.dtype)
        else:
            del state_dict
            export_embodied(weights, args.base_model, tmp, args.dtype, args.rlinf_repo)
        with open(os.path.join(tmp, MARKER), "w", encoding="utf-8") as f:
            json.dump({**stamp, "step": int(os.path.basename(step_dir)[len(args.prefix):]), "family": args.family,
                       "base_model": args.base_model, "dtype": args.dtype, "exported_at": time.time()}, f)
        publish(tmp, args.out)
    except Exception as exc:  # the conversion's own errors: named, the previous export untouched
        shutil.rmtree(tmp, ignore_errors=True)
        say(f"conversion of {weights} failed: {type(exc).__name__}: {exc}")
        return EXIT_CONVERT
    say(f"exported {step_dir} -> {args.out} ({args.family}, {args.dtype})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
