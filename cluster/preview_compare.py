"""The real engine's operations beside the offline impact, per resource: what the pull request's
simulated-cluster preview (ci/sim-preview.sh) adds to the review comment, saying where they disagree.

    python -m cluster.preview_compare --stack sim --base-record BASE/resources.json \\
        --preview preview.json [--title TEXT]     # prints Markdown; run from the pull request's tree

BASE/resources.json: the base's offline record of the stack (what is deployed on the simulated
cluster: ci/base_render.py of the base's tree); the pull request's record is rendered here, by this
checkout's own program (components.offline.render, imported from this tree); preview.json
is `python -m cluster.deploy preview --json` of the pull request's program against the deployed base
(each resource's step operations from the engine's events). Compared: the Kubernetes objects and
the providers (pulumi-eks and AWS resources do not exist on the simulated cluster), as
tests/sim/test_day_two.py compares them. An offline "refused" agrees with any real operation: the
impact guard refuses what the engine would try.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Optional

from components.offline import impact, render

COMPARED = ("kubernetes:", "pulumi:providers:")
# What an offline impact kind means for the engine's step on that resource.
OFFLINE_OP = {impact.CREATE: "create", impact.DELETE: "delete", impact.IN_PLACE: "update",
              impact.SERVING_RESTART: "update", impact.REPLACE: "replace", impact.DATA_LOSS: "replace",
              impact.RUN_RESTART: "replace", impact.CHECK_RERUN: "replace", impact.NEVER_FINISHES: "replace",
              impact.NODE_ROLL: "replace", impact.REFUSED: "refused"}


def real_op(ops: list[str]) -> str:
    """One word per resource from its step events (a replacement shows as create-replacement /
    replace / delete-replaced; refresh and read steps are not changes)."""
    ops = [o for o in ops if o not in ("refresh", "read")]
    for word, found in (("replace", {"replace", "create-replacement", "delete-replaced"}), ("create", {"create"}),
                        ("delete", {"delete"}), ("update", {"update"})):
        if found & set(ops):
            return word
    return "same"


def compare(before: list[dict[str, Any]], after: list[dict[str, Any]], cfg: Any,
            preview: dict[str, Any]) -> list[tuple[str, str, str, str, bool]]:
    """(resource, offline kind, offline op, real op, agree) for every resource either side changes."""
    impacts = [i for i in impact.classify(before, after, cfg) if i.type.startswith(COMPARED)]
    kinds = {i.name: i.kind for i in reversed(impacts)}  # the worst kind per name (worst first)
    predicted = {i.name: OFFLINE_OP.get(i.kind, i.kind) for i in impacts}
    real = {urn.split("::")[-1]: real_op(e.get("ops") or []) for urn, e in (preview.get("ops") or {}).items()
            if str(e.get("type", "")).startswith(COMPARED)}
    rows = []
    for name in sorted(set(real) | set(predicted)):
        off, got = predicted.get(name, "same"), real.get(name, "same")
        if off == got == "same":
            continue
        rows.append((name, kinds.get(name, "no change"), off, got, off == got or (off == "refused" and got != "same")))
    return rows


def markdown(rows: list[tuple[str, str, str, str, bool]], preview: dict[str, Any], title: str) -> str:
    lines = [f"### {title}", ""]
    if not preview.get("ok", False):
        error = str(preview.get("error") or "").strip().splitlines()[-15:]
        lines += ["**The real preview failed** on the simulated cluster:", "", "```text", *error, "```", ""]
    if not rows:
        lines += ["No change, offline and in the real preview.", ""]
        return "\n".join(lines)
    bad = [r for r in rows if not r[4]]
    lines += ["| resource | offline impact | real preview | |", "|---|---|---|---|"]
    for name, kind, off, got, agree in rows:
        note = "the impact guard refuses it" if off == "refused" and agree else ("" if agree else "**disagree**")
        lines.append(f"| `{name}` | {kind} | {got} | {note} |")
    lines.append("")
    if bad:
        lines += [f"**The offline impact and the real engine disagree on {len(bad)} resource(s)**: "
                  + ", ".join(f"`{r[0]}` (offline {r[2]}, real {r[3]})" for r in bad)
                  + ". The real preview is what `pulumi up` would do on a cluster like this one.", ""]
    else:
        lines += ["The offline impact and the real engine agree on every resource.", ""]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m cluster.preview_compare", description=__doc__.split("\n\n")[0])
    ap.add_argument("--stack", default="sim")
    ap.add_argument("--base-record", type=Path, required=True, help="the base's STACK/resources.json")
    ap.add_argument("--preview", type=Path, required=True, help="python -m cluster.deploy preview --json output")
    ap.add_argument("--title", default="Real preview on the simulated cluster")
    args = ap.parse_args(argv)
    before = json.loads(args.base_record.read_text()) if args.base_record.exists() else []
    rendered = render.render_stack(args.stack)
    after = json.loads(render.resources_json(rendered.result))
    preview = json.loads(args.preview.read_text()) if args.preview.exists() else {"ok": False, "error": "no preview"}
    sys.stdout.write(markdown(compare(before, after, rendered.cfg, preview), preview, args.title))
    return 0


if __name__ == "__main__":
    sys.exit(main())
