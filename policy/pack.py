"""CrossGuard adapter: one stack-validation policy per rule of components/offline/policy.py.

    pulumi preview --policy-pack policy

The rules themselves live in the project package, so the render, the tests and this pack can never
disagree. This module only translates what pulumi-policy's analyzer hands a policy into the
render's resource view (a row of rendered/<stack>/resources.json):

- Properties arrive wrapped in pulumi-policy's read-only proxies (`_DictProxy`, `_ListProxy` in
  pulumi_policy/proxy.py): Mappings and Sequences, not dicts and lists, so a rule's `a | b` or
  `isinstance(x, dict)` fails. The view is made of plain dicts and lists, and integral numbers
  (floats on the wire) are ints again, as in the render.
- On a preview, the proxies raise `UnknownValueError` when a value the engine does not know yet is
  read, and pulumi-policy then skips the whole policy ("can't run policy ... during preview",
  advisory). The view is built from the raw values behind the proxies instead (`proxy["__target"]`,
  the same way pulumi-policy's own `serialize_properties` lets unknowns through), with every
  unknown replaced by the render's placeholder `[unknown before deploy]`. Each rule then runs on
  everything it can see.
- A rule that applies to the stack but finds nothing to read (a component that registers no
  outputs, a Kubernetes object whose outputs lack the spec the rule reads) is a mandatory
  violation of that rule, naming what it expected (policy.evaluate runs `unread` after each rule;
  the render does the same), never a pass. The rules read every resource of a kind, in whatever
  order the engine sends them (it iterates a map: no set order).
- What a rule could not see is written, per rule, to stderr, which the engine streams into the
  preview's output. Not a policy diagnostic: pulumi-policy gives every diagnostic of a policy that
  policy's enforcement level (mandatory here, so a note would block the preview), and its only other
  one, for `UnknownValueError`, says the policy did not run. That path is kept for a rule that
  fails outright on a placeholder: a rule is not skipped for a value it never read.
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Optional

from pulumi_policy import EnforcementLevel, PolicyResource, StackValidationArgs, StackValidationPolicy

# Private names of pulumi-policy, pinned in requirements.txt: the proxies and the unknown sentinels.
from pulumi_policy.proxy import (
    UNKNOWN_ARCHIVE_VALUE,
    UNKNOWN_ARRAY_VALUE,
    UNKNOWN_ASSET_VALUE,
    UNKNOWN_BOOLEAN_VALUE,
    UNKNOWN_NUMBER_VALUE,
    UNKNOWN_OBJECT_VALUE,
    UNKNOWN_STRING_VALUE,
    UnknownValueError,
    _DictProxy,
    _ListProxy,
)
from pulumi_policy.secret import Secret, _DictSecretsProxy, _ListSecretsProxy

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from components.offline import policy  # noqa: E402
from components.offline.resources import Violation  # noqa: E402
from components.offline.mock_engine import UNKNOWN  # noqa: E402

PACK_NAME = "rltrain-guardrails"
_SENTINELS = frozenset({UNKNOWN_BOOLEAN_VALUE, UNKNOWN_NUMBER_VALUE, UNKNOWN_STRING_VALUE, UNKNOWN_ARRAY_VALUE,
                        UNKNOWN_ASSET_VALUE, UNKNOWN_ARCHIVE_VALUE, UNKNOWN_OBJECT_VALUE})
_PROXIES = (_DictProxy, _ListProxy, _DictSecretsProxy, _ListSecretsProxy)

Unknowns = list[tuple[str, str]]  # (resource, property path) of each value unknown until deploy


def _path(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = str(key)
    if key.replace("_", "a").replace("-", "a").isalnum():
        return f"{path}.{key}" if path else key
    return f"{path}[{key!r}]"


def _plain(value: Any, path: str, found: list[str]) -> Any:
    """Plain dicts and lists from pulumi-policy's proxies, without reading through them."""
    while isinstance(value, _PROXIES) or isinstance(value, Secret):
        value = value.value if isinstance(value, Secret) else value["__target"]
    if isinstance(value, str) and value in _SENTINELS:
        found.append(path)
        return UNKNOWN
    if isinstance(value, dict):
        return {str(k): _plain(v, _path(path, k), found) for k, v in value.items()}
    if isinstance(value, Mapping):  # not expected from the analyzer; read it key by key
        return {str(k): _plain(value[k], _path(path, k), found) for k in value}
    if isinstance(value, (list, tuple)):
        return [_plain(v, _path(path, i), found) for i, v in enumerate(value)]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


# pulumi-kubernetes applies with server-side apply under a field manager of its own; its entry in
# metadata.managedFields names the fields the program set (provider/pkg/provider/provider.go,
# fieldManager "pulumi-kubernetes-<random>").
PULUMI_MANAGER = "pulumi-kubernetes"


def _owned(value: Any, fields: dict[str, Any]) -> Any:
    """The part of a live value named by a managedFields FieldsV1 set (Kubernetes structured-merge-
    diff: `f:<field>` a field, `k:{...}` a list item by its keys, `v:<json>` a set item, `.` the node
    itself); a field with nothing below it is owned whole."""
    if not fields or set(fields) == {"."}:
        return value
    if isinstance(value, dict):
        return {k[2:]: _owned(value[k[2:]], sub) for k, sub in fields.items()
                if k.startswith("f:") and k[2:] in value}
    if isinstance(value, list):
        out = []
        for item in value:
            for k, sub in fields.items():
                if k.startswith("k:") and isinstance(item, dict) and all(
                        item.get(kk) == vv for kk, vv in json.loads(k[2:]).items()):
                    out.append(_owned(item, sub))
                    break
                if k.startswith("v:") and json.loads(k[2:]) == item:
                    out.append(item)
                    break
        return out
    return value


def declared(obj: dict[str, Any]) -> dict[str, Any]:
    """A live Kubernetes object (what the engine hands a policy: the resource's outputs, with
    status, server defaults and what controllers wrote) cut down to what the program applied, by
    the Pulumi field manager's managedFields entry. Kueue, for one, sets a queued Job's
    spec.suspend and adds its flavor's node labels to the pod template: read as the program's,
    every queued run broke `kueue-queue` and `schedules-on-gpu-nodes` in a real preview (the
    simulated cluster). An object without that entry (a create in preview: its inputs) is kept."""
    meta = obj.get("metadata") or {}
    entries = [m for m in meta.get("managedFields") or []
               if str(m.get("manager", "")).startswith(PULUMI_MANAGER) and m.get("operation") == "Apply"]
    if not entries:
        return obj
    out: dict[str, Any] = {}
    for m in entries:
        part = _owned(obj, m.get("fieldsV1") or {})
        out = _merge(out, part)
    out["apiVersion"], out["kind"] = obj.get("apiVersion"), obj.get("kind")
    keep = {k: meta[k] for k in ("name", "namespace") if k in meta}
    out["metadata"] = {**keep, **(out.get("metadata") or {})}
    return out


def _merge(a: Any, b: Any) -> Any:
    if isinstance(a, dict) and isinstance(b, dict):
        return {**a, **{k: _merge(a[k], v) if k in a else v for k, v in b.items()}}
    return b


def resource_view(r: PolicyResource, unknowns: Optional[Unknowns] = None, live: bool = False) -> dict[str, Any]:
    """A CrossGuard PolicyResource as a row of rendered/<stack>/resources.json.

    Unknown values become `[unknown before deploy]`; their paths are appended to `unknowns`.
    A Kubernetes object is cut down to what the program applied (`declared`), unless `live`.
    """
    found: list[str] = []
    inputs = _plain(r.props if r.props is not None else {}, "", found)
    if r.resource_type.startswith("kubernetes:") and isinstance(inputs, dict) and not live:
        inputs = declared(inputs)
    if unknowns is not None:
        unknowns.extend((r.name, p) for p in found)
    opts = getattr(r, "opts", None)
    parent = getattr(r, "parent", None)
    provider = getattr(r, "provider", None)
    # The engine's ordering edges, as the render records them (`type::name`), for the deploy model.
    edges = [f"{d.resource_type}::{d.name}" for d in getattr(r, "dependencies", None) or []]
    return {"type": r.resource_type, "name": r.name, "parent": getattr(parent, "name", None),
            # Components (ours and pulumi-eks's remote ones) are not custom resources.
            "custom": not r.resource_type.startswith(("rltrain:", "eks:index:")),
            "dependsOn": edges,
            "provider": f"{provider.resource_type}::{provider.name}" if provider else None,
            "inputs": inputs if isinstance(inputs, dict) else {},
            "options": {"protect": bool(getattr(opts, "protect", False)),
                        "deleteBeforeReplace": bool(getattr(opts, "delete_before_replace", False)),
                        # The render records ignoreChanges only when set; the engine always sends it.
                        **({"ignoreChanges": sorted(opts.ignore_changes)}
                           if getattr(opts, "ignore_changes", None) else {})}}


def _urn(resources: list[PolicyResource], v: Violation) -> Optional[str]:
    """The violating resource's URN; names repeat across types, the rule's text names the type."""
    same = [r for r in resources if v.pulumi_name and r.name == v.pulumi_name]
    if len(same) > 1:
        same = [r for r in same if r.resource_type in v.resource] or same
    return same[0].urn if len(same) == 1 else None


def unseen_report(rule_name: str, unknowns: Unknowns, resources: list[PolicyResource]) -> str:
    """One line: what the rule ran without, by resource, list items folded (`subnetIds[*] x2`)."""
    names = Counter(r.name for r in resources)
    types = {r.name: r.resource_type for r in resources}
    by_resource: dict[str, Counter[str]] = {}
    for name, path in unknowns:
        label = name if names[name] == 1 else f"{types[name]}::{name}"
        by_resource.setdefault(label, Counter())[re.sub(r"\[\d+\]", "[*]", path)] += 1
    listed = "; ".join(
        f"{res} ({', '.join(p if n == 1 else f'{p} x{n}' for p, n in paths.items())})"
        for res, paths in by_resource.items())
    return (f"{PACK_NAME}/{rule_name}: ran with {len(unknowns)} value(s) unknown until deploy, "
            f"seen as {UNKNOWN!r}, in {len(by_resource)} resource(s): {listed}")


def _log(line: str) -> None:
    # The analyzer has no engine connection (pulumi.log would print here too); the engine streams a
    # policy pack's stderr into the preview's output.
    print(line, file=sys.stderr, flush=True)


def _validator(rule_name: str, log: Callable[[str], None] = _log):
    def validate(args: StackValidationArgs, report_violation) -> None:
        unknowns: Unknowns = []
        rows = [resource_view(r, unknowns) for r in args.resources]
        try:
            violations = policy.evaluate(rows, rules=[rule_name])
        except Exception as e:
            if not unknowns:
                raise  # a broken rule, not a preview
            # The rule cannot run on placeholders: pulumi-policy's own advisory "can't run policy".
            err = UnknownValueError(UNKNOWN_STRING_VALUE, [])
            err.message = (f"it failed on a value unknown until deploy ({type(e).__name__}: {e}); "
                           + unseen_report(rule_name, unknowns, args.resources))
            raise err from e
        for v in violations:
            report_violation(f"{v.resource}: {v.message}. Fix: {v.fix}", _urn(args.resources, v))
        if unknowns:
            log(unseen_report(rule_name, unknowns, args.resources))
    return validate


def policies() -> list[StackValidationPolicy]:
    return [
        StackValidationPolicy(name=name, description=rule.description, validate=_validator(name),
                              enforcement_level=EnforcementLevel.MANDATORY)
        for name, rule in policy.RULES.items()
    ]
