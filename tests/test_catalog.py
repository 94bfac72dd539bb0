"""The instance catalog and the numbers derived from it (FACTS.md 'Node allocatable')."""

import pytest

from components.stack import catalog
def test_allocatable_cpu_matches_nodeadm_formula():
    # FACTS.md: p4de ≈ 95.69 CPU, p5 ≈ 191.45 CPU.
    assert catalog.get("p4de.24xlarge").allocatable().cpu_milli == 95690
    assert catalog.get("p5.48xlarge").allocatable().cpu_milli == 191450


def test_kube_reserved_cpu_steps():
    assert catalog.kube_reserved_cpu_milli(1) == 60
    assert catalog.kube_reserved_cpu_milli(2) == 70
    assert catalog.kube_reserved_cpu_milli(4) == 80
    assert catalog.kube_reserved_cpu_milli(96) == 310


def test_allocatable_memory_range_matches_facts():
    # FACTS.md: p4de 1057-1144 GiB, p5 1893-2047 GiB.
    p4de = catalog.get("p4de.24xlarge").allocatable()
    p5 = catalog.get("p5.48xlarge").allocatable()
    assert round(p4de.memory_gib) == 1144
    assert round(p4de.memory_gib_conservative) == 1057
    assert round(p5.memory_gib_conservative) == 1893
    assert 2045 <= p5.memory_gib <= 2047
    # kube-reserved memory = 11 MiB x maxPods + 255 MiB.
    assert catalog.kube_reserved_memory_mib(100) == 1355


@pytest.mark.parametrize("name,cpu,mem_gib", [("p4de.24xlarge", 90, 1000), ("p5.48xlarge", 180, 1800)])
def test_reference_sizing_fits_conservative_allocatable(name, cpu, mem_gib):
    a = catalog.get(name).allocatable()
    assert cpu * 1000 + catalog.DAEMONSET_CPU_MILLI <= a.cpu_milli
    assert mem_gib * 1024 + catalog.DAEMONSET_MEMORY_MIB <= a.memory_mib_conservative


@pytest.mark.parametrize("name,efa,cards", [
    ("p4d.24xlarge", 4, 4), ("p4de.24xlarge", 4, 4), ("p5.48xlarge", 32, 32),
    ("p5e.48xlarge", 32, 32), ("p5en.48xlarge", 16, 16), ("g6.12xlarge", 1, 1), ("g5.xlarge", 0, 1),
])
def test_efa_devices_and_network_cards(name, efa, cards):
    it = catalog.get(name)
    assert (it.efa_devices, it.network_cards) == (efa, cards)


def test_every_priced_type_has_date_and_source():
    for it in catalog.CATALOG.values():
        if it.price is not None:
            assert it.price.usd_per_hour > 0 and it.price.date and it.price.source
        else:
            assert it.notes, f"{it.name}: no price and no note saying why"


def test_unknown_type_lists_known():
    with pytest.raises(KeyError, match="p5.48xlarge"):
        catalog.get("p5.48xlarg")


def test_nccl_env_only_with_efa_devices():
    p5 = catalog.get("p5.48xlarge")
    assert "FI_PROVIDER" not in catalog.nccl_env(p5, 0)
    env = catalog.nccl_env(p5, 32)
    assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    # g6 EFA has no GPUDirect RDMA: asking libfabric for it would fail.
    assert "FI_EFA_USE_DEVICE_RDMA" not in catalog.nccl_env(catalog.get("g6.12xlarge"), 1)
