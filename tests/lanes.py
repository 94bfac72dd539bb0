"""How the simulated-cluster modules share this machine and a test run (imports nothing heavy: the
xdist controller reads it, tests/conftest.py).

Lanes: at most RLTRAIN_SIM_LANES simulated clusters run on this machine at once, whatever test runs
or engineers start them (a semaphore of lock files: tests/sim/conftest.py take_lane). A run that
selects the simulated-cluster tests gets that many xdist workers more than its -n, and the groups
below are handed to them first, longest first, at most that many at a time (LaneScheduling in
tests/conftest.py); every other module goes to any worker, longest first.

Groups: modules that run on the same kind of cluster, one after the other in one worker, sharing it
(reset to its baseline in between, tests/sim/conftest.py). A group's seconds (its wall time, measured
on the 2-core build machine: docs/testing.md) only order the groups.
"""

from __future__ import annotations

import os

# A cluster idles at about 5 % of a core; starting one costs some 20 s of CPU (mostly the API server
# taking the operators' CRDs), a Pulumi operation 5-10 s: on 2 cores the sim tier used 1,011 s of CPU
# over its 1,317 s in three lanes (docs/testing.md, 2026-12-05), each lane mostly waiting on its
# timers. Four lanes: the four groups of 680-800 s each get one, instead of two of them sharing a lane.
DEFAULT_LANES = 4
LANES_ENV = "RLTRAIN_SIM_LANES"

# group -> (its modules in the order they run, expected seconds: their wall in .ci/run 2026-12-05).
# The modules of a group share one cluster kind (tests/sim/conftest.py KINDS, a module's
# CLUSTER_KIND), or need none: a module that leaves its deployment on the cluster
# (test_deploy_script: a stack in a state of its own) goes last.
SIM_GROUPS: dict[str, tuple[tuple[str, ...], float]] = {
    "shared-a": (("tests/sim/test_day_two.py", "tests/sim/test_deploy_plan.py", "tests/sim/test_sim_named_runs.py"), 790),
    "shared-b": (("tests/sim/test_key_sweep.py", "tests/sim/test_deploy.py", "tests/sim/test_deploy_script.py"), 735),
    "held": (("tests/sim/test_node_repair.py",), 680),
    "serving": (("tests/sim/test_serve_export.py",), 90),
    "elastic": (("tests/sim/test_elastic.py",), 800),
    # No cluster of their own in a lane but the script's: the preview script starts one (in a lane it
    # takes itself); the CLI-only modules after it.
    "preview": (("tests/sim/test_sim_preview.py", "tests/sim/test_update_plans.py", "tests/sim/test_sim_langhost.py"),
                330),
}
GROUP_OF = {module: group for group, (modules, _) in SIM_GROUPS.items() for module in modules}

# The other long modules, in seconds (the rest are ordered by their number of tests): started early
# so that none of them is the last thing a run waits for.
LONG_MODULES = {
    "tests/test_review_flow.py": 300, "tests/test_checkov.py": 120, "tests/scripts/test_ray_launcher.py": 90,
    "tests/test_resume_contract.py": 60, "tests/scripts/test_export_hf.py": 60, "tests/test_policy_pack.py": 60,
    "tests/test_lint.py": 40, "tests/test_render.py": 40,
}


def lanes() -> int:
    return max(1, int(os.environ.get(LANES_ENV, DEFAULT_LANES)))
