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
"""

from __future__ import annotations

import functools
import importlib.util
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
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCHER_PATH = REPO / "components" / "scripts" / "ray_launcher.py"
BIN_DIR = Path(sys.executable).parent
RAY_CLI = shutil.which("ray", path=str(BIN_DIR)) or shutil.which("ray")

HEAD_IP = "127.0.0.2"
WORKER_IP = "127.0.0.3"

needs_ray = pytest.mark.skipif(
    RAY_CLI is None, reason="the ray CLI is not installed (pip install ray==2.60.0)"
)


def _load_launcher():
    spec = importlib.util.spec_from_file_location("ray_launcher", LAUNCHER_PATH)
    module = importlib.util.module_from_spec(spec)
    # Registered before exec_module so the dataclass can resolve its module.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


launcher = _load_launcher()


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
            and key not in ("NUM_NODES", "JOB_COMPLETION_INDEX", "HOSTNAME", "RUN_DONE_MARKER")
        }
        # The launcher finds `ray` on PATH; use the one installed beside this Python.
        env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env["PYTHONUNBUFFERED"] = "1"
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


@needs_ray
def test_head_and_worker_form_a_two_node_cluster_and_head_trains(launchers):
    port = free_port()
    worker = launchers.start(
        launchers.env(
            NUM_NODES="2",
            JOB_COMPLETION_INDEX="1",
            RAY_HEAD_HOST=HEAD_IP,
            RAY_PORT=str(port),
            RAY_JOIN_DEADLINE_SECONDS="90",
            RAY_TMPDIR=launchers.ray_tmpdir(),
            RAY_START_EXTRA_ARGS=worker_extra_args(),
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
        launchers.env(
            NUM_NODES="2",
            JOB_COMPLETION_INDEX="0",
            RAY_PORT=str(port),
            RAY_NODE_WAIT_SECONDS="90",
            RAY_TMPDIR=launchers.ray_tmpdir(),
            RAY_START_EXTRA_ARGS=head_extra_args(free_port()),
        ),
        python_command("import os; print(f'trained-ok pid={os.getpid()}')"),
        name="head",
        container=True,
    )
    launcher_pid = 1 if head.namespaced else head.pid

    assert head.wait(timeout=90) == 0, head.describe()
    # Same pid as the launcher: the trainer replaced it (os.execvp), so it
    # gets the kubelet's SIGTERM directly and its exit code is the pod's.
    assert f"trained-ok pid={launcher_pid}" in head.stdout
    assert "[ray-launcher rank=0] 2 of 2 Ray nodes alive; starting training" in head.stdout
    # The worker joined and is still serving as a Ray node (ray start --block).
    assert worker.proc.poll() is None, worker.describe()
    assert (
        f"[ray-launcher rank=1] head reachable; joining: ray start --address={HEAD_IP}:{port} --block"
        in worker.stdout
    )
    assert "worker ran the training command" not in worker.stderr


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
    run = launchers.run(launchers.env(NUM_NODES="1", JOB_COMPLETION_INDEX="0"), [])

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
    assert launcher.parse_rank(env) == rank


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
    with pytest.raises(launcher.ConfigError, match=re.escape(message)):
        launcher.parse_rank(env)


def test_load_config_defaults():
    cfg = launcher.load_config({"NUM_NODES": "1", "JOB_COMPLETION_INDEX": "0"})

    assert cfg == launcher.Config(
        num_nodes=1,
        rank=0,
        head_host=None,
        port=6379,
        node_wait_seconds=300,
        join_deadline_seconds=600,
        done_marker=None,
        extra_start_args=(),
    )
    assert cfg.is_head


def test_load_config_worker_values():
    cfg = launcher.load_config(
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
    with pytest.raises(launcher.ConfigError, match="RAY_START_EXTRA_ARGS is not valid shell quoting"):
        launcher.load_config({"NUM_NODES": "1", "JOB_COMPLETION_INDEX": "0", "RAY_START_EXTRA_ARGS": "--x='a"})


def _last_value(command, option):
    values = [arg.split("=", 1)[1] for arg in command if arg.startswith(option + "=")]
    return values[-1]


def test_head_command_keeps_the_dashboard_private_whatever_extra_args_say():
    cfg = launcher.load_config(
        {
            "NUM_NODES": "2",
            "JOB_COMPLETION_INDEX": "0",
            "RAY_START_EXTRA_ARGS": "--include-dashboard=true --dashboard-host=0.0.0.0 --num-gpus=8",
        }
    )
    command = launcher.head_start_command(cfg)

    assert command[:4] == ["ray", "start", "--head", "--port=6379"]
    assert "--num-gpus=8" in command
    # click, which parses `ray start`, keeps the last value of a repeated option.
    assert _last_value(command, "--include-dashboard") == "false"
    assert _last_value(command, "--dashboard-host") == "127.0.0.1"


def test_worker_command_joins_the_head_and_blocks():
    cfg = launcher.load_config(
        {
            "NUM_NODES": "2",
            "JOB_COMPLETION_INDEX": "1",
            "RAY_HEAD_HOST": "run-0.run-svc.ns.svc.cluster.local",
        }
    )

    assert launcher.worker_start_command(cfg)[:4] == [
        "ray",
        "start",
        "--address=run-0.run-svc.ns.svc.cluster.local:6379",
        "--block",
    ]


def test_split_command():
    assert launcher.split_command(["--", "python", "train.py", "--", "-x"]) == ["python", "train.py", "--", "-x"]
    assert launcher.split_command(["--"]) == []
    assert launcher.split_command([]) == []


# run_and_mark replaces the SIGTERM/SIGINT handlers of the process it runs in;
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

    assert launcher.run_and_mark(launcher.Launcher("0"), python_command(code), str(marker)) == expected
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
        os.kill(os.getpid(), signal.SIGTERM)  # to us; run_and_mark forwards it

    thread = threading.Thread(target=kubelet)
    thread.start()
    try:
        code = launcher.run_and_mark(launcher.Launcher("0"), trainer, str(marker))
    finally:
        thread.join()

    assert code == 0
    assert not marker.exists()
    assert "training command exited 0 after SIGTERM; not writing" in capsys.readouterr().out
