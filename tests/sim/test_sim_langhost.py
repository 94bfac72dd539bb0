"""The real Pulumi CLI (the one cluster/build.sh builds) running a Python program and a Python policy
pack through the test harness's language host (cluster/langhost), no cluster: `pulumi preview
--save-plan`, then `pulumi up --plan` applied; a plan made before the program moved on refused by the
CLI ("not allowed by the plan") with the state left as the last applied plan. The same contract on the
`sim` stack, through ci/deploy.sh: tests/sim/test_deploy_script.py. The protocol alone, without the
CLI: tests/test_langhost.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import ENABLE, sim_requested

if not sim_requested():
    pytest.skip(ENABLE, allow_module_level=True)

from cluster.binaries import toolset  # noqa: E402
from cluster.langhost.__main__ import install  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.sim]

PROGRAM = '''import pulumi


class Box(pulumi.ComponentResource):
    def __init__(self, name):
        super().__init__("test:index:Box", name, None, None)
        self.register_outputs({})


name = pulumi.Config().require("name")
print(f"program sees name={name}")
Box(name)
pulumi.export("name", name)
'''

PACK = '''from pulumi_policy import EnforcementLevel, PolicyPack, ReportViolation, ResourceValidationPolicy


def boxes(args, report_violation: ReportViolation):
    if args.resource_type == "test:index:Box":
        report_violation(f"saw box {args.name}")


PolicyPack(name="langhost-pack", policies=[ResourceValidationPolicy(
    name="see-boxes", description="reports every box", validate=boxes,
    enforcement_level=EnforcementLevel.ADVISORY)])
'''


def test_preview_save_plan_and_up_plan_through_the_harness_host(tmp_path: Path):
    cli = Path(toolset().require("pulumi"))
    host_dir = tmp_path / "langhost"
    install(host_dir)
    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text("name: plans\nruntime: python\n")
    (project / "__main__.py").write_text(PROGRAM)
    pack = tmp_path / "pack"
    pack.mkdir()
    (pack / "PulumiPolicy.yaml").write_text("runtime: python\n")
    (pack / "__main__.py").write_text(PACK)
    (tmp_path / "state").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PULUMI_")}
    env.update(PATH=f"{host_dir}:{cli.parent}:{env['PATH']}", PULUMI_HOME=str(tmp_path / "home"),
               PULUMI_BACKEND_URL=f"file://{tmp_path / 'state'}", PULUMI_CONFIG_PASSPHRASE="throwaway",
               PULUMI_SKIP_UPDATE_CHECK="true", PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true", NO_COLOR="1")

    def pulumi(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        r = subprocess.run([str(cli), *args, "--non-interactive"], cwd=project, env=env, capture_output=True,
                           text=True, timeout=300)
        if check:
            assert r.returncode == 0, f"pulumi {' '.join(args)}:\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}"
        return r

    pulumi("stack", "init", "t")
    pulumi("config", "set", "name", "a")
    up = pulumi("up", "--yes", "--policy-pack", str(pack))
    assert "program sees name=a" in up.stdout and "saw box a" in up.stdout  # the program's output, the pack ran

    # Reviewed and merged unchanged: the plan applies.
    pulumi("config", "set", "name", "b")
    reviewed = tmp_path / "plan-b.json"
    pulumi("preview", "--save-plan", str(reviewed), "--policy-pack", str(pack))
    assert reviewed.stat().st_size > 0
    up = pulumi("up", "--yes", "--plan", str(reviewed), "--policy-pack", str(pack))
    assert "+ 1 created" in up.stdout and "- 1 deleted" in up.stdout, up.stdout

    # The program moved on after the preview: the CLI refuses the stale plan; the state keeps "b".
    pulumi("config", "set", "name", "c")
    stale = tmp_path / "plan-c.json"
    pulumi("preview", "--save-plan", str(stale))
    pulumi("config", "set", "name", "d")
    refused = pulumi("up", "--yes", "--plan", str(stale), check=False)
    assert refused.returncode != 0
    assert "create is not allowed by the plan" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    assert pulumi("stack", "output", "name").stdout.strip() == "b"
