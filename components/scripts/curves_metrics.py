#!/usr/bin/env python3
"""Each training run's headline scalars from its TensorBoard event files, as Prometheus metrics.

Usage (the curves pod, components/workloads/curves.py):

    python3 /scripts/curves_metrics.py --run lr-1e-6=/fsx/runs/.../grpo-1.5b/tensorboard \
        --tag reward=rollout/reward_scores --tag loss=actor/training/actor/final_loss \
        --tag 'seconds per step=time/step' --port 9401

Serves on /metrics, for every run and metric whose tag was written:

    rltrain_run_scalar{run="lr-1e-6",metric="reward",tag="rollout/reward_scores"} 0.42
    rltrain_run_scalar_step{run="lr-1e-6",metric="reward",tag="rollout/reward_scores"} 120

the value at the newest step written (Prometheus keeps the history: the Grafana panel plots it
over time, TensorBoard over steps), and /healthz.

The event files are read incrementally, with the standard library only (the pod runs the small
pinned Python image): a TFRecord stream (tensorflow/core/lib/io/record_writer.cc: a little-endian
uint64 length, its masked CRC32C, the data, its masked CRC32C; a record still being written at the
end of the file is left for the next pass), each record a tensorflow.Event protobuf
(tensorboard/compat/proto/event.proto: step = field 2, summary = field 5), its Summary.Value
(summary.proto: tag = field 1, simple_value = field 2, a float). That is what RLinf writes: its
TensorBoard logger calls torch.utils.tensorboard SummaryWriter.add_scalar (RLinf
rlinf/utils/metric_logger.py at 0505431), whose scalar summary is a simple_value
(torch/utils/tensorboard/summary.py scalar, new_style False by default). Other values (tensors,
histograms, images) are skipped. The CRCs are not checked: a torn record is cut by its length.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, Optional

PREFIX = "events.out.tfevents."


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, i
        shift += 7


def fields(buf: bytes) -> Iterator[tuple[int, int, object]]:
    """(field number, wire type, value) of one protobuf message; bytes for length-delimited."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = _varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, value


def scalars(event: bytes) -> list[tuple[int, str, float]]:
    """(step, tag, value) of every simple_value in one Event record."""
    step, out = 0, []
    values = []
    for num, wire, value in fields(event):
        if num == 2 and wire == 0:
            step = value  # int64 step (non-negative here)
        elif num == 5 and wire == 2:
            values += [v for n, w, v in fields(value) if n == 1 and w == 2]
    for raw in values:
        tag, simple = None, None
        for n, w, v in fields(raw):
            if n == 1 and w == 2:
                tag = v.decode("utf-8", "replace")
            elif n == 2 and w == 5:
                simple = struct.unpack("<f", v)[0]
        if tag is not None and simple is not None:
            out.append((step, tag, simple))
    return out


def records(data: bytes) -> tuple[list[bytes], int]:
    """The complete records of `data` and how many bytes they take (a torn one at the end is left)."""
    out, i = [], 0
    while i + 12 <= len(data):
        (n,) = struct.unpack("<Q", data[i:i + 8])
        if i + 12 + n + 4 > len(data):
            break
        out.append(data[i + 12:i + 12 + n])
        i += 12 + n + 4
    return out, i


class Curves:
    """Newest (step, value) per run and tag, read incrementally from the runs' event files."""

    def __init__(self, runs: dict[str, str], tags: dict[str, str]):
        self.runs, self.tags = runs, tags
        self.offsets: dict[str, int] = {}
        self.latest: dict[tuple[str, str], tuple[int, float]] = {}
        self.lock = threading.Lock()

    def files(self, root: str) -> list[str]:
        found = []
        for dirpath, _, names in os.walk(root):
            found += [os.path.join(dirpath, n) for n in names if n.startswith(PREFIX)]
        return sorted(found)

    def scan(self) -> None:
        wanted = set(self.tags.values())
        for run, root in self.runs.items():
            for path in self.files(root):
                try:
                    with open(path, "rb") as f:
                        f.seek(self.offsets.get(path, 0))
                        data = f.read()
                except OSError:
                    continue
                recs, used = records(data)
                self.offsets[path] = self.offsets.get(path, 0) + used
                for rec in recs:
                    try:
                        found = scalars(rec)
                    except (ValueError, IndexError, struct.error):
                        continue  # not a scalar event we can read: skipped
                    with self.lock:
                        for step, tag, value in found:
                            if tag in wanted and step >= self.latest.get((run, tag), (-1, 0.0))[0]:
                                self.latest[(run, tag)] = (step, value)

    def exposition(self) -> str:
        lines = ["# HELP rltrain_run_scalar A training run's headline scalar at its newest step (TensorBoard event files).",
                 "# TYPE rltrain_run_scalar gauge",
                 "# HELP rltrain_run_scalar_step The step of rltrain_run_scalar.",
                 "# TYPE rltrain_run_scalar_step gauge"]
        with self.lock:
            for run in sorted(self.runs):
                for metric, tag in sorted(self.tags.items()):
                    if (run, tag) not in self.latest:
                        continue
                    step, value = self.latest[(run, tag)]
                    labels = f'run="{_esc(run)}",metric="{_esc(metric)}",tag="{_esc(tag)}"'
                    lines.append(f"rltrain_run_scalar{{{labels}}} {value!r}")
                    lines.append(f"rltrain_run_scalar_step{{{labels}}} {step}")
        return "\n".join(lines) + "\n"


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _pairs(items: list[str], what: str) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name or not value:
            raise SystemExit(f"--{what} {item!r}: expected NAME=VALUE")
        out[name] = value
    return out


def serve(curves: Curves, port: int, host: str = "0.0.0.0", interval: float = 30.0,
          stop: Optional[threading.Event] = None) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == "/healthz":
                body, kind = b"ok\n", "text/plain"
            elif self.path == "/metrics":
                body, kind = curves.exposition().encode(), "text/plain; version=0.0.4"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    stop = stop or threading.Event()

    def loop() -> None:
        while not stop.is_set():
            curves.scan()
            stop.wait(interval)

    threading.Thread(target=loop, daemon=True).start()
    return server


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="append", default=[], help="NAME=DIR of a run's event files (repeatable)")
    ap.add_argument("--tag", action="append", default=[], help="METRIC=TAG exported (repeatable)")
    ap.add_argument("--port", type=int, default=9401)
    ap.add_argument("--host", default="0.0.0.0")
    ap.add_argument("--interval", type=float, default=30.0, help="seconds between scans of the event files")
    args = ap.parse_args(argv)
    curves = Curves(_pairs(args.run, "run"), _pairs(args.tag, "tag"))
    server = serve(curves, args.port, args.host, args.interval)
    print(f"[curves-metrics] {len(curves.runs)} run(s), {len(curves.tags)} tag(s), :{args.port}/metrics",
          file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
