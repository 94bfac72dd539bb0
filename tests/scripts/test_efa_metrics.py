"""Run components/scripts/efa_metrics.py as a program against a fake sysfs.

The fake node is a directory tree (SYSFS_ROOT) holding
sys/class/infiniband/rdmap<N>s0/ports/1/hw_counters/<counter> for 32 devices,
one file per counter the kernel's EFA driver defines (KNOWN_PORT_COUNTERS)
plus the RDMA core's lifespan file, each holding a value derived from the
device and counter so every (device, counter) pair is distinct. The tests
parse the efa.prom the script writes into TEXTFILE_DIR.
"""

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "components" / "scripts" / "efa_metrics.py"
NODE = "ip-10-0-1-5.us-west-2.compute.internal"
DEVICES = 32
LIFESPAN_MS = 10

_spec = importlib.util.spec_from_file_location("efa_metrics", SCRIPT)
efa_metrics = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(efa_metrics)
COUNTERS = efa_metrics.KNOWN_PORT_COUNTERS

SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def device_name(i):
    return f"rdmap{i}s0"


def expected(i, counter):
    """The value the fake sysfs holds for device i's counter."""
    if counter == "rx_bytes":
        return 10**15 + i  # large, as real byte counters are
    return 1000 * i + COUNTERS.index(counter) + 1


def make_device(ib, i, counters=COUNTERS):
    hw = ib / device_name(i) / "ports" / "1" / "hw_counters"
    hw.mkdir(parents=True)
    for counter in counters:
        (hw / counter).write_text(f"{expected(i, counter)}\n")
    (hw / "lifespan").write_text(f"{LIFESPAN_MS}\n")
    return hw


def make_sysfs(root):
    ib = root / "sys" / "class" / "infiniband"
    ib.mkdir(parents=True)
    for i in range(DEVICES):
        make_device(ib, i)
    return root


@pytest.fixture(scope="module")
def shared_sysfs(tmp_path_factory):
    """One fake sysfs (some 740 files) for the tests that only read it; a test that changes it uses
    `own_node` and builds its own."""
    return make_sysfs(tmp_path_factory.mktemp("efa-sysfs") / "root")


@pytest.fixture
def node(shared_sysfs, tmp_path):
    return node_at(shared_sysfs, tmp_path)


@pytest.fixture
def own_node(tmp_path):
    return node_at(make_sysfs(tmp_path / "root"), tmp_path)


def node_at(root, tmp_path):
    ib = root / "sys" / "class" / "infiniband"
    out = tmp_path / "textfile"
    out.mkdir()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TEXTFILE_DIR": str(out),
        "SYSFS_ROOT": str(root),
        "NODE_NAME": NODE,
    }
    return {"root": root, "ib": ib, "out": out, "env": env}


def run(env, *args, timeout=60):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def parse(text):
    """{metric: {frozenset(labels): value}}, {metric: type}, {metric: help count}, {metric: type count}."""
    samples, types, help_count, type_count = {}, {}, {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split()[2]
            help_count[name] = help_count.get(name, 0) + 1
        elif line.startswith("# TYPE "):
            _, _, name, mtype = line.split()
            types[name] = mtype
            type_count[name] = type_count.get(name, 0) + 1
        else:
            m = SAMPLE.fullmatch(line)
            assert m, f"unparseable line {line!r}"
            name, labels, value = m.groups()
            pairs = frozenset(LABEL.findall(labels or ""))
            assert pairs not in samples.setdefault(name, {}), f"duplicate sample {line!r}"
            samples[name][pairs] = float(value) if "." in value or "e" in value else int(value)
    return samples, types, help_count, type_count


def port_labels(i, port="1"):
    return frozenset({("device", device_name(i)), ("port", port), ("node", NODE)})


NODE_ONLY = frozenset({("node", NODE)})


def prom(node):
    return (node["out"] / "efa.prom").read_text()


def test_writes_every_counter_of_32_devices(node):
    proc = run(node["env"], "--once")
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in node["out"].iterdir()) == ["efa.prom"]  # no .tmp left
    text = prom(node)
    samples, types, help_count, type_count = parse(text)

    assert samples["efa_devices"] == {NODE_ONLY: 32}
    assert f'efa_devices{{node="{NODE}"}} 32' in text.splitlines()
    assert samples["efa_metrics_scrape_error"] == {NODE_ONLY: 0}
    assert samples["efa_metrics_read_errors_total"] == {NODE_ONLY: 0}
    (last_success,) = samples["efa_metrics_last_success_timestamp_seconds"].values()
    assert abs(last_success - time.time()) < 60

    # Exact values for several device/counter pairs.
    for i, counter, value in [
        (0, "rdma_read_bytes", 11),
        (0, "tx_bytes", 1),
        (7, "retrans_pkts", 7019),
        (31, "impaired_remote_conn_events", 31022),
        (31, "rx_bytes", 10**15 + 31),
        (16, "rdma_write_recv_bytes", 16017),
    ]:
        assert expected(i, counter) == value
        assert samples[f"efa_{counter}_total"][port_labels(i)] == value
    # Every counter of every device, nothing else.
    for counter in COUNTERS:
        name = f"efa_{counter}_total"
        assert types[name] == "counter"
        assert samples[name] == {port_labels(i): expected(i, counter) for i in range(DEVICES)}
    assert samples["efa_hw_counters_lifespan_seconds"] == {
        port_labels(i): LIFESPAN_MS / 1000 for i in range(DEVICES)
    }
    assert types["efa_hw_counters_lifespan_seconds"] == "gauge"
    assert "efa_lifespan_total" not in samples

    # The documented names are exactly what is emitted.
    emitted = set(samples)
    assert emitted == set(efa_metrics.METRIC_NAMES) | {f"efa_{c}_total" for c in COUNTERS}
    # One HELP and one TYPE per metric, before its samples; metrics sorted.
    assert help_count == {name: 1 for name in emitted}
    assert type_count == {name: 1 for name in emitted}
    order = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]
    assert order == sorted(order)
    assert text.endswith("\n")


def test_output_is_deterministic(node):
    assert run(node["env"], "--once").returncode == 0
    first = prom(node)
    assert run(node["env"], "--once").returncode == 0
    second = prom(node)

    def strip(text):
        return [line for line in text.splitlines() if not line.startswith("efa_metrics_last_success")]

    assert strip(first) == strip(second)
    # Devices in name order, so rdmap10s0 sorts before rdmap2s0.
    lines = [line for line in first.splitlines() if line.startswith("efa_send_wrs_total{")]
    assert len(lines) == DEVICES
    assert lines == sorted(lines)


def test_non_integer_counter_skipped_and_counted(own_node):
    node = own_node
    hw = node["ib"] / device_name(3) / "ports" / "1" / "hw_counters"
    (hw / "retrans_pkts").write_text("n/a\n")
    (hw / "rx_drops").write_text("-5\n")
    proc = run(node["env"], "--once")
    assert proc.returncode == 0, proc.stderr
    samples, *_ = parse(prom(node))
    assert port_labels(3) not in samples["efa_retrans_pkts_total"]
    assert port_labels(3) not in samples["efa_rx_drops_total"]
    assert len(samples["efa_retrans_pkts_total"]) == DEVICES - 1
    assert samples["efa_retrans_pkts_total"][port_labels(4)] == expected(4, "retrans_pkts")
    assert samples["efa_send_bytes_total"][port_labels(3)] == expected(3, "send_bytes")
    assert samples["efa_devices"] == {NODE_ONLY: 32}
    assert samples["efa_metrics_read_errors_total"] == {NODE_ONLY: 2}
    assert samples["efa_metrics_scrape_error"] == {NODE_ONLY: 1}
    assert samples["efa_metrics_last_success_timestamp_seconds"] == {NODE_ONLY: 0}
    assert "retrans_pkts" in proc.stderr and "skipped 2" in proc.stderr


def test_vanished_device_skipped_and_counted(own_node):
    node = own_node
    # A device removed while being read: its /sys/class/infiniband entry is
    # still listed but points nowhere.
    (node["ib"] / "rdmap99s0").symlink_to(node["root"] / "sys" / "devices" / "gone")
    proc = run(node["env"], "--once")
    assert proc.returncode == 0, proc.stderr
    samples, *_ = parse(prom(node))
    assert samples["efa_devices"] == {NODE_ONLY: 32}
    assert samples["efa_metrics_read_errors_total"] == {NODE_ONLY: 1}
    assert samples["efa_metrics_scrape_error"] == {NODE_ONLY: 1}
    assert all(dict(labels)["device"] != "rdmap99s0" for labels in samples["efa_tx_bytes_total"])
    assert "rdmap99s0" in proc.stderr


def test_no_infiniband_dir_is_zero_devices(own_node):
    node = own_node
    shutil.rmtree(node["root"] / "sys")
    proc = run(node["env"], "--once")
    assert proc.returncode == 0, proc.stderr
    samples, *_ = parse(prom(node))
    assert samples["efa_devices"] == {NODE_ONLY: 0}
    assert samples["efa_metrics_scrape_error"] == {NODE_ONLY: 0}
    assert set(samples) == set(efa_metrics.FIXED_METRICS)


def test_label_values_escaped(node):
    env = dict(node["env"], NODE_NAME='odd"node\\name')
    assert run(env, "--once").returncode == 0
    assert 'efa_devices{node="odd\\"node\\\\name"} 32' in prom(node)


def test_node_defaults_to_hostname(node):
    env = dict(node["env"])
    del env["NODE_NAME"]
    assert run(env, "--once").returncode == 0
    samples, *_ = parse(prom(node))
    assert samples["efa_devices"] == {frozenset({("node", socket.gethostname())}): 32}


@pytest.mark.parametrize(
    "change, variable",
    [
        ({"TEXTFILE_DIR": None}, "TEXTFILE_DIR"),
        ({"TEXTFILE_DIR": "/nonexistent/textfile"}, "TEXTFILE_DIR"),
        ({"SYSFS_ROOT": "relative/root"}, "SYSFS_ROOT"),
        ({"SYSFS_ROOT": "/nonexistent/root"}, "SYSFS_ROOT"),
        ({"INTERVAL_SECONDS": "soon"}, "INTERVAL_SECONDS"),
        ({"INTERVAL_SECONDS": "0"}, "INTERVAL_SECONDS"),
        ({"INTERVAL_SECONDS": "-3"}, "INTERVAL_SECONDS"),
        ({"INTERVAL_SECONDS": "nan"}, "INTERVAL_SECONDS"),
    ],
)
def test_bad_configuration_exits_2(node, change, variable):
    env = dict(node["env"])
    for key, value in change.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    proc = run(env, "--once")
    assert proc.returncode == 2
    assert variable in proc.stderr
    assert not (node["out"] / "efa.prom").exists()


def test_bad_argument_exits_2(node):
    proc = run(node["env"], "--twice")
    assert proc.returncode == 2
    assert "--twice" in proc.stderr


def test_loop_rewrites_and_exits_0_on_sigterm(own_node):
    node = own_node
    env = dict(node["env"], INTERVAL_SECONDS="0.2")
    out = node["out"] / "efa.prom"
    hw = node["ib"] / device_name(5) / "ports" / "1" / "hw_counters"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.exists(), "no efa.prom within 30s"
        # A counter that moves is picked up by a later pass.
        (hw / "send_wrs").write_text("424242\n")
        value = None
        while time.monotonic() < deadline:
            samples, *_ = parse(out.read_text())
            value = samples["efa_send_wrs_total"][port_labels(5)]
            if value == 424242:
                break
            time.sleep(0.05)
        assert value == 424242
        assert proc.poll() is None, "the loop exited on its own"
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert sorted(p.name for p in node["out"].iterdir()) == ["efa.prom"]


def test_loop_exits_0_on_sigterm_during_long_interval(node):
    env = dict(node["env"], INTERVAL_SECONDS="3600")
    out = node["out"] / "efa.prom"
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while not out.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert out.exists()
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=10)
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr


def test_promtool_accepts_output(own_node):
    node = own_node
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is not on PATH in CI (apt-get install prometheus)")
        pytest.skip("promtool not on PATH")
    (node["ib"] / device_name(2) / "ports" / "1" / "hw_counters" / "tx_pkts").write_text("bogus\n")
    assert run(node["env"], "--once").returncode == 0
    check = subprocess.run(
        [promtool, "check", "metrics"], input=prom(node), capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    assert check.stdout + check.stderr == ""  # no lint warnings either
