"""Run components/scripts/validate_node.py as a program against a fake node.

The fake node is a directory tree (VALIDATE_ROOT) holding
sys/class/infiniband/rdmap*, fsx/ and dev/shm/, plus a fake nvidia-smi
script. dev/shm is a plain directory, so its statvfs size is the tmp
filesystem's: the expectations are computed from os.statvfs here.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = (
    Path(__file__).resolve().parents[2] / "components" / "scripts" / "validate_node.py"
)
GIB = 1 << 30
NODE = "ip-10-0-1-5.us-west-2.compute.internal"


def write_fake_smi(path, gpus=8, exit_code=0):
    """An executable stand-in: prints `nvidia-smi -L` lines or fails."""
    lines = [
        f"GPU {i}: NVIDIA H100 80GB HBM3 "
        f"(UUID: GPU-5d2f7c1e-{i:04x}-8b3e-41c2-9a7d0c1e{i:04x})"
        for i in range(gpus)
    ]
    if exit_code:
        error = (
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
            "driver. Make sure that the latest NVIDIA driver is installed and running."
        )
        body = f"#!/bin/sh\ncat >&2 <<'EOF'\n{error}\nEOF\nexit {exit_code}\n"
    else:
        listing = "\n".join(lines)
        body = f"#!/bin/sh\ncat <<'EOF'\n{listing}\nEOF\n"
    path.write_text(body)
    path.chmod(0o755)
    return path


@pytest.fixture
def node(tmp_path):
    root = tmp_path / "root"
    ib = root / "sys" / "class" / "infiniband"
    ib.mkdir(parents=True)
    for i in range(32):
        (ib / f"rdmap{79 + i}s0").mkdir()
    (root / "fsx").mkdir()
    (root / "dev" / "shm").mkdir(parents=True)
    smi = write_fake_smi(tmp_path / "nvidia-smi")
    st = os.statvfs(root / "dev" / "shm")
    shm_gib = st.f_frsize * st.f_blocks / GIB
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "EXPECTED_GPUS": "8",
        "EXPECTED_EFA": "32",
        "SHM_MIN_GIB": "%.3f" % (shm_gib / 2),
        "NODE_NAME": NODE,
        "VALIDATE_ROOT": str(root),
        "NVIDIA_SMI": str(smi),
    }
    return {"root": root, "tmp": tmp_path, "env": env, "shm_gib": shm_gib}


def run(env):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
    )
    return proc


def summary(proc):
    lines = proc.stdout.rstrip("\n").splitlines()
    assert lines, proc.stderr
    assert sum(line.startswith("VALIDATION ") for line in lines) == 1, proc.stdout
    assert lines[-1].startswith("VALIDATION "), proc.stdout
    return lines[-1]


def shm_field(node, op, minimum):
    return "shm={:.1f}GiB{}{:.1f}GiB".format(node["shm_gib"], op, minimum)


def test_all_pass(node):
    proc = run(node["env"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    minimum = float(node["env"]["SHM_MIN_GIB"])
    assert summary(proc) == (
        "VALIDATION node={} gpus=8/8 efa=32/32 fsx=rw {} RESULT=PASS".format(
            NODE, shm_field(node, ">=", minimum)
        )
    )
    for name in ("gpus", "efa", "fsx", "shm"):
        assert f"CHECK {name} PASS:" in proc.stdout
    # The probe file is cleaned up.
    assert list((node["root"] / "fsx").iterdir()) == []


def test_node_name_defaults_to_hostname(node):
    env = dict(node["env"])
    del env["NODE_NAME"]
    proc = run(env)
    assert proc.returncode == 0
    import socket

    assert summary(proc).startswith(f"VALIDATION node={socket.gethostname()} ")


def test_wrong_gpu_count(node):
    write_fake_smi(Path(node["env"]["NVIDIA_SMI"]), gpus=7)
    proc = run(node["env"])
    assert proc.returncode == 1
    line = summary(proc)
    assert " gpus=7/8 " in line
    assert line.endswith("RESULT=FAIL failed=gpus")
    assert "CHECK gpus FAIL: 7 GPU(s)" in proc.stdout


def test_nvidia_smi_failing(node):
    write_fake_smi(Path(node["env"]["NVIDIA_SMI"]), exit_code=9)
    proc = run(node["env"])
    assert proc.returncode == 1
    assert summary(proc).endswith("RESULT=FAIL failed=gpus")
    assert " gpus=?/8 " in summary(proc)
    assert "-L exited 9: NVIDIA-SMI has failed" in proc.stdout


def test_nvidia_smi_missing(node):
    env = dict(node["env"], NVIDIA_SMI=str(node["tmp"] / "no-such-nvidia-smi"))
    proc = run(env)
    assert proc.returncode == 1
    assert summary(proc).endswith("RESULT=FAIL failed=gpus")
    assert "no-such-nvidia-smi not found" in proc.stdout


def test_fsx_missing(node):
    env = dict(node["env"], FSX_PATH="/fsx-not-mounted")
    proc = run(env)
    assert proc.returncode == 1
    line = summary(proc)
    assert " fsx=missing " in line and line.endswith("RESULT=FAIL failed=fsx")
    assert "/fsx-not-mounted does not exist" in proc.stdout


def test_fsx_is_a_file(node):
    # Works as root too, unlike chmod.
    (node["root"] / "fsx-file").write_text("not a mount\n")
    proc = run(dict(node["env"], FSX_PATH="/fsx-file"))
    assert proc.returncode == 1
    assert " fsx=notdir " in summary(proc)
    assert summary(proc).endswith("RESULT=FAIL failed=fsx")


@pytest.mark.skipif(
    not hasattr(os, "geteuid") or os.geteuid() == 0,
    reason="root ignores directory permissions",
)
def test_fsx_read_only(node):
    fsx = node["root"] / "fsx"
    fsx.chmod(0o555)
    try:
        proc = run(node["env"])
    finally:
        fsx.chmod(0o755)
    assert proc.returncode == 1
    assert " fsx=ro " in summary(proc)
    assert summary(proc).endswith("RESULT=FAIL failed=fsx")
    assert "cannot write /fsx/.validate-node-" in proc.stdout


def test_efa_count_mismatch(node):
    ib = node["root"] / "sys" / "class" / "infiniband"
    for entry in sorted(ib.iterdir())[16:]:
        entry.rmdir()
    proc = run(node["env"])
    assert proc.returncode == 1
    line = summary(proc)
    assert " efa=16/32 " in line and line.endswith("RESULT=FAIL failed=efa")


def test_efa_dir_absent_when_expected(node):
    ib = node["root"] / "sys" / "class" / "infiniband"
    for entry in ib.iterdir():
        entry.rmdir()
    ib.rmdir()
    proc = run(node["env"])
    assert proc.returncode == 1
    assert " efa=0/32 " in summary(proc)
    assert "/sys/class/infiniband is absent" in proc.stdout


def test_efa_not_expected(node):
    ib = node["root"] / "sys" / "class" / "infiniband"
    env = dict(node["env"], EXPECTED_EFA="0")
    # Present devices while none are expected: fail.
    proc = run(env)
    assert proc.returncode == 1
    assert " efa=32/0 " in summary(proc)
    # Directory absent: pass, and say EFA is not expected.
    for entry in ib.iterdir():
        entry.rmdir()
    ib.rmdir()
    proc = run(env)
    assert proc.returncode == 0, proc.stdout
    assert " efa=0/0 " in summary(proc)
    assert "CHECK efa PASS: EFA not expected" in proc.stdout


def test_shm_too_small(node):
    minimum = round(node["shm_gib"] * 2 + 1, 1)
    proc = run(dict(node["env"], SHM_MIN_GIB=str(minimum)))
    assert proc.returncode == 1
    line = summary(proc)
    assert " {} ".format(shm_field(node, "<", minimum)) in line
    assert line.endswith("RESULT=FAIL failed=shm")


def test_several_failures_listed(node):
    write_fake_smi(Path(node["env"]["NVIDIA_SMI"]), exit_code=9)
    env = dict(node["env"], FSX_PATH="/nope", SHM_MIN_GIB=str(node["shm_gib"] * 2 + 1))
    proc = run(env)
    assert proc.returncode == 1
    assert summary(proc).endswith("RESULT=FAIL failed=gpus,fsx,shm")


@pytest.mark.parametrize(
    "var, value",
    [
        ("EXPECTED_GPUS", None),
        ("EXPECTED_GPUS", "eight"),
        ("EXPECTED_EFA", "-1"),
        ("SHM_MIN_GIB", "lots"),
        ("SHM_MIN_GIB", ""),
        ("VALIDATE_ROOT", "relative/root"),
    ],
)
def test_bad_env_exits_2(node, var, value):
    env = dict(node["env"])
    if value is None:
        del env[var]
    else:
        env[var] = value
    proc = run(env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert var in proc.stderr
    line = summary(proc)
    assert line.startswith(f"VALIDATION node={NODE} RESULT=ERROR")
    assert var in line
