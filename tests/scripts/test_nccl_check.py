"""Run components/scripts/nccl_check.py as a program on all_reduce_perf output.

The fixtures reproduce nccl-tests' own printf formats (src/util.cu:
writeDeviceReport, writeResultHeader, writeBenchmarkLinePreamble,
writeBenchmarkLineBody, getFloatStr, writeResultFooter) for a 2-node,
16-rank run of ``all_reduce_perf -b 8 -e 16G -f 2 -g 1``.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = (
    Path(__file__).resolve().parents[2] / "components" / "scripts" / "nccl_check.py"
)

GIB = 1 << 30
P5_LABEL = "90% of 437.0 GB/s published for 2x p5.48xlarge"
TCP_HINT = "a figure near 3 GB/s means NCCL fell back to TCP"

P5_BUS_IDS = ["53", "64", "75", "86", "97", "a8", "b9", "ca"]
P4DE_BUS_IDS = ["10", "10", "20", "20", "90", "90", "a0", "a0"]


def float_str(value, width):
    """nccl-tests getFloatStr()."""
    power = 0
    val = 1
    while value >= val:
        power += 1
        val *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


# Column widths of writeResultHeader / writeBenchmarkLine*: "# %10s  %12s ..."
HEAD_WIDTHS = (10, 12, 8, 6, 6, 7, 6, 6, 6, 7, 6, 6, 6)
HEAD_NAMES = ("size", "count", "type", "redop", "root", "time", "algbw", "busbw")
HEAD_NAMES += ("#wrong", "time", "algbw", "busbw", "#wrong")
HEAD_UNITS = ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "")
HEAD_UNITS += ("(us)", "(GB/s)", "(GB/s)", "")


def header_line(values):
    """printf("# %10s  %12s  %8s  %6s  %6s  %7s ... %6s %*s\\n", ..., 0, "")."""
    return "# " + "  ".join(f"{v:>{w}}" for v, w in zip(values, HEAD_WIDTHS)) + " "


def all_reduce_output(
    busbw_at_1g,
    latency_us,
    gpu="NVIDIA H100 80GB HBM3",
    bus_ids=P5_BUS_IDS,
    max_bytes=16 * GIB,
    nodes=2,
    gpus_per_node=8,
    wrong=None,
    old_format=False,
    tag_output=False,
    nccl_info=False,
    truncate_after_header=False,
):
    """Text of a realistic all_reduce_perf run.

    time(size) = latency + size / B, with B chosen so that busbw at 1 GiB is
    exactly ``busbw_at_1g`` (all_reduce busbw = algbw * 2(n-1)/n).
    """
    ranks = nodes * gpus_per_node
    factor = 2.0 * (ranks - 1) / ranks
    algbw_1g = busbw_at_1g / factor
    time_1g = GIB / (algbw_1g * 1e3)
    bw_bytes_per_us = GIB / (time_1g - latency_us)
    wrong = wrong or {}

    lines = []
    if not old_format:
        lines += [
            "# nccl-tests version 2.16.9 nccl-headers=22707 nccl-library=22707",
            "# Collective test starting: all_reduce_perf",
        ]
    preamble = (
        f"# nThread 1 nGpus 1 minBytes 8 maxBytes {max_bytes} step: 2(factor) "
        "warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0"
    )
    lines += [preamble + ("" if old_format else " unalign: 0"), "#", "# Using devices"]
    for rank in range(ranks):
        node, dev = divmod(rank, gpus_per_node)
        host = f"rltrain-nccl-worker-{node}"
        lines.append(
            f"#  Rank {rank:2d} Group {0:2d} Pid {41 + dev:6d} on {host:>10} "
            f"device {dev:2d} [0000:{bus_ids[dev]}:00] {gpu}"
        )
    if nccl_info:
        info = "rltrain-nccl-worker-0:41:41 [0] NCCL INFO "
        lines += [
            info + "Bootstrap: Using eth0:10.0.1.5<0>",
            info + "NET/OFI Initializing aws-ofi-nccl 1.16.3",
            info + "NET/OFI Selected provider is efa, fabric is efa-direct "
            "(found 32 nics)",
            info + "comm 0x5581c0 rank 0 nRanks 16 nNodes 2 localRanks 8 "
            "localRank 0 MNNVL 0",
        ]
    lines += [
        "#",
        header_line(("",) * 5)[:-1]
        + "           out-of-place                       in-place          ",
        header_line(HEAD_NAMES),
        header_line(HEAD_UNITS),
    ]
    if truncate_after_header:
        return "\n".join(lines) + "\n"

    total_busbw = 0.0
    size = 8
    nrows = 0
    while size <= max_bytes:
        # "%12li  %12li  %8s  %6s  %6s" (root printed with "%6i")
        row = f"{size:12d}  {size // 4:12d}  {'float':>8}  {'sum':>6}  {-1:6d}"
        for in_place in (False, True):
            t = latency_us + size / bw_bytes_per_us + (0.3 if in_place else 0.0)
            algbw = size / t / 1e3
            busbw = algbw * factor
            if not in_place:
                total_busbw += busbw
            # "  %7s  %6s  %6s  %6g"
            row += (
                f"  {float_str(t, 7)}  {float_str(algbw, 6)}  "
                f"{float_str(busbw, 6)}  {wrong.get(size, 0):6g}"
            )
        lines.append(row)
        nrows += 1
        size *= 2
    bad = sum(1 for v in wrong.values() if v)
    lines += [
        f"# {'Out of bounds values':<20} : {bad} {'FAILED' if bad else 'OK'}",
        f"# {'Avg bus bandwidth':<20} : {total_busbw / nrows:g} ",
        "#",
    ]
    if not old_format:
        lines.append("# Collective test concluded: all_reduce_perf")
    lines.append("")
    if tag_output:
        lines = ["[1,0]<stdout>:" + line for line in lines]
    return "\n".join(lines) + "\n"


P5_OUTPUT = all_reduce_output(437.0, latency_us=58.0)
P4DE_OUTPUT = all_reduce_output(
    76.8, latency_us=95.0, gpu="NVIDIA A100-SXM4-80GB", bus_ids=P4DE_BUS_IDS
)
TCP_OUTPUT = all_reduce_output(3.04, latency_us=420.0)


def run(args=(), stdin="", env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_CHECK_")}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )


def last_line(proc):
    lines = proc.stdout.rstrip("\n").splitlines()
    assert lines, proc.stderr
    return lines[-1]


P5_ARGS = ["--size", str(GIB), "--min-busbw", "393.3", "--label", P5_LABEL]


def test_fixture_looks_like_all_reduce_perf():
    lines = P5_OUTPUT.splitlines()
    assert any(line.startswith("#  Rank 15 Group  0 Pid") for line in lines)
    header = next(line for line in lines if "#wrong" in line)
    assert header.split() == [
        "#",
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong",
    ]
    row = next(line for line in lines if line.split()[:1] == [str(GIB)])
    assert row.split()[1:5] == [str(GIB // 4), "float", "sum", "-1"]
    assert row.split()[7] == "437.00"
    assert lines[-1] != "" or lines[-2].startswith("# Collective test concluded")
    sizes = [int(line.split()[0]) for line in lines if line[:1] == " "]
    assert sizes[0] == 8 and sizes[-1] == 16 * GIB and len(sizes) == 32


def test_pass_p5_from_stdin_echoes_table():
    proc = run(P5_ARGS, stdin=P5_OUTPUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_line(proc) == (
        "NCCL CHECK PASS: busbw 437.00 GB/s at 1073741824 B >= expected 393.3 GB/s "
        "(90% of 437.0 GB/s published for 2x p5.48xlarge)"
    )
    # The whole all_reduce_perf output is passed through before the verdict.
    assert proc.stdout.startswith(P5_OUTPUT)
    assert proc.stdout.count("NCCL CHECK") == 1


def test_pass_p4de_configured_by_env():
    proc = run(
        stdin=P4DE_OUTPUT,
        env_extra={
            "NCCL_CHECK_SIZE_BYTES": str(GIB),
            "NCCL_CHECK_MIN_BUSBW": "69.1",
            "NCCL_CHECK_LABEL": "90% of 76.8 GB/s published for 2x p4de.24xlarge",
        },
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_line(proc).startswith(
        "NCCL CHECK PASS: busbw 76.80 GB/s at 1073741824 B"
    )
    assert "2x p4de.24xlarge" in last_line(proc)


def test_cli_flags_override_env():
    proc = run(
        ["--min-busbw", "393.3"],
        stdin=P5_OUTPUT,
        env_extra={"NCCL_CHECK_SIZE_BYTES": "1G", "NCCL_CHECK_MIN_BUSBW": "999"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "at 1073741824 B >= expected 393.3 GB/s" in last_line(proc)


def test_fail_tcp_fallback():
    proc = run(P5_ARGS, stdin=TCP_OUTPUT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    line = last_line(proc)
    assert line.startswith(
        "NCCL CHECK FAIL: busbw 3.04 GB/s at 1073741824 B is below expected 393.3 GB/s "
        "(90% of 437.0 GB/s published for 2x p5.48xlarge); "
    )
    assert TCP_HINT in line
    for hint in (
        "vpc.amazonaws.com/efa",
        "security group self rules",
        "EFA device plugin",
    ):
        assert hint in line


def test_fail_p4de_figures_against_p5_expectation():
    proc = run(P5_ARGS, stdin=P4DE_OUTPUT)
    assert proc.returncode == 1
    assert last_line(proc).startswith("NCCL CHECK FAIL: busbw 76.80 GB/s")


def test_file_argument_same_as_stdin(tmp_path):
    path = tmp_path / "all_reduce_perf.log"
    path.write_text(TCP_OUTPUT)
    from_file = run([*P5_ARGS, str(path)])
    from_stdin = run(P5_ARGS, stdin=TCP_OUTPUT)
    assert from_file.returncode == from_stdin.returncode == 1
    assert from_file.stdout == from_stdin.stdout
    assert run([*P5_ARGS, "-"], stdin=TCP_OUTPUT).stdout == from_stdin.stdout


def test_missing_file_is_usage_error(tmp_path):
    proc = run([*P5_ARGS, str(tmp_path / "nope.log")])
    assert proc.returncode not in (0, 1, 2)
    assert "cannot read" in proc.stderr


def test_missing_size_row_exits_2():
    # Run stopped at -e 512M: there is no 1 GiB row.
    output = all_reduce_output(437.0, latency_us=58.0, max_bytes=512 << 20)
    proc = run(P5_ARGS, stdin=output)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = last_line(proc)
    assert line.startswith("NCCL CHECK ERROR: no row for message size 1073741824 B")
    assert "sizes seen 8..536870912 B" in line


def test_size_not_on_the_factor_2_grid_exits_2():
    proc = run(["--size", "1000000000", "--min-busbw", "393.3"], stdin=P5_OUTPUT)
    assert proc.returncode == 2
    assert "no row for message size 1000000000 B" in last_line(proc)


@pytest.mark.parametrize("stdin", ["", "\n"])
def test_empty_input_is_not_a_pass(stdin):
    proc = run(P5_ARGS, stdin=stdin)
    assert proc.returncode == 2
    assert last_line(proc).startswith("NCCL CHECK ERROR:")


def test_mpirun_failure_text_only_is_not_a_pass():
    mpirun_error = (
        "--------------------------------------------------------------------------\n"
        "ORTE was unable to reliably start one or more daemons.\n"
        "This usually is caused by:\n"
        "--------------------------------------------------------------------------\n"
    )
    proc = run(P5_ARGS, stdin=mpirun_error)
    assert proc.returncode == 2
    assert proc.stdout.startswith(mpirun_error)
    assert "no all_reduce_perf results in 4 line(s)" in last_line(proc)


def test_header_without_rows_exits_2():
    output = all_reduce_output(437.0, latency_us=58.0, truncate_after_header=True)
    proc = run(P5_ARGS, stdin=output)
    assert proc.returncode == 2
    assert "header but no result rows" in last_line(proc)


def test_wrong_elements_exit_2_even_if_fast():
    output = all_reduce_output(437.0, latency_us=58.0, wrong={GIB * 4: 1048576})
    assert "1 FAILED" in output
    proc = run(P5_ARGS, stdin=output)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    line = last_line(proc)
    assert line.startswith("NCCL CHECK ERROR: data errors: 1 row(s) with #wrong > 0")
    assert "4294967296 B (#wrong 1.04858e+06)" in line


def test_not_all_reduce_output_exits_2():
    all_gather = P5_OUTPUT.replace("all_reduce_perf", "all_gather_perf")
    proc = run(P5_ARGS, stdin=all_gather)
    assert proc.returncode == 2
    assert "not all_reduce_perf output" in last_line(proc)
    assert "all_gather_perf" in last_line(proc)

    redop_none = P5_OUTPUT.replace("     sum", "    none").replace(
        "# Collective test starting: all_reduce_perf\n", ""
    )
    proc = run(P5_ARGS, stdin=redop_none)
    assert proc.returncode == 2
    assert "redop 'none'" in last_line(proc)


def test_old_format_with_mpirun_tag_output_and_nccl_info():
    # nccl-tests <= 2.13 (no version/"Collective test" lines) behind
    # `mpirun --tag-output`, interleaved with NCCL_DEBUG=INFO lines.
    output = all_reduce_output(
        437.0, latency_us=58.0, old_format=True, tag_output=True, nccl_info=True
    )
    assert output.startswith("[1,0]<stdout>:# nThread")
    proc = run(P5_ARGS, stdin=output)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert last_line(proc).startswith("NCCL CHECK PASS: busbw 437.00 GB/s")


@pytest.mark.parametrize(
    "args, env, needle",
    [
        (["--min-busbw", "393.3"], {}, "message size not set"),
        (["--size", str(GIB)], {}, "minimum busbw not set"),
        (["--size", "lots", "--min-busbw", "1"], {}, "NCCL_CHECK_SIZE_BYTES"),
        (
            [],
            {"NCCL_CHECK_SIZE_BYTES": "1G", "NCCL_CHECK_MIN_BUSBW": "-3"},
            "NCCL_CHECK_MIN_BUSBW",
        ),
    ],
)
def test_bad_configuration(args, env, needle):
    proc = run(args, stdin=P5_OUTPUT, env_extra=env)
    assert proc.returncode not in (0, 1, 2)
    assert needle in proc.stderr
