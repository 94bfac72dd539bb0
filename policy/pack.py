"""CrossGuard adapter: one stack-validation policy per rule of components/offline/policy.py.

    pulumi preview --policy-pack policy

The rules themselves live in the project package, so the render, the tests and this pack can never
disagree. This module only translates CrossGuard's resources into the render's resource view.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from pulumi_policy import EnforcementLevel, StackValidationArgs, StackValidationPolicy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from components.offline import policy  # noqa: E402


def resource_view(r: Any) -> dict[str, Any]:
    """A CrossGuard PolicyResource as a row of rendered/<stack>/resources.json."""
    opts = getattr(r, "opts", None)
    return {"type": r.resource_type, "name": r.name, "inputs": dict(r.props or {}),
            "options": {"protect": bool(getattr(opts, "protect", False))}}


def _validator(rule_name: str):
    def validate(args: StackValidationArgs, report_violation) -> None:
        urns = {r.name: r.urn for r in args.resources}
        for v in policy.evaluate([resource_view(r) for r in args.resources], rules=[rule_name]):
            report_violation(f"{v.resource}: {v.message}. Fix: {v.fix}", urns.get(v.pulumi_name))
    return validate


def policies() -> list[StackValidationPolicy]:
    return [
        StackValidationPolicy(name=name, description=description, validate=_validator(name),
                              enforcement_level=EnforcementLevel.MANDATORY)
        for name, (_, description) in policy.RULES.items()
    ]
