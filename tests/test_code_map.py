"""README.md's map of the code is generated from the modules' docstrings, and is current
(components/offline/code_map.py); its paragraph on the import direction names the edges
tests/test_imports.py allows."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_imports import ALLOWED, MAY_READ, floor

from components.offline import code_map

README = code_map.README.read_text()


def test_the_readme_map_is_current():
    assert code_map.readme(README) == README, f"README.md's map of the code is stale: run {code_map.COMMAND}"


def test_every_module_of_components_is_on_the_map_with_its_first_sentence():
    text = "\n".join(code_map.lines())
    modules = [p for p in (code_map.ROOT / "components").rglob("*.py") if p.name != "__init__.py"]
    names = re.findall(r"^ *(\S+)", text, re.M)
    for p in modules:
        assert p.stem in names, p
    assert "    fit                 Does it fit on the GPU nodes: one first-fit placement of pods onto nodes, pure." in text
    # A sentence goes on after a dot inside a word, and ends at the first full stop.
    assert code_map.summary(code_map.ROOT / "components" / "stack" / "catalog.py") == (
        "Instance catalog: the one place where hardware numbers are typed.")


def test_the_floors_are_in_the_order_imports_flow():
    order = {f: i for i, f in enumerate(code_map.FLOORS)}
    assert set(order) == set(MAY_READ)
    for f, reads in MAY_READ.items():
        assert all(order[r] < order[f] for r in reads), f
    for a, b in ALLOWED:
        assert order[floor(b)] < order[floor(a)], (a, b)


def test_the_import_paragraph_names_every_allowed_edge():
    paragraph = README[README.index(code_map.END):README.index("## Where to read next")]
    for a, b in sorted(ALLOWED):
        for module in (a, b):
            assert f"`{module.split('.', 1)[1].replace('.', '/')}.py`" in paragraph, module
    assert "four edges" in paragraph and len(ALLOWED) == 4


def test_a_module_without_a_docstring_is_refused(tmp_path, monkeypatch):
    bare = tmp_path / "bare.py"
    bare.write_text("X = 1\n")
    monkeypatch.setattr(code_map, "ROOT", tmp_path)
    with pytest.raises(ValueError, match="bare.py: no docstring"):
        code_map.summary(bare)


def test_check_fails_on_a_stale_map(tmp_path, monkeypatch):
    stale = tmp_path / "README.md"
    stale.write_text(README.replace("    fit ", "    fitted "))
    monkeypatch.setattr(code_map, "README", stale)
    assert code_map.main(["--check"]) == 1
    assert code_map.main(["--write"]) == 0 and stale.read_text() == README
    proc = subprocess.run([sys.executable, "-m", "components.offline.code_map", "--check"],
                          cwd=Path(code_map.ROOT), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
