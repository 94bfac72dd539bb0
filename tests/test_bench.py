"""The benchmark's floor loads exactly the library modules a render loads (bench/render_bench.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

from components.offline.mock_engine import ROOT


def _bench():
    spec = importlib.util.spec_from_file_location("render_bench", ROOT / "bench" / "render_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_floor_executes_the_modules_the_render_executed(tmp_path):
    bench = _bench()
    modules = bench.render_modules("byo", tmp_path)
    assert any(m.startswith("pulumi_kubernetes.core.v1") for m in modules), "the probe saw no SDK sub-package"
    assert not [m for m in modules if m.split(".")[0] == "components"]
    dump = ("import json as _j\nprint(_j.dumps([n for n, m in list(sys.modules.items()) "
            "if type(m).__name__ != '_LazyModule']))\nsys.stdout.flush()")
    script = bench.FLOOR.format(modules=modules).replace("sys.stdout.flush()", dump, 1)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    executed = set(json.loads(proc.stdout))
    missing = sorted(set(modules) - executed)
    assert not missing, f"the floor left these lazy or unloaded: {missing[:20]}"
    # Nothing beyond them but what every interpreter starts with.
    startup = subprocess.run([sys.executable, "-c", "import sys, json; print(json.dumps(list(sys.modules)))"],
                             capture_output=True, text=True, check=True)
    extra = executed - set(modules) - set(json.loads(startup.stdout)) - {"importlib", "gc"}
    assert not extra, sorted(extra)[:20]
