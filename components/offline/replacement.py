"""Replacement guard: refuse a change that would replace a stateful resource, unless config allows it.

The render compares the inputs that force replacement (FACTS.md "what replaces a stateful
resource") with the committed snapshot `rendered/<stack>/resources.json`, so a pull request that
would silently recreate the FSx file system (empty), the GPU node group (running pods killed) or
the cluster fails offline with a plain warning, before anyone runs `pulumi up`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from components.stack.config import StackConfig

Resource = dict[str, Any]


@dataclass(frozen=True)
class Guarded:
    what: str  # "the FSx file system"
    consequence: str  # "its data is lost"
    keys: tuple[str, ...]  # dotted input paths whose change replaces the resource
    allow_key: str  # config key that opts in
    allowed: Callable[[StackConfig], bool]
    # Inputs that replace only when they go down (AWS cannot shrink FSx storage).
    decrease_keys: tuple[str, ...] = ()


GUARDED: dict[str, Guarded] = {
    "aws:fsx/lustreFileSystem:LustreFileSystem": Guarded(
        "the FSx file system", "its data is lost",
        ("deploymentType", "subnetIds", "securityGroupIds", "storageType", "kmsKeyId", "driveCacheType",
         "importPath", "exportPath", "importedFileChunkSize", "backupId", "efaEnabled"),
        "rltrain:storage.allowReplacement", lambda c: c.storage.allow_replacement,
        decrease_keys=("storageCapacity",)),
    "aws:eks/nodeGroup:NodeGroup": Guarded(
        "the GPU node group", "running training pods are killed",
        ("amiType", "capacityType", "diskSize", "instanceTypes", "launchTemplate.id", "launchTemplate.name",
         "nodeGroupName", "nodeRoleArn", "remoteAccess", "subnetIds"),
        "rltrain:gpuNodes.allowReplacement", lambda c: c.gpu_nodes.allow_replacement),
    "eks:index:Cluster": Guarded(
        "the EKS cluster", "every workload and in-cluster object is recreated",
        ("name", "vpcId", "encryptionConfigKeyArn"),
        "rltrain:cluster.allowReplacement", lambda c: c.cluster.allow_replacement),
}


@dataclass(frozen=True)
class Replacement:
    type: str
    name: str
    change: str
    guard: Guarded

    def message(self) -> str:
        return (f"this change replaces {self.guard.what} ({self.name}: {self.change}): "
                f"{self.guard.consequence}. To accept that, set {self.guard.allow_key}: true")


def _get(inputs: dict[str, Any], path: str) -> Any:
    value: Any = inputs
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def replacements(before: list[Resource], after: list[Resource]) -> list[Replacement]:
    old = {(r["type"], r["name"]): r for r in before if r["type"] in GUARDED}
    new = {(r["type"], r["name"]): r for r in after if r["type"] in GUARDED}
    found = []
    for key, was in sorted(old.items()):
        guard = GUARDED[key[0]]
        now = new.get(key)
        if now is None:
            found.append(Replacement(key[0], key[1], "removed from the stack", guard))
            continue
        for path in guard.keys:
            a, b = _get(was["inputs"], path), _get(now["inputs"], path)
            if a != b:
                found.append(Replacement(key[0], key[1], f"{path} {a!r} -> {b!r}", guard))
        for path in guard.decrease_keys:
            a, b = _get(was["inputs"], path), _get(now["inputs"], path)
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b < a:
                found.append(Replacement(key[0], key[1], f"{path} {a} -> {b} (cannot shrink)", guard))
    return found


def check(before: Optional[list[Resource]], after: list[Resource], cfg: StackConfig
          ) -> tuple[list[Replacement], list[Replacement]]:
    """(refused, allowed) replacements against the snapshot; no snapshot -> nothing to compare."""
    if before is None:
        return [], []
    found = replacements(before, after)
    return [r for r in found if not r.guard.allowed(cfg)], [r for r in found if r.guard.allowed(cfg)]
