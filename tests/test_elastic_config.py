"""rltrain:gpuNodes.elastic: off by default, and each bad combination refused before anything exists,
named by its key (components/stack/elastic.py, the checks in components/stack/validate.py)."""

import datetime as dt

import pytest
from test_config import load, problems

from components.offline import unset_secrets
from components.stack import elastic, validate

KEY = "rltrain:gpuNodes.elastic"
BLOCK = {"type": "capacity-block", "reservationId": "cr-0123456789abcdef0"}
WINDOW = {"start": "2026-12-03T06:00:00Z", "end": "2026-12-04T06:00:00Z"}


def gpu(**elastic_keys):
    return {"gpuNodes": {"instanceType": "p5.48xlarge", "count": 2, "elastic": elastic_keys}}


def test_off_by_default_and_the_maximum_defaults_to_the_count():
    cfg = load()
    assert cfg.gpu_nodes.elastic.enabled is False
    assert cfg.gpu_nodes.node_limit == 2 and elastic.pod_annotations(cfg.gpu_nodes.elastic) == {}
    on = load(overrides=gpu(enabled=True, maxNodes=4, idleMinutes=15))
    assert on.gpu_nodes.node_limit == 4 and on.gpu_nodes.elastic.idle_minutes == 15
    assert elastic.pod_annotations(on.gpu_nodes.elastic) == {"karpenter.sh/do-not-disrupt": "true"}
    assert load(overrides=gpu(enabled=True)).gpu_nodes.node_limit == 2


def test_a_maximum_smaller_than_the_widest_run_is_refused():
    p = problems(overrides=gpu(enabled=True, maxNodes=1))
    assert "1 is smaller than the widest run" in p[f"{KEY}.maxNodes"]
    assert "2 nodes" in p[f"{KEY}.maxNodes"] and "Allowed: 2-256" in p[f"{KEY}.maxNodes"]


def test_the_multi_node_run_counts_as_a_run():
    cfg = load(overrides={**gpu(enabled=True, maxNodes=4),
                          "workloads": {"image": "repo/rl:1.0", "multiNode": {"enabled": True}}})
    assert validate.widest_run(cfg)[0] == 2


def test_a_capacity_block_outside_its_window_is_refused(monkeypatch):
    overrides = {"gpuNodes": {"instanceType": "p5.48xlarge", "count": 2, "capacity": BLOCK,
                              "elastic": {"enabled": True, "capacityBlock": WINDOW}}}
    for now, word in ((dt.datetime(2026, 12, 3, 5, 59, tzinfo=dt.timezone.utc), "has not started"),
                      (dt.datetime(2026, 12, 4, 6, 0, tzinfo=dt.timezone.utc), "has ended")):
        monkeypatch.setattr(validate, "_now", lambda now=now: now)
        p = problems(overrides=overrides)
        assert f"the Capacity Block {word}" in p[f"{KEY}.capacityBlock"]
        assert "2026-12-03T06:00:00+00:00 to 2026-12-04T06:00:00+00:00" in p[f"{KEY}.capacityBlock"]
    monkeypatch.setattr(validate, "_now", lambda: dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.timezone.utc))
    assert load(overrides=overrides).gpu_nodes.elastic.capacity_block.end.hour == 6


def test_a_capacity_block_needs_its_window_and_only_it_takes_one():
    p = problems(overrides={"gpuNodes": {"instanceType": "p5.48xlarge", "count": 2, "capacity": BLOCK,
                                         "elastic": {"enabled": True}}})
    assert "required with capacity.type capacity-block" in p[f"{KEY}.capacityBlock"]
    p = problems(overrides=gpu(enabled=True, capacityBlock=WINDOW))
    assert p[f"{KEY}.capacityBlock"] == "only with capacity.type capacity-block (got on-demand)"


def test_a_window_needs_a_time_zone_and_an_end_after_its_start():
    p = problems(overrides=gpu(enabled=True, capacityBlock={"start": "2026-12-03T06:00:00", "end": WINDOW["end"]}))
    assert "start needs a time zone" in p[f"{KEY}.capacityBlock"]
    p = problems(overrides=gpu(enabled=True, capacityBlock={"start": WINDOW["end"], "end": WINDOW["start"]}))
    assert "is not after start" in p[f"{KEY}.capacityBlock"]


def byo_values(**elastic_keys):
    """The committed bring-your-own stack's config, with elastic keys."""
    values, secret, _ = unset_secrets.load_stack("byo")
    values = {k.split(":", 1)[1]: validate.parse_value(v) for k, v in values.items()}
    values["gpuNodes"] = {**values["gpuNodes"], "elastic": elastic_keys}
    return values, {k.split(":", 1)[1] for k in secret}


def test_a_bring_your_own_cluster_without_karpenter_is_refused():
    values, secret = byo_values(enabled=True)
    with pytest.raises(validate.ConfigError) as e:
        validate.load(values, secret_keys=secret, region="us-east-1")
    assert "needs Karpenter already running" in dict(e.value.problems)[f"{KEY}.existingKarpenter"]
    values, secret = byo_values(enabled=True, existingKarpenter=True)
    assert validate.load(values, secret_keys=secret, region="us-east-1").gpu_nodes.elastic.existing_karpenter


def test_existing_karpenter_only_on_a_bring_your_own_cluster():
    p = problems(overrides=gpu(enabled=True, existingKarpenter=True))
    assert "only with cluster.existing" in p[f"{KEY}.existingKarpenter"]


def test_elastic_keys_without_elastic_are_refused():
    p = problems(overrides=gpu(maxNodes=4))
    assert p[f"{KEY}.maxNodes"].startswith("only with elastic.enabled: true")


@pytest.mark.parametrize("bad, allowed", [({"maxNodes": 0}, "should be at least 1 (got 0)"),
                                          ({"idleMinutes": 0}, "should be at least 1 (got 0)"),
                                          ({"idleMinutes": 2000}, "should be at most 1440 (got 2000)"),
                                          ({"maxnodes": 3}, "maxNodes")])
def test_bad_values_name_the_key(bad, allowed):
    p = problems(overrides=gpu(enabled=True, **bad))
    assert any(k.startswith(KEY) and allowed in v for k, v in p.items()), p
