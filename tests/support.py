"""Helpers shared by the component tests: one offline render per stack per session, the same code
path as `python -m components.offline.render`."""

from __future__ import annotations

import functools

from components.offline import render
STACKS = ("byo", "dev", "p4de", "p5", "sim")


@functools.lru_cache(maxsize=None)
def rendered(stack: str) -> render.Rendered:
    return render.render_stack(stack)


def objects(r: render.Rendered, kind: str) -> list[dict]:
    return [m for m in r.manifests if m["kind"] == kind]


def obj(r: render.Rendered, kind: str, name: str) -> dict:
    found = [m for m in objects(r, kind) if m["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: found {len(found)}"
    return found[0]


# p5 with serving on (tests/test_serving.py): a third node so the 2-node multi-node run still fits
# beside two 4-GPU replicas; the checks span every node and cannot run while serving holds one.
SERVING_P5 = {
    "rltrain:gpuNodes": {"count": 3},
    "rltrain:workloads": {
        "multiNode": {"enabled": True, "nodes": 2}, "validation": {"enabled": False}, "ncclTest": {"enabled": False},
        "serving": {"enabled": True, "gpusPerReplica": 4, "replicas": 2,
                    "model": {"run": "multi-node", "step": 1200, "sizeGiB": 16},
                    "evaluation": {"enabled": True}}},
}
