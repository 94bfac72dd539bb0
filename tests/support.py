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
