"""Where the simulated cluster's binaries and the operators' module trees are.

`cluster/build.sh` builds every binary into `${RLTRAIN_SIM_CACHE:-~/.cache/rltrain-sim}/<key>/bin`
and writes `<key>/env.sh` beside it (the key follows cluster/versions.env). `RLTRAIN_SIM_ENV`
names that env.sh; without it the newest env.sh under the cache is used. The CRDs, Kueue's webhook
manifests and kwok's stages are read from the module trees env.sh names (or the Go module cache),
never copied into this repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok",
            "kueue", "ray-operator", "mpi-operator", "pulumi", "pulumi-language-python",
            "pulumi-resource-kubernetes")
# Alternative names a build may give the operators' main packages.
ALIASES = {"ray-operator": ("ray-operator", "kuberay-operator", "manager"), "kueue": ("kueue", "kueue-manager")}
# Module trees, recognised by the module path in the directory name.
MODULES = {"kueue": "sigs.k8s.io/kueue@", "kuberay": "ray-operator@", "mpi-operator": "mpi-operator@",
           "kwok": "sigs.k8s.io/kwok@"}
ENABLE_HINT = "build them with cluster/build.sh (docs/simulated-cluster.md)"


def cache_root() -> Path:
    return Path(os.environ.get("RLTRAIN_SIM_CACHE") or Path.home() / ".cache" / "rltrain-sim")


def find_env_sh() -> Optional[Path]:
    explicit = os.environ.get("RLTRAIN_SIM_ENV")
    if explicit:
        return Path(explicit)
    found = sorted(cache_root().glob("*/env.sh"), key=lambda p: p.stat().st_mtime, reverse=True)
    return found[0] if found else None


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


def _gomodcache() -> Optional[Path]:
    if os.environ.get("GOMODCACHE"):
        return Path(os.environ["GOMODCACHE"])
    go = shutil.which("go")
    if go:
        r = subprocess.run([go, "env", "GOMODCACHE"], capture_output=True, text=True)
        if r.returncode == 0 and r.stdout.strip():
            return Path(r.stdout.strip())
    return Path.home() / "go" / "pkg" / "mod"


def toolset() -> Toolset:
    env_sh = find_env_sh()
    bin_dir = Path(os.environ["RLTRAIN_SIM_BIN"]) if os.environ.get("RLTRAIN_SIM_BIN") else None
    modules: dict[str, Path] = {}
    if env_sh and env_sh.exists():
        bin_dir = bin_dir or env_sh.parent / "bin"
        for value in _sourced(env_sh).values():
            for name, marker in MODULES.items():
                if marker in value and Path(value).is_dir() and name not in modules:
                    modules[name] = Path(value)
    cache = _gomodcache()
    if cache and cache.is_dir():
        fallbacks = {"kueue": "sigs.k8s.io/kueue@v*", "kwok": "sigs.k8s.io/kwok@v*",
                     "kuberay": "github.com/ray-project/kuberay/ray-operator@v*",
                     "mpi-operator": "github.com/kubeflow/mpi-operator@v*"}
        for name, pattern in fallbacks.items():
            if name not in modules:
                found = sorted(cache.glob(pattern))
                if found:
                    modules[name] = found[-1]
    return Toolset(bin_dir=bin_dir, env_sh=env_sh, modules=modules)
