#!/usr/bin/env python3
"""Serve the evaluation results of a run as Prometheus metrics: accuracy over served steps.

Usage (the eval-metrics Deployment's command; components/workloads/evaluation.py):

    python3 /scripts/eval_metrics.py --eval-dir /fsx/runs/EXP/ID/eval --model NAME [--port 9400]

On every `GET /metrics` it reads the result files evaluate.py wrote (`eval-<label>-<UTC time>.json`,
whole files: evaluate.py renames them into place), keeps the newest one per step, and answers:

    rltrain_eval_accuracy{model="...",step="200",scoring="math"} 0.45
    rltrain_eval_correct{...} 9
    rltrain_eval_judged{...} 20
    rltrain_eval_result_timestamp_seconds{...} 1.7e9
    rltrain_eval_success_rate{model="...",step="400",scoring="embodied"} 0.6  (embodied_eval.py's files)
    rltrain_eval_episodes{...} 16

A file that does not parse is skipped (counted in rltrain_eval_unreadable_files). `GET /healthz`
answers 200. Standard library only; nothing is cached between scrapes (a handful of small files).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import signal
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional, Sequence

METRICS = (("rltrain_eval_accuracy", "accuracy", "accuracy over the judged prompts of the newest evaluation of a step"),
           ("rltrain_eval_correct", "correct", "prompts answered correctly"),
           ("rltrain_eval_judged", "judged", "prompts with an expected answer"),
           # The embodied family (embodied_eval.py): RLinf's eval/success_once over the episodes.
           ("rltrain_eval_success_rate", "success_rate", "success rate over the episodes of the newest embodied evaluation of a step"),
           ("rltrain_eval_episodes", "episodes", "episodes of the newest embodied evaluation of a step"))


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def newest_per_step(eval_dir: str) -> tuple[dict[str, tuple[float, dict]], int]:
    """step (or label) -> (mtime, summary) of its newest result file; and the unreadable count."""
    out: dict[str, tuple[float, dict]] = {}
    bad = 0
    for path in glob.glob(os.path.join(eval_dir, "eval-*.json")):
        try:
            mtime = os.path.getmtime(path)
            with open(path, encoding="utf-8") as f:
                summary = json.load(f)["summary"]
        except (OSError, ValueError, KeyError, TypeError):
            bad += 1
            continue
        step = summary.get("step")
        key = str(step) if step is not None else os.path.basename(path).split("-")[1]
        if key not in out or mtime > out[key][0]:
            out[key] = (mtime, summary)
    return out, bad


def render(eval_dir: str, model: str) -> str:
    found, bad = newest_per_step(eval_dir)
    lines = []
    for name, key, help_text in METRICS:
        lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge"]
        for step, (_, s) in sorted(found.items(), key=lambda kv: kv[0]):
            value = s.get(key)
            if isinstance(value, (int, float)):
                labels = f'model="{_label(model)}",step="{_label(step)}",scoring="{_label(str(s.get("scoring", "")))}"'
                lines.append(f"{name}{{{labels}}} {value}")
    lines += ["# HELP rltrain_eval_result_timestamp_seconds modification time of the step's newest result file",
              "# TYPE rltrain_eval_result_timestamp_seconds gauge"]
    for step, (mtime, _) in sorted(found.items()):
        lines.append(f'rltrain_eval_result_timestamp_seconds{{model="{_label(model)}",step="{_label(step)}"}} {mtime}')
    lines += ["# HELP rltrain_eval_unreadable_files result files that did not parse",
              "# TYPE rltrain_eval_unreadable_files gauge", f"rltrain_eval_unreadable_files {bad}"]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eval-dir", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--port", type=int, default=9400)
    ap.add_argument("--host", default="0.0.0.0")
    args = ap.parse_args(argv)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if self.path.split("?")[0] == "/metrics":
                body, ctype = render(args.eval_dir, args.model).encode(), "text/plain; version=0.0.4"
            elif self.path == "/healthz":
                body, ctype = b"ok\n", "text/plain"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    # PID 1 in its container: a signal whose action is the default is ignored there, so SIGTERM
    # gets a handler (the pod stops at once instead of after its grace period).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    print(f"[eval-metrics] serving {args.eval_dir} on :{args.port}/metrics", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
