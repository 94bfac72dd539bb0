"""Helpers shared by the component tests: one offline render per stack per session, the same code
path as `python -m components.offline.render`.

The render module (and with it the Pulumi SDKs, ~1.4 s of CPU) is imported on first use, not when this
module is: tests/conftest.py imports this module, and under xdist the controller, which runs no test,
loads conftest.py before it starts the workers."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Optional

import yaml

if TYPE_CHECKING:
    from components.offline import render

ROOT = Path(__file__).resolve().parents[1]
STACKS = ("byo", "dev", "dev-reasoning", "p4de", "p5", "p5-elastic", "sim")


@functools.lru_cache(maxsize=None)
def rendered(stack: str) -> render.Rendered:
    from components.offline import render

    return render.render_stack(stack)


def stack_copy(tmp_path: Path, stack: str, edit: Optional[Callable[[dict], None]] = None) -> Path:
    """A scratch project holding the program and Pulumi.<stack>.yaml under its own name (a renamed
    copy would name another cluster), the stack file's document changed by `edit`."""
    proj = tmp_path / "proj"
    proj.mkdir()
    for name in ("__main__.py", "Pulumi.yaml"):
        shutil.copy(ROOT / name, proj / name)
    (proj / "components").symlink_to(ROOT / "components")
    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    if edit:
        edit(doc)
    (proj / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return proj


def objects(r: render.Rendered, kind: str) -> list[dict]:
    return [m for m in r.manifests if m["kind"] == kind]


def obj(r: render.Rendered, kind: str, name: str) -> dict:
    found = [m for m in objects(r, kind) if m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: found {len(found)}"
    return found[0]


# p5 with serving on (tests/test_serving.py, docs/serving.md): the reasoning trainer (vLLM serves
# its Qwen2 model; the embodied OpenVLA policy it does not), step 200 (a multiple of the config's
# save_interval 50), exported then served; a third node so the 2-node multi-node run still fits
# beside two 4-GPU replicas (4 divides the model's 12 attention heads); the checks span every node
# and cannot run while serving holds one.
SERVING_P5 = {
    "rltrain:gpuNodes": {"count": 3},
    "rltrain:workloads": {
        "trainer": "rlinf-reasoning",
        "multiNode": {"enabled": True, "nodes": 2}, "validation": {"enabled": False}, "ncclTest": {"enabled": False},
        "serving": {"enabled": True, "gpusPerReplica": 4, "replicas": 2,
                    "model": {"run": "multi-node", "step": 200},
                    "evaluation": {"enabled": True}}},
}
