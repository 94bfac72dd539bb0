"""Renders of the tests, cached by what they are computed from and shared by every test process.

Every render runs the program against the recording engine through
`components.offline.mock_engine.run_program` (render_stack, the key sweep's plan, and the tests that
pass a stack's config values directly). In a test process the program is `<project_dir>/__main__.py`
run against the `components` package this process imported (the repository's: _run_main finds it in
sys.modules), so a run is a function of

- the stack name, the config values and which of them are secret, the project name;
- `<project_dir>/__main__.py`, and every file of the repository's `components/` (the program, the
  scripts it mounts into ConfigMaps);
- the Python and the versions of the SDKs and libraries the program runs on;
- this file (the cache's own format).

The key is a sha256 over all of it; the value, the pickled RunResult, lives in a directory every
xdist worker of a run reads and writes (`$RLTRAIN_RENDER_CACHE`, else `~/.cache/rltrain/renders`),
so a render is computed once per content, not once per worker, and a second run with no change
renders nothing. Each call gets its own unpickled copy: a test may change what it is handed
(tests/test_deploy_model.py drops records). Not cached: a run of a program passed in as a function,
and any run during a test that uses `monkeypatch` (it may have changed the program's behaviour
in-process, where no key can see it). `RLTRAIN_RENDER_CACHE=off` turns the cache off; `RLTRAIN_RENDER_CACHE_LOG=FILE` appends a line per
run to FILE: hit, miss or bypass, the stack, the project directory and the test.

Entries not read for a week are removed when a test process opens the cache (a read touches its
entry).
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import importlib.metadata
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

ROOT = Path(__file__).resolve().parents[1]
ENV = "RLTRAIN_RENDER_CACHE"
# What the program's behaviour depends on besides its sources (requirements.txt pins them).
DISTRIBUTIONS = ("pulumi", "pulumi-kubernetes", "pulumi-eks", "pulumi-aws", "pydantic", "PyYAML")
KEEP_SECONDS = 7 * 24 * 3600


def directory() -> Optional[Path]:
    value = os.environ.get(ENV, "")
    if value == "off":
        return None
    path = Path(value) if value else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rltrain" / "renders"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _tree_signature(tree: Path) -> tuple:
    """(path, mtime_ns, size) of every file under `tree` but bytecode: cheap, to know when to hash again."""
    out = []
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            out.append((p, st.st_mtime_ns, st.st_size))
    return tuple(out)


_tree_hashes: dict[tuple, str] = {}


def tree_hash(tree: Path) -> str:
    sig = _tree_signature(tree)
    if sig not in _tree_hashes:
        h = hashlib.sha256()
        for p, _, _ in sig:
            h.update(os.path.relpath(p, tree).encode() + b"\0")
            h.update(Path(p).read_bytes() + b"\0")
        _tree_hashes[sig] = h.hexdigest()
    return _tree_hashes[sig]


@functools.lru_cache(maxsize=1)
def environment() -> str:
    versions = []
    for dist in DISTRIBUTIONS:
        try:
            versions.append(f"{dist}=={importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist} missing")
    return f"{sys.version}|{'|'.join(versions)}|{hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}"


def key(kwargs: dict[str, Any]) -> str:
    project_dir = Path(kwargs.get("project_dir") or ROOT)
    main = project_dir / "__main__.py"
    h = hashlib.sha256()
    h.update(repr((kwargs.get("stack"), sorted((kwargs.get("config") or {}).items()),
                   sorted(kwargs.get("secret_keys") or ()), kwargs.get("project", "rltrain"))).encode() + b"\0")
    h.update(f"{environment()}\0{tree_hash(ROOT / 'components')}\0".encode())
    h.update(main.read_bytes() if main.exists() else b"(no __main__.py)")
    return h.hexdigest()


def prune(cache: Path) -> None:
    """Entries (and their lock files) not used for KEEP_SECONDS; a write a killed process left."""
    now = time.time()
    for p in cache.iterdir():
        try:
            age = now - p.stat().st_mtime
            if age > KEEP_SECONDS or (p.name.startswith(".tmp-") and age > 3600):
                p.unlink()
        except OSError:
            pass


def _load(path: Path) -> Any:
    """The cached run at `path`, a fresh copy; None when there is none (or it does not load)."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    try:
        result = pickle.loads(data)
    except Exception:  # noqa: BLE001 - a foreign or damaged entry: run again
        return None
    os.utime(path)  # read: kept by prune
    return result


def _note(what: str, kwargs: dict) -> None:
    log = os.environ.get("RLTRAIN_RENDER_CACHE_LOG")
    if log:
        with open(log, "a") as f:
            f.write(f"{what} {kwargs.get('stack')} {kwargs.get('project_dir')} {os.environ.get('PYTEST_CURRENT_TEST')}\n")


def cached(run_program: Callable[..., Any], bypass: Callable[[], bool]) -> Callable[..., Any]:
    """run_program through the cache (unless it runs a program passed in, or `bypass()` says this
    call must run afresh)."""
    cache = directory()
    if cache is None:
        return run_program
    prune(cache)

    @functools.wraps(run_program)
    def run_program_cached(**kwargs: Any) -> Any:
        if kwargs.get("program") is not None or bypass():
            _note("bypass", kwargs)
            return run_program(**kwargs)
        k = key(kwargs)
        path = cache / f"{k}.pickle"
        result = _load(path)
        if result is not None:
            _note("hit", kwargs)
            return result
        # One process renders a key; another that wants it meanwhile waits for its result.
        with open(cache / f"{k}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            result = _load(path)
            if result is not None:
                _note("hit", kwargs)
                return result
            _note("miss", kwargs)
            data = pickle.dumps(run_program(**kwargs), protocol=pickle.HIGHEST_PROTOCOL)
            fd, tmp = tempfile.mkstemp(dir=cache, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)  # whole or not at all
        # The caller gets a copy, as every later caller will, not what the cache holds.
        return pickle.loads(data)

    run_program_cached.uncached = run_program
    return run_program_cached


def install(bypass: Callable[[], bool]) -> None:
    """Route every caller of mock_engine.run_program through the cache: the module's own name and
    every module already imported that bound it by name (render, key_sweep, scan_report...); a
    module imported later binds the cached one."""
    from components.offline import mock_engine

    real = mock_engine.run_program
    if hasattr(real, "uncached"):
        return
    wrapped = cached(real, bypass)
    for module in list(sys.modules.values()):
        if getattr(module, "run_program", None) is real:
            module.run_program = wrapped
    mock_engine.run_program = wrapped
