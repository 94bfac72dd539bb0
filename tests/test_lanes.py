"""tests/lanes.py: every simulated-cluster module is in exactly one group of lanes, so that the
scheduler (tests/conftest.py LaneScheduling) hands it to a lane and no two groups share a cluster."""

from __future__ import annotations

from pathlib import Path

from lanes import GROUP_OF, SIM_GROUPS

SIM = Path(__file__).resolve().parent / "sim"


def test_every_sim_module_is_in_one_group():
    marked = sorted(f"tests/sim/{p.name}" for p in SIM.glob("test_*.py") if "pytest.mark.sim" in p.read_text())
    grouped = [m for modules, _ in SIM_GROUPS.values() for m in modules]
    assert sorted(grouped) == marked  # each once, none missing, none that is not a sim module
    assert set(GROUP_OF) == set(marked)


def test_no_two_test_modules_share_a_name():
    """The test folders are not packages: pytest imports each module under its file name, so two
    `test_x.py` (one in tests/, one in tests/sim/) collide ("import file mismatch") in any run that
    collects both, as CI's does."""
    tests = Path(__file__).resolve().parent
    names = [p.name for p in tests.rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []
