#!/usr/bin/env python3
"""EFA hardware counters as node-exporter textfile-collector metrics.

There is no upstream Prometheus exporter for EFA. This program runs as a
DaemonSet pod on GPU nodes, reads every EFA device's port counters from sysfs

  /sys/class/infiniband/<device>/ports/<port>/hw_counters/<counter>

and writes them, in the Prometheus text exposition format, to
TEXTFILE_DIR/efa.prom, which node-exporter's textfile collector (started with
--collector.textfile.directory=TEXTFILE_DIR) reads on every scrape. The file
is written to TEXTFILE_DIR/efa.prom.tmp first and then renamed over efa.prom,
so node-exporter never reads a half-written file (it only reads *.prom).

Every entry of /sys/class/infiniband is taken to be an EFA device (on the
GPU nodes this runs on, EFA is the only RDMA driver), as validate_node.py
does. /sys/class/infiniband is not namespaced: the pod sees all devices of
the host, whatever EFA devices it was allocated (it needs none).

Counter names are not hardcoded: every file in hw_counters whose content is a
non-negative integer is exported, so counters added by newer kernels appear
without a change here. Where the names come from:

  Linux drivers/infiniband/hw/efa/efa_verbs.c, EFA_DEFINE_PORT_STATS:
    tx_bytes tx_pkts rx_bytes rx_pkts rx_drops
    send_bytes send_wrs recv_bytes recv_wrs
    rdma_read_wrs rdma_read_bytes rdma_read_wr_err rdma_read_resp_bytes
    rdma_write_wrs rdma_write_bytes rdma_write_wr_err rdma_write_recv_bytes
    retrans_bytes retrans_pkts retrans_timeout_events
    unresponsive_remote_events impaired_remote_conn_events
  (the rdma_write_* and network groups are newer than the rest; the network
  group came with the patch "RDMA/efa: Add Network HW statistics counters",
  linux-rdma, July 2025. Older kernels simply have fewer files.)
  All of them are u64 values the device accumulates (efa_fill_port_stats
  copies them from the device's GET_STATS admin command), so all are
  exported as Prometheus counters.

  Linux drivers/infiniband/core/sysfs.c, show_stats_lifespan: the RDMA core
  adds a file "lifespan" to every hw_counters directory. It is not a counter
  but a setting: the minimum time, in milliseconds (0..10000, writable),
  between two hardware queries, i.e. how stale a counter read may be. It is
  exported as a gauge (see GAUGE_FILES).

  (Device-wide driver statistics such as cmds_err and create_qp_err live in
  /sys/class/infiniband/<device>/hw_counters, without a port, and are not
  read.)

Metrics (all carry the label node=NODE_NAME; label values are escaped):

  efa_<counter>_total{device,node,port}   counter, one per counter file, e.g.
      efa_rdma_read_bytes_total, efa_retrans_pkts_total,
      efa_impaired_remote_conn_events_total (COUNTER_METRIC_FORMAT)
  efa_hw_counters_lifespan_seconds{device,node,port}   gauge, the lifespan
      file converted to seconds (GAUGE_FILES: the files exported as gauges,
      under their own names and in base units)
  efa_devices                             gauge, devices read in this pass
  efa_metrics_read_errors_total           counter, since this process started:
      entries skipped (a device that vanished while being read, a counter
      file that could not be read or does not hold a non-negative integer,
      a counter name that is not a valid metric name)
  efa_metrics_scrape_error                gauge, 1 if the last pass skipped
      anything, else 0
  efa_metrics_last_success_timestamp_seconds   gauge, Unix time of the last
      pass that skipped nothing (0 until there is one)

FIXED_METRICS lists the metrics that are always present. The file is sorted
by metric name, then by device and port number, with one HELP and one TYPE
line per metric, so two passes over the same counters give the same bytes
except for the timestamp. A node without /sys/class/infiniband (no EFA) gives
efa_devices 0 and is not an error.

Usage:
  efa_metrics.py           write every INTERVAL_SECONDS until SIGTERM/SIGINT
  efa_metrics.py --once    write once and exit

Environment:
  TEXTFILE_DIR      required; existing, writable directory (node-exporter's
                    textfile directory, shared with this pod)
  SYSFS_ROOT        default /; prefixed to /sys/class/infiniband
  INTERVAL_SECONDS  default 15; number > 0, time between passes (start to start)
  NODE_NAME         default: hostname (set from spec.nodeName via the
                    downward API)

A pass never raises on what it reads: anything skipped is counted in the
error metrics and summarised on stderr. In loop mode a failed write is
reported on stderr and retried at the next interval.

Exit codes: 0 done (--once) or stopped by SIGTERM/SIGINT, 1 --once and
efa.prom could not be written, 2 bad configuration (the message names the
variable or argument).
Python 3.8+, standard library only.
"""

import argparse
import os
import re
import signal
import socket
import sys
import threading
import time

EXIT_OK = 0
EXIT_WRITE_FAILED = 1
EXIT_CONFIG = 2

IB_DIR = "/sys/class/infiniband"
OUTPUT_NAME = "efa.prom"
TMP_NAME = OUTPUT_NAME + ".tmp"
DEFAULT_INTERVAL = 15.0

# Naming rule for the per-port counter files: efa_<file name>_total.
COUNTER_METRIC_FORMAT = "efa_{}_total"

# Files in hw_counters that are not monotonic counters: file name ->
# (metric name, HELP, divisor from the file's unit to the metric's base unit).
# Everything else in hw_counters is a counter.
GAUGE_FILES = {
    "lifespan": (
        "efa_hw_counters_lifespan_seconds",
        "Minimum time in seconds between two hardware reads of this port's "
        "hw_counters (RDMA core setting, file hw_counters/lifespan, in milliseconds).",
        1000,
    ),
}

# Port counters the kernel's EFA driver defines (see the module docstring for
# the source). Documentation and test data only: the exporter exports whatever
# counter files it finds, and a kernel may have fewer or more.
KNOWN_PORT_COUNTERS = (
    "tx_bytes",
    "tx_pkts",
    "rx_bytes",
    "rx_pkts",
    "rx_drops",
    "send_bytes",
    "send_wrs",
    "recv_bytes",
    "recv_wrs",
    "rdma_read_wrs",
    "rdma_read_bytes",
    "rdma_read_wr_err",
    "rdma_read_resp_bytes",
    "rdma_write_wrs",
    "rdma_write_bytes",
    "rdma_write_wr_err",
    "rdma_write_recv_bytes",
    "retrans_bytes",
    "retrans_pkts",
    "retrans_timeout_events",
    "unresponsive_remote_events",
    "impaired_remote_conn_events",
)

DEVICES = "efa_devices"
READ_ERRORS = "efa_metrics_read_errors_total"
SCRAPE_ERROR = "efa_metrics_scrape_error"
LAST_SUCCESS = "efa_metrics_last_success_timestamp_seconds"

# Metrics present in every file: name -> (type, HELP).
FIXED_METRICS = {
    DEVICES: ("gauge", "Number of EFA devices (entries of /sys/class/infiniband) read in the last pass."),
    READ_ERRORS: (
        "counter",
        "Devices, ports or counter files skipped since the exporter started "
        "(vanished while read, unreadable, not a non-negative integer, or an invalid name).",
    ),
    SCRAPE_ERROR: ("gauge", "1 if the last pass skipped any device, port or counter file, else 0."),
    LAST_SUCCESS: ("gauge", "Unix time of the last pass that skipped nothing (0 if none yet)."),
}

# Every metric name this exporter can emit, apart from the per-counter names
# built with COUNTER_METRIC_FORMAT from the counter file names.
METRIC_NAMES = tuple(sorted(list(FIXED_METRICS) + [gauge[0] for gauge in GAUGE_FILES.values()]))

COUNTER_FILE_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
UNSIGNED = re.compile(r"[0-9]+")


class ConfigError(Exception):
    pass


# -- configuration ----------------------------------------------------------


def load_config(env):
    cfg = {}
    textfile_dir = env.get("TEXTFILE_DIR", "").strip()
    if not textfile_dir:
        raise ConfigError("TEXTFILE_DIR is not set")
    if not os.path.isdir(textfile_dir):
        raise ConfigError(f"TEXTFILE_DIR {textfile_dir!r} is not an existing directory")
    if not os.access(textfile_dir, os.W_OK | os.X_OK):
        raise ConfigError(f"TEXTFILE_DIR {textfile_dir!r} is not writable")
    cfg["textfile_dir"] = textfile_dir

    root = env.get("SYSFS_ROOT", "").strip() or "/"
    if not os.path.isabs(root):
        raise ConfigError(f"SYSFS_ROOT must be an absolute path, got {root!r}")
    if not os.path.isdir(root):
        raise ConfigError(f"SYSFS_ROOT {root!r} is not an existing directory")
    cfg["ib_dir"] = os.path.join(root, IB_DIR.lstrip("/"))

    raw = env.get("INTERVAL_SECONDS", "").strip()
    if raw:
        try:
            interval = float(raw)
        except ValueError:
            interval = -1.0
        if not (0 < interval < float("inf")):
            raise ConfigError(f"INTERVAL_SECONDS must be a number of seconds > 0, got {raw!r}")
    else:
        interval = DEFAULT_INTERVAL
    cfg["interval"] = interval

    cfg["node"] = env.get("NODE_NAME", "").strip() or socket.gethostname() or "unknown"
    return cfg


# -- reading sysfs ----------------------------------------------------------


def _port_key(name):
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


def _listdir(path):
    """Sorted entry names of a directory (follows symlinks, as sysfs needs)."""
    return sorted(os.listdir(path))


def read_counter(path):
    """The non-negative integer in a counter file; ValueError if it holds anything else."""
    with open(path, "rb") as f:
        text = f.read(64).decode("ascii", "replace").strip()
    if not UNSIGNED.fullmatch(text):
        raise ValueError(f"not a non-negative integer: {text[:20]!r}")
    return int(text)


def collect(ib_dir):
    """One pass over ib_dir.

    Returns (devices, samples, errors): the number of devices read, a list of
    (device, port, counter file name, value) and a list of messages, one per
    skipped entry.
    """
    samples = []
    errors = []
    try:
        names = _listdir(ib_dir)
    except FileNotFoundError:
        return 0, samples, errors  # no RDMA devices on this node
    except OSError as e:
        errors.append(f"{ib_dir}: {e.strerror or e}")
        return 0, samples, errors

    devices = 0
    for dev in names:
        ports_dir = os.path.join(ib_dir, dev, "ports")
        try:
            ports = sorted(_listdir(ports_dir), key=_port_key)
        except OSError as e:
            errors.append(f"device {dev} skipped: {ports_dir}: {e.strerror or e}")
            continue
        devices += 1
        for port in ports:
            hw_dir = os.path.join(ports_dir, port, "hw_counters")
            try:
                counters = _listdir(hw_dir)
            except FileNotFoundError:
                if os.path.isdir(os.path.join(ports_dir, port)):
                    continue  # a kernel without hw stats for this port: nothing to read
                errors.append(f"device {dev} port {port} skipped: vanished")
                continue
            except OSError as e:
                errors.append(f"device {dev} port {port} skipped: {hw_dir}: {e.strerror or e}")
                continue
            for counter in counters:
                path = os.path.join(hw_dir, counter)
                if not COUNTER_FILE_NAME.fullmatch(counter):
                    errors.append(f"{path}: skipped, not a valid metric name part")
                    continue
                try:
                    value = read_counter(path)
                except (OSError, ValueError) as e:
                    reason = e.strerror if isinstance(e, OSError) and e.strerror else e
                    errors.append(f"{path}: skipped, {reason}")
                    continue
                samples.append((dev, port, counter, value))
    return devices, samples, errors


# -- rendering --------------------------------------------------------------


def _escape_label(value):
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(pairs):
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape_label(v)}"' for k, v in sorted(pairs)) + "}"


def _number(value):
    if isinstance(value, int):
        return str(value)
    return repr(float(value))


def render(node, devices, samples, read_errors_total, scrape_error, last_success):
    """The text of efa.prom. samples: (device, port, counter file, value)."""
    families = {}  # metric name -> [type, help, [(sort key, line)]]

    def add(name, mtype, help_text, labels, value, key=()):
        family = families.setdefault(name, [mtype, help_text, []])
        family[2].append((key, name + _labels(labels) + " " + _number(value)))

    for dev, port, counter, value in samples:
        if counter in GAUGE_FILES:
            name, help_text, divisor = GAUGE_FILES[counter]
            mtype = "gauge"
            value = value / divisor
        else:
            name = COUNTER_METRIC_FORMAT.format(counter)
            mtype = "counter"
            help_text = (
                f"EFA port hardware counter {counter}, read from "
                f"{IB_DIR}/<device>/ports/<port>/hw_counters/{counter}."
            )
        labels = [("device", dev), ("port", port), ("node", node)]
        add(name, mtype, help_text, labels, value, key=(dev, _port_key(port)))

    node_label = [("node", node)]
    fixed = {
        DEVICES: devices,
        READ_ERRORS: read_errors_total,
        SCRAPE_ERROR: 1 if scrape_error else 0,
        LAST_SUCCESS: last_success,
    }
    for name, value in fixed.items():
        mtype, help_text = FIXED_METRICS[name]
        add(name, mtype, help_text, node_label, value)

    out = []
    for name in sorted(families):
        mtype, help_text, lines = families[name]
        out.append(f"# HELP {name} {_escape_help(help_text)}")
        out.append(f"# TYPE {name} {mtype}")
        out.extend(line for _, line in sorted(lines))
    return "\n".join(out) + "\n"


def write_atomically(directory, text):
    tmp = os.path.join(directory, TMP_NAME)
    final = os.path.join(directory, OUTPUT_NAME)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # node-exporter may run as another user
        os.replace(tmp, final)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


# -- main loop --------------------------------------------------------------


class Exporter:
    def __init__(self, cfg):
        self.cfg = cfg
        self.read_errors_total = 0
        self.last_success = 0.0

    def one_pass(self):
        """Collect and write once. Returns True if efa.prom was written."""
        devices, samples, errors = collect(self.cfg["ib_dir"])
        kept = []
        for sample in samples:
            counter = sample[2]
            if counter not in GAUGE_FILES and COUNTER_METRIC_FORMAT.format(counter) in METRIC_NAMES:
                errors.append(f"counter {counter} of {sample[0]} port {sample[1]} skipped: name clash")
                continue
            kept.append(sample)
        self.read_errors_total += len(errors)
        now = time.time()
        if not errors:
            self.last_success = now
        text = render(
            self.cfg["node"],
            devices,
            kept,
            self.read_errors_total,
            bool(errors),
            round(self.last_success, 3),
        )
        if errors:
            shown = "; ".join(errors[:5])
            more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
            print(f"efa_metrics: skipped {len(errors)}: {shown}{more}", file=sys.stderr, flush=True)
        try:
            write_atomically(self.cfg["textfile_dir"], text)
        except OSError as e:
            print(
                f"efa_metrics: cannot write {os.path.join(self.cfg['textfile_dir'], OUTPUT_NAME)}: {e}",
                file=sys.stderr,
                flush=True,
            )
            return False
        return True


def parse_args(argv):
    parser = argparse.ArgumentParser(
        prog="efa_metrics.py",
        description="Write EFA hw_counters as node-exporter textfile metrics (see the module docstring).",
    )
    parser.add_argument("--once", action="store_true", help="write efa.prom once and exit")
    return parser.parse_args(argv)  # exits 2 on a bad argument


def main(argv=None, env=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    env = os.environ if env is None else env
    try:
        cfg = load_config(env)
    except ConfigError as e:
        print(f"efa_metrics: configuration error: {e}", file=sys.stderr, flush=True)
        return EXIT_CONFIG

    exporter = Exporter(cfg)
    if args.once:
        return EXIT_OK if exporter.one_pass() else EXIT_WRITE_FAILED

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()  # the pass in progress finishes; the wait below returns at once

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(
        "efa_metrics: node={} reading {} every {}s into {}".format(
            cfg["node"], cfg["ib_dir"], cfg["interval"], os.path.join(cfg["textfile_dir"], OUTPUT_NAME)
        ),
        file=sys.stderr,
        flush=True,
    )
    while not stop.is_set():
        started = time.monotonic()
        exporter.one_pass()
        stop.wait(max(0.0, cfg["interval"] - (time.monotonic() - started)))
    print("efa_metrics: stopped by signal", file=sys.stderr, flush=True)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
