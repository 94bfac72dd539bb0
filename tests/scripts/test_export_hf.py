"""components/scripts/export_hf.py as a program.

The default tier needs no torch: the bounded wait, the refusal of a half-written full_weights.pt
(the previous export kept) and the idempotent skip happen before torch is imported. The slow tests
run a stand-in trainer that writes RLinf-layout checkpoints of a tiny Qwen2 model built here with
transformers (random weights, CPU, nothing downloaded) and export it; they need a Python with
torch and transformers: $RLTRAIN_TORCH_PYTHON (ci/torch-env.sh builds it), else this one (skipped
when neither has them, failed under CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from checkpoint_files import tear, write_step

from components.stack import trainers

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "components" / "scripts" / "export_hf.py"
RETENTION = ROOT / "components" / "scripts" / "retention.py"
MARKS = trainers.RLINF_REASONING.resume.complete_marks
FULL = "actor/model_state_dict/full_weights.pt"


def run(tmp: Path, *extra: str, python: str = sys.executable, timeout: int = 60) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(SCRIPT), "--family", "reasoning", "--steps-dir", str(tmp / "ckpt"),
                           "--prefix", "global_step_", "--marks", ",".join(MARKS), "--base-model", str(tmp / "base"),
                           "--out", str(tmp / "export"), "--poll-seconds", "0.05", *extra],
                          capture_output=True, text=True, timeout=timeout)


def fake_step(tmp: Path, n: int, weights: bytes | None = None) -> Path:
    """A step with every mark as RLinf writes it (checkpoint_files), full_weights.pt replaced by
    `weights` when given."""
    d = write_step(tmp / "ckpt" / f"global_step_{n}", MARKS, n)
    if weights is not None:
        (d / FULL).write_bytes(weights)
    return d


def truncated_zip(tmp: Path) -> bytes:
    z = tmp / "whole.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("archive/data.pkl", b"x" * 4096)
    return z.read_bytes()[:2000]  # cut mid-write: no central directory


def test_waits_bounded_for_the_step_and_names_what_is_missing(tmp_path):
    r = run(tmp_path, "--step", "100", "--wait-seconds", "0.3")
    assert r.returncode == 4
    assert "step 100" in r.stdout and "was not complete after" in r.stdout and "data/data.pt" in r.stdout


def test_half_written_full_weights_refused_and_previous_export_kept(tmp_path):
    fake_step(tmp_path, 100, truncated_zip(tmp_path))
    prev = tmp_path / "export"
    prev.mkdir()
    (prev / "model.safetensors").write_bytes(b"previous")
    (prev / ".rltrain-export.json").write_text(json.dumps({"step": 50}))
    r = run(tmp_path, "--step", "100")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "is not a complete checkpoint (actor/model_state_dict/full_weights.pt: not a complete zip archive" in r.stdout
    assert "previous export there is kept" in r.stdout
    assert (prev / "model.safetensors").read_bytes() == b"previous"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_an_incomplete_newest_step_is_not_exported(tmp_path):
    fake_step(tmp_path, 100)
    newer = tmp_path / "ckpt" / "global_step_150" / "actor" / "model_state_dict"
    newer.mkdir(parents=True)
    (newer / "full_weights.pt").write_bytes(b"half")
    r = run(tmp_path)  # newest complete: 100 (150 has no DCP metadata nor data.pt)
    # 100 is chosen; without torch here the load itself stops (exit 5), after the choice.
    assert f"exporting {tmp_path / 'ckpt' / 'global_step_100'}" in r.stdout, r.stdout
    assert "skipping" in r.stdout and "global_step_150: incomplete, actor/dcp_checkpoint/.metadata: missing" in r.stdout


def test_a_torn_newest_step_is_skipped_naming_it_and_the_previous_one_exported(tmp_path):
    """Every mark of 150 exists, but its full_weights.pt was cut mid-write (torch.save writes it in
    place): export takes 100, and says why not 150."""
    fake_step(tmp_path, 100)
    torn = tear(fake_step(tmp_path, 150) / FULL)
    r = run(tmp_path)
    assert f"exporting {tmp_path / 'ckpt' / 'global_step_100'}" in r.stdout, r.stdout
    assert (f"skipping {tmp_path / 'ckpt' / 'global_step_150'}: incomplete, {FULL}: not a complete zip archive"
            in r.stdout)
    assert torn.stat().st_size > 0 and r.returncode != 4


def test_current_export_is_left_alone(tmp_path):
    step = fake_step(tmp_path, 100)
    st = os.stat(step / FULL)
    out = tmp_path / "export"
    out.mkdir()
    (out / ".rltrain-export.json").write_text(json.dumps(
        {"step_dir": str(step), "full_weights_size": st.st_size, "full_weights_mtime": st.st_mtime}))
    r = run(tmp_path, "--step", "100")
    assert r.returncode == 0 and "nothing to do" in r.stdout


# ---------------------------------------------------------------------------------------------
# with torch and transformers


def torch_python() -> str:
    py = os.environ.get("RLTRAIN_TORCH_PYTHON", sys.executable)
    ok = subprocess.run([py, "-c", "import torch, transformers, tokenizers"], capture_output=True).returncode == 0
    if not ok:
        # Under CI, ci/install.sh built the torch environment (ci/torch-env.sh) and ci/env.sh named it.
        if os.environ.get("CI"):
            pytest.fail(f"{py} has no torch/transformers/tokenizers: ci/torch-env.sh builds the environment "
                        "and ci/env.sh sets RLTRAIN_TORCH_PYTHON")
        pytest.skip(f"{py} has no torch/transformers/tokenizers (set RLTRAIN_TORCH_PYTHON, ci/torch-env.sh)")
    return py


# A stand-in for RLinf's reasoning runner: a tiny Qwen2 (random weights) as the base model with a
# word-level tokenizer, then checkpoint steps in RLinf's layout (reasoning_runner._save_checkpoint,
# fsdp strategy save_checkpoint): DCP metadata, the full state dict with torch.save, data/data.pt.
STANDIN = textwrap.dedent('''
    import os, pickle, sys, torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    root, steps, incomplete = sys.argv[1], [int(s) for s in sys.argv[2].split(",")], sys.argv[3] == "1"
    torch.manual_seed(0)
    vocab = {w: i for i, w in enumerate(["<pad>", "<eos>", "<unk>"] + [str(i) for i in range(61)])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    cfg = Qwen2Config(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, eos_token_id=1, pad_token_id=0)
    base = Qwen2ForCausalLM(cfg)
    base.save_pretrained(os.path.join(root, "base"))
    hf_tok.save_pretrained(os.path.join(root, "base"))
    for n in steps:
        d = os.path.join(root, "ckpt", f"global_step_{n}")
        os.makedirs(os.path.join(d, "actor", "dcp_checkpoint"), exist_ok=True)
        with open(os.path.join(d, "actor", "dcp_checkpoint", ".metadata"), "wb") as f:
            pickle.dump({"step": n}, f)  # DCP pickles its Metadata there
        with torch.no_grad():
            for p in base.parameters():
                p.add_(0.01 * n)
        os.makedirs(os.path.join(d, "actor", "model_state_dict"), exist_ok=True)
        torch.save({k: v.float() for k, v in base.state_dict().items()},
                   os.path.join(d, "actor", "model_state_dict", "full_weights.pt"))
        os.makedirs(os.path.join(d, "data"), exist_ok=True)
        torch.save({"epoch": 0}, os.path.join(d, "data", "data.pt"))
    if incomplete:  # a newest step killed mid-save: the DCP shards only
        d = os.path.join(root, "ckpt", f"global_step_{steps[-1] + 50}", "actor", "dcp_checkpoint")
        os.makedirs(d)
        open(os.path.join(d, "__0_0.distcp"), "wb").write(b"x")
''')

CHECK = textwrap.dedent('''
    import sys, torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    out, weights = sys.argv[1], sys.argv[2]
    model = AutoModelForCausalLM.from_pretrained(out, torch_dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(out)
    want = torch.load(weights, map_location="cpu")
    got = model.state_dict()
    assert all(torch.allclose(got[k].float(), want[k].to(torch.bfloat16).float()) for k in want), "weights differ"
    ids = tok("1 2 3", return_tensors="pt").input_ids
    gen = model.generate(ids, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert gen.shape[1] == ids.shape[1] + 4 or int(gen[0, -1]) == 1, gen
    print("OK", gen.shape[1])
''')


@pytest.mark.slow
def test_standin_trainer_retention_and_export_load_and_generate(tmp_path):
    py = torch_python()
    subprocess.run([py, "-c", STANDIN, str(tmp_path), "50,100,150,200,250", "1"], check=True, timeout=300)
    keep = subprocess.run([sys.executable, str(RETENTION), "--steps-dir", str(tmp_path / "ckpt"), "--prefix",
                           "global_step_", "--marks", ",".join(MARKS), "--keep", "3", "--min-age-seconds", "0"],
                          capture_output=True, text=True, timeout=60)
    assert keep.returncode == 0, keep.stdout
    # exactly 3 complete steps kept, and the incomplete newest (300) is left to the trainer
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == [
        "global_step_150", "global_step_200", "global_step_250", "global_step_300"]
    r = run(tmp_path, python=py, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "global_step_250" in r.stdout and (tmp_path / "export" / ".rltrain-export.json").is_file()
    assert json.loads((tmp_path / "export" / ".rltrain-export.json").read_text())["step"] == 250
    ok = subprocess.run([py, "-c", CHECK, str(tmp_path / "export"), str(tmp_path / "ckpt" / "global_step_250" / FULL)],
                        capture_output=True, text=True, timeout=300)
    assert ok.returncode == 0 and ok.stdout.startswith("OK"), ok.stdout + ok.stderr
    again = run(tmp_path, python=py, timeout=300)
    assert again.returncode == 0 and "nothing to do" in again.stdout


@pytest.mark.slow
def test_rewritten_step_with_a_torn_full_weights_keeps_the_previous_export(tmp_path):
    py = torch_python()
    subprocess.run([py, "-c", STANDIN, str(tmp_path), "100", "0"], check=True, timeout=300)
    assert run(tmp_path, "--step", "100", python=py, timeout=300).returncode == 0
    before = sorted((tmp_path / "export").iterdir())
    weights = tmp_path / "ckpt" / "global_step_100" / FULL
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # rewritten in place, torn
    r = run(tmp_path, "--step", "100", python=py, timeout=300)
    assert r.returncode == 3 and "previous export there is kept" in r.stdout
    assert sorted((tmp_path / "export").iterdir()) == before
