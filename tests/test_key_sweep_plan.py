"""The key sweep's plan (cluster/key_sweep.py): every key of the models, a valid new value
each, its offline impact or why it is skipped; the groups the simulated cluster applies together."""

from __future__ import annotations

import pytest
import yaml

from cluster import key_sweep
from components.offline import config_reference, impact
from components.offline.mock_engine import ROOT
from components.stack import config

BY_PATH = {k.path: k for k in key_sweep.keys()}


def test_the_keys_are_the_configuration_reference_s():
    """Generated from the models: every documented key that is not a section, in the page's order."""
    documented = [f"{section}.{key}" for section in config.SECTIONS
                  for key, typ, _, _ in config_reference.rows(config_reference.models_in(
                      next(f for n, f in config.StackConfig.model_fields.items()
                           if (f.alias or n) == section).annotation)[0]) if typ != "section"]
    assert [k.path for k in key_sweep.keys()] == documented
    assert len(documented) > 100


@pytest.mark.parametrize("path,now,expected", [
    ("workloads.retries", 3, [6, 4, 2, 0, 20]),       # doubled, either side, then its bounds (ge=0, le=20)
    ("workloads.retries", 15, [16, 14, 0, 20]),       # 30 is over le=20
    ("workloads.singleNode.enabled", True, [False]),
    ("gpuNodes.capacity.type", "on-demand", ["capacity-block", "odcr"]),
    ("workloads.image", "registry.example/rlinf:1", ["registry.example/rlinf:sweep-retagged"]),
    ("training.serviceAccount", "training-sa", ["training-sa-b"]),
    ("workloads.env", {}, [{"NCCL_DEBUG": "INFO"}]),
])
def test_a_representative_value_is_derived_from_the_type_and_the_current_value(path, now, expected):
    got = key_sweep.candidates(BY_PATH[path], now)
    assert got == expected


@pytest.fixture(scope="module")
def sim():
    doc = yaml.safe_load((ROOT / "Pulumi.sim.yaml").read_text())
    proj = key_sweep.Project("sim", ROOT, doc)
    base, cfg = proj.render({})
    yield lambda path: key_sweep._plan_key(proj, BY_PATH[path], base, cfg)
    proj.close()


def test_what_the_sweep_found_is_planned_as_the_fix_makes_it(sim):
    """The two changes of issue 34: a deadline is patched in place on both training Jobs; a priority
    replaces its PriorityClass (value is immutable)."""
    p = sim("workloads.maxRunMinutes")
    assert p.changes == {"workloads-single-node-job": impact.IN_PLACE, "workloads-multi-node-job": impact.IN_PLACE}
    p = sim("workloads.priority")
    assert p.value == 2000000 and p.changes.pop("workloads-priority") == impact.REPLACE
    assert set(p.changes.values()) == {impact.RUN_RESTART}  # the runs naming the class are recreated


def test_a_refused_change_is_planned_alone(sim):
    p = sim("storage.claimSizeGiB")
    assert p.refused and p.changes == {"storage-claim": impact.REFUSED}
    assert [len(g) for g in key_sweep.groups([p, sim("workloads.retries")]) if g[0].refused] == [1]


@pytest.mark.parametrize("path,reason", [
    ("cluster.systemNodes.count", "has no effect on a bring-your-own cluster"),   # the config refuses it
    ("monitoring.enabled", "installs Helm charts"),                               # no chart repository here
    ("workloads.serving.replicas", "workloads.serving.enabled is false"),         # under a section that is off
    ("kueue.install", "a second install would fight it"),                         # NOT_ON_THE_SIM
])
def test_a_key_the_simulated_cluster_cannot_change_says_why(sim, path, reason):
    p = sim(path)
    assert not p.changes and reason in p.skipped, p


@pytest.mark.parametrize("path", ["training.namespace", "storage.claimName"])
def test_a_claim_move_is_swept_with_its_data_loss_opt_in_alone_after_the_rest(sim, path):
    """Before the simulated cluster ran a provisioner these were skipped; now the sweep sets the
    opt-in a user would (storage.allowReplacement), so `up` must apply it, not refuse it."""
    p = sim(path)
    assert p.changes["storage-claim"] == impact.DATA_LOSS and p.opt_in == {"storage.allowReplacement": True}
    assert not p.refused and p.edits() == {path: p.value, "storage.allowReplacement": True}
    other = sim("workloads.retries")
    assert key_sweep.groups([p, other]) == [[other], [p]]
    # Without the opt-in the same change is one `up` must refuse.
    assert key_sweep.Planned(path, p.value, dict(p.changes)).refused


def _planned(key: str, **changes: str) -> key_sweep.Planned:
    return key_sweep.Planned(key, 1, dict(changes))


def test_a_group_never_hides_an_update_under_a_replacement():
    a = _planned("a", job=impact.IN_PLACE)
    b = _planned("b", job=impact.RUN_RESTART)
    c = _planned("c", job=impact.IN_PLACE, svc=impact.IN_PLACE)
    d = _planned("d", job=impact.CHECK_RERUN, pc=impact.REPLACE)
    e = _planned("e", job=impact.DELETE)
    f = _planned("f", other=impact.CREATE)
    got = [[p.key for p in g] for g in key_sweep.groups([a, b, c, d, e, f])]
    # Updates together, replacements together; a delete after every other change.
    assert got == [["a", "c", "f"], ["b", "d"], ["e"]]


def test_a_value_refused_on_top_of_earlier_changes_is_named():
    """Applied one after the other, validation off after the NCCL test is off is refused while
    trainingAfterChecks still waits for them: the sweep defers such a key (tests/sim)."""
    doc = yaml.safe_load((ROOT / "Pulumi.sim.yaml").read_text())
    assert key_sweep.refusal(doc, ROOT) == ""
    key_sweep.set_key(doc["config"], BY_PATH["workloads.ncclTest.enabled"], False)
    key_sweep.set_key(doc["config"], BY_PATH["workloads.validation.enabled"], False)
    assert "trainingAfterChecks" in key_sweep.refusal(doc, ROOT)
