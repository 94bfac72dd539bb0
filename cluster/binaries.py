"""Where the simulated cluster's binaries and the operators' module trees are.

`cluster/build.sh` builds every binary into `${RLTRAIN_SIM_CACHE:-~/.cache/rltrain-sim}/<key>/bin`
and writes `<key>/env.sh` beside it (the key follows cluster/versions.env). `RLTRAIN_SIM_ENV`
names that env.sh; without it the newest env.sh under the cache is used. The CRDs, Kueue's webhook
manifests and kwok's stages are read from the module trees env.sh names (or the Go module cache),
never copied into this repository.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok",
            "kueue", "ray-operator", "mpi-operator", "pulumi", "pulumi-resource-kubernetes", "karpenter")
# Alternative names a build may give the operators' main packages.
ALIASES = {"ray-operator": ("ray-operator", "kuberay-operator", "manager"), "kueue": ("kueue", "kueue-manager")}
# Module trees: the variable env.sh exports for each (cluster/build.sh), else the module path in a
# directory name of the Go module cache.
MODULES = {"kueue": "sigs.k8s.io/kueue@", "kuberay": "ray-operator@", "mpi-operator": "mpi-operator@",
           "kwok": "sigs.k8s.io/kwok@", "karpenter": "sigs.k8s.io/karpenter@",
           "karpenter-aws": "github.com/aws/karpenter-provider-aws@"}
MODULE_VARS = {"kueue": "RLTRAIN_SIM_KUEUE_DIR", "kuberay": "RLTRAIN_SIM_KUBERAY_DIR",
               "mpi-operator": "RLTRAIN_SIM_MPI_OPERATOR_DIR", "kwok": "RLTRAIN_SIM_KWOK_DIR",
               "karpenter": "RLTRAIN_SIM_KARPENTER_DIR", "karpenter-aws": "RLTRAIN_SIM_KARPENTER_AWS_DIR"}
ENABLE_HINT = "build them with cluster/build.sh (docs/simulated-cluster.md)"


def cache_root() -> Path:
    return Path(os.environ.get("RLTRAIN_SIM_CACHE") or Path.home() / ".cache" / "rltrain-sim")


def find_env_sh() -> Optional[Path]:
    """RLTRAIN_SIM_ENV, else <cache>/current/env.sh (build.sh points `current` at its last build),
    else the newest env.sh under the cache."""
    explicit = os.environ.get("RLTRAIN_SIM_ENV")
    if explicit:
        return Path(explicit)
    current = cache_root() / "current" / "env.sh"
    if current.exists():
        return current
    found = sorted(cache_root().glob("*/env.sh"), key=lambda p: p.stat().st_mtime, reverse=True)
    return found[0] if found else None


def _newest_bin_dir() -> Optional[Path]:
    # While a build is still running there is no env.sh yet: its bin directory already serves.
    found = sorted((p for p in cache_root().glob("*/bin") if p.is_dir()), key=lambda p: p.stat().st_mtime,
                   reverse=True)
    return found[0] if found else None


@functools.lru_cache(maxsize=8)  # a bash process; the file does not change while this process runs
def _sourced(env_sh: Path) -> dict[str, str]:
    r = subprocess.run(["bash", "-c", f'set -a; . "{env_sh}" >/dev/null; env -0'], capture_output=True)
    if r.returncode:
        return {}
    out = {}
    for item in r.stdout.decode(errors="replace").split("\0"):
        k, sep, v = item.partition("=")
        if sep:
            out[k] = v
    return out


@dataclass
class Toolset:
    bin_dir: Optional[Path]
    env_sh: Optional[Path]
    modules: dict[str, Path] = field(default_factory=dict)

    def path(self, name: str) -> Optional[Path]:
        for candidate in ALIASES.get(name, (name,)):
            if self.bin_dir and (self.bin_dir / candidate).is_file():
                return self.bin_dir / candidate
        return None

    def missing(self, names: tuple[str, ...] = BINARIES) -> list[str]:
        return [n for n in names if self.path(n) is None]

    def require(self, name: str) -> str:
        p = self.path(name)
        if p is None:
            where = self.bin_dir or cache_root()
            raise FileNotFoundError(f"{name} not found in {where}: {ENABLE_HINT}")
        return str(p)

    def module(self, name: str) -> Path:
        if name in self.modules:
            return self.modules[name]
        raise FileNotFoundError(f"the {name} module tree ({MODULES[name]}...) is neither named by "
                                f"{self.env_sh or 'an env.sh'} nor in the Go module cache: {ENABLE_HINT}")


@functools.lru_cache(maxsize=1)  # `go env` is a process of its own; asked by every toolset()
def _gomodcache() -> Optional[Path]:
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    go = shutil.which("go")
    if go:
        r = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            return Path(r.stdout.strip())
    return Path.home() / "go" / "pkg" / "mod"


def versions_env() -> dict[str, str]:
    """The pins of cluster/versions.env (NAME=value lines), e.g. KARPENTER_VERSION."""
    path = Path(__file__).with_name("versions.env")
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            k, sep, v = line.partition("=")
            if sep and not k.startswith("#"):
                out[k.strip()] = v.strip()
    return out


def toolset() -> Toolset:
    env_sh = find_env_sh()
    env: dict[str, str] = {}
    if env_sh and env_sh.exists():
        env = dict(_sourced(env_sh))  # a copy: the cached one stays as sourced
    env.update({k: v for k, v in os.environ.items() if k.startswith("RLTRAIN_SIM_")})
    bin_dir: Optional[Path] = Path(env["RLTRAIN_SIM_BIN"]) if env.get("RLTRAIN_SIM_BIN") else None
    if bin_dir is None:
        bin_dir = env_sh.parent / "bin" if env_sh and env_sh.exists() else _newest_bin_dir()
    modules: dict[str, Path] = {}
    for name, var in MODULE_VARS.items():
        if env.get(var) and Path(env[var]).is_dir():
            modules[name] = Path(env[var])
    cache = _gomodcache()
    if cache and cache.is_dir():
        pins = versions_env()
        fallbacks = {"kueue": ("sigs.k8s.io/kueue", "KUEUE_VERSION"), "kwok": ("sigs.k8s.io/kwok", "KWOK_VERSION"),
                     "kuberay": ("github.com/ray-project/kuberay/ray-operator", "KUBERAY_VERSION"),
                     "mpi-operator": ("github.com/kubeflow/mpi-operator", "MPI_OPERATOR_VERSION"),
                     "karpenter": ("sigs.k8s.io/karpenter", "KARPENTER_VERSION"),
                     "karpenter-aws": ("github.com/aws/karpenter-provider-aws", "KARPENTER_VERSION")}
        for name, (module, var) in fallbacks.items():
            candidate = cache / f"{module}@v{pins.get(var, '')}"
            if name not in modules and pins.get(var) and candidate.is_dir():
                modules[name] = candidate
    return Toolset(bin_dir=bin_dir, env_sh=env_sh, modules=modules)
