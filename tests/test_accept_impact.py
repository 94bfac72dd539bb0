"""`render --accept-impact` (for a change of the program itself) accepts run restarts and node rolls,
never data loss: an FSx file system or the cluster replaced needs the stack's own opt-in whatever the
flag says (before: every impact but "refused" was accepted, data loss included). The flag's
help and the render's summary say which impacts it accepted.

Each case runs the CLI's main() with its arguments (its exit code, stdout and stderr) against a base
record made from the committed one so that the current program is the change: a larger FSx before (a
shrink now), another cluster name before (a new cluster now), one more GPU node before (a node removed
now). Every case runs main() in this process, which has the SDKs loaded already (a fresh interpreter
spends some 3 s of CPU per render importing them); the node-roll refusal also runs the CLI as a
program (exit code 1 through the CLI's own exit), in the slow tier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_kueue_support import write_variant

from components.offline import impact, render
from components.offline.mock_engine import ROOT


def base_with(tmp_path: Path, stack: str, edit, rows=None) -> Path:
    rows = rows if rows is not None else json.loads((ROOT / "rendered" / "p5" / "resources.json").read_text())
    edit(rows)
    (tmp_path / "base" / stack).mkdir(parents=True)
    (tmp_path / "base" / stack / "resources.json").write_text(json.dumps(rows))
    return tmp_path / "base"


def one(rows, type_):
    return next(r for r in rows if r["type"] == type_)


def bigger_fsx(rows):
    one(rows, "aws:fsx/lustreFileSystem:LustreFileSystem")["inputs"]["storageCapacity"] = 9600


def other_cluster(rows):
    one(rows, "eks:index:Cluster")["inputs"]["name"] = "rltrain-p5-old"


def more_gpu_nodes(rows):
    scaling = one(rows, "aws:eks/nodeGroup:NodeGroup")["inputs"]["scalingConfig"]
    scaling["desiredSize"] += 1


def render_cli(tmp_path: Path, stack: str, base: Path, *extra: str, project: Path = ROOT, capsys=None):
    """The CLI with these arguments: as a program, or, given pytest's capsys, its main() in this process."""
    md = tmp_path / "summary.md"
    argv = ["--stack", stack, "--project-dir", str(project), "--out", str(tmp_path / "out"), "--base", str(base),
            "--summary-md", str(md), *extra]
    if capsys is None:
        proc = subprocess.run([sys.executable, "-m", "components.offline.render", *argv], cwd=ROOT,
                              capture_output=True, text=True, timeout=600)
    else:
        capsys.readouterr()
        code = render.main(argv)
        out, err = capsys.readouterr()
        proc = subprocess.CompletedProcess(["render.main", *argv], code, out, err)
    return proc, (md.read_text() if md.exists() else "")


@pytest.mark.parametrize("edit,opt_in", [(bigger_fsx, "rltrain:storage.allowReplacement"),
                                         (other_cluster, "rltrain:cluster.allowReplacement")],
                         ids=["fsx", "cluster"])
def test_data_loss_is_refused_whatever_the_flag_says(tmp_path, capsys, edit, opt_in):
    proc, md = render_cli(tmp_path, "p5", base_with(tmp_path, "p5", edit), "--accept-impact", capsys=capsys)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    refused = next(line for line in proc.stderr.splitlines() if "REFUSED: replace (data loss)" in line)
    assert f"set {opt_in}: true" in refused and "--accept-impact never accepts replace (data loss)" in refused
    assert "accepted (--accept-impact): replace (data loss)" not in proc.stderr
    assert not (tmp_path / "out").exists()  # nothing written
    assert "refused: set `" + opt_in + ": true`" in md


def test_the_stacks_own_opt_in_accepts_data_loss(tmp_path, capsys):
    proj = write_variant("p5", "p5-fsx-optin", {"rltrain:storage": {"allowReplacement": True}})
    own = json.loads(json.dumps(render.render_stack("p5-fsx-optin", proj).resources))  # its own record
    proc, _ = render_cli(tmp_path, "p5-fsx-optin", base_with(tmp_path, "p5-fsx-optin", bigger_fsx, own),
                         "--accept-impact", project=proj, capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    assert "warning: replace (data loss): LustreFileSystem storage-fs" in proc.stderr
    assert "(accepted by rltrain:storage.allowReplacement) (allowed)" in proc.stderr


def test_a_node_roll_is_accepted_and_the_summary_says_so(tmp_path, capsys):
    base = base_with(tmp_path, "p5", more_gpu_nodes)
    proc, _ = render_cli(tmp_path, "p5", base, capsys=capsys)
    assert proc.returncode == 1 and "REFUSED: node roll: NodeGroup gpu-nodes" in proc.stderr
    assert not (tmp_path / "out").exists()
    proc, md = render_cli(tmp_path, "p5", base, "--accept-impact", capsys=capsys)
    assert proc.returncode == 0, proc.stderr
    assert "accepted (--accept-impact): node roll: NodeGroup gpu-nodes" in proc.stderr
    said = "--accept-impact accepted 1 node roll; it never accepts replace (data loss) or refused"
    assert f"Pulumi.p5.yaml: {said}" in proc.stderr and said in proc.stdout  # stderr and the summary
    assert "Accepted by `--accept-impact`" in md and "- node roll: NodeGroup gpu-nodes" in md


@pytest.mark.slow  # a fresh interpreter (some 3 s of CPU): the render CLI's default-tier case is its --help
def test_the_cli_as_a_program_refuses_a_node_roll_with_exit_1(tmp_path):
    proc, _ = render_cli(tmp_path, "p5", base_with(tmp_path, "p5", more_gpu_nodes))  # the program
    assert proc.returncode == 1 and "REFUSED: node roll: NodeGroup gpu-nodes" in proc.stderr
    assert not (tmp_path / "out").exists()


def test_the_flags_help_names_what_it_accepts_and_what_it_never_does(capsys):
    # main()'s argparse help (the program's `--help`: tests/test_render_cli.py)
    with pytest.raises(SystemExit) as exited:
        render.main(["--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "node roll or a run restart" in text and "Never accepted by the flag: replace (data loss) and " \
        "refused" in text
    assert render.FLAG_ACCEPTS == (impact.NODE_ROLL, impact.RUN_RESTART, impact.SERVING_RESTART)
