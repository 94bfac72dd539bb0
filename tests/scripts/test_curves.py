"""The runs' curves (issue 43): event files written in the test with TensorBoard's own writer, in the
layout the reasoning profile writes (<run dir>/grpo-1.5b/tensorboard, RLinf's MetricLogger through
torch.utils.tensorboard's SummaryWriter: simple_value scalars), read by the exporter as a program
and, in the slow tier, served by a real TensorBoard on loopback with the logdir_spec the render gives.
That test also leaves a picture of the page for a reviewer, an artifact and not an assertion: a
headless Chromium or Chrome screenshot of TensorBoard's Time Series tab with both runs' reward curves,
written to $RLTRAIN_CI_OUT/curves/ (ci-out/curves/ under ci/test.sh; the pull-request workflow uploads
it as `screenshots`)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import warnings
from pathlib import Path

import pytest
from support import rendered

from components.scripts import curves_metrics
from components.workloads import curves

pytest.importorskip("tensorboard")
from tensorboard.compat.proto.event_pb2 import Event  # noqa: E402
from tensorboard.compat.proto.summary_pb2 import Summary  # noqa: E402
from tensorboard.summary.writer.event_file_writer import EventFileWriter  # noqa: E402

TAGS = {"reward": "rollout/reward_scores", "loss": "actor/training/actor/final_loss", "seconds per step": "time/step"}


def write_run(logdir: Path, points: dict[str, list[tuple[int, float]]]) -> None:
    """What RLinf's TensorBoard logger writes: add_scalar -> an Event with a simple_value Summary."""
    w = EventFileWriter(str(logdir))
    for tag, series in points.items():
        for step, value in series:
            w.add_event(Event(wall_time=time.time(), step=step,
                              summary=Summary(value=[Summary.Value(tag=tag, simple_value=value)])))
    w.close()


def runs_under(tmp_path: Path) -> dict[str, Path]:
    """The committed dev-reasoning stack's event directories, moved under tmp_path."""
    dirs = curves.event_dirs(rendered("dev-reasoning").cfg)
    assert set(dirs) == {"single-node", "lr-2e-6", "lr-5e-7"}
    return {name: tmp_path / d.lstrip("/") for name, d in dirs.items()}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 60.0) -> bytes:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                return r.read()
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_the_profile_layout_is_what_the_render_serves():
    cfg = rendered("dev-reasoning").cfg
    spec = curves.logdir_spec(cfg)
    assert spec.split(",")[0].startswith("lr-2e-6:/fsx/runs/math-grpo/lr-2e-6-") and spec.endswith("/grpo-1.5b/tensorboard")
    docs = rendered("dev-reasoning").manifests
    [dep] = [d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == curves.NAME]
    tb, metrics = dep["spec"]["template"]["spec"]["containers"]
    assert tb["command"][:2] == ["tensorboard", f"--logdir_spec={spec}"]
    assert f"--tag=reward={TAGS['reward']}" in metrics["args"]
    assert dep["spec"]["template"]["spec"].get("affinity") is None  # CPU only, beside the CronJobs


def test_the_exporter_serves_each_runs_newest_scalars(tmp_path):
    dirs = runs_under(tmp_path)
    write_run(dirs["lr-2e-6"], {TAGS["reward"]: [(1, 0.1), (2, 0.3)], TAGS["loss"]: [(1, 0.9), (2, 0.7)]})
    write_run(dirs["lr-5e-7"], {TAGS["reward"]: [(1, 0.05)], "rollout/other": [(1, 5.0)]})
    # A record still being written at the end of a file: cut by its length, read on a later pass.
    with open(next(dirs["lr-5e-7"].glob("events.out.tfevents.*")), "ab") as f:
        f.write(b"\x40\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00partial")
    port = _port()
    args = [f"--run={n}={d}" for n, d in dirs.items()] + [f"--tag={m}={t}" for m, t in TAGS.items()]
    p = subprocess.Popen([sys.executable, curves_metrics.__file__, *args, f"--port={port}", "--host=127.0.0.1",
                          "--interval=0.2"], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            text = _get(f"http://127.0.0.1:{port}/metrics").decode()
            if 'run="lr-5e-7"' in text or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    finally:
        p.terminate()
        p.wait(timeout=10)
    assert 'rltrain_run_scalar{run="lr-2e-6",metric="reward",tag="rollout/reward_scores"} 0.30000001192092896' in text
    assert 'rltrain_run_scalar_step{run="lr-2e-6",metric="reward",tag="rollout/reward_scores"} 2' in text
    assert 'rltrain_run_scalar{run="lr-2e-6",metric="loss",tag="actor/training/actor/final_loss"} 0.699999988079071' in text
    assert 'rltrain_run_scalar{run="lr-5e-7",metric="reward",tag="rollout/reward_scores"} 0.05000000074505806' in text
    assert "rollout/other" not in text and 'run="single-node"' not in text  # no file yet, nothing invented


def test_event_records_are_parsed_as_tensorboard_writes_them(tmp_path):
    write_run(tmp_path, {"time/step": [(7, 12.5)]})
    [path] = tmp_path.glob("events.out.tfevents.*")
    recs, used = curves_metrics.records(path.read_bytes())
    assert used == path.stat().st_size
    found = [s for r in recs for s in curves_metrics.scalars(r)]
    assert found == [(7, "time/step", 12.5)]


BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def screenshot(url: str, out: Path) -> None:
    """A headless browser's picture of `url` in `out`, or a warning saying why there is none.

    --disable-3d-apis: without a GPU, TensorBoard's WebGL line charts draw axes but no lines;
    with WebGL off it draws them as SVG (seen with Chromium 156 and tensorboard 2.20.0).
    --virtual-time-budget lets the page's scripts fetch and draw before the picture is taken."""
    browser = next(filter(None, map(shutil.which, BROWSERS)), None)
    if browser is None:
        warnings.warn(f"no screenshot of the curves: none of {', '.join(BROWSERS)} is on PATH")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-3d-apis", "--hide-scrollbars",
                           "--window-size=1280,800", "--virtual-time-budget=15000", f"--screenshot={out}", url],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not out.is_file():
        warnings.warn(f"no screenshot of the curves: {browser} exited {proc.returncode}: {proc.stderr[-400:]}")
    else:
        print(f"curves screenshot: {out}")


@pytest.mark.slow
def test_a_real_tensorboard_serves_one_run_per_named_run(tmp_path):
    dirs = runs_under(tmp_path)
    write_run(dirs["lr-2e-6"], {TAGS["reward"]: [(1, 0.1), (2, 0.3)]})
    write_run(dirs["lr-5e-7"], {TAGS["reward"]: [(1, 0.05), (2, 0.06)]})
    # More steps (from 3 on) for the picture only: what the API returns is read below steps 3.
    write_run(dirs["lr-2e-6"], {TAGS["reward"]: [(s, 0.3 + 0.6 * (1 - 0.85 ** s)) for s in range(3, 41)]})
    write_run(dirs["lr-5e-7"], {TAGS["reward"]: [(s, 0.06 + 0.3 * (1 - 0.97 ** s)) for s in range(3, 41)]})
    spec = ",".join(f"{n}:{d}" for n, d in sorted(dirs.items()))
    port = _port()
    tb = subprocess.Popen([sys.executable, "-m", "tensorboard.main", f"--logdir_spec={spec}", f"--port={port}",
                           "--host=127.0.0.1", "--load_fast=false", "--reload_interval=1"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # TensorBoard names a logdir_spec run `<name>/<directory relative to its path>`: files directly
    # in it are the run `<name>/.` (seen here with tensorboard 2.20.0): one TensorBoard run per named run.
    want = {"lr-2e-6/.", "lr-5e-7/."}
    try:
        deadline = time.monotonic() + 90
        while True:
            runs = json.loads(_get(f"http://127.0.0.1:{port}/data/runs"))
            if want <= set(runs) or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert set(runs) == want, runs  # single-node has written nothing yet: no run invented
        tag = urllib.request.quote(TAGS["reward"], safe="")
        got = {run: [(step, round(v, 3)) for _, step, v in json.loads(_get(
            f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?run={urllib.request.quote(run, safe='')}&tag={tag}"))]
            for run in sorted(want)}
        screenshot(f"http://127.0.0.1:{port}/#timeseries",
                   Path(os.environ.get("RLTRAIN_CI_OUT") or tmp_path) / "curves" / "tensorboard-runs.png")
    finally:
        tb.terminate()
        tb.wait(timeout=20)
    assert {run: points[:2] for run, points in got.items()} == {"lr-2e-6/.": [(1, 0.1), (2, 0.3)],
                                                              "lr-5e-7/.": [(1, 0.05), (2, 0.06)]}
    assert [step for step, _ in got["lr-2e-6/."]] == list(range(1, 41))
