"""Config of elastic GPU capacity (`rltrain:gpuNodes.elastic`), fed to components/aws/karpenter.py.

Off by default: the fixed managed node group (components/aws/gpu_nodes.py) holds `gpuNodes.count`
nodes whether or not anything runs. On, no GPU node is held: Karpenter launches nodes for the pods
Kueue admits, up to `maxNodes`, and removes a node once it has been empty `idleMinutes`. The
capacity type is the stack's own (`gpuNodes.capacity`: on-demand, a Capacity Block, an ODCR).

Whole or none: Kueue admits a run only when the quota (the maximum, not the nodes present) has
room for all its pods, and `waitForPodsReady` releases an admitted run whole when its pods are not
all Ready in time (a node that never launched); the run is requeued whole (docs/elastic-capacity.md).

A module of its own beside the component it feeds (not stack/config.py, which only holds the
field); pure (no Pulumi); stack/config calls `problems` through refusals.stack_problems.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING, Callable, Optional

from pydantic import Field, model_validator

from components.stack.model_base import _Model

if TYPE_CHECKING:  # pragma: no cover
    from components.stack.config import StackConfig

KEY = "rltrain:gpuNodes.elastic"
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


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def enabled(cfg: "StackConfig") -> bool:
    return cfg.gpu_nodes.elastic.enabled


def max_nodes(cfg: "StackConfig") -> int:
    """The most GPU nodes the stack may hold: the maximum in elastic mode, the count otherwise."""
    e = cfg.gpu_nodes.elastic
    return (e.max_nodes or cfg.gpu_nodes.count) if e.enabled else cfg.gpu_nodes.count


def widest_run(cfg: "StackConfig") -> tuple[int, str]:
    """(nodes, what) of the widest workload the stack runs: validation and the NCCL test take every
    one of `gpuNodes.count` nodes (components/workloads/validation.py, nccl.py), the multi-node run
    its `nodes`."""
    w = cfg.workloads
    widths = [(cfg.gpu_nodes.count, "gpuNodes.count (validation, the NCCL test, the default run width)")]
    if w.multi_node.enabled:
        widths.append((cfg.multi_node_count, "the multi-node run (workloads.multiNode.nodes)"))
    return max(widths, key=lambda x: x[0])


def pod_annotations(cfg: "StackConfig") -> dict[str, str]:
    """Annotations of every GPU pod: do-not-disrupt in elastic mode (a training node is never
    consolidated or drifted while the run is on it), none otherwise (no change to fixed stacks)."""
    return dict(DO_NOT_DISRUPT) if enabled(cfg) else {}


def problems(cfg: "StackConfig", now: Optional[Callable[[], dt.datetime]] = None) -> list[tuple[str, str]]:
    """What elastic mode refuses before anything is created, each with its key and what is allowed."""
    e = cfg.gpu_nodes.elastic
    out: list[tuple[str, str]] = []
    if not e.enabled:
        for name, set_ in (("maxNodes", e.max_nodes is not None), ("capacityBlock", e.capacity_block is not None),
                           ("existingKarpenter", e.existing_karpenter)):
            if set_:
                out.append((f"{KEY}.{name}", "only with elastic.enabled: true (the fixed node group ignores it)"))
        return out
    width, what = widest_run(cfg)
    top = max_nodes(cfg)
    if top < width:
        out.append((f"{KEY}.maxNodes", f"{top} is smaller than the widest run, {what}: {width} nodes; Kueue would "
                    f"never admit it whole (its quota is the maximum). Allowed: {width}-256"))
    cap = cfg.gpu_nodes.capacity.type
    if cap == "capacity-block":
        w = e.capacity_block
        if w is None:
            out.append((f"{KEY}.capacityBlock", "required with capacity.type capacity-block: the block's start and "
                        "end (aws ec2 describe-capacity-reservations --capacity-reservation-ids ID: StartDate, "
                        "EndDate)"))
        else:
            t = (now or _now)()
            if not w.start <= t < w.end:
                when = "has not started" if t < w.start else "has ended"
                out.append((f"{KEY}.capacityBlock", f"the Capacity Block {when} (window {w.start.isoformat()} to "
                            f"{w.end.isoformat()}, now {t.replace(microsecond=0).isoformat()}): EC2 launches into a "
                            "block only inside its window, so every run would stay queued. Apply inside the window, "
                            "or use capacity.type on-demand / odcr"))
    elif e.capacity_block is not None:
        out.append((f"{KEY}.capacityBlock", f"only with capacity.type capacity-block (got {cap})"))
    if cfg.byo_cluster and not e.existing_karpenter:
        out.append((f"{KEY}.existingKarpenter", "a bring-your-own cluster needs Karpenter already running with a "
                    "NodePool for the GPU nodes (this stack installs Karpenter, its IAM roles and interruption "
                    "queue only on a cluster it creates): set existingKarpenter: true once it does, or turn "
                    "elastic off"))
    if e.existing_karpenter and not cfg.byo_cluster:
        out.append((f"{KEY}.existingKarpenter", "only with cluster.existing: a created cluster gets the stack's own "
                    "Karpenter"))
    return out
