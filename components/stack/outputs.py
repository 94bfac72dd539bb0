"""Stack outputs and summary figures derived from config and catalog."""

from __future__ import annotations

from typing import Any

from components.stack import catalog
from components.stack.config import StackConfig


def cost_per_hour(cfg: StackConfig) -> dict[str, Any]:
    """Estimated on-demand $/h: GPU nodes x catalog price + the FSx file system, with price dates.

    Fixed mode: `gpuNodes.count` nodes, held whether or not anything runs. Elastic mode
    (`gpuNodes.elastic.enabled`): no GPU node is held, so the figure is a range, from zero GPU nodes
    (`usdAtZero`: the FSx file system alone) to `maxNodes` of them (`usdAtMax`); `usd` is the maximum,
    so a before/after comparison and a budget read the ceiling, never the idle floor.

    Not counted: the EKS control plane ($0.10/h), system nodes, NAT and data transfer.
    """
    it = cfg.gpu_nodes.instance
    if cfg.byo_cluster:
        return {"usd": 0.0, "note": "bring-your-own cluster: its nodes and storage are not billed to this stack"}
    if it.price is None:
        return {"usd": None, "note": f"{it.name}: no on-demand price ({'; '.join(it.notes)})"}
    fsx = cfg.storage.fsx
    fsx_usd = catalog.fsx_usd_per_hour(fsx.storage_capacity_gib, fsx.per_unit_storage_throughput) if fsx else 0.0
    fsx_part = f" + FSx {fsx.storage_capacity_gib} GiB at ${fsx_usd:.2f}/h" if fsx else ""
    dated = {"priceDate": it.price.date, "priceSource": f"{it.price.source}; {catalog.FSX_PRICE.source}"}
    if cfg.gpu_nodes.elastic.enabled:
        top = cfg.gpu_nodes.node_limit
        at_max = round(it.price.usd_per_hour * top + fsx_usd, 2)
        return {
            "usd": at_max,
            "usdAtZero": round(fsx_usd, 2),
            "usdAtMax": at_max,
            "breakdown": f"elastic: 0 to {top} x {it.name} at ${it.price.usd_per_hour}/h{fsx_part}",
            **dated,
        }
    nodes = it.price.usd_per_hour * cfg.gpu_nodes.count
    return {
        "usd": round(nodes + fsx_usd, 2),
        "breakdown": f"{cfg.gpu_nodes.count} x {it.name} at ${it.price.usd_per_hour}/h{fsx_part}",
        **dated,
    }


def usd_text(cost: dict[str, Any], digits: int = 2) -> str:
    """`$X/h`, or `$Z/h at zero GPU nodes to $M/h at the maximum` for an elastic stack's range."""
    if cost.get("usd") is None:
        return "unknown"
    if "usdAtZero" in cost:
        return f"${cost['usdAtZero']:,.{digits}f}/h at zero GPU nodes to ${cost['usdAtMax']:,.{digits}f}/h at the maximum"
    return f"${cost['usd']:,.{digits}f}/h"
