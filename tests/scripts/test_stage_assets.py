"""components/scripts/stage_assets.py as a program: skips complete items, redoes partial ones,
fails with the item named. Sources are file:// directories (no network, nothing installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "components" / "scripts" / "stage_assets.py"
MARK = ".rltrain-staged"


def run(items, **extra) -> subprocess.CompletedProcess:
    env = {"PATH": os.environ.get("PATH", ""), "STAGE_ITEMS": json.dumps(items), **extra}
    return subprocess.run([sys.executable, str(SCRIPT)], env=env, text=True, capture_output=True, timeout=60)


def source(tmp: Path, name: str, files: dict[str, str]) -> str:
    d = tmp / "src" / name
    for rel, text in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return f"file://{d}"


def test_stages_every_item_and_marks_it(tmp_path):
    model = source(tmp_path, "model", {"config.json": "{}", "weights/part-0": "w0"})
    assets = source(tmp_path, "assets", {"scene.glb": "g"})
    dest_m, dest_a = tmp_path / "fsx/models/m", tmp_path / "fsx/assets/a"
    p = run([{"name": "model", "source": model, "dest": str(dest_m)},
             {"name": "assets", "source": assets, "dest": str(dest_a)}])
    assert p.returncode == 0, p.stdout + p.stderr
    assert (dest_m / "config.json").read_text() == "{}" and (dest_m / "weights/part-0").read_text() == "w0"
    assert json.loads((dest_m / MARK).read_text()) == {"source": model}
    assert (dest_a / "scene.glb").read_text() == "g" and (dest_a / MARK).exists()
    assert "all 2 item(s) complete" in p.stdout


def test_complete_items_are_skipped_untouched(tmp_path):
    model = source(tmp_path, "model", {"config.json": "{}"})
    dest = tmp_path / "fsx/models/m"
    item = {"name": "model", "source": model, "dest": str(dest)}
    assert run([item]).returncode == 0
    (tmp_path / "src/model/config.json").write_text("changed at the source")
    p = run([item])
    assert p.returncode == 0 and "model: complete at" in p.stdout and "skipped" in p.stdout
    assert (dest / "config.json").read_text() == "{}"  # not fetched again


def test_partial_items_are_fetched_again(tmp_path):
    model = source(tmp_path, "model", {"config.json": "{}", "weights/part-0": "full"})
    dest = tmp_path / "fsx/models/m"
    (dest / "weights").mkdir(parents=True)
    (dest / "weights/part-0").write_text("half")  # an interrupted download: no mark
    p = run([{"name": "model", "source": model, "dest": str(dest)}])
    assert p.returncode == 0, p.stdout
    assert "partial or from another source, fetching again" in p.stdout
    assert (dest / "weights/part-0").read_text() == "full" and (dest / "config.json").exists()
    assert (dest / MARK).exists()


def test_an_item_of_another_source_is_fetched_again(tmp_path):
    old, new = source(tmp_path, "old", {"config.json": "old"}), source(tmp_path, "new", {"config.json": "new"})
    dest = tmp_path / "fsx/models/m"
    assert run([{"name": "model", "source": old, "dest": str(dest)}]).returncode == 0
    assert run([{"name": "model", "source": new, "dest": str(dest)}]).returncode == 0
    assert (dest / "config.json").read_text() == "new"


def test_a_failed_item_is_named_and_stops_the_run(tmp_path):
    good = source(tmp_path, "good", {"config.json": "{}"})
    missing = f"file://{tmp_path / 'src/missing'}"
    p = run([{"name": "good", "source": good, "dest": str(tmp_path / "fsx/a")},
             {"name": "lora", "source": missing, "dest": str(tmp_path / "fsx/b")},
             {"name": "after", "source": good, "dest": str(tmp_path / "fsx/c")}])
    assert p.returncode == 1
    assert f"error: staging lora from {missing} to {tmp_path / 'fsx/b'} failed" in p.stdout
    assert (tmp_path / "fsx/a" / MARK).exists() and not (tmp_path / "fsx/b" / MARK).exists()
    assert not (tmp_path / "fsx/c").exists()


def test_bad_items_exit_2(tmp_path):
    p = subprocess.run([sys.executable, str(SCRIPT)], env={"PATH": os.environ.get("PATH", "")},
                       text=True, capture_output=True, timeout=60)
    assert p.returncode == 2 and "STAGE_ITEMS is not set" in p.stdout
    p = run([{"name": "x", "source": "ftp://host/x", "dest": str(tmp_path / "x")}])
    assert p.returncode == 1 and "unknown source scheme" in p.stdout and "staging x from ftp://host/x" in p.stdout
    p = run([{"name": "x", "source": "file:///x", "dest": "relative/x"}])
    assert p.returncode == 2 and "not an absolute path" in p.stdout
