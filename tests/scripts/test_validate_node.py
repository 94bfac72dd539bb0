"""Run components/scripts/validate_node.py as a program against a fake node.

The fake node is a directory tree (VALIDATE_ROOT) holding
sys/class/infiniband/rdmap* (the host's EFA devices, as sysfs shows them in
any container), dev/infiniband/uverbs* (the EFA devices the pod was
allocated; plain files here, character devices on a node), fsx/ and dev/shm/,
plus a fake nvidia-smi script. dev/shm is a plain directory, so its statvfs size is the tmp
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
POD_EFA = "(/dev/infiniband/uverbs*)"


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


def set_pod_efa(root, count):
    """Give the pod exactly `count` EFA devices: dev/infiniband/uverbs0..count-1."""
    dev = root / "dev" / "infiniband"
    dev.mkdir(parents=True, exist_ok=True)
    for entry in dev.iterdir():
        entry.unlink()
    for i in range(count):
        (dev / f"uverbs{i}").write_text("")
    return dev


def remove_host_efa(root):
    ib = root / "sys" / "class" / "infiniband"
    for entry in ib.iterdir():
        entry.rmdir()
    ib.rmdir()


def efa_line(proc):
    lines = [line for line in proc.stdout.splitlines() if line.startswith("CHECK efa ")]
    assert len(lines) == 1, proc.stdout
    return lines[0]


@pytest.fixture
def node(tmp_path):
    root = tmp_path / "root"
    ib = root / "sys" / "class" / "infiniband"
    ib.mkdir(parents=True)
    for i in range(32):
        (ib / f"rdmap{79 + i}s0").mkdir()
    set_pod_efa(root, 32)
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


def run(env, *args):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args],
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


def test_efa_all_allocated_passes(node):
    # Pod got all 32 of the host's 32 devices.
    proc = run(node["env"])
    assert proc.returncode == 0, proc.stdout
    assert " efa=32/32 " in summary(proc)
    assert efa_line(proc) == (
        f"CHECK efa PASS: 32 EFA device(s) allocated to this pod {POD_EFA}, "
        "host has 32"
    )


def test_efa_pod_got_fewer_than_host_fails(node):
    # sysfs shows the host's 32 devices, but the pod was allocated only 4:
    # the host count matching EXPECTED_EFA must not make this pass.
    set_pod_efa(node["root"], 4)
    proc = run(node["env"])
    assert proc.returncode == 1, proc.stdout
    line = summary(proc)
    assert " efa=4/32 " in line and line.endswith("RESULT=FAIL failed=efa")
    detail = efa_line(proc)
    assert detail.startswith(
        f"CHECK efa FAIL: 4 EFA device(s) allocated to this pod {POD_EFA}, "
        "host has 32, expected 32 ("
    )
    assert "request vpc.amazonaws.com/efa: 32" in detail
    assert "launch template" not in detail


def test_efa_host_has_too_few(node):
    # The pod got all the host has, but the node has fewer than expected.
    ib = node["root"] / "sys" / "class" / "infiniband"
    for entry in sorted(ib.iterdir())[16:]:
        entry.rmdir()
    set_pod_efa(node["root"], 16)
    proc = run(node["env"])
    assert proc.returncode == 1
    assert " efa=16/32 " in summary(proc)
    detail = efa_line(proc)
    assert detail.startswith(
        f"CHECK efa FAIL: 16 EFA device(s) allocated to this pod {POD_EFA}, "
        "host has 16, expected 32 ("
    )
    assert "launch template" in detail


def test_efa_pod_count_is_what_counts_not_host(node):
    # Pod got what was asked for on a host with more devices: pass, and still
    # say how many the host has.
    set_pod_efa(node["root"], 4)
    proc = run(dict(node["env"], EXPECTED_EFA="4"))
    assert proc.returncode == 0, proc.stdout
    assert " efa=4/4 " in summary(proc)
    assert efa_line(proc) == (
        f"CHECK efa PASS: 4 EFA device(s) allocated to this pod {POD_EFA}, "
        "host has 32"
    )


def test_efa_only_uverbs_entries_count(node):
    dev = set_pod_efa(node["root"], 31)
    for name in ("rdma_cm", "uverbs", "uverbsX", "umad0", "issm0"):
        (dev / name).write_text("")
    proc = run(node["env"])
    assert proc.returncode == 1
    assert " efa=31/32 " in summary(proc)
    assert "31 EFA device(s) allocated to this pod" in efa_line(proc)
    (dev / "uverbs31").write_text("")
    proc = run(node["env"])
    assert proc.returncode == 0, proc.stdout
    assert " efa=32/32 " in summary(proc)


def test_efa_dev_infiniband_absent_when_expected(node):
    dev = set_pod_efa(node["root"], 0)
    dev.rmdir()
    proc = run(node["env"])
    assert proc.returncode == 1
    line = summary(proc)
    assert " efa=0/32 " in line and line.endswith("RESULT=FAIL failed=efa")
    detail = efa_line(proc)
    assert detail.startswith(
        "CHECK efa FAIL: /dev/infiniband is absent in this pod, "
        "expected 32 EFA device(s), host has 32 ("
    )
    assert "request vpc.amazonaws.com/efa: 32" in detail
    assert "aws-efa-k8s-device-plugin" in detail


def test_efa_no_uverbs_when_expected(node):
    set_pod_efa(node["root"], 0)
    proc = run(node["env"])
    assert proc.returncode == 1
    assert " efa=0/32 " in summary(proc)
    detail = efa_line(proc)
    assert detail.startswith(
        f"CHECK efa FAIL: 0 EFA device(s) allocated to this pod {POD_EFA}, "
        "host has 32, expected 32 ("
    )
    assert "request vpc.amazonaws.com/efa: 32" in detail


def test_efa_host_sysfs_absent(node):
    # The host count is information only: the pod's devices decide.
    remove_host_efa(node["root"])
    proc = run(node["env"])
    assert proc.returncode == 0, proc.stdout
    assert efa_line(proc) == (
        f"CHECK efa PASS: 32 EFA device(s) allocated to this pod {POD_EFA}, "
        "host has none (/sys/class/infiniband absent)"
    )


def test_efa_not_expected(node):
    env = dict(node["env"], EXPECTED_EFA="0")
    # The pod has devices while none are expected: fail, naming them.
    set_pod_efa(node["root"], 2)
    proc = run(env)
    assert proc.returncode == 1
    assert " efa=2/0 " in summary(proc)
    assert efa_line(proc).startswith(
        f"CHECK efa FAIL: EFA not expected but 2 EFA device(s) allocated to this "
        f"pod {POD_EFA}, host has 32: uverbs0 uverbs1 ("
    )
    # No uverbs in the pod: pass, although the host (sysfs) has 32.
    set_pod_efa(node["root"], 0)
    proc = run(env)
    assert proc.returncode == 0, proc.stdout
    assert " efa=0/0 " in summary(proc)
    assert efa_line(proc) == (
        "CHECK efa PASS: EFA not expected and none allocated to this pod "
        "(host has 32)"
    )
    # /dev/infiniband absent and no EFA on the host: pass too.
    (node["root"] / "dev" / "infiniband").rmdir()
    remove_host_efa(node["root"])
    proc = run(env)
    assert proc.returncode == 0, proc.stdout
    assert " efa=0/0 " in summary(proc)
    assert efa_line(proc) == (
        "CHECK efa PASS: EFA not expected and none allocated to this pod "
        "(host has none (/sys/class/infiniband absent))"
    )


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


# -- the image's EFA provider (--efa-provider IMAGE: a multi-node stack with EFA) ------------------

IMAGE = "rltrain-p5/training:embodied-maniskill_libero-050543189957-3a8d6a4b31f4"
# What `fi_info -p efa -t FI_EP_RDM` prints on a node with EFA (libfabric's fi_info(1) output, one
# block per fabric interface; the EC2 user guide's efa-start shows the same `provider: efa`).
FI_INFO_EFA = """provider: efa
    fabric: efa
    domain: rdmap79s0-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
"""
FI_INFO_TCP = """provider: tcp;ofi_rxm
    fabric: 10.0.0.0/16
    domain: eth0
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_RXM
"""


def write_fake_fi_info(path, stdout="", stderr="", exit_code=0):
    """A stand-in fi_info that records its arguments and prints what a real one would."""
    path.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > "{path}.args"\n'
        f"cat <<'EOF'\n{stdout}EOF\n"
        f"cat >&2 <<'EOF'\n{stderr}EOF\n"
        f"exit {exit_code}\n"
    )
    path.chmod(0o755)
    return path


def run_provider(node, fi_info):
    return run(dict(node["env"], FI_INFO=str(fi_info)), "--efa-provider", IMAGE)


def provider_line(proc):
    lines = [line for line in proc.stdout.splitlines() if line.startswith("CHECK provider ")]
    assert len(lines) == 1, proc.stdout
    return lines[0]


def test_provider_present_passes(node):
    fi = write_fake_fi_info(node["tmp"] / "fi_info", stdout=FI_INFO_EFA)
    proc = run_provider(node, fi)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert provider_line(proc).startswith("CHECK provider PASS:")
    assert summary(proc).endswith(" provider=efa RESULT=PASS")
    # The provider and the endpoint type NCCL's plugin opens (aws-ofi-nccl: FI_EP_RDM).
    assert Path(f"{fi}.args").read_text().split() == ["-p", "efa", "-t", "FI_EP_RDM"]


def test_provider_absent_fails_naming_the_image_and_the_fix(node):
    # libfabric without the EFA provider: fi_getinfo finds nothing (-61, No data available).
    fi = write_fake_fi_info(node["tmp"] / "fi_info", stderr="fi_getinfo: -61 (No data available)\n",
                            exit_code=1)
    proc = run_provider(node, fi)
    assert proc.returncode == 1
    line = provider_line(proc)
    assert line.startswith("CHECK provider FAIL:") and "exited 1: fi_getinfo: -61 (No data available)" in line
    assert f"{IMAGE} has no working EFA provider" in line and "TCP sockets" in line
    assert "workloads.image: {build: {target: ...}}" in line and "docs/running-for-real.md" in line
    assert summary(proc).endswith(" provider=noefa RESULT=FAIL failed=provider")


def test_provider_wrong_provider_fails(node):
    # A fi_info that answers with another provider only (tcp over rxm, what libfabric falls back to).
    fi = write_fake_fi_info(node["tmp"] / "fi_info", stdout=FI_INFO_TCP)
    proc = run_provider(node, fi)
    assert proc.returncode == 1
    line = provider_line(proc)
    assert "lists only tcp;ofi_rxm" in line and f"{IMAGE} has no working EFA provider" in line
    assert summary(proc).endswith(" provider=noefa RESULT=FAIL failed=provider")


def test_provider_fi_info_missing_fails(node):
    proc = run_provider(node, node["tmp"] / "no-such-fi_info")
    assert proc.returncode == 1
    line = provider_line(proc)
    assert "not found" in line and f"{IMAGE} has no libfabric" in line and "EFA installer" in line
    assert summary(proc).endswith(" provider=nofabric RESULT=FAIL failed=provider")


def test_provider_not_checked_by_default(node):
    fi = write_fake_fi_info(node["tmp"] / "fi_info", exit_code=1)
    proc = run(dict(node["env"], FI_INFO=str(fi)))
    assert proc.returncode == 0 and "CHECK provider" not in proc.stdout and "provider=" not in summary(proc)
    assert not Path(f"{fi}.args").exists()


@pytest.mark.parametrize("args", [("--efa-provider",), ("--efa-provider", ""), ("--efa", IMAGE)])
def test_provider_arguments_are_checked(node, args):
    proc = run(node["env"], *args)
    assert proc.returncode == 2 and "arguments: --efa-provider IMAGE or none" in proc.stdout
