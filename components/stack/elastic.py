"""Config of elastic GPU capacity (`rltrain:gpuNodes.elastic`), fed to components/aws/karpenter.py.

Off by default: the fixed managed node group (components/aws/gpu_nodes.py) holds `gpuNodes.count`
nodes whether or not anything runs. On, no GPU node is held: Karpenter launches nodes for the pods
Kueue admits, up to `maxNodes`, and removes a node once it has been empty `idleMinutes`. The
capacity type is the stack's own (`gpuNodes.capacity`: on-demand, a Capacity Block, an ODCR).

Whole or none: Kueue admits a run only when the quota (the maximum, not the nodes present) has
room for all its pods, and `waitForPodsReady` releases an admitted run whole when its pods are not
all Ready in time (a node that never launched); the run is requeued whole (docs/elastic-capacity.md).

A module of its own beside the component it feeds (not stack/config.py, which only holds the
field); pure (no Pulumi). What elastic mode refuses (keys that need each other, a maximum below the
widest run, a Capacity Block outside its window) is checked in components/stack/validate.py; the
most nodes the stack may hold is `GpuNodesConfig.node_limit`.
"""

from __future__ import annotations

import datetime as dt
from typing import Optional

from pydantic import Field, model_validator

from components.stack.model_base import _Model

# The pod annotation that keeps Karpenter from voluntarily disrupting (consolidation, drift,
# expiration) the node a pod runs on (sigs.k8s.io/karpenter v1.14.0 pkg/apis/v1/labels.go
# DoNotDisruptAnnotationKey "karpenter.sh/do-not-disrupt"): every GPU pod of an elastic stack.
DO_NOT_DISRUPT = {"karpenter.sh/do-not-disrupt": "true"}


class CapacityBlockWindow(_Model):
    """The window of the Capacity Block (`gpuNodes.capacity.type: capacity-block`): EC2 launches
    into a block only between its start and end (EC2 user guide, capacity-blocks-using)."""

    start: dt.datetime
    """the block's start, ISO 8601 with a time zone (`2026-12-03T11:30:00Z`; DescribeCapacityReservations StartDate)"""
    end: dt.datetime
    """the block's end, ISO 8601 with a time zone (DescribeCapacityReservations EndDate)"""

    @model_validator(mode="after")
    def _order(self) -> "CapacityBlockWindow":
        for name in ("start", "end"):
            if getattr(self, name).tzinfo is None:
                raise ValueError(f"{name} needs a time zone (append Z for UTC)")
        if self.end <= self.start:
            raise ValueError(f"end {self.end.isoformat()} is not after start {self.start.isoformat()}")
        return self


class ElasticConfig(_Model):
    """Elastic GPU capacity: nodes from zero for a whole queued run, back to zero when idle (Karpenter)."""

    enabled: bool = False
    """on: no GPU node is held; Karpenter launches nodes for admitted runs up to `maxNodes` and removes empty ones after `idleMinutes` (docs/elastic-capacity.md). Off (default): the fixed managed node group of `count` nodes"""
    max_nodes: Optional[int] = Field(None, ge=1, le=256)
    """the most GPU nodes the stack may hold at once, 1-256 (Karpenter's NodePool limit, Kueue's quota, the preflight quota check); none = `gpuNodes.count`. Must hold the widest run"""
    idle_minutes: int = Field(10, ge=1, le=1440)
    """minutes a GPU node stays empty before Karpenter removes it (NodePool consolidateAfter), 1-1440"""
    capacity_block: Optional[CapacityBlockWindow] = None
    """the window of the Capacity Block: required with `capacity.type: capacity-block` (an `up` outside it is refused), refused otherwise"""
    existing_karpenter: bool = False
    """bring your own cluster: Karpenter already runs there with a NodePool for these GPU nodes (the stack installs Karpenter only on a cluster it creates); required with `cluster.existing`, refused without it"""


def pod_annotations(e: ElasticConfig) -> dict[str, str]:
    """Annotations of every GPU pod: do-not-disrupt in elastic mode (a training node is never
    consolidated or drifted while the run is on it), none otherwise (no change to fixed stacks)."""
    return dict(DO_NOT_DISRUPT) if e.enabled else {}
