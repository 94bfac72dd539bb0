"""Tests for components/scripts/ray_launcher.py.

Most tests run the launcher as a program, the way the training pods do,
against a real Ray started on loopback addresses only. A few import the pure
parts (environment parsing, rank, the `ray start` command lines) directly.

Running two Ray nodes on one host takes some care:

* Ray rewrites "127.0.0.1"/"localhost" in `--node-ip-address` and in a
  worker's `--address` to the host's primary (non-loopback) IP. Any other
  127.x.y.z address is left alone, so the head uses 127.0.0.2 and the worker
  127.0.0.3 (via RAY_START_EXTRA_ARGS): each node has its own IP, as pods do,
  and all traffic stays on loopback.
* Every port a second node would share with the first is chosen per test
  (GCS, Ray Client server, dashboard agent), and RAY_TMPDIR is a short
  per-test directory: Ray's Unix socket paths must fit in 107 bytes, which a
  pytest tmp_path does not leave room for.

Where the machine allows it (root, as in CI), each launcher that starts Ray
or waits for a signal runs as PID 1 of its own PID namespace (`unshare --pid --fork --mount-proc`),
as it does in a container: that exercises its PID-1 duties (signal handlers,
reaping), and the `ray stop` it runs on failure then sees only its own
namespace instead of every Ray process on the machine.

Cleanup does not use `ray stop` either, for the same reason. Each launcher
runs in its own session (start_new_session), which neither `ray start` nor
unshare leaves, so killing the session's processes by pid removes exactly
what the test started.

Waits that real Ray would only make long (a `ray start` that hangs, a GCS that
never answers) run against a fake `ray` executable placed first on PATH, and a
loopback port that accepts connections but never answers.

The resume contract is tested with tests/scripts/resume_trainer.py as the
training command, against a real Ray head started by the launcher.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Optional

import pytest
from support import rendered

from components.scripts import ray_launcher as launcher
from components.scripts._ray_launcher import common as launcher_common, node_wait, worker as launcher_worker

REPO = Path(__file__).resolve().parents[2]
LAUNCHER_PATH = REPO / "components" / "scripts" / "ray_launcher.py"
BIN_DIR = Path(sys.executable).parent
RAY_CLI = shutil.which("ray", path=str(BIN_DIR)) or shutil.which("ray")

HEAD_IP = "127.0.0.2"
WORKER_IP = "127.0.0.3"
# Another Ray cluster on the same host, which the launcher must never join.
UNRELATED_IP = "127.0.0.4"
# A "head" that accepts TCP connections and never answers.
SILENT_IP = "127.0.0.5"
RESUME_TRAINER = Path(__file__).resolve().parent / "resume_trainer.py"

# The launcher's fixed waits (common.tuned), shortened for every launcher these tests start: what
# each bounds is the same at any length, and the assertions read these values. Its defaults:
# DEFAULT_WAITS; test_head_keeps_the_trainers_code_when_ray_cannot_tell[hang-at-the-defaults] runs at
# them (slow tier).
FAST_WAITS = {"PEER_REPLY_SECONDS": 1.0, "HEAD_PROBE_SECONDS": 0.5, "NODE_POLL_SECONDS": 0.2,
              "JOIN_RETRY_SECONDS": 0.2, "HEALTH_POLL_SECONDS": 0.2}
DEFAULT_WAITS = {"PEER_REPLY_SECONDS": node_wait.PEER_REPLY_SECONDS,
                 "HEAD_PROBE_SECONDS": launcher_worker.HEAD_PROBE_SECONDS,
                 "NODE_POLL_SECONDS": node_wait.NODE_POLL_SECONDS,
                 "JOIN_RETRY_SECONDS": launcher_worker.JOIN_RETRY_SECONDS,
                 "HEALTH_POLL_SECONDS": node_wait.HEALTH_POLL_SECONDS}


def at_defaults(env: dict) -> dict:
    """A launcher environment without the shortened waits: the launcher's own defaults."""
    return {k: v for k, v in env.items() if not k.startswith(launcher_common.TUNED_PREFIX)}


_ray_installed = pytest.mark.skipif(
    RAY_CLI is None, reason="the ray CLI is not installed (pip install ray==2.60.0)"
)


def needs_ray(test):
    """A test that starts a real Ray cluster on loopback: the slow tier (`python -m pytest -q -m slow`)."""
    return pytest.mark.slow(_ray_installed(test))


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    # Registered before exec_module so the dataclass can resolve its module.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


resume_trainer = _load("resume_trainer", RESUME_TRAINER)


# --------------------------------------------------------------------------
# Helpers for running the launcher as a program
# --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@functools.cache
def pid_namespaces_work() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    try:
        probe = subprocess.run(
            [unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _proc_stat(pid: str):
    """(state, parent pid, session id) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return fields[0], int(fields[1]), int(fields[3])


def session_pids(sid: int) -> list:
    """Live (non-zombie) processes in session `sid`."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _proc_stat(entry)
            if info is not None and info[2] == sid and info[0] != "Z":
                pids.append(int(entry))
    return pids


def foreign_ray_daemons(own_sessions) -> list:
    """Ray daemons on this machine that these tests did not start."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/comm", encoding="utf-8") as handle:
                comm = handle.read().strip()
        except OSError:
            continue
        info = _proc_stat(entry)
        if comm in ("raylet", "gcs_server") and info and info[0] != "Z":
            if info[2] not in own_sessions:
                found.append(int(entry))
    return found


class Run:
    """One launcher process, its output files and its session."""

    def __init__(self, proc: subprocess.Popen, out: Path, err: Path, namespaced: bool) -> None:
        self.proc = proc
        self.out_path = out
        self.err_path = err
        # True: self.proc is unshare, and the launcher is PID 1 of a
        # namespace (its child here).
        self.namespaced = namespaced

    @property
    def pid(self) -> int:
        return self.proc.pid

    def launcher_pid(self) -> int:
        """The launcher's pid as this test sees it."""
        if not self.namespaced:
            return self.proc.pid
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            for entry in os.listdir("/proc"):
                info = _proc_stat(entry) if entry.isdigit() else None
                if info is not None and info[1] == self.proc.pid:
                    return int(entry)
            time.sleep(0.02)
        pytest.fail("unshare did not start the launcher")

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"launcher did not exit within {timeout} s\n--- stdout\n"
                f"{self.stdout}\n--- stderr\n{self.stderr}"
            )

    def wait_for_output(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.stdout:
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        pytest.fail(f"{text!r} never appeared\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}")

    def describe(self) -> str:
        return f"rc={self.proc.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


class Launchers:
    """Starts launcher programs and removes everything they started."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.runs = []
        self.temp_dirs = []

    def ray_tmpdir(self) -> str:
        path = tempfile.mkdtemp(prefix="rlt-", dir="/tmp" if os.path.isdir("/tmp") else None)
        self.temp_dirs.append(path)
        return path

    def env(self, **values: str) -> dict:
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith("RAY_")
            and key
            not in ("NUM_NODES", "JOB_COMPLETION_INDEX", "HOSTNAME", "RUN_DONE_MARKER", "CKPT_DIR", "RESUME")
        }
        # The launcher finds `ray` on PATH; use the one installed beside this Python.
        env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env["PYTHONUNBUFFERED"] = "1"
        env.update({launcher_common.TUNED_PREFIX + name: f"{value:g}" for name, value in FAST_WAITS.items()})
        env.update(values)
        return env

    def start(self, env: dict, command=(), name: str = "launcher", container: bool = False) -> Run:
        """Start the launcher; container=True makes it PID 1 where possible."""
        index = len(self.runs)
        namespaced = container and pid_namespaces_work()
        # --kill-child: if unshare dies, so does the namespace.
        prefix = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"] if namespaced else []
        out = self.tmp_path / f"{name}-{index}.out"
        err = self.tmp_path / f"{name}-{index}.err"
        with open(out, "wb") as out_handle, open(err, "wb") as err_handle:
            proc = subprocess.Popen(
                [*prefix, sys.executable, str(LAUNCHER_PATH), "--", *command],
                env=env,
                cwd=self.tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=out_handle,
                stderr=err_handle,
                # Own session: everything it starts, Ray daemons included,
                # can be found and killed by session id afterwards.
                start_new_session=True,
            )
        run = Run(proc, out, err, namespaced)
        self.runs.append(run)
        return run

    def start_program(self, argv, env: dict, name: str) -> Run:
        """Any other program, in its own session like the launchers."""
        index = len(self.runs)
        out = self.tmp_path / f"{name}-{index}.out"
        err = self.tmp_path / f"{name}-{index}.err"
        with open(out, "wb") as out_handle, open(err, "wb") as err_handle:
            proc = subprocess.Popen(
                list(argv),
                env=env,
                cwd=self.tmp_path,
                stdin=subprocess.DEVNULL,
                stdout=out_handle,
                stderr=err_handle,
                start_new_session=True,
            )
        run = Run(proc, out, err, namespaced=False)
        self.runs.append(run)
        return run

    def kill_session(self, run: Run) -> None:
        """Kill everything `run` started (e.g. a head's Ray daemons): a lost head."""
        for pid in session_pids(run.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def run(self, env: dict, command=(), timeout: float = 30, container: bool = False) -> Run:
        run = self.start(env, command, container=container)
        run.wait(timeout)
        return run

    @property
    def sessions(self) -> set:
        return {run.pid for run in self.runs}

    def cleanup(self) -> None:
        for run in self.runs:
            for pid in session_pids(run.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                run.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(session_pids(sid) for sid in self.sessions):
            time.sleep(0.1)
        for path in self.temp_dirs:
            shutil.rmtree(path, ignore_errors=True)
        leftovers = {sid: session_pids(sid) for sid in self.sessions if session_pids(sid)}
        assert not leftovers, f"processes survived cleanup: {leftovers}"


@pytest.fixture
def launchers(tmp_path):
    runs = Launchers(tmp_path)
    try:
        yield runs
    finally:
        runs.cleanup()


@pytest.fixture
def closed_port():
    """A loopback port that refuses connections for the whole test.

    Bound but never listening, so nothing else can take it meanwhile.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


class SilentHead:
    """A listening socket nobody accepts from: TCP connects, Ray never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind((SILENT_IP, 0))
        self.sock.listen(64)
        self.host = SILENT_IP
        self.port = self.sock.getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def silent_head():
    head = SilentHead()
    try:
        yield head
    finally:
        head.close()


FAKE_RAY = """#!/bin/sh
# A stand-in for the ray CLI: FAKE_RAY_MODE says what `ray start` does.
echo "$*" >> "$FAKE_RAY_LOG"
[ "$1" = stop ] && exit 0
case "$FAKE_RAY_MODE" in
  hang) exec sleep 300 ;;
  succeed) exit 0 ;;
  fail) echo "fake ray: cannot start" >&2; exit 1 ;;
  join|join-gcs-lost)
    echo "2026-01-01 00:00:00,000 SUCC scripts.py:1251 -- Ray runtime started."
    # Like Ray's own handler: SIGTERM ends `ray start --block` with exit 1.
    trap 'echo "fake ray: SIGTERM"; exit ${FAKE_RAY_TERM_CODE:-1}' TERM
    while [ ! -e "$FAKE_RAY_RELEASE" ]; do sleep 0.05; done
    if [ "$FAKE_RAY_MODE" = join-gcs-lost ]; then
      echo "(raylet) rpc_client.h:204: Failed to connect to GCS within 60 seconds. GCS may have been killed." >&2
    fi
    exit 1 ;;
esac
echo "fake ray: unknown FAKE_RAY_MODE=$FAKE_RAY_MODE" >&2
exit 99
"""


# A stand-in for the `ray` package in the head's node-wait child (node_wait.report_nodes): the
# file FAKE_RAY_NODES says how many nodes are alive, or "hang-init"/"hang" for a Ray that never
# answers ray.init() or ray.nodes(). The trainer of a test rewrites it to lose a peer.
FAKE_RAY_PACKAGE = """
import os, time


def _state():
    with open(os.environ["FAKE_RAY_NODES"]) as handle:
        return handle.read().strip()


def init(address=None, **_):
    print("fake-ray-init", address, flush=True)
    if _state() == "hang-init":
        time.sleep(300)


def nodes():
    state = _state()
    if state.startswith("hang"):
        time.sleep(300)
    # One dead node besides the alive ones: ray.nodes() lists those too.
    return [{"Alive": True} for _ in range(int(state))] + [{"Alive": False}]


def shutdown():
    pass
"""


class FakeRay:
    def __init__(self, tmp_path: Path) -> None:
        self.bin = tmp_path / "fakebin"
        self.bin.mkdir()
        script = self.bin / "ray"
        script.write_text(FAKE_RAY)
        script.chmod(0o755)
        self.log = tmp_path / "fake-ray.log"
        self.release = tmp_path / "fake-ray-release"
        self.python = tmp_path / "fakepy"
        self.nodes = tmp_path / "fake-ray-nodes"

    def env(self, launchers: "Launchers", mode: str, nodes=None, **values: str) -> dict:
        """With `nodes` (alive count or state), the head's node-wait child imports the fake package."""
        env = launchers.env(**values)
        env["PATH"] = f"{self.bin}{os.pathsep}{env['PATH']}"
        env.update(FAKE_RAY_MODE=mode, FAKE_RAY_LOG=str(self.log), FAKE_RAY_RELEASE=str(self.release))
        if nodes is not None:
            (self.python / "ray").mkdir(parents=True, exist_ok=True)
            (self.python / "ray" / "__init__.py").write_text(FAKE_RAY_PACKAGE)
            self.nodes.write_text(str(nodes))
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(self.python), env.get("PYTHONPATH")) if p)
            env["FAKE_RAY_NODES"] = str(self.nodes)
        return env

    @property
    def calls(self) -> list:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def fake_ray(tmp_path):
    return FakeRay(tmp_path)


def head_extra_args(client_port: int) -> str:
    return " ".join(
        [
            f"--node-ip-address={HEAD_IP}",
            # No prestarted Python workers and no log monitor: the tests
            # never schedule Ray tasks, and 2 cores are shared by two nodes.
            "--num-cpus=0",
            "--include-log-monitor=false",
            "--no-monitor",  # the autoscaler's monitor; a hidden `ray start` flag
            "--object-store-memory=100000000",
            # 10001 by default: a fixed port would collide with any other Ray.
            f"--ray-client-server-port={client_port}",
            f"--dashboard-port={free_port()}",
            f"--dashboard-agent-listen-port={free_port()}",
        ]
    )


def two_node_env(launchers: "Launchers", port: int, rank: int, **extra: str) -> dict:
    """The launcher's env for rank 0 (the head) or 1 (the worker) of a real two-node Ray on this
    host: the head waits up to 90 s for the worker, the worker up to 90 s to join."""
    own = ({"RAY_NODE_WAIT_SECONDS": "90", "RAY_START_EXTRA_ARGS": head_extra_args(free_port())} if rank == 0 else
           {"RAY_JOIN_DEADLINE_SECONDS": "90", "RAY_START_EXTRA_ARGS": worker_extra_args()})
    return launchers.env(NUM_NODES="2", JOB_COMPLETION_INDEX=str(rank), RAY_HEAD_HOST=HEAD_IP, RAY_PORT=str(port),
                         RAY_TMPDIR=launchers.ray_tmpdir(), **own, **extra)


def worker_extra_args() -> str:
    return " ".join(
        [
            f"--node-ip-address={WORKER_IP}",
            "--num-cpus=0",
            "--include-log-monitor=false",
            "--object-store-memory=100000000",
            # The head's agent holds the default (52365) when ray[default] is
            # installed; a second node on the same host needs another.
            f"--dashboard-agent-listen-port={free_port()}",
        ]
    )


def python_command(code: str) -> list:
    return [sys.executable, "-c", code]


# --------------------------------------------------------------------------
# The launcher as a program, against a real Ray
# --------------------------------------------------------------------------


def start_unrelated_ray(launchers: Launchers) -> str:
    """A plain Ray head on UNRELATED_IP, as another user's cluster on the host."""
    port = free_port()
    env = launchers.env(RAY_TMPDIR=launchers.ray_tmpdir())
    started = launchers.start_program(
        [
            RAY_CLI,
            "start",
            "--head",
            f"--port={port}",
            *shlex.split(head_extra_args(free_port()).replace(HEAD_IP, UNRELATED_IP)),
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        env,
        name="unrelated",
    )
    assert started.wait(timeout=60) == 0, started.describe()
    return f"{UNRELATED_IP}:{port}"


def node_ips_of(launchers: Launchers, address: str) -> list:
    """Every node (alive or dead) that ever registered with the cluster at address."""
    probe = subprocess.run(
        python_command(
            "import json, ray\n"
            f"ray.init(address={address!r}, log_to_driver=False)\n"
            "print(json.dumps(sorted(n['NodeManagerAddress'] for n in ray.nodes())))\n"
        ),
        env=launchers.env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert probe.returncode == 0, probe.stderr
    return json.loads(probe.stdout.strip().splitlines()[-1])


# The trainer of the two-node test: a plain ray.init(), as most trainers do.
REPORTING_TRAINER = (
    "import os, ray\n"
    "ray.init(log_to_driver=False)\n"
    "nodes = sorted(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive'])\n"
    "gcs = ray.get_runtime_context().gcs_address\n"
    "print(f'trained-ok pid={os.getpid()} gcs={gcs} nodes={\",\".join(nodes)}', flush=True)\n"
)


@needs_ray
def test_two_node_cluster_ignores_another_ray_on_the_host_and_worker_exits_6_when_head_is_lost(launchers):
    # Another cluster on the same host, and its address inherited in
    # RAY_ADDRESS: with ray.init(address="auto") the head would have counted
    # (and the trainer used) that cluster instead of its own.
    unrelated = start_unrelated_ray(launchers)
    port = free_port()
    token = "run-token-0123456789abcdef"
    worker = launchers.start(
        two_node_env(
            launchers, port, 1,
            RAY_ADDRESS=unrelated,
            RAY_AUTH_TOKEN=token,
            # Ray's own setting (60 s by default): how long the raylet keeps
            # trying a GCS that went away before it exits.
            RAY_gcs_rpc_server_reconnect_timeout_s="2",
        ),
        # Workers ignore the command; it must never run there.
        python_command("raise SystemExit('worker ran the training command')"),
        name="worker",
        container=True,
    )
    # The worker starts first, as it may in a cluster: it must keep retrying
    # until the head exists.
    worker.wait_for_output("not reachable yet", timeout=10)
    head = launchers.start(
        two_node_env(
            launchers, port, 0,
            RAY_ADDRESS=unrelated,
            RAY_AUTH_TOKEN=token,
        ),
        python_command(REPORTING_TRAINER),
        name="head",
        container=True,
    )
    launcher_pid = 1 if head.namespaced else head.pid

    assert head.wait(timeout=90) == 0, head.describe() + "\n" + worker.describe()
    # The launcher's child, not the launcher (which stays to tell a lost peer
    # from a failure). Its plain ray.init() reached this run's cluster
    # (RAY_ADDRESS from the launcher), authenticated with the token, and saw
    # both nodes.
    trained = re.search(rf"trained-ok pid=(\d+) gcs={re.escape(HEAD_IP)}:{port} nodes={HEAD_IP},{WORKER_IP}\n",
                        head.stdout)
    assert trained is not None and int(trained.group(1)) != launcher_pid, head.describe()
    assert f"ignoring the inherited RAY_ADDRESS={unrelated}; this run's Ray is at {HEAD_IP}:{port}" in head.stdout
    assert f"connected to Ray at {HEAD_IP}:{port}; waiting up to 90 s for 2 nodes" in head.stdout
    assert (
        "[ray-launcher rank=0] 2 of 2 Ray nodes alive; starting training with "
        f"RAY_ADDRESS={HEAD_IP}:{port}"
    ) in head.stdout
    assert "Ray token authentication on (token from RAY_AUTH_TOKEN)" in head.stdout
    assert token not in head.stdout + head.stderr + worker.stdout + worker.stderr
    assert (
        f"[ray-launcher rank=1] head reachable; joining: ray start --address={HEAD_IP}:{port} --block"
        in worker.stdout
    )
    assert f"[ray-launcher rank=1] joined the Ray cluster at {HEAD_IP}:{port}" in worker.stdout
    # And the other cluster never saw either of this run's nodes.
    assert node_ips_of(launchers, unrelated) == [UNRELATED_IP]

    # The head's pod is gone (its Ray too: killed with the namespace, or here).
    launchers.kill_session(head)
    assert worker.wait(timeout=60) == 6, worker.describe()
    assert re.search(
        rf"\[ray-launcher rank=1\] ERROR: lost the Ray head {re.escape(HEAD_IP)}:{port}: "
        r"`ray start --block` exited with code 1 and "
        rf"(Ray reported it lost the GCS|its port no longer answers \(tried for {FAST_WAITS['HEAD_PROBE_SECONDS']:g} s\)); "
        r"exiting 6 \(head lost, a disruption\)",
        worker.stderr,
    ), worker.describe()
    assert "worker ran the training command" not in worker.stderr


@needs_ray
def test_head_exits_9_when_its_trainer_fails_after_a_real_worker_node_was_lost(launchers, tmp_path):
    # Real Ray at its default health checks: the worker's Ray is killed (its pod lost), the trainer
    # fails right after, before the GCS has declared the node dead; the head's watch sees it.
    port = free_port()
    go = tmp_path / "go"
    worker = launchers.start(
        two_node_env(launchers, port, 1),
        ["true"],
        name="worker",
        container=True,
    )
    trainer = python_command(
        "import os, sys, time\n"
        "print('training', flush=True)\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    time.sleep(0.1)\n"
        "sys.exit(1)\n"
    )
    head = launchers.start(
        two_node_env(launchers, port, 0),
        trainer,
        name="head",
        container=True,
    )
    head.wait_for_output("\ntraining\n", timeout=90)

    launchers.kill_session(worker)
    lost = time.monotonic()
    go.touch()

    assert head.wait(timeout=120) == 9, head.describe() + "\n" + worker.describe()
    elapsed = time.monotonic() - lost
    assert "[ray-launcher rank=0] training command exited with code 1" in head.stdout
    assert (
        "[ray-launcher rank=0] ERROR: the training command exited with code 1 and only 1 of 2 Ray nodes "
        "are alive: a peer was lost; exiting 9 (peer lost, a disruption)"
    ) in head.stderr
    # Within the default watch (70 s) plus the time to connect.
    assert elapsed < 85, f"the lost peer took {elapsed:.1f} s to show"
    print(f"lost peer seen {elapsed:.1f} s after the worker's Ray was killed")


# The trainer of the token test: three clients of its own cluster, at the
# address the launcher passes. Ray's own client retries (20 by default, about
# a second each) are cut to 2 so a refused client gives up quickly.
AUTH_PROBING_TRAINER = """
import os, subprocess, sys
code = (
    "import ray\\n"
    f"ray.init(address={os.environ['RAY_ADDRESS']!r}, log_to_driver=False)\\n"
    "print('nodes', len(ray.nodes()))\\n"
)
def client(**auth):
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_")}
    env.update(auth, RAY_NUM_REDIS_GET_RETRIES="2")
    return subprocess.Popen([sys.executable, "-c", code], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
clients = {
    "no-token": client(),
    "wrong-token": client(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="not-the-token"),
    "the-token": client(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=os.environ["RAY_AUTH_TOKEN"]),
}
for name, proc in clients.items():
    out, err = proc.communicate(timeout=90)
    refused = "InvalidAuthToken" in err
    print(f"client {name}: exit={proc.returncode} refused={refused} {out.strip()}", flush=True)
"""


@needs_ray
def test_token_authentication_refuses_clients_without_the_token(launchers):
    token = "ray-token-from-the-secret-5f2c"
    head = launchers.run(
        launchers.env(
            NUM_NODES="1",
            JOB_COMPLETION_INDEX="0",
            RAY_HEAD_HOST=HEAD_IP,
            RAY_PORT=str(free_port()),
            RAY_NODE_WAIT_SECONDS="60",
            RAY_TMPDIR=launchers.ray_tmpdir(),
            RAY_START_EXTRA_ARGS=head_extra_args(free_port()),
            RAY_AUTH_TOKEN=token,
        ),
        python_command(AUTH_PROBING_TRAINER),
        timeout=120,
        container=True,
    )

    assert head.proc.returncode == 0, head.describe()
    # The launcher itself connected with the token (the node count needs it).
    assert "[ray-launcher rank=0] Ray token authentication on (token from RAY_AUTH_TOKEN)" in head.stdout
    assert "1 of 1 Ray nodes alive; starting training" in head.stdout
    assert "client no-token: exit=1 refused=True" in head.stdout, head.describe()
    assert "client wrong-token: exit=1 refused=True" in head.stdout, head.describe()
    assert "client the-token: exit=0 refused=False nodes 1" in head.stdout, head.describe()
    assert token not in head.stdout + head.stderr


@needs_ray
def test_head_gives_up_when_workers_do_not_join(launchers, tmp_path):
    foreign = [] if pid_namespaces_work() else foreign_ray_daemons(launchers.sessions)
    if foreign:
        pytest.skip(f"Ray daemons {foreign} run on this machine; the launcher's `ray stop` would kill them")
    trained = tmp_path / "trained"
    head = launchers.run(
        launchers.env(
            NUM_NODES="2",
            JOB_COMPLETION_INDEX="0",
            RAY_PORT=str(free_port()),
            RAY_NODE_WAIT_SECONDS="1",
            RAY_TMPDIR=launchers.ray_tmpdir(),
            RAY_START_EXTRA_ARGS=head_extra_args(free_port()),
        ),
        python_command(f"open({str(trained)!r}, 'w').close()"),
        timeout=60,
        container=True,
    )

    assert head.proc.returncode == 3, head.describe()
    assert (
        "[ray-launcher rank=0] ERROR: only 1 of 2 Ray nodes joined within 1 s; "
        "check the worker pods' logs"
    ) in head.stderr
    assert not trained.exists(), "the training command ran without all nodes"
    # The launcher stopped the Ray head it started before exiting.
    assert "(ray stop --force)" in head.stdout
    assert re.search(r"Stopped all \d+ Ray processes", head.stdout), head.describe()
    assert session_pids(head.pid) == []


def test_worker_exits_4_when_head_is_unreachable(launchers, closed_port):
    started = time.monotonic()
    worker = launchers.run(
        launchers.env(
            NUM_NODES="2",
            JOB_COMPLETION_INDEX="1",
            RAY_HEAD_HOST="127.0.0.1",
            RAY_PORT=str(closed_port),
            RAY_JOIN_DEADLINE_SECONDS="1",
        ),
        ["true"],
    )
    elapsed = time.monotonic() - started

    assert worker.proc.returncode == 4, worker.describe()
    assert (
        f"[ray-launcher rank=1] ERROR: the Ray head 127.0.0.1:{closed_port} was not "
        "reachable within 1 s (last error: [Errno 111] Connection refused)"
    ) in worker.stderr
    assert f"head 127.0.0.1:{closed_port} not reachable yet" in worker.stdout
    assert 1.0 <= elapsed < 10, f"deadline of 1 s took {elapsed:.1f} s"


# --------------------------------------------------------------------------
# Every wait is bounded (a fake `ray` where real Ray would take minutes)
# --------------------------------------------------------------------------


def test_head_gives_up_when_ray_start_hangs(launchers, fake_ray, tmp_path):
    trained = tmp_path / "trained"
    started = time.monotonic()
    head = launchers.run(
        fake_ray.env(
            launchers,
            "hang",
            NUM_NODES="1",
            JOB_COMPLETION_INDEX="0",
            RAY_HEAD_HOST="127.0.0.1",
            RAY_START_TIMEOUT_SECONDS="1",
        ),
        python_command(f"open({str(trained)!r}, 'w').close()"),
        container=True,
    )
    elapsed = time.monotonic() - started

    assert head.proc.returncode == 7, head.describe()
    assert (
        "[ray-launcher rank=0] ERROR: `ray start --head` did not finish within 1 s "
        "(RAY_START_TIMEOUT_SECONDS); giving up"
    ) in head.stderr
    # Whatever the hung `ray start` had started is stopped.
    assert fake_ray.calls[-1] == "stop --force"
    assert not trained.exists()
    assert elapsed < 15, f"a 1 s timeout took {elapsed:.1f} s"


def test_worker_gives_up_when_ray_start_never_joins(launchers, fake_ray, silent_head):
    started = time.monotonic()
    worker = launchers.run(
        fake_ray.env(
            launchers,
            "hang",
            NUM_NODES="2",
            JOB_COMPLETION_INDEX="1",
            RAY_HEAD_HOST=silent_head.host,
            RAY_PORT=str(silent_head.port),
            RAY_START_TIMEOUT_SECONDS="1",
        ),
        ["true"],
        container=True,
    )
    elapsed = time.monotonic() - started

    assert worker.proc.returncode == 7, worker.describe()
    assert (
        f"[ray-launcher rank=1] ERROR: `ray start` did not join the Ray cluster at {silent_head.address} "
        "within 1 s (RAY_START_TIMEOUT_SECONDS); stopping it and giving up"
    ) in worker.stderr
    assert fake_ray.calls == [f"start --address={silent_head.address} --block --disable-usage-stats"]
    assert elapsed < 15, f"a 1 s timeout took {elapsed:.1f} s"


@needs_ray
def test_head_gives_up_when_its_ray_never_answers(launchers, fake_ray, silent_head, tmp_path):
    # `ray start --head` "succeeds" but nothing answers at the head address:
    # the real ray.init would keep retrying; the launcher abandons it. The
    # inherited RAY_ADDRESS (another cluster) is not tried instead.
    trained = tmp_path / "trained"
    started = time.monotonic()
    head = launchers.run(
        fake_ray.env(
            launchers,
            "succeed",
            NUM_NODES="1",
            JOB_COMPLETION_INDEX="0",
            RAY_HEAD_HOST=silent_head.host,
            RAY_PORT=str(silent_head.port),
            RAY_CONNECT_TIMEOUT_SECONDS="3",
            RAY_ADDRESS="127.0.0.9:6379",
        ),
        python_command(f"open({str(trained)!r}, 'w').close()"),
        timeout=60,
        container=True,
    )
    elapsed = time.monotonic() - started

    assert head.proc.returncode == 8, head.describe()
    assert f"ignoring the inherited RAY_ADDRESS=127.0.0.9:6379; this run's Ray is at {silent_head.address}" in (
        head.stdout
    )
    assert f"Ray head up; connecting to it at {silent_head.address} (up to 3 s)" in head.stdout
    assert (
        f"[ray-launcher rank=0] ERROR: cannot connect to this run's Ray head at {silent_head.address}: "
        "no connection within 3 s (RAY_CONNECT_TIMEOUT_SECONDS); giving up"
    ) in head.stderr
    assert fake_ray.calls[-1] == "stop --force"
    assert not trained.exists()
    assert elapsed < 20, f"a 3 s timeout took {elapsed:.1f} s"


@pytest.mark.parametrize(
    ("mode", "head_goes_away", "code", "message"),
    [
        # The raylet said so (production: `ray start --block` prints its log's tail).
        ("join-gcs-lost", False, 6, "exited with code 1 and Ray reported it lost the GCS; exiting 6"),
        # Nothing said, but the head's port is gone.
        ("join", True, 6, "exited with code 1 and its port no longer answers (tried for {probe:g} s); exiting 6"),
        # The head is fine: this node failed, and that is not a disruption.
        ("join", False, 1, "exited with code 1 while the head 127.0.0.5:{port} is still reachable"),
        ("fail", False, 5, "`ray start` exited with code 1 before joining the Ray cluster at 127.0.0.5:{port}"),
    ],
)
def test_worker_exit_code_tells_a_lost_head_from_a_failure(
    launchers, fake_ray, silent_head, mode, head_goes_away, code, message
):
    if not head_goes_away:
        fake_ray.release.touch()  # `ray start --block` fails right after joining
    worker = launchers.start(
        fake_ray.env(
            launchers,
            mode,
            NUM_NODES="2",
            JOB_COMPLETION_INDEX="1",
            RAY_HEAD_HOST=silent_head.host,
            RAY_PORT=str(silent_head.port),
        ),
        ["true"],
        container=True,
    )
    if head_goes_away:
        worker.wait_for_output("joined the Ray cluster", timeout=10)
        silent_head.close()
        fake_ray.release.touch()

    assert worker.wait(timeout=20) == code, worker.describe()
    assert message.format(port=silent_head.port, probe=FAST_WAITS["HEAD_PROBE_SECONDS"]) in worker.stdout + worker.stderr
    # Ray's own output is passed through.
    assert ("Ray runtime started." in worker.stdout) == mode.startswith("join")


@pytest.mark.parametrize("ray_code", [1, 0])
def test_sigterm_stops_a_joined_worker_with_143(launchers, fake_ray, silent_head, ray_code):
    worker = launchers.start(
        fake_ray.env(
            launchers,
            "join",
            NUM_NODES="2",
            JOB_COMPLETION_INDEX="1",
            RAY_HEAD_HOST=silent_head.host,
            RAY_PORT=str(silent_head.port),
            FAKE_RAY_TERM_CODE=str(ray_code),
        ),
        ["true"],
        container=True,
    )
    worker.wait_for_output("joined the Ray cluster", timeout=10)

    os.kill(worker.launcher_pid(), signal.SIGTERM)

    # Forwarded to `ray start --block`, which exits 1 (as Ray does) or 0; the pod reports the
    # signal, never a success (a succeeded index of the Indexed Job is not recreated), and no
    # head loss.
    assert worker.wait(timeout=10) == 128 + signal.SIGTERM, worker.describe()
    assert "fake ray: SIGTERM" in worker.stdout
    assert f"`ray start --block` exited with code {ray_code} after SIGTERM" in worker.stdout
    assert "lost the Ray head" not in worker.stderr


@pytest.mark.skipif(not pid_namespaces_work(), reason="needs PID namespaces (unshare, root)")
def test_sigterm_stops_a_waiting_launcher_running_as_pid_1(launchers, closed_port):
    # The kernel drops signals with the default action that are sent to a
    # namespace's PID 1: without its own handler the launcher would ignore
    # the kubelet's SIGTERM while it waits, until the grace period's SIGKILL.
    worker = launchers.start(
        launchers.env(
            NUM_NODES="2",
            JOB_COMPLETION_INDEX="1",
            RAY_HEAD_HOST="127.0.0.1",
            RAY_PORT=str(closed_port),
            RAY_JOIN_DEADLINE_SECONDS="60",
        ),
        ["true"],
        container=True,
    )
    worker.wait_for_output("not reachable yet", timeout=10)

    os.kill(worker.launcher_pid(), signal.SIGTERM)

    assert worker.wait(timeout=5) == 128 + signal.SIGTERM, worker.describe()


def test_rank_comes_from_the_hostname_ordinal(launchers, closed_port):
    worker = launchers.run(
        launchers.env(
            NUM_NODES="4",
            HOSTNAME="training-3",
            RAY_HEAD_HOST="127.0.0.1",
            RAY_PORT=str(closed_port),
            RAY_JOIN_DEADLINE_SECONDS="0",
        ),
        ["true"],
    )

    assert worker.proc.returncode == 4, worker.describe()
    assert "[ray-launcher rank=3] worker of 4; ignoring the training command" in worker.stdout


@pytest.mark.parametrize(
    ("variables", "message"),
    [
        ({"NUM_NODES": "two"}, "NUM_NODES must be an integer, got 'two'"),
        ({"NUM_NODES": "0"}, "NUM_NODES must be >= 1, got '0'"),
        ({"NUM_NODES": "-2"}, "NUM_NODES must be >= 1, got '-2'"),
        ({"NUM_NODES": "2", "RAY_PORT": "70000"}, "RAY_PORT must be <= 65535, got '70000'"),
        ({"NUM_NODES": "2", "RAY_NODE_WAIT_SECONDS": "-5"}, "RAY_NODE_WAIT_SECONDS must be >= 0, got '-5'"),
        ({"NUM_NODES": "2", "RAY_JOIN_DEADLINE_SECONDS": "soon"}, "RAY_JOIN_DEADLINE_SECONDS must be an integer"),
        ({"NUM_NODES": "2", "JOB_COMPLETION_INDEX": "x"}, "JOB_COMPLETION_INDEX must be an integer, got 'x'"),
        ({"NUM_NODES": "2", "JOB_COMPLETION_INDEX": "2"}, "rank 2 is out of range for NUM_NODES=2"),
        ({"NUM_NODES": "2", "JOB_COMPLETION_INDEX": "1"}, "RAY_HEAD_HOST is required on workers (rank 1)"),
        ({"NUM_NODES": "1"}, "RAY_HEAD_HOST is required on the head too (or --node-ip-address in"),
        ({"NUM_NODES": "1", "RAY_HEAD_HOST": "h", "RAY_START_TIMEOUT_SECONDS": "0"},
         "RAY_START_TIMEOUT_SECONDS must be >= 1, got '0'"),
        ({"NUM_NODES": "1", "RAY_HEAD_HOST": "h", "RAY_CONNECT_TIMEOUT_SECONDS": "1m"},
         "RAY_CONNECT_TIMEOUT_SECONDS must be an integer, got '1m'"),
        ({"NUM_NODES": "1", "RAY_HEAD_HOST": "h", "RAY_PEER_CHECK_SECONDS": "-1"},
         "RAY_PEER_CHECK_SECONDS must be >= 0, got '-1'"),
        ({"NUM_NODES": "1", "RAY_HEAD_HOST": "h", "RAY_AUTH_TOKEN": " "},
         "RAY_AUTH_TOKEN is set but empty; check the Secret it comes from"),
        ({"NUM_NODES": "1", "RAY_HEAD_HOST": "h", "RAY_AUTH_TOKEN": "t", "RAY_AUTH_MODE": "disabled"},
         "RAY_AUTH_TOKEN is set but RAY_AUTH_MODE='disabled'; unset RAY_AUTH_MODE or set it to 'token'"),
        ({"NUM_NODES": "1", "RAY_HEAD_HOST": "h", "RAY_AUTH_MODE": "on"},
         "RAY_AUTH_MODE must be 'token' or 'disabled', got 'on'"),
    ],
)
def test_invalid_environment_exits_2_naming_the_variable(launchers, variables, message):
    values = {"JOB_COMPLETION_INDEX": "0", **variables}
    run = launchers.run(launchers.env(**values), ["true"])

    assert run.proc.returncode == 2, run.describe()
    assert "ERROR: " + message in run.stderr
    assert run.stdout == ""


def test_unparseable_hostname_exits_2(launchers):
    run = launchers.run(launchers.env(NUM_NODES="2", HOSTNAME="trainer"), ["true"])

    assert run.proc.returncode == 2, run.describe()
    assert "[ray-launcher rank=?] ERROR: cannot determine the rank" in run.stderr
    assert "HOSTNAME 'trainer'" in run.stderr


def test_head_without_a_command_exits_2_with_usage(launchers):
    run = launchers.run(launchers.env(NUM_NODES="1", JOB_COMPLETION_INDEX="0", RAY_HEAD_HOST="127.0.0.1"), [])

    assert run.proc.returncode == 2, run.describe()
    assert "no training command given after '--'" in run.stderr
    assert "usage: ray_launcher.py -- <training command>" in run.stderr


@pytest.mark.parametrize(("rank", "sig"), [("0", signal.SIGTERM), ("1", signal.SIGINT)])
def test_existing_marker_idles_without_ray_until_signalled(launchers, tmp_path, rank, sig):
    marker = tmp_path / "fsx" / "DONE"
    marker.parent.mkdir()
    marker.write_text("completed_at: 2026-01-02T03:04:05Z\ncommand: python train.py\n")
    trained = tmp_path / "trained"
    run = launchers.start(
        launchers.env(
            NUM_NODES="2",
            JOB_COMPLETION_INDEX=rank,
            RAY_HEAD_HOST="127.0.0.1",
            RUN_DONE_MARKER=str(marker),
        ),
        python_command(f"open({str(trained)!r}, 'w').close()"),
        container=True,  # PID 1 drops signals it has no handler for
    )
    run.wait_for_output("run already completed", timeout=10)
    time.sleep(0.3)
    assert run.proc.poll() is None, "must idle, not exit (restartPolicy Always would loop)"

    os.kill(run.launcher_pid(), sig)

    assert run.wait(timeout=10) == 0, run.describe()
    assert (
        f"[ray-launcher rank={rank}] run already completed (marker {marker}: "
        "completed_at: 2026-01-02T03:04:05Z | command: python train.py)"
    ) in run.stdout
    assert f"received {sig.name}; exiting" in run.stdout
    assert "ray start" not in run.stdout
    assert not trained.exists()


@needs_ray
def test_head_writes_marker_after_success_and_restart_idles(launchers, tmp_path):
    marker = tmp_path / "fsx" / "runs" / "r1" / "DONE"  # parents do not exist yet
    command = python_command("import os; print(f'trained-ok pid={os.getpid()}')")
    env = launchers.env(
        NUM_NODES="1",
        JOB_COMPLETION_INDEX="0",
        RAY_PORT=str(free_port()),
        RAY_NODE_WAIT_SECONDS="60",
        RAY_TMPDIR=launchers.ray_tmpdir(),
        RAY_START_EXTRA_ARGS=head_extra_args(free_port()),
        RUN_DONE_MARKER=str(marker),
    )

    head = launchers.run(env, command, timeout=60, container=True)

    assert head.proc.returncode == 0, head.describe()
    trained = re.search(r"trained-ok pid=(\d+)", head.stdout)
    assert trained is not None, head.describe()
    # With a marker the trainer runs as a child, so the launcher can write
    # the marker after it succeeds.
    assert int(trained.group(1)) != (1 if head.namespaced else head.pid)
    content = marker.read_text()
    assert re.fullmatch(
        r"completed_at: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\ncommand: (.+)\n", content
    ), content
    assert content.endswith(f"command: {shlex.join(command)}\n")
    assert f"training command succeeded; wrote {marker}" in head.stdout

    # The StatefulSet restarts the container: now it must not train again.
    restarted = launchers.start(env, command, container=True)
    restarted.wait_for_output("run already completed", timeout=10)
    os.kill(restarted.launcher_pid(), signal.SIGTERM)
    assert restarted.wait(timeout=10) == 0, restarted.describe()
    assert re.search(r"^trained-ok", restarted.stdout, re.MULTILINE) is None, restarted.describe()
    assert "starting the Ray head" not in restarted.stdout


# --------------------------------------------------------------------------
# The head after its trainer failed: a lost peer (9) or the trainer's own code
# (a fake `ray` CLI and package: the node count is a file the trainer rewrites)
# --------------------------------------------------------------------------


def peer_env(launchers: Launchers, fake_ray: FakeRay, **values: str) -> dict:
    return fake_ray.env(
        launchers,
        "succeed",
        nodes=2,
        **{"NUM_NODES": "2", "JOB_COMPLETION_INDEX": "0", "RAY_HEAD_HOST": "127.0.0.1", "RAY_NODE_WAIT_SECONDS": "10",
           **values},
    )


def failing_trainer(fake_ray: FakeRay, code: int, nodes_after: str) -> list:
    """Prints its pid, leaves the fake Ray in state `nodes_after`, exits `code`."""
    return python_command(
        "import os, sys\n"
        "print(f'trainer pid={os.getpid()}', flush=True)\n"
        f"open({str(fake_ray.nodes)!r}, 'w').write({nodes_after!r})\n"
        f"sys.exit({code})\n"
    )


def trainer_is_a_child(run: Run) -> bool:
    """Whether the trainer ran as the launcher's child, not in its place (pids as the launcher sees them)."""
    found = re.search(r"^trainer pid=(\d+)$", run.stdout, re.MULTILINE)
    assert found is not None, run.describe()
    return int(found.group(1)) != (1 if run.namespaced else run.pid)


@pytest.mark.parametrize("later", [False, True], ids=["seen-at-once", "seen-within-the-watch"])
def test_head_exits_9_when_its_trainer_fails_after_a_peer_was_lost(launchers, fake_ray, later):
    if later:
        # The trainer failed before the GCS declared the peer dead: the count drops 1 s later.
        trainer = python_command(
            "import os, subprocess, sys\n"
            "print(f'trainer pid={os.getpid()}', flush=True)\n"
            f"subprocess.Popen(['sh', '-c', 'sleep 1; echo 1 > {fake_ray.nodes}'])\n"
            "sys.exit(1)\n"
        )
        env = peer_env(launchers, fake_ray, RAY_PEER_CHECK_SECONDS="20")
    else:
        trainer = failing_trainer(fake_ray, 1, "1")
        env = peer_env(launchers, fake_ray)  # the default watch (70 s) ends at the first short count
    started = time.monotonic()
    head = launchers.run(env, trainer, timeout=40, container=True)
    elapsed = time.monotonic() - started

    assert head.proc.returncode == 9, head.describe()
    assert "[ray-launcher rank=0] 2 of 2 Ray nodes alive; starting training" in head.stdout
    assert trainer_is_a_child(head)
    assert "[ray-launcher rank=0] training command exited with code 1" in head.stdout
    watch = 20 if later else 70
    assert (
        f"[ray-launcher rank=0] asking Ray at 127.0.0.1:6379 how many of the 2 nodes are alive "
        f"(for up to {watch} s)"
    ) in head.stdout
    assert (
        "[ray-launcher rank=0] ERROR: the training command exited with code 1 and only 1 of 2 Ray nodes "
        "are alive: a peer was lost; exiting 9 (peer lost, a disruption)"
    ) in head.stderr
    # Both connections (the wait, the check) went to this run's address.
    assert head.stdout.count("fake-ray-init 127.0.0.1:6379\n") == 2, head.describe()
    assert elapsed < 15, f"a lost peer seen {'after 1 s' if later else 'at once'} took {elapsed:.1f} s"


@pytest.mark.parametrize(
    ("code", "watch", "expected", "message"),
    [
        (1, 1, 1, "2 of 2 Ray nodes are alive: the training command failed on its own"),
        # 9, which the pod failure policy ignores, never passes for a lost peer (other reserved
        # codes stay the trainer's: test_a_failed_trainer_exits_9_only_when_a_peer_is_lost).
        # A watch of 0 s counts once.
        (9, 0, 1, "the training command exited with code 9, which the launcher keeps for a lost peer or head or a "
                  "wait that ran out, and 2 of 2 Ray nodes are alive; exiting 1"),
    ],
)
def test_head_keeps_the_trainers_code_when_every_node_is_alive(launchers, fake_ray, code, watch, expected, message):
    started = time.monotonic()
    head = launchers.run(
        peer_env(launchers, fake_ray, RAY_PEER_CHECK_SECONDS=str(watch)),
        failing_trainer(fake_ray, code, "2"),
        container=True,
    )
    elapsed = time.monotonic() - started

    assert head.proc.returncode == expected, head.describe()
    assert f"[ray-launcher rank=0] training command exited with code {code}" in head.stdout
    assert f"(for up to {watch} s)" in head.stdout
    assert f"[ray-launcher rank=0] {message}" in head.stdout
    assert "peer was lost" not in head.stderr
    # It watched for the whole window before believing every node alive.
    assert watch <= elapsed < 15, f"a {watch} s watch took {elapsed:.1f} s"


@pytest.mark.parametrize(
    ("state", "code", "expected", "problem", "waits"),
    [
        ("hang", 1, 1, "no node count within {within:g} s of connecting", FAST_WAITS),
        # Not knowing is no lost peer either: a trainer's 9 is still 1.
        ("hang-init", 9, 1, "no connection within 2 s (RAY_CONNECT_TIMEOUT_SECONDS)", FAST_WAITS),
        # The same bound at the launcher's own waits (1 s of watching + its 5 s for a count).
        pytest.param("hang", 1, 1, "no node count within {within:g} s of connecting", DEFAULT_WAITS,
                     marks=pytest.mark.slow, id="hang-at-the-defaults"),
    ],
)
def test_head_keeps_the_trainers_code_when_ray_cannot_tell(launchers, fake_ray, state, code, expected, problem, waits):
    head_env = peer_env(launchers, fake_ray, RAY_PEER_CHECK_SECONDS="1", RAY_CONNECT_TIMEOUT_SECONDS="2")
    if waits is DEFAULT_WAITS:
        head_env = at_defaults(head_env)
    started = time.monotonic()
    head = launchers.run(head_env, failing_trainer(fake_ray, code, state), container=True)
    elapsed = time.monotonic() - started

    problem = problem.format(within=1 + waits["PEER_REPLY_SECONDS"])
    assert head.proc.returncode == expected, head.describe()
    assert f"[ray-launcher rank=0] ERROR: cannot count the Ray nodes at 127.0.0.1:6379: {problem}" in head.stderr
    assert ("Ray could not tell whether a peer was lost; exiting 1" in head.stdout) == (code == 9)
    # Bounded: 2 s to connect, or 1 s of watching + PEER_REPLY_SECONDS for a count, and the
    # abandoned child killed.
    assert elapsed < 10 + waits["PEER_REPLY_SECONDS"], f"a bounded check took {elapsed:.1f} s"


@pytest.mark.parametrize(("handler", "expected"), [(42, 42), (None, 128 + signal.SIGTERM), (0, 128 + signal.SIGTERM)],
                         ids=["exits-42", "no-handler", "exits-0"])
def test_sigterm_reaches_the_trainer_and_its_code_is_the_pods(launchers, fake_ray, tmp_path, handler, expected):
    """The trainer's code on a stop is the pod's, except a 0: a trainer that checkpoints and exits 0
    on SIGTERM has been stopped, not finished, and the Job's success policy (index 0) would complete
    the run; the head exits 143 instead."""
    ready = tmp_path / "ready"
    trainer = python_command(
        "import os, signal, sys, time\n"
        + (f"signal.signal(signal.SIGTERM, lambda *_: sys.exit({handler}))\n" if handler is not None else "")
        + "print(f'trainer pid={os.getpid()}', flush=True)\n"
        # Had the head asked Ray after this stop, it would have seen a lost peer.
        + f"open({str(fake_ray.nodes)!r}, 'w').write('1')\n"
        + f"open({str(ready)!r}, 'w').close()\n"
        + "time.sleep(30)\n"
    )
    head = launchers.start(peer_env(launchers, fake_ray), trainer, container=True)
    deadline = time.monotonic() + 20
    while not ready.exists() and time.monotonic() < deadline and head.proc.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), head.describe()

    os.kill(head.launcher_pid(), signal.SIGTERM)

    assert head.wait(timeout=10) == expected, head.describe()
    assert trainer_is_a_child(head)
    code = expected if handler is None else handler
    assert f"[ray-launcher rank=0] training command exited with code {code} after SIGTERM" in head.stdout
    assert ("the training command exited 0 after SIGTERM: the run was stopped, not finished; exiting 143"
            in head.stdout) == (handler == 0)
    assert "asking Ray" not in head.stdout
    assert "peer was lost" not in head.stderr


# --------------------------------------------------------------------------
# The resume contract: CKPT_DIR + RESUME=auto, through the launcher
# --------------------------------------------------------------------------


def fresh_values(last_step: int) -> list:
    """The value after each step 0..last_step of an uninterrupted run."""
    values, value = [], 0
    for step in range(last_step + 1):
        value = resume_trainer.advance(value, step)
        values.append(value)
    return values


def steps_run(output: str) -> list:
    return [(int(step), int(value)) for step, value in re.findall(r"^step (\d+) value=(\d+)$", output, re.MULTILINE)]


def checkpoints(ckpt: Path) -> dict:
    """{name: complete?} for every entry in a checkpoint directory."""
    return {entry.name: (entry / "COMPLETE").is_file() for entry in sorted(ckpt.iterdir())}


def resume_env(launchers: Launchers, ckpt: Path, **values: str) -> dict:
    return launchers.env(
        NUM_NODES="1",
        JOB_COMPLETION_INDEX="0",
        RAY_HEAD_HOST=HEAD_IP,
        RAY_PORT=str(free_port()),
        RAY_NODE_WAIT_SECONDS="60",
        RAY_TMPDIR=launchers.ray_tmpdir(),
        RAY_START_EXTRA_ARGS=head_extra_args(free_port()),
        CKPT_DIR=str(ckpt),
        RESUME="auto",
        **values,
    )


def trainer_command(last_step: int, step_seconds: float = 0.0) -> list:
    return [sys.executable, str(RESUME_TRAINER), "--last-step", str(last_step), "--step-seconds", str(step_seconds)]


@needs_ray
def test_trainer_resumes_after_sigterm_from_the_newest_complete_checkpoint(launchers, tmp_path):
    ckpt = tmp_path / "fsx" / "runs" / "exp1" / "identity-a"
    marker = tmp_path / "fsx" / "runs" / "exp1" / "DONE"
    # The StatefulSet form: the launcher stays PID 1, forwards SIGTERM to the
    # trainer and writes RUN_DONE_MARKER only after a real finish.
    first = launchers.start(
        resume_env(launchers, ckpt, RUN_DONE_MARKER=str(marker)),
        trainer_command(last_step=1000, step_seconds=0.2),
        name="first",
        container=True,
    )
    deadline = time.monotonic() + 90
    while not (ckpt / "step-0002" / "COMPLETE").exists():
        assert first.proc.poll() is None and time.monotonic() < deadline, first.describe()
        time.sleep(0.05)

    os.kill(first.launcher_pid(), signal.SIGTERM)  # mid-run, as a drain would

    assert first.wait(timeout=30) == 128 + signal.SIGTERM, first.describe()
    stopped = re.search(r"^stopping before step (\d+) \(SIGTERM\)", first.stdout, re.MULTILINE)
    assert stopped is not None, first.describe()
    last = int(stopped.group(1)) - 1
    assert last >= 2
    expected = fresh_values(last + 3)
    assert "resume: no complete checkpoint" in first.stdout
    assert steps_run(first.stdout) == [(step, expected[step]) for step in range(last + 1)]
    assert checkpoints(ckpt) == {f"step-{step:04d}": True for step in range(last + 1)}
    assert "[ray-launcher rank=0] training command exited with code 143" in first.stdout
    assert not marker.exists(), "a run stopped by SIGTERM is not done"

    # A newer checkpoint that was being written when its writer died: no
    # COMPLETE marker, truncated state. It must be ignored, then replaced.
    half = ckpt / f"step-{last + 1:04d}"
    half.mkdir()
    (half / "state.json").write_text('{"step": ')

    second = launchers.run(
        resume_env(launchers, ckpt, RUN_DONE_MARKER=str(marker)),
        trainer_command(last_step=last + 3),
        timeout=120,
        container=True,
    )

    assert second.proc.returncode == 0, second.describe()
    assert f"resume: ignoring step-{last + 1:04d} (no COMPLETE marker" in second.stdout
    assert (
        f"resume: from step-{last:04d} value={expected[last]}; starting at step {last + 1}" in second.stdout
    ), second.describe()
    # Exactly the missing steps, and the same values as an uninterrupted run.
    assert steps_run(second.stdout) == [(step, expected[step]) for step in range(last + 1, last + 4)]
    assert f"finished at step {last + 3} value={expected[last + 3]}" in second.stdout
    assert checkpoints(ckpt) == {f"step-{step:04d}": True for step in range(last + 4)}
    assert json.loads((ckpt / f"step-{last + 1:04d}" / "state.json").read_text()) == {
        "step": last + 1,
        "value": expected[last + 1],
    }
    assert marker.exists()


@needs_ray
def test_trainer_with_another_checkpoint_dir_starts_from_step_0(launchers, tmp_path):
    experiment = tmp_path / "fsx" / "runs" / "exp1"
    # The old identity's run got to step 5 ...
    old = experiment / "identity-a"
    old.mkdir(parents=True)
    for step, value in enumerate(fresh_values(5)):
        resume_trainer.save_checkpoint(old, step, value)
    before = checkpoints(old)
    # ... and a changed model path gives the run another identity.
    new = experiment / "identity-b"

    head = launchers.run(resume_env(launchers, new), trainer_command(last_step=1), timeout=120, container=True)

    assert head.proc.returncode == 0, head.describe()
    assert f"resume: no complete checkpoint in {new} (RESUME=auto); starting at step 0" in head.stdout
    expected = fresh_values(1)
    assert steps_run(head.stdout) == [(0, expected[0]), (1, expected[1])]
    assert checkpoints(new) == {"step-0000": True, "step-0001": True}
    assert checkpoints(old) == before


# --------------------------------------------------------------------------
# The program as the pod gets it
# --------------------------------------------------------------------------


def test_the_launcher_runs_from_exactly_the_files_its_configmap_mounts(tmp_path):
    """The rendered pod's /scripts, rebuilt from the rendered objects alone: each ConfigMap key of the
    scripts volume written to the path the volume maps it to (the launcher and its package
    _ray_launcher/). The head runs the rendered command from there, away from the repo, with
    PYTHONSAFEPATH set (no script directory on sys.path, as an image may set it), and gets as far as
    its node-wait child (the entry script again, from the mount) importing `ray`, which a stand-in
    refuses: every part loaded from the mount."""
    docs = rendered("p5").manifests
    job = next(d for d in docs if d["kind"] == "Job" and d["metadata"]["name"] == "rltrain-multinode")
    pod = job["spec"]["template"]["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == "scripts"]
    data = {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"}
    scripts = tmp_path / "scripts"
    for source in volume["projected"]["sources"]:
        for item in source["configMap"]["items"]:
            path = scripts / item["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(data[source["configMap"]["name"]][item["key"]])
    assert sorted(p.relative_to(scripts).as_posix() for p in scripts.rglob("*.py")) == sorted(
        ["ray_launcher.py", "resume_wrapper.py", "checkpoint_complete.py", "_ray_launcher/__init__.py",
         *(f"_ray_launcher/{p.name}" for p in (LAUNCHER_PATH.parent / "_ray_launcher").glob("*.py")
           if p.name != "__init__.py")])
    [trainer] = [c for c in pod["containers"] if c["name"] == "trainer"]
    command = [arg.replace("/scripts/", f"{scripts}/") for arg in trainer["command"]]
    assert command[:2] == ["python3", f"{scripts}/ray_launcher.py"]
    bin_dir, stand_in = tmp_path / "bin", tmp_path / "site"
    (bin_dir).mkdir()
    (bin_dir / "ray").write_text("#!/bin/sh\necho \"stand-in ray $*\"\n")
    (bin_dir / "ray").chmod(0o755)
    (stand_in / "ray").mkdir(parents=True)
    (stand_in / "ray" / "__init__.py").write_text("raise ImportError('stand-in: no Ray here')\n")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHONPATH": str(stand_in), "PYTHONSAFEPATH": "1",
           "NUM_NODES": "2", "JOB_COMPLETION_INDEX": "0", "RAY_HEAD_HOST": "127.0.0.1"}
    run = subprocess.run([sys.executable, *command[1:]], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)

    assert run.returncode == launcher.EXIT_RAY_CONNECT_FAILED, run.stdout + run.stderr
    assert "stand-in ray start --head --port=6379" in run.stdout
    assert f"cannot import ray in {sys.executable}: stand-in: no Ray here" in run.stderr
    assert "stand-in ray stop --force" in run.stdout


# --------------------------------------------------------------------------
# The pure parts, imported
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "rank"),
    [
        ({"JOB_COMPLETION_INDEX": "2", "HOSTNAME": "rltrain-run-0-x7k2p"}, 2),
        ({"JOB_COMPLETION_INDEX": "0", "HOSTNAME": "training-5"}, 0),
        ({"HOSTNAME": "training-3"}, 3),
        ({"HOSTNAME": "rl-run-worker-12"}, 12),
    ],
)
def test_parse_rank(env, rank):
    assert launcher.config.parse_rank(env) == rank


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"HOSTNAME": "training"}, "HOSTNAME 'training' does not end in -<ordinal>"),
        ({}, "HOSTNAME '' does not end in -<ordinal>"),
        ({"JOB_COMPLETION_INDEX": "", "HOSTNAME": "training-1"}, "JOB_COMPLETION_INDEX must be an integer, got ''"),
        ({"JOB_COMPLETION_INDEX": "1.5"}, "JOB_COMPLETION_INDEX must be an integer, got '1.5'"),
    ],
)
def test_parse_rank_rejects(env, message):
    with pytest.raises(launcher.common.ConfigError, match=re.escape(message)):
        launcher.config.parse_rank(env)


def test_load_config_defaults():
    cfg = launcher.config.load_config({"NUM_NODES": "1", "JOB_COMPLETION_INDEX": "0", "RAY_HEAD_HOST": "run-0.svc"})

    assert cfg == launcher.config.Config(
        num_nodes=1,
        rank=0,
        head_host="run-0.svc",
        port=6379,
        node_wait_seconds=300,
        join_deadline_seconds=600,
        done_marker=None,
        extra_start_args=(),
        ray_address="run-0.svc:6379",
        start_timeout_seconds=120,
        connect_timeout_seconds=60,
        auth_mode="disabled",
        peer_check_seconds=70,
    )
    assert cfg.is_head


@pytest.mark.parametrize(
    ("env", "address"),
    [
        ({"RAY_HEAD_HOST": "run-0.svc"}, "run-0.svc:6379"),
        # Where `ray start --head` was told to bind wins, in either spelling.
        ({"RAY_HEAD_HOST": "run-0.svc", "RAY_START_EXTRA_ARGS": "--node-ip-address=10.0.0.5"}, "10.0.0.5:6379"),
        ({"RAY_START_EXTRA_ARGS": "--node-ip-address 10.0.0.6 --num-cpus=1"}, "10.0.0.6:6379"),
        ({"RAY_HEAD_HOST": "fd00::5", "RAY_PORT": "7000"}, "[fd00::5]:7000"),
    ],
)
def test_head_connects_to_an_explicit_address(env, address):
    cfg = launcher.config.load_config({"NUM_NODES": "2", "JOB_COMPLETION_INDEX": "0", **env})

    assert cfg.ray_address == address


@pytest.mark.parametrize(
    ("env", "mode"),
    [
        ({}, "disabled"),
        ({"RAY_AUTH_TOKEN": "s3cret"}, "token"),
        ({"RAY_AUTH_TOKEN": "s3cret", "RAY_AUTH_MODE": "Token"}, "token"),
        # A token file named by RAY_AUTH_TOKEN_PATH: the operator's choice.
        ({"RAY_AUTH_MODE": "token"}, "token"),
        ({"RAY_AUTH_MODE": "disabled"}, "disabled"),
    ],
)
def test_auth_mode(env, mode):
    assert launcher.auth.auth_mode(env) == mode


def test_exit_codes_are_distinct_module_constants():
    codes = {name: value for name, value in vars(launcher).items() if name.startswith("EXIT_")}

    assert codes == {
        "EXIT_USAGE": 2,
        "EXIT_NODES_TIMEOUT": 3,
        "EXIT_HEAD_UNREACHABLE": 4,
        "EXIT_RAY_START_FAILED": 5,
        "EXIT_HEAD_LOST": 6,
        "EXIT_RAY_START_TIMEOUT": 7,
        "EXIT_RAY_CONNECT_FAILED": 8,
        "EXIT_PEER_LOST": 9,
        "EXIT_NO_PROGRESS": 10,
        "EXIT_NOT_FOUND": 127,
    }
    # None of them can be mistaken for a signal's 128+N.
    assert all(code < 128 for code in codes.values())
    # 10 is the resume wrapper's, passed on by the head.
    from components.scripts import resume_wrapper
    assert launcher.EXIT_NO_PROGRESS == resume_wrapper.EXIT_NO_PROGRESS


def test_pulumi_program_imports_the_exit_codes_without_ray():
    # The Pulumi program maps these codes in the pod failure policy; importing
    # the script must not need (or import) Ray.
    probe = subprocess.run(
        python_command(
            "import sys\n"
            "from components.scripts import ray_launcher as launcher\n"
            "print(launcher.EXIT_HEAD_LOST, launcher.EXIT_PEER_LOST, launcher.EXIT_RAY_START_TIMEOUT,"
            " 'ray' in sys.modules)\n"
        ),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert probe.returncode == 0, probe.stderr
    assert probe.stdout == "6 9 7 False\n"


def test_load_config_worker_values():
    cfg = launcher.config.load_config(
        {
            "NUM_NODES": "4",
            "HOSTNAME": "training-2",
            "RAY_HEAD_HOST": "run-0.run-svc.ns.svc.cluster.local",
            "RAY_PORT": "6380",
            "RAY_NODE_WAIT_SECONDS": "0",
            "RAY_JOIN_DEADLINE_SECONDS": "30",
            "RUN_DONE_MARKER": "/fsx/runs/r1/DONE",
            "RAY_START_EXTRA_ARGS": "--num-cpus=8 --resources='{\"a\": 1}'",
        }
    )

    assert (cfg.rank, cfg.port, cfg.node_wait_seconds, cfg.join_deadline_seconds) == (2, 6380, 0, 30)
    assert cfg.done_marker == "/fsx/runs/r1/DONE"
    assert cfg.extra_start_args == ("--num-cpus=8", '--resources={"a": 1}')
    assert not cfg.is_head


def test_unbalanced_extra_args_are_rejected():
    with pytest.raises(launcher.common.ConfigError, match="RAY_START_EXTRA_ARGS is not valid shell quoting"):
        launcher.config.load_config({"NUM_NODES": "1", "JOB_COMPLETION_INDEX": "0", "RAY_START_EXTRA_ARGS": "--x='a"})


def _last_value(command, option):
    values = [arg.split("=", 1)[1] for arg in command if arg.startswith(option + "=")]
    return values[-1]


def test_head_command_keeps_the_dashboard_private_whatever_extra_args_say():
    cfg = launcher.config.load_config(
        {
            "NUM_NODES": "2",
            "JOB_COMPLETION_INDEX": "0",
            "RAY_HEAD_HOST": "run-0.svc",
            "RAY_START_EXTRA_ARGS": "--include-dashboard=true --dashboard-host=0.0.0.0 --num-gpus=8",
        }
    )
    command = launcher.start.head_start_command(cfg)

    assert command[:4] == ["ray", "start", "--head", "--port=6379"]
    assert "--num-gpus=8" in command
    # click, which parses `ray start`, keeps the last value of a repeated option.
    assert _last_value(command, "--include-dashboard") == "false"
    assert _last_value(command, "--dashboard-host") == "127.0.0.1"


def test_worker_command_joins_the_head_and_blocks():
    cfg = launcher.config.load_config(
        {
            "NUM_NODES": "2",
            "JOB_COMPLETION_INDEX": "1",
            "RAY_HEAD_HOST": "run-0.run-svc.ns.svc.cluster.local",
        }
    )

    assert launcher.start.worker_start_command(cfg)[:4] == [
        "ray",
        "start",
        "--address=run-0.run-svc.ns.svc.cluster.local:6379",
        "--block",
    ]


def test_split_command():
    assert launcher.config.split_command(["--", "python", "train.py", "--", "-x"]) == ["python", "train.py", "--", "-x"]
    assert launcher.config.split_command(["--"]) == []
    assert launcher.config.split_command([]) == []


# run_training replaces the SIGTERM/SIGINT handlers of the process it runs in;
# these in-process tests put pytest's back.
@pytest.fixture
def restore_signals():
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


@pytest.mark.usefixtures("restore_signals")
@pytest.mark.parametrize(
    ("code", "expected"),
    [("raise SystemExit(7)", 7), ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9)],
)
def test_failed_training_returns_its_code_and_writes_no_marker(tmp_path, code, expected):
    marker = tmp_path / "DONE"

    finished = launcher.training.run_training(launcher.common.Launcher("0"), python_command(code), str(marker))

    assert finished == (expected, None)
    assert not marker.exists()


@pytest.mark.usefixtures("restore_signals")
def test_trainer_stopped_by_sigterm_is_not_marked_done_even_if_it_exits_0(tmp_path, capsys):
    marker = tmp_path / "DONE"
    ready = tmp_path / "ready"
    # A trainer that checkpoints and exits 0 on SIGTERM, as many do.
    trainer = python_command(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        f"open({str(ready)!r}, 'w').close()\n"
        "time.sleep(30)\n"
        "sys.exit(5)\n"
    )

    def kubelet() -> None:
        deadline = time.monotonic() + 20
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        os.kill(os.getpid(), signal.SIGTERM)  # to us; run_training forwards it

    thread = threading.Thread(target=kubelet)
    thread.start()
    try:
        finished = launcher.training.run_training(launcher.common.Launcher("0"), trainer, str(marker))
    finally:
        thread.join()

    assert finished == (0, signal.SIGTERM)
    assert not marker.exists()
    assert f"training command exited with code 0 after SIGTERM; not writing {marker}" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("code", "alive", "expected"),
    [
        (1, 1, 9), (128 + 9, 1, 9), (9, 1, 9), (1, 0, 9),  # a peer is gone: whatever the trainer said
        # all alive: the trainer's code, but never one a pod failure policy may ignore (3, 4, 6, 9)
        (1, 2, 1), (3, 2, 1), (4, 2, 1), (5, 2, 5), (6, 2, 1), (9, 2, 1),
        (1, None, 1), (9, None, 1), (6, None, 1),  # Ray could not tell: the trainer's code, never 6 or 9
    ],
)
def test_a_failed_trainer_exits_9_only_when_a_peer_is_lost(code, alive, expected, capsys):
    cfg = launcher.config.load_config({"NUM_NODES": "2", "JOB_COMPLETION_INDEX": "0", "RAY_HEAD_HOST": "h"})

    assert launcher.head.failed_training_code(launcher.common.Launcher("0"), cfg, code, alive) == expected
    out, err = capsys.readouterr()
    assert ("a peer was lost; exiting 9 (peer lost, a disruption)" in err) == (expected == 9)
    assert ("which the launcher keeps for a lost peer or head" in out) == (code in (3, 4, 6, 9) and expected == 1)


# --------------------------------------------------------------------------
# The head and the Kubernetes API: a node of the run unhealthy (node_health.py)
# (the fake `ray` of the previous section, and a fake API server serving the two reads the head
# makes: the run's pods, and their nodes, from a JSON file a test or its trainer rewrites)
# --------------------------------------------------------------------------

NS, SELECTOR = "rltrain", "rltrain/run=rltrain-multinode"


def kube_node(name: str, *, ready: str = "True", agent: Optional[tuple] = None, taint: Optional[str] = None,
              cordoned: bool = False) -> dict:
    """A Node as the API serves it; `agent`: (condition, status, reason) the node monitoring agent set."""
    conditions = [{"type": "Ready", "status": ready, "reason": "KubeletReady" if ready == "True" else "NodeStatusUnknown"}]
    conditions += [{"type": t, "status": "True", "reason": f"{t}IsReady"} for t in launcher.node_health.AGENT_CONDITIONS]
    if agent:
        kind, status, reason = agent
        conditions = [c for c in conditions if c["type"] != kind] + [
            {"type": kind, "status": status, "reason": reason, "message": f"simulated {reason}"}]
    spec = {"unschedulable": True} if cordoned else {}
    if taint:
        spec["taints"] = [{"key": taint, "effect": "NoExecute"}]
    return {"metadata": {"name": name}, "spec": spec, "status": {"conditions": conditions}}


def kube_pod(name: str, node: str, phase: str = "Running") -> dict:
    return {"metadata": {"name": name}, "spec": {"nodeName": node}, "status": {"phase": phase}}


def run_state(**nodes: dict) -> dict:
    """The run's two pods (head on node-a, worker on node-b), an old Failed pod on a deleted node,
    and the nodes given (by name; a node not given does not exist)."""
    return {"pods": [kube_pod("run-0-abc", "node-a"), kube_pod("run-1-def", "node-b"),
                     kube_pod("run-1-old", "node-gone", phase="Failed")],
            "nodes": nodes}


HEALTHY = run_state(**{"node-a": kube_node("node-a"), "node-b": kube_node("node-b")})
XID = run_state(**{"node-a": kube_node("node-a"),
                   "node-b": kube_node("node-b", agent=("AcceleratedHardwareReady", "False", "NvidiaXID31Error"))})


class FakeKubeApi:
    def __init__(self, tmp_path: Path) -> None:
        import http.server

        self.state = tmp_path / "kube-state.json"
        self.requests: list = []
        self.state.write_text(json.dumps(HEALTHY))
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                api.requests.append(self.path)
                state = json.loads(api.state.read_text())
                path, _, query = self.path.partition("?")
                body = None
                if path == f"/api/v1/namespaces/{NS}/pods" and query == urllib.parse.urlencode(
                        {"labelSelector": SELECTOR}):
                    body = {"items": state["pods"]}
                elif path.startswith("/api/v1/nodes/"):
                    body = state["nodes"].get(path.rsplit("/", 1)[1])
                self.send_response(200 if body is not None else 404)
                self.end_headers()
                self.wfile.write(json.dumps(body or {"kind": "Status", "code": 404}).encode())

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def set(self, state: dict) -> None:
        tmp = self.state.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self.state)

    def env(self) -> dict:
        return {"NODE_HEALTH_API_URL": self.url, "POD_NAMESPACE": NS, "RUN_POD_SELECTOR": SELECTOR}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def kube_api(tmp_path):
    api = FakeKubeApi(tmp_path)
    try:
        yield api
    finally:
        api.close()


def trainer_setting_state(api: FakeKubeApi, state: dict, code: int) -> list:
    """A trainer that crashes as a GPU fault makes it crash: the agent's condition appears on the
    API (written here at once, as its 15 s report would) while every Ray node stays alive."""
    return python_command(
        "import os, sys\n"
        "print(f'trainer pid={os.getpid()}', flush=True)\n"
        f"open({str(api.state)!r} + '.new', 'w').write({json.dumps(state)!r})\n"
        f"os.replace({str(api.state)!r} + '.new', {str(api.state)!r})\n"
        f"sys.exit({code})\n"
    )


def test_head_exits_9_when_its_trainer_fails_while_the_agent_marks_a_node_of_the_run(launchers, fake_ray, kube_api):
    """An XID on the worker's GPU: the trainer fails while both Ray nodes stay alive. Ray alone would
    call it the trainer's failure (counted in workloads.retries); the node's condition says it is the
    node's (repaired by a reboot after 10 minutes), so the head exits 9, which the policy ignores."""
    started = time.monotonic()
    head = launchers.run(peer_env(launchers, fake_ray, **kube_api.env()),
                         trainer_setting_state(kube_api, XID, 1), container=True)
    elapsed = time.monotonic() - started

    assert head.proc.returncode == launcher.EXIT_PEER_LOST, head.describe()
    assert "2 of 2 Ray nodes alive; starting training" in head.stdout
    assert f"and the Kubernetes API about the nodes of the pods {SELECTOR} in {NS}" in head.stdout
    assert ("the training command exited with code 1 while a node of the run is unhealthy (node-b: "
            "AcceleratedHardwareReady=False (NvidiaXID31Error: simulated NvidiaXID31Error); pods run-1-def): "
            "the node failed, not the trainer; exiting 9 (a disruption)") in head.stderr
    # The old Failed pod's node (deleted long ago) is not asked about.
    assert not [r for r in kube_api.requests if r.endswith("/node-gone")]
    assert elapsed < 15, f"an unhealthy node seen at once took {elapsed:.1f} s"


@pytest.mark.parametrize(("state", "why"), [
    (HEALTHY, "every node healthy"),
    # DCGMError: no repair follows (node-health-nma: repair action None): the failure is the trainer's.
    (run_state(**{"node-a": kube_node("node-a"),
                  "node-b": kube_node("node-b", agent=("AcceleratedHardwareReady", "False", "DCGMError"))}),
     "a DCGM condition EKS does not repair"),
])
def test_a_genuine_crash_keeps_its_code_and_counts(launchers, fake_ray, kube_api, state, why):
    head = launchers.run(peer_env(launchers, fake_ray, RAY_PEER_CHECK_SECONDS="1", **kube_api.env()),
                         trainer_setting_state(kube_api, state, 1), container=True)
    assert head.proc.returncode == 1, (why, head.describe())
    assert "2 of 2 Ray nodes are alive: the training command failed on its own" in head.stdout
    assert "unhealthy" not in head.stderr


def test_an_api_that_cannot_be_read_leaves_the_decision_to_ray(launchers, fake_ray, kube_api, closed_port):
    env = peer_env(launchers, fake_ray, RAY_PEER_CHECK_SECONDS="1", **kube_api.env())
    env["NODE_HEALTH_API_URL"] = f"http://127.0.0.1:{closed_port}"
    head = launchers.run(env, failing_trainer(fake_ray, 1, "2"), container=True)
    assert head.proc.returncode == 1, head.describe()
    assert "cannot read the run's nodes from the Kubernetes API" in head.stdout
    assert "deciding on Ray's count alone" in head.stdout


def test_the_head_waits_for_an_unhealthy_node_before_training(launchers, fake_ray, kube_api, tmp_path):
    """The new head of a run whose worker's node has the agent's condition (its repair pending):
    a trainer started now would fail on it and count in the start ledger, so the head waits until
    the node is healthy again (the reboot done), then trains."""
    kube_api.set(XID)
    healed = threading.Timer(2.0, kube_api.set, args=(HEALTHY,))
    healed.start()
    try:
        head = launchers.run(peer_env(launchers, fake_ray, RAY_NODE_WAIT_SECONDS="60", **kube_api.env()),
                             python_command("print('trained-ok', flush=True)"), container=True, timeout=60)
    finally:
        healed.cancel()
    assert head.proc.returncode == 0, head.describe()
    out = head.stdout
    assert ("2 of 2 Ray nodes alive, but a node of the run is unhealthy (node-b: AcceleratedHardwareReady=False "
            "(NvidiaXID31Error") in out
    assert "waiting up to" in out and "for its repair before training" in out
    assert "the run's nodes are healthy again; waiting for 2 Ray nodes" in out
    assert out.index("healthy again") < out.index("starting training") < out.index("trained-ok")


def test_a_node_that_stays_unhealthy_ends_the_wait_with_3_recorded_in_the_ledger(launchers, fake_ray, kube_api,
                                                                                   tmp_path):
    """The wait for a repair that never comes ends (exit 3, ignored by the policy), and is counted
    in the start ledger like a start without progress: the attempt over the bound exits 10."""
    kube_api.set(run_state(**{"node-a": kube_node("node-a"),
                              "node-b": kube_node("node-b", taint="node.kubernetes.io/unreachable")}))
    ledger = tmp_path / "ckpt" / ".rltrain" / "starts.jsonl"
    resume = {"RESUME_STEPS_DIR": str(tmp_path / "ckpt" / "steps"), "RESUME_STEP_PREFIX": "global_step_",
              "RESUME_COMPLETE_MARKS": "x.pt", "RESUME_ENV": "OVR", "RESUME_FORMAT": "r={step_dir}",
              "RESUME_LEDGER": str(ledger), "RESUME_MAX_STALLED_RESTARTS": "1", "RESUME_LEDGER_SCOPE": "uid-1"}
    codes = []
    for _ in range(3):
        head = launchers.run(peer_env(launchers, fake_ray, RAY_NODE_WAIT_SECONDS="1", **kube_api.env(), **resume),
                             python_command("print('trained-ok', flush=True)"), container=True, timeout=60)
        codes.append(head.proc.returncode)
        assert "trained-ok" not in head.stdout, head.describe()
    assert codes == [launcher.EXIT_NODES_TIMEOUT, launcher.EXIT_NODES_TIMEOUT, launcher.EXIT_NO_PROGRESS], head.describe()
    assert ("a node of the run stayed unhealthy: node-b: taint node.kubernetes.io/unreachable:NoExecute"
            in head.stderr)
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert [(e["kind"], e["job"], e["step"]) for e in entries] == [
        ("nodes: 2 of 2 alive within 1 s, a node unhealthy", "uid-1", None)] * 2
    assert "refusing to start" in head.stderr and "the start ledger refuses another attempt; exiting 10" in head.stderr


@pytest.mark.parametrize(("node", "problem"), [
    (kube_node("n"), None),
    (kube_node("n", ready="Unknown"), "Ready=Unknown (NodeStatusUnknown)"),
    (kube_node("n", taint="node.kubernetes.io/out-of-service"), "taint node.kubernetes.io/out-of-service:NoExecute"),
    (kube_node("n", cordoned=True), "cordoned (spec.unschedulable)"),
    (kube_node("n", agent=("AcceleratedHardwareReady", "False", "NvidiaXID79Error")),
     "AcceleratedHardwareReady=False (NvidiaXID79Error: simulated NvidiaXID79Error)"),
    (kube_node("n", agent=("NetworkingReady", "False", "InterfaceNotUp")),
     "NetworkingReady=False (InterfaceNotUp: simulated InterfaceNotUp)"),
    # Repair action None (EKS user guide, node-health-nma): not a node going away.
    (kube_node("n", agent=("AcceleratedHardwareReady", "False", "DCGMError")), None),
    (kube_node("n", agent=("AcceleratedHardwareReady", "False", "DCGMHealthCode101")), None),
    (kube_node("n", agent=("AcceleratedHardwareReady", "False", "DCGMDiagnosticFailure")), None),
])
def test_node_problem(node, problem):
    assert launcher.node_health.node_problem(node) == problem


def test_without_the_selector_or_a_token_the_check_is_off(tmp_path):
    log = launcher.common.Launcher("0")
    assert not launcher.node_health.NodeHealth(log, {"POD_NAMESPACE": NS}).enabled
    off = launcher.node_health.NodeHealth(log, {"POD_NAMESPACE": NS, "RUN_POD_SELECTOR": SELECTOR,
                                                "KUBERNETES_SERVICE_HOST": "10.100.0.1"})
    assert off.check() is None and "no service-account token mounted" in off.describe()


def test_a_failed_trainer_on_an_unhealthy_node_exits_9_whatever_its_code(capsys):
    cfg = launcher.config.load_config({"NUM_NODES": "2", "JOB_COMPLETION_INDEX": "0", "RAY_HEAD_HOST": "h"})
    log = launcher.common.Launcher("0")
    assert launcher.head.failed_training_code(log, cfg, 1, 2, {"node-b": "Ready=Unknown"}) == 9
    assert launcher.head.failed_training_code(log, cfg, 1, 2, {}) == 1
    assert launcher.head.failed_training_code(log, cfg, 1, None, None) == 1
    assert "while a node of the run is unhealthy (node-b: Ready=Unknown)" in capsys.readouterr().err
