"""A policy pack that reports nothing and writes what the engine hands a stack policy to
$RLTRAIN_POLICY_RECORD: each resource in the rltrain pack's view (policy/pack.py resource_view) but
as the engine sent it (`live`: a Kubernetes object's outputs, not cut down to what was applied).
Run by cluster/record_policy_input.py through `python -m cluster.deploy preview --policy-pack`."""

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path[:0] = [str(ROOT / "policy"), str(ROOT)]

from pack import resource_view  # noqa: E402
from pulumi_policy import EnforcementLevel, PolicyPack, StackValidationPolicy  # noqa: E402


def record(args, report_violation) -> None:
    rows = [{**resource_view(r, live=True), "urn": r.urn} for r in args.resources]
    Path(os.environ["RLTRAIN_POLICY_RECORD"]).write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n")


PolicyPack(name="rltrain-record", policies=[StackValidationPolicy(
    name="record", description="writes the resources the engine sends", validate=record,
    enforcement_level=EnforcementLevel.ADVISORY)])
