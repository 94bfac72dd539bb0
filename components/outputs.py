"""Stack outputs and summary figures derived from config and catalog."""

from __future__ import annotations

from typing import Any

from .config import StackConfig


def cost_per_hour(cfg: StackConfig) -> dict[str, Any]:
    """Estimated on-demand $/h of the GPU nodes (the dominant cost), with the price's date."""
    it = cfg.gpu_nodes.instance
    if cfg.byo_cluster:
        return {"usd": 0.0, "note": "bring-your-own cluster: nodes are not billed to this stack"}
    if it.price is None:
        return {"usd": None, "note": f"{it.name}: no on-demand price ({'; '.join(it.notes)})"}
    usd = round(it.price.usd_per_hour * cfg.gpu_nodes.count, 2)
    return {"usd": usd, "gpuNodes": f"{cfg.gpu_nodes.count} x {it.name} at ${it.price.usd_per_hour}/h",
            "priceDate": it.price.date, "priceSource": it.price.source}
