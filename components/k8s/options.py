"""Resource options of a component's child, for every Kubernetes component (k8s/ and workloads/).

Moved from workloads/runs.py (which re-exports it) so that k8s/ components need nothing of workloads/.
"""

from __future__ import annotations

from typing import Optional

import pulumi


def _as_list(deps) -> list:
    if deps is None:
        return []
    return list(deps) if isinstance(deps, (list, tuple)) else [deps]


def child_opts(parent: pulumi.Resource, opts: Optional[pulumi.ResourceOptions], *extra_deps: pulumi.Resource,
               **kwargs) -> pulumi.ResourceOptions:
    """Options of a component's child: parent, the caller's Kubernetes provider and dependencies.

    depends_on is not inherited from a component by its children, so it is passed on explicitly
    (the namespace and its service account must exist before any pod is created).
    """
    return pulumi.ResourceOptions(
        parent=parent,
        provider=opts.provider if opts else None,
        depends_on=[*_as_list(opts.depends_on if opts else None), *extra_deps],
        **kwargs,
    )
