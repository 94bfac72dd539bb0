"""cluster/build.sh as a program: its options, its refusals and the no-op rebuild, without building.

The build itself (an hour on two cores) is not run here: a copy of the script, versions.env and the
wrapper modules runs against a temporary cache. A reuse is checked with stub binaries in a cache
directory marked complete, so it shows that a second run with the same key builds nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GO = shutil.which("go")
BASH = shutil.which("bash") or "/bin/bash"


def go_126() -> bool:
    if not GO:
        return False
    out = subprocess.run([GO, "env", "GOVERSION"], capture_output=True, text=True).stdout.strip()
    m = re.match(r"go1\.(\d+)", out)
    return bool(m and int(m.group(1)) >= 26)


needs_go = pytest.mark.skipif(not go_126(), reason="needs Go 1.26+ (cluster/build.sh reads the wrapper modules with it)")


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A copy of what build.sh reads: cluster/{build.sh,versions.env,go/} and requirements.txt."""
    repo = tmp_path / "repo"
    (repo / "cluster").mkdir(parents=True)
    shutil.copy2(ROOT / "cluster" / "build.sh", repo / "cluster" / "build.sh")
    shutil.copy2(ROOT / "cluster" / "versions.env", repo / "cluster" / "versions.env")
    shutil.copytree(ROOT / "cluster" / "go", repo / "cluster" / "go")
    shutil.copy2(ROOT / "requirements.txt", repo / "requirements.txt")
    return repo


def run(repo: Path, *args: str, path: str | None = None, **env: str) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("RLTRAIN_") and k != "CI"}
    e["RLTRAIN_SIM_CACHE"] = str(repo.parent / "cache")
    if path is not None:
        e["PATH"] = path
    e.update(env)
    return subprocess.run([BASH, str(repo / "cluster" / "build.sh"), *args], cwd=repo, env=e,
                          capture_output=True, text=True, timeout=300)


def edit_versions_env(repo: Path, old: str, new: str) -> None:
    """Replace `old` with `new` in the copy's cluster/versions.env (e.g. one version line)."""
    env_file = repo / "cluster" / "versions.env"
    env_file.write_text(env_file.read_text().replace(old, new))


def no_go_path(tmp_path: Path) -> str:
    """A PATH with the shell tools build.sh needs but no `go`."""
    d = tmp_path / "nogo"
    d.mkdir()
    for tool in ("sed", "cat", "dirname", "id"):
        found = shutil.which(tool)
        if found:
            (d / tool).symlink_to(found)
    return str(d)


def test_unknown_option_is_refused_with_the_usage(tree):
    res = run(tree, "--fast")
    assert res.returncode == 2
    assert "usage: cluster/build.sh [--if-go] [--reuse-only]" in res.stderr


def test_without_go_if_go_skips_but_ci_fails(tree, tmp_path):
    path = no_go_path(tmp_path)
    res = run(tree, "--if-go", path=path)
    assert res.returncode == 0, res.stderr
    assert "no Go 1.26+ on PATH, simulated-cluster binaries not built" in res.stdout
    res = run(tree, "--if-go", path=path, CI="1")
    assert res.returncode == 1
    assert "needs Go 1.26 or newer on PATH (found: none)" in res.stderr
    res = run(tree, path=path)
    assert res.returncode == 1


@needs_go
def test_a_version_line_that_disagrees_with_its_wrapper_module_is_refused(tree):
    edit_versions_env(tree, "KUEUE_VERSION=0.19.2", "KUEUE_VERSION=0.19.1")
    res = run(tree, "--reuse-only")
    assert res.returncode == 1
    assert ("cluster/go/kueue builds sigs.k8s.io/kueue v0.19.2 but versions.env says v0.19.1; "
            "edit both together") in res.stderr
    assert not (tree.parent / "cache").exists()


@needs_go
def test_the_kubernetes_staging_modules_follow_the_patch_line(tree):
    edit_versions_env(tree, "K8S_VERSION=1.35.4", "K8S_VERSION=1.35.9")
    res = run(tree, "--reuse-only")
    assert res.returncode == 1
    assert "cluster/go/kubernetes builds k8s.io/kubernetes v1.35.4 but versions.env says v1.35.9" in res.stderr


@needs_go
def test_a_requirements_pin_that_versions_env_does_not_know_is_refused(tree):
    req = tree / "requirements.txt"
    req.write_text(re.sub(r"(?m)^pulumi-kubernetes==\S+", "pulumi-kubernetes==4.99.0", req.read_text()))
    res = run(tree, "--reuse-only")
    assert res.returncode == 1
    assert "requirements.txt pins pulumi-kubernetes==4.99.0 but versions.env PULUMI_KUBERNETES_PY_PIN=" in res.stderr


@needs_go
def test_reuse_only_builds_nothing_and_a_complete_cache_is_reused(tree):
    res = run(tree, "--reuse-only")
    assert res.returncode == 0, res.stderr
    m = re.search(r"no complete build in (\S+) and --reuse-only: nothing built", res.stdout)
    assert m, res.stdout
    cache = Path(m.group(1))
    assert cache.parent == tree.parent / "cache" and not cache.exists()

    # The same key with a complete build (stub binaries answering the version flags).
    stubs = {"kube-apiserver": "echo Kubernetes v1.35.4",
             "kubectl": "echo '{\"clientVersion\": {\"gitVersion\": \"v1.35.4\"}}' | tr -d '\\n'; echo",
             "etcd": "echo 'etcd Version: 3.6.16'", "pulumi": "echo v3.274.0"}
    (cache / "bin").mkdir(parents=True)
    for name, body in stubs.items():
        (cache / "bin" / name).write_text(f"#!/bin/sh\n{body}\n")
        (cache / "bin" / name).chmod(0o755)
    (cache / "complete").touch()
    res = run(tree)
    assert res.returncode == 0, res.stderr
    assert f"reusing {cache} (key {cache.name}:" in res.stdout
    assert "Kubernetes: Kubernetes v1.35.4" in res.stdout and "Pulumi CLI: v3.274.0" in res.stdout
    assert "==> build" not in res.stdout and "==> download" not in res.stdout

    # Any change to a wrapper module is another key: nothing is reused.
    (tree / "cluster" / "go" / "etcd" / "main.go").write_text(
        (tree / "cluster" / "go" / "etcd" / "main.go").read_text() + "\n// changed\n")
    res = run(tree, "--reuse-only")
    assert res.returncode == 0 and "no complete build in" in res.stdout and cache.name not in res.stdout
