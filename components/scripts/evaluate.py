#!/usr/bin/env python3
"""Evaluate the served policy: send each prompt of a JSONL file to the serving endpoint, write a result file.

Runs in the evaluation CronJob's pod (components/workloads/evaluation.py) against the serving
Service's OpenAI-compatible API (vLLM): `GET /v1/models` must list the served model, then one
`POST /v1/completions` per prompt (temperature 0, `--max-tokens`). Each line of the prompts file is
a JSON object with `prompt` and optionally `expected`; a completion that contains `expected`
(stripped) counts as correct. The result - per prompt and a summary (count, correct, accuracy over
the prompts with an answer, mean latency, completion tokens) - is written as JSON to
`<out-dir>/eval-<label>-<UTC time>.json`, beside the run's checkpoints; the file appears whole
(written to a temporary name, then renamed).

    python3 evaluate.py --endpoint http://rltrain-serving.rltrain.svc:8000 --model NAME \\
        --prompts /fsx/eval/prompts.jsonl --out-dir /fsx/runs/EXP/ID/eval --label step-1200

Scoring (`--scoring`): `contains` (above), or `math` for the reasoning family: the completion's
final answer (the last \\boxed{...}, as RLinf's math reward extracts it: _evaluate/answers.py)
equal to `expected` after a light normalization. `--prompts builtin:math` is the shipped set
(_evaluate/math_set.py); `--chat` sends each prompt as a user message to `/v1/chat/completions`
(the server applies the model's chat template). `--step N` is written into the summary, so the
result files of successive steps give accuracy over steps.

Exit codes:
  0  every prompt answered (EVAL DONE)
  1  the server failed: unreachable, an HTTP error, the model not served (EVAL ERROR)
  2  bad input: no prompts file, a line that is not a JSON object with a string `prompt` (EVAL ERROR)

Standard library only; Python 3.9+.
"""

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # the _evaluate package beside it
from _evaluate import answers, math_set  # noqa: E402

EXIT_DONE = 0
EXIT_SERVER = 1
EXIT_INPUT = 2


class ServerError(Exception):
    pass


class InputError(Exception):
    pass


def _request(url, body=None, timeout=600.0):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"},
                                 method="GET" if body is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode() or "{}")
    except urllib.error.HTTPError as e:
        raise ServerError(f"{url}: HTTP {e.code} {e.read()[:200].decode(errors='replace')}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise ServerError(f"{url}: {e}") from None


def read_prompts(path):
    if path == "builtin:math":
        return math_set.items()
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise InputError(f"cannot read prompts file {path}: {e}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError as e:
            raise InputError(f"{path}:{n}: not JSON ({e})") from None
        if not isinstance(item, dict) or not isinstance(item.get("prompt"), str):
            raise InputError(f"{path}:{n}: expected an object with a string 'prompt'")
        if "expected" in item and not isinstance(item["expected"], str):
            raise InputError(f"{path}:{n}: 'expected' must be a string")
        out.append(item)
    if not out:
        raise InputError(f"{path}: no prompts")
    return out


def _complete(base, model, prompt, max_tokens, timeout, chat):
    if chat:
        resp = _request(f"{base}/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": prompt}],
                                                        "max_tokens": max_tokens, "temperature": 0}, timeout)
        choices = resp.get("choices") or []
        text = (choices[0].get("message") or {}).get("content") if choices else None
    else:
        resp = _request(f"{base}/v1/completions", {"model": model, "prompt": prompt,
                                                   "max_tokens": max_tokens, "temperature": 0}, timeout)
        choices = resp.get("choices") or []
        text = choices[0].get("text") if choices else None
    return resp, text


def evaluate(endpoint, model, prompts, max_tokens, timeout, scoring="contains", chat=False, step=None):
    base = endpoint.rstrip("/")
    served = [m.get("id") for m in (_request(f"{base}/v1/models", timeout=timeout).get("data") or [])]
    if model not in served:
        raise ServerError(f"model {model!r} is not served (the server lists {served})")
    results = []
    for item in prompts:
        start = time.monotonic()
        resp, text = _complete(base, model, item["prompt"], max_tokens, timeout, chat)
        latency = time.monotonic() - start
        if not isinstance(text, str):
            raise ServerError(f"no completion text in the response to prompt {len(results) + 1}")
        row = {"prompt": item["prompt"], "completion": text, "latency_seconds": round(latency, 4),
               "completion_tokens": (resp.get("usage") or {}).get("completion_tokens")}
        if "expected" in item:
            row["expected"] = item["expected"]
            if scoring == "math":
                row["correct"], row["answer"] = answers.correct(text, item["expected"])
            else:
                row["correct"] = item["expected"].strip() in text
        results.append(row)
    judged = [r for r in results if "correct" in r]
    correct = sum(1 for r in judged if r["correct"])
    summary = {
        "model": model, "endpoint": base, "step": step, "scoring": scoring,
        "prompts": len(results), "judged": len(judged), "correct": correct,
        "accuracy": round(correct / len(judged), 4) if judged else None,
        "mean_latency_seconds": round(sum(r["latency_seconds"] for r in results) / len(results), 4),
        "completion_tokens": sum(r["completion_tokens"] or 0 for r in results),
    }
    return {"summary": summary, "results": results}


def write_result(out_dir, label, result, now=None):
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"eval-{label}-{stamp}.json")
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
    return path


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--endpoint", default=os.environ.get("EVAL_ENDPOINT"), help="server base URL")
    ap.add_argument("--model", default=os.environ.get("EVAL_MODEL"), help="served model name")
    ap.add_argument("--prompts", default=os.environ.get("EVAL_PROMPTS"), help="JSONL prompts file")
    ap.add_argument("--out-dir", default=os.environ.get("EVAL_OUT_DIR"), help="directory for the result file")
    ap.add_argument("--label", default=os.environ.get("EVAL_LABEL", "model"), help="part of the result file name")
    ap.add_argument("--max-tokens", type=int, default=int(os.environ.get("EVAL_MAX_TOKENS", "256")))
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    ap.add_argument("--scoring", choices=("contains", "math"), default="contains")
    ap.add_argument("--chat", action="store_true", help="use /v1/chat/completions")
    ap.add_argument("--step", type=int, default=None, help="the served checkpoint step (recorded)")
    a = ap.parse_args(argv)
    missing = [n for n in ("endpoint", "model", "prompts", "out_dir") if not getattr(a, n)]
    if missing:
        print(f"EVAL ERROR: missing {', '.join('--' + m.replace('_', '-') for m in missing)}", file=sys.stderr)
        return EXIT_INPUT
    try:
        prompts = read_prompts(a.prompts)
        result = evaluate(a.endpoint, a.model, prompts, a.max_tokens, a.timeout, a.scoring, a.chat, a.step)
    except InputError as e:
        print(f"EVAL ERROR: {e}", file=sys.stderr)
        return EXIT_INPUT
    except ServerError as e:
        print(f"EVAL ERROR: {e}", file=sys.stderr)
        return EXIT_SERVER
    path = write_result(a.out_dir, a.label, result)
    s = result["summary"]
    acc = "n/a" if s["accuracy"] is None else f"{s['accuracy']:.2%}"
    print(f"EVAL DONE: {s['prompts']} prompts, {s['correct']}/{s['judged']} correct ({acc}), mean latency "
          f"{s['mean_latency_seconds']:.3f} s -> {path}")
    return EXIT_DONE


if __name__ == "__main__":
    sys.exit(main())
