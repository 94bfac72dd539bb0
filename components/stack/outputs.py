"""Stack outputs and summary figures derived from config and catalog."""

from __future__ import annotations

from typing import Any

from components.stack import catalog
from components.stack.config import StackConfig


def cost_per_hour(cfg: StackConfig) -> dict[str, Any]:
    """Estimated on-demand $/h: GPU nodes x catalog price + the FSx file system, with price dates.

    Not counted: the EKS control plane ($0.10/h), system nodes, NAT and data transfer.
    """
    it = cfg.gpu_nodes.instance
    if cfg.byo_cluster:
        return {"usd": 0.0, "note": "bring-your-own cluster: its nodes and storage are not billed to this stack"}
    if it.price is None:
        return {"usd": None, "note": f"{it.name}: no on-demand price ({'; '.join(it.notes)})"}
    nodes = it.price.usd_per_hour * cfg.gpu_nodes.count
    fsx = cfg.storage.fsx
    fsx_usd = catalog.fsx_usd_per_hour(fsx.storage_capacity_gib, fsx.per_unit_storage_throughput) if fsx else 0.0
    return {
        "usd": round(nodes + fsx_usd, 2),
        "breakdown": f"{cfg.gpu_nodes.count} x {it.name} at ${it.price.usd_per_hour}/h"
                     + (f" + FSx {fsx.storage_capacity_gib} GiB at ${fsx_usd:.2f}/h" if fsx else ""),
        "priceDate": it.price.date,
        "priceSource": f"{it.price.source}; {catalog.FSX_PRICE.source}",
    }
