"""One direction of imports over components/ (DESIGN.md "Layout"), read from the source with ast:

- no import circle between our modules (relative and type-only imports counted), in components/
  and in cluster/;
- `stack/` reads nothing of ours but `stack/`;
- `k8s/` and `aws/` read `stack/` (and the mounted programs of `scripts/`), never `workloads/`,
  `offline/` or each other's floor... except where ALLOWED names a known edge;
- `workloads/` reads `k8s/`, `stack/`, `scripts/` and itself; nothing deployed reads `offline/`
  or `cluster/`; `scripts/` are programs mounted into pods and read nothing of ours, nor does
  `image/` (the training image's build definition, which `aws/` and `offline/` read).

    python -m pytest -q -o addopts= -p no:xdist tests/test_imports.py
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "components"

# What each floor may read (besides itself).
MAY_READ = {
    "stack": set(),
    "scripts": set(),
    # The training image's build definition (components/image/): files CodeBuild runs, and the tag
    # program the stack runs too; like scripts/, it reads nothing of ours.
    "image": set(),
    "aws": {"stack", "scripts", "image"},
    "k8s": {"stack", "scripts"},
    "workloads": {"k8s", "stack", "scripts"},
    "offline": {"stack", "aws", "k8s", "workloads", "scripts", "image"},
}
# aws/storage.py and aws/platform.py build the FSx PersistentVolume and claim with k8s/volumes.py's
# builders (the volume of a created cluster is an AWS resource): the one known edge between the two
# middle floors, below workloads/ and above stack/, that makes no circle.
# aws/platform.py builds an elastic stack's Karpenter NodePool and NodeOverlay with
# k8s/karpenter_nodes.py's pure builders (shared with the simulated cluster): the same kind of edge.
ALLOWED = {("components.aws.storage", "components.k8s.volumes"),
           ("components.aws.platform", "components.k8s.volumes"),
           ("components.aws.platform", "components.k8s.karpenter_nodes"),
           # and the CPU NodePool's (k8s/cpu_nodes.py: the staging Job selects it, platform applies it).
           ("components.aws.platform", "components.k8s.cpu_nodes")}

# The simulated cluster's package (cluster/): held to no circle either.
CLUSTER = ROOT / "cluster"


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def graph(type_only: bool = False, package: Path = PACKAGE) -> dict[str, set[str]]:
    """module -> the modules of ours it imports (anywhere in the file, lazy imports and relative
    imports included); with `type_only`, also the imports under `if TYPE_CHECKING:`, which name a
    type for the checkers only (no import at run time) but still tie the two modules together. A
    copy: the tests may change what they get. `package`: components/ unless another is named."""
    runtime, types = _parsed_graph(package)
    return {name: set(deps) | (types[name] if type_only else set()) for name, deps in runtime.items()}


def _target(node: ast.ImportFrom, name: str, path: Path) -> str:
    """The module an `from X import` names, a relative one (`from .auth import`) resolved from `name`."""
    if node.level == 0:
        return node.module or ""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    base = package[:len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@functools.lru_cache(maxsize=None)  # the source does not change during a run: parse every module once, not per test
def _parsed_graph(package: Path = PACKAGE) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(run-time imports, type-only imports) of every module of the package."""
    mods = modules(package)
    prefix = package.name + "."
    runtime: dict[str, set[str]] = {}
    types: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        typed: set[str] = set()
        tree = ast.parse(path.read_text(), str(path))
        # `if TYPE_CHECKING:` imports name a type for the checkers only: no import at run time.
        type_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If)
                     and getattr(block.test, "id", getattr(block.test, "attr", None)) == "TYPE_CHECKING"
                     for stmt in block.body for n in ast.walk(stmt)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and (module := _target(node, name, path)):
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in mods else module for a in node.names]
            else:
                continue
            found = {t for t in targets if t.startswith(prefix) and t in mods and t != name}
            (typed if id(node) in type_only else deps).update(found)
        runtime[name], types[name] = deps, typed - deps
    return runtime, types


def floor(module: str) -> str:
    return module.split(".")[1] if module.count(".") >= 1 else ""


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_graph_is_read():
    edges = graph()
    assert "components.offline.render" in edges and "components.stack.config" in edges["components.offline.render"]
    # A relative import (the launcher's parts, mounted as a package) and a type-only one are read too.
    assert "components.scripts._ray_launcher.common" in edges["components.scripts._ray_launcher.auth"]
    typed = graph(type_only=True)
    assert "components.stack.config" in typed["components.k8s.karpenter_nodes"] - edges["components.k8s.karpenter_nodes"]


def test_no_import_circle():
    # Type-only imports count: a circle through `if TYPE_CHECKING:` (config <-> elastic <-> volume_budget,
    # a launcher part <-> its config, before issue 48) is still two modules that need each other.
    assert circles(graph(type_only=True)) == []


def test_no_import_circle_in_the_simulated_cluster_not_even_for_a_type():
    """cluster/ too: no circle between its modules, a type-only import counted (issue 48:
    karpenter.py named sim.Cluster for its type and called its private methods; the Karpenter
    start is now part of Cluster.start, karpenter.py builds what it is given)."""
    edges = graph(type_only=True, package=CLUSTER)
    assert "cluster.sim" in edges and "cluster.karpenter" in edges["cluster.sim"]
    assert circles(edges) == []


def test_each_floor_reads_only_the_floors_below_it():
    wrong = []
    for module, deps in sorted(graph().items()):
        own = floor(module)
        if own not in MAY_READ:
            continue
        for dep in sorted(deps):
            if floor(dep) != own and floor(dep) not in MAY_READ[own] and (module, dep) not in ALLOWED:
                wrong.append(f"{module} -> {dep}")
    assert wrong == [], "imports against the direction of DESIGN.md:\n" + "\n".join(wrong)


def test_nothing_deployed_imports_offline_or_the_simulated_cluster():
    deployed = {"__main__"} | {m for m in graph() if floor(m) in ("stack", "aws", "k8s", "workloads", "scripts")}
    main = ast.parse((ROOT / "__main__.py").read_text())
    main_deps = {n.module for n in ast.walk(main) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(main) if isinstance(n, ast.Import) for a in n.names}
    edges = {**graph(), "__main__": main_deps}
    wrong = [f"{m} -> {d}" for m in sorted(deployed) for d in sorted(edges[m])
             if d.startswith(("components.offline", "cluster"))]
    assert wrong == []


def test_the_checker_finds_a_circle_and_a_wrong_direction():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert floor("components.k8s.kueue") == "k8s" and "workloads" not in MAY_READ["k8s"]
