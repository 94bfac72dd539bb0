"""Update plans on the real Pulumi CLI (the one cluster/build.sh builds) with a local file backend,
no provider and no cluster: the engine behaviour the deploy on merge relies on (docs/pr-review.md
"Deploy on merge": `pulumi preview --save-plan`, then `pulumi up --plan`). A plan applied when the
program is still what was previewed; refused, with the engine's "not allowed by the plan", when the
program moved on after the preview (main moved), and nothing outside the plan is applied.

A small inline program (component resources named from config) keeps it to seconds; the same
contract on the `sim` stack is tests/sim/test_deploy_plan.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import ENABLE, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from cluster.binaries import toolset  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]


def program():
    import pulumi

    class Box(pulumi.ComponentResource):
        def __init__(self, name: str):
            super().__init__("test:index:Box", name, None, None)
            self.register_outputs({})

    name = pulumi.Config().require("name")
    Box(name)
    pulumi.export("name", name)


def test_a_saved_plan_applies_and_a_stale_one_is_refused(tmp_path: Path):
    from pulumi import automation as auto

    cli = Path(toolset().require("pulumi"))
    assert cli.parent.name == "bin", cli  # PulumiCommand wants <root>/bin/pulumi
    backend = f"file://{tmp_path / 'state'}"
    (tmp_path / "state").mkdir()
    opts = auto.LocalWorkspaceOptions(
        work_dir=str(tmp_path), pulumi_home=str(tmp_path / "home"),
        env_vars={"PULUMI_BACKEND_URL": backend, "PULUMI_CONFIG_PASSPHRASE": "throwaway",
                  "PULUMI_SKIP_UPDATE_CHECK": "true"},
        pulumi_command=auto.PulumiCommand(root=str(cli.parent.parent), skip_version_check=True),
        project_settings=auto.ProjectSettings(name="plans", runtime="python", backend=auto.ProjectBackend(url=backend)))
    stack = auto.create_or_select_stack(stack_name="t", project_name="plans", program=program, opts=opts)
    quiet = {"on_output": lambda line: None}
    stack.set_config("name", auto.ConfigValue("a"))
    stack.up(**quiet)

    # Reviewed and merged unchanged: the plan applies.
    stack.set_config("name", auto.ConfigValue("b"))
    reviewed = tmp_path / "plan-b.json"
    stack.preview(plan=str(reviewed), **quiet)
    up = stack.up(plan=str(reviewed), **quiet)
    assert up.summary.result == "succeeded"
    assert up.summary.resource_changes == {"create": 1, "delete": 1, "same": 1}

    # The program moved on after the preview: refused, and the state keeps the last applied plan.
    stack.set_config("name", auto.ConfigValue("c"))
    stale = tmp_path / "plan-c.json"
    stack.preview(plan=str(stale), **quiet)
    stack.set_config("name", auto.ConfigValue("d"))
    with pytest.raises(auto.CommandError) as refused:
        stack.up(plan=str(stale), **quiet)
    assert "create is not allowed by the plan" in str(refused.value)
    assert stack.outputs()["name"].value == "b"
