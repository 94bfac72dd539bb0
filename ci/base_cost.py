"""The estimated cost of every stack of a base commit, computed by that commit's own code.

    python ci/base_cost.py PROJECT_DIR OUT_DIR [STACK...]   # writes OUT_DIR/STACK/cost.json per stack

PROJECT_DIR is an export of the base commit (ci/render-review.sh: `git archive BASE`). The cost is a
stack output (`estimatedCostPerHour`: the catalog's dated prices x the configured shape); the
recorded resources do not hold it, so "before" is the base's own render, priced by the base's own
catalog: a change of prices shows as a change. A base that no longer renders with this environment
gets `{"usd": null, "note": "..."}` and the summary says the cost before is unknown.
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
    # Stacks the base has (a stack new in this change has no cost before).
    stacks = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in project.glob("Pulumi.*.yaml"))
    stacks = [s for s in stacks if s in argv[2:]] if argv[2:] else stacks
    try:
        from components.offline import render
    except Exception as e:  # noqa: BLE001 - whatever the base's code raises, the cost is unknown
        costs = {s: {"usd": None, "note": f"the base does not render here ({type(e).__name__}: {e})"} for s in stacks}
    else:
        costs = {}
        for stack in stacks:
            try:
                outputs = render.render_stack(stack, project).result.stack_outputs
                costs[stack] = outputs.get("estimatedCostPerHour") or {"usd": None, "note": "no cost output"}
            except Exception as e:  # noqa: BLE001
                first = (str(e).strip().splitlines() or [""])[0][:300]
                costs[stack] = {"usd": None, "note": f"the base does not render here ({type(e).__name__}: {first})"}
    for stack, cost in costs.items():
        (out / stack).mkdir(parents=True, exist_ok=True)
        (out / stack / "cost.json").write_text(json.dumps(cost, indent=2, sort_keys=True) + "\n")
        print(f"{stack}: {cost.get('usd')} ({cost.get('breakdown') or cost.get('note', '')})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
