#!/usr/bin/env python3
"""Check the bus bandwidth reported by nccl-tests ``all_reduce_perf``.

Runs in the MPIJob launcher pod (image public.ecr.aws/hpc-cloud/nccl-tests,
which ships python3) at the end of a pipeline such as::

    mpirun ... /opt/nccl-tests/build/all_reduce_perf -b 8 -e 16G -f 2 -g 1 \\
        | python3 /opt/nccl-check/nccl_check.py

It echoes its input line by line (so the pod log still shows the whole
table), finds the row whose size column equals the configured message size,
takes its out-of-place busbw and compares it with a minimum.

Exit codes:
  0  busbw >= minimum                        (NCCL CHECK PASS)
  1  busbw <  minimum                        (NCCL CHECK FAIL)
  2  cannot judge: no all_reduce_perf rows (empty input, mpirun failed),
     not all_reduce_perf output, #wrong > 0 / out-of-bounds errors,
     or no row for the configured size      (NCCL CHECK ERROR)
  64 bad arguments / configuration          (NCCL CHECK ERROR)

Standard library only; Python 3.8+.
"""

import argparse
import os
import re
import sys

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_ERROR = 2
EXIT_USAGE = 64

TCP_HINT = (
    "a figure near 3 GB/s means NCCL fell back to TCP: check "
    "vpc.amazonaws.com/efa requests, the node security group self rules "
    "and the EFA device plugin"
)

# `mpirun --tag-output` prefixes every line with "[jobid,rank]<stdout>:".
_TAG_RE = re.compile(r"^\[\d+,\d+\]<(?:stdout|stderr)>:\s?")
# A results row starts with two integers: size (B) and count (elements).
_ROW_RE = re.compile(r"^\s*\d+\s+\d+\s")
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([kKmMgGtT]?)\s*[bB]?\s*$")
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


class CheckError(Exception):
    """Output cannot be judged (exit 2)."""


def parse_size(text):
    """Bytes, optionally with a K/M/G/T suffix (powers of 1024, as nccl-tests -b/-e)."""
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"not a byte count: {text!r}")
    value = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if value <= 0:
        raise ValueError(f"size must be > 0: {text!r}")
    return value


def parse_gbps(text):
    value = float(text)
    if not value > 0 or value == float("inf"):
        raise ValueError(f"must be a positive number: {text!r}")
    return value


def fmt_num(value):
    return f"{value:g}"


class Results:
    """Incremental parser for all_reduce_perf stdout."""

    def __init__(self):
        self.lines = 0
        self.header = None  # column names from the "#  size  count ..." line
        self.program = None  # from "# Collective test starting: <name>"
        self.out_of_bounds = None
        self.rows = []  # token lists of results rows
        self.stray_rows = 0  # row-like lines seen before any header

    def feed(self, raw_line):
        self.lines += 1
        line = _TAG_RE.sub("", raw_line.rstrip("\r\n"))
        stripped = line.strip()
        if stripped.startswith("#"):
            self._comment(stripped[1:].strip())
        elif _ROW_RE.match(line):
            if self.header is None:
                self.stray_rows += 1
            else:
                self.rows.append(line.split())

    def _comment(self, text):
        tokens = text.split()
        if (
            len(tokens) >= 3
            and tokens[0] == "size"
            and tokens[1] == "count"
            and "busbw" in tokens
        ):
            if self.header is None:
                self.header = tokens
            return
        if text.startswith("Collective test starting:"):
            self.program = text.split(":", 1)[1].strip()
            return
        if text.startswith("Out of bounds values"):
            match = re.search(r":\s*(\d+)", text)
            if match:
                self.out_of_bounds = int(match.group(1))

    # -- evaluation -------------------------------------------------------

    def _col(self, name):
        return self.header.index(name) if name in self.header else None

    def check_is_all_reduce(self):
        if self.program and "all_reduce" not in os.path.basename(self.program):
            raise CheckError(
                f"not all_reduce_perf output: collective test is {self.program!r}"
            )
        redop = self._col("redop")
        if redop is None:
            raise CheckError(
                "not all_reduce_perf output: results header has no redop column: "
                + " ".join(self.header)
            )
        for row in self.rows:
            if len(row) > redop and row[redop] == "none":
                raise CheckError(
                    "not all_reduce_perf output: rows have redop 'none' "
                    "(a non-reducing collective such as all_gather_perf)"
                )

    def wrong_columns(self):
        return [i for i, name in enumerate(self.header) if name in ("#wrong", "error")]

    def check_no_errors(self):
        bad = []
        for row in self.rows:
            for idx in self.wrong_columns():
                if idx >= len(row) or row[idx] == "N/A":
                    continue
                try:
                    wrong = float(row[idx])
                except ValueError:
                    continue
                if wrong != 0:
                    bad.append((row[0], row[idx]))
                    break
        if bad:
            sizes = ", ".join(f"{s} B (#wrong {w})" for s, w in bad[:5])
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            raise CheckError(
                f"data errors: {len(bad)} row(s) with #wrong > 0: {sizes}{more}; "
                "NCCL produced wrong results, bandwidth figures are meaningless"
            )
        if self.out_of_bounds:
            raise CheckError(
                f"data errors: 'Out of bounds values : {self.out_of_bounds} FAILED' "
                "in the all_reduce_perf summary"
            )

    def busbw_at(self, size):
        """Out-of-place busbw (the first busbw column) of the first row of `size`."""
        busbw = self.header.index("busbw")
        seen = []
        for row in self.rows:
            if int(row[0]) != size:
                seen.append(int(row[0]))
                continue
            if len(row) <= busbw:
                text = " ".join(row)
                raise CheckError(f"truncated row for {size} B: {text}")
            try:
                return float(row[busbw]), row[busbw]
            except ValueError:
                raise CheckError(
                    f"unparsable busbw {row[busbw]!r} in row for {size} B"
                ) from None
        span = f"sizes seen {min(seen)}..{max(seen)} B" if seen else "no sizes seen"
        raise CheckError(
            f"no row for message size {size} B ({span}); all_reduce_perf must run "
            f"with -b <= {size} and -e >= {size} and a -f step that hits it, or "
            "mpirun stopped before reaching it"
        )


def evaluate(results, size, min_busbw, label):
    """Return (exit_code, result_line)."""
    suffix = f" ({label})" if label else ""
    try:
        if results.header is None:
            if results.lines == 0:
                raise CheckError(
                    "empty input: no all_reduce_perf output at all "
                    "(did mpirun fail before the test started?)"
                )
            if results.stray_rows:
                raise CheckError(
                    f"not all_reduce_perf output: found {results.stray_rows} "
                    "table-like rows but no '#  size  count  type ... busbw' header"
                )
            raise CheckError(
                f"no all_reduce_perf results in {results.lines} line(s) of input "
                "(mpirun failed or the test did not start; see the log above)"
            )
        if not results.rows:
            raise CheckError(
                "all_reduce_perf printed its header but no result rows "
                "(mpirun/NCCL failed during the run; see the log above)"
            )
        results.check_is_all_reduce()
        results.check_no_errors()
        busbw, busbw_text = results.busbw_at(size)
    except CheckError as exc:
        return EXIT_ERROR, f"NCCL CHECK ERROR: {exc}"

    measured = f"busbw {busbw_text} GB/s at {size} B"
    expected = f"expected {fmt_num(min_busbw)} GB/s{suffix}"
    if busbw >= min_busbw:
        return EXIT_PASS, f"NCCL CHECK PASS: {measured} >= {expected}"
    return EXIT_FAIL, f"NCCL CHECK FAIL: {measured} is below {expected}; {TCP_HINT}"


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad usage; keep 2 for 'cannot judge the output'."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"NCCL CHECK ERROR: {message}\n")


def build_parser():
    parser = _Parser(
        description="Echo nccl-tests all_reduce_perf output and check the "
        "out-of-place busbw at one message size against a minimum.",
    )
    parser.add_argument(
        "input",
        nargs="?",
        default="-",
        help="all_reduce_perf output file (default: stdin, also '-')",
    )
    parser.add_argument(
        "--size",
        default=os.environ.get("NCCL_CHECK_SIZE_BYTES"),
        help="message size in bytes whose row is checked, e.g. 1073741824 or 1G "
        "(env NCCL_CHECK_SIZE_BYTES)",
    )
    parser.add_argument(
        "--min-busbw",
        default=os.environ.get("NCCL_CHECK_MIN_BUSBW"),
        help="minimum out-of-place busbw in GB/s (env NCCL_CHECK_MIN_BUSBW)",
    )
    parser.add_argument(
        "--label",
        default=os.environ.get("NCCL_CHECK_LABEL", ""),
        help="where the expectation comes from, shown in the result line "
        "(env NCCL_CHECK_LABEL)",
    )
    return parser


def usage_error(message):
    print(f"NCCL CHECK ERROR: {message}", file=sys.stderr, flush=True)
    return EXIT_USAGE


def open_input(path):
    if path == "-":
        return open(
            sys.stdin.fileno(), encoding="utf-8", errors="replace", closefd=False
        )
    return open(path, encoding="utf-8", errors="replace")


def main(argv=None):
    args = build_parser().parse_args(argv)
    if not args.size:
        return usage_error("message size not set: pass --size or NCCL_CHECK_SIZE_BYTES")
    if not args.min_busbw:
        return usage_error(
            "minimum busbw not set: pass --min-busbw or NCCL_CHECK_MIN_BUSBW"
        )
    try:
        size = parse_size(args.size)
    except ValueError as exc:
        return usage_error(f"bad --size/NCCL_CHECK_SIZE_BYTES: {exc}")
    try:
        min_busbw = parse_gbps(args.min_busbw)
    except ValueError as exc:
        return usage_error(f"bad --min-busbw/NCCL_CHECK_MIN_BUSBW: {exc}")

    try:
        stream = open_input(args.input)
    except OSError as exc:
        return usage_error(f"cannot read {args.input}: {exc}")

    results = Results()
    out = sys.stdout
    if hasattr(out, "reconfigure"):
        out.reconfigure(errors="replace")  # never die echoing odd bytes
    with stream:
        # readline (not block reads) so each line reaches the pod log as
        # soon as mpirun prints it.
        for line in iter(stream.readline, ""):
            out.write(line if line.endswith("\n") else line + "\n")
            out.flush()
            results.feed(line)

    code, message = evaluate(results, size, min_busbw, args.label.strip())
    print(message, flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
