"""Every stack of a base commit rendered by that commit's own code: its record and its estimated cost.

    python ci/base_render.py PROJECT_DIR OUT_DIR [STACK...]
        # writes OUT_DIR/STACK/resources.json (the base program's render) and OUT_DIR/STACK/cost.json

PROJECT_DIR is an export of the base commit (ci/render-review.sh: `git archive BASE`). Two uses:

- the base's committed record (rendered/STACK/resources.json there) may be older than the base's own
  program (someone merged without re-rendering): ci/render-review.sh compares the two and judges the
  pull request against what the base's program renders, showing the difference separately ("main is
  stale: these changes are not this PR's");
- the cost is a stack output (`estimatedCostPerHour`: the catalog's dated prices x the configured
  shape) the records do not hold: "before" is the base's own render, priced by the base's own catalog.

A base that no longer renders with this environment gets no resources.json (the review falls back to
the committed record and says so) and `{"usd": null, "note": "..."}` as its cost.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    project, out = Path(argv[0]).resolve(), Path(argv[1])
    sys.path.insert(0, str(project))  # the base's `components`, not this checkout's
    # Stacks the base has (a stack new in this change has nothing before).
    stacks = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in project.glob("Pulumi.*.yaml"))
    stacks = [s for s in stacks if s in argv[2:]] if argv[2:] else stacks
    records: dict[str, str] = {}
    try:
        from components.offline import render
    except Exception as e:  # noqa: BLE001 - whatever the base's code raises, it does not render here
        costs = {s: {"usd": None, "note": f"the base does not render here ({type(e).__name__}: {e})"} for s in stacks}
    else:
        costs = {}
        for stack in stacks:
            try:
                rendered = render.render_stack(stack, project)
                records[stack] = render.resources_json(rendered.result)
                costs[stack] = rendered.result.stack_outputs.get("estimatedCostPerHour") or {
                    "usd": None, "note": "no cost output"}
            except Exception as e:  # noqa: BLE001
                first = (str(e).strip().splitlines() or [""])[0][:300]
                costs[stack] = {"usd": None, "note": f"the base does not render here ({type(e).__name__}: {first})"}
    for stack, cost in costs.items():
        (out / stack).mkdir(parents=True, exist_ok=True)
        (out / stack / "cost.json").write_text(json.dumps(cost, indent=2, sort_keys=True) + "\n")
        if stack in records:
            (out / stack / "resources.json").write_text(records[stack])
        print(f"{stack}: record {'rendered' if stack in records else 'NOT rendered'}, cost {cost.get('usd')} "
              f"({cost.get('breakdown') or cost.get('note', '')})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
