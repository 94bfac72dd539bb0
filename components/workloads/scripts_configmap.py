"""ScriptsConfigMap: the launcher, NCCL check and node validation scripts as files in the pods.

The scripts are read from `components/scripts/*.py` on disk and mounted at /scripts (mode 0755):
no shell text embedded in a manifest, no envsubst over it (SEED-DEFECTS D1).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

import pulumi
import pulumi_kubernetes as k8s
from pydantic import BaseModel, ConfigDict

from components.stack.labels import MANAGED_BY
from components.workloads.runs import child_opts
from components.workloads.volumes import SCRIPTS_CONFIGMAP

SCRIPTS_DIR = Path(__file__).resolve().parent.parent / "scripts"


def read_scripts(directory: Path = SCRIPTS_DIR) -> dict[str, str]:
    """File name -> text of every `*.py` in `directory`, sorted by name."""
    files = sorted(p for p in directory.glob("*.py") if p.is_file())
    if not files:
        raise FileNotFoundError(f"no scripts in {directory}")
    return {p.name: p.read_text(encoding="utf-8") for p in files}


def scripts_digest(files: dict[str, str]) -> str:
    """sha256 over names and contents; pod templates carry it so a script change starts a new run."""
    h = hashlib.sha256()
    for name, text in sorted(files.items()):
        h.update(name.encode() + b"\0" + text.encode() + b"\0")
    return h.hexdigest()


class ScriptsConfigMapArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # File name -> text (default: read_scripts()).
    files: dict[str, str]


def configmap_args(a: ScriptsConfigMapArgs, namespace: pulumi.Input[str]) -> k8s.core.v1.ConfigMapInitArgs:
    return k8s.core.v1.ConfigMapInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=SCRIPTS_CONFIGMAP, namespace=namespace, labels=MANAGED_BY,
            annotations={"rltrain/scripts-sha256": scripts_digest(a.files)},
        ),
        data=dict(sorted(a.files.items())),
    )


class ScriptsConfigMap(pulumi.ComponentResource):
    """ConfigMap `rltrain-scripts` with the files of components/scripts."""

    name: pulumi.Output[str]
    digest: str

    def __init__(self, name: str, args: ScriptsConfigMapArgs, namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:ScriptsConfigMap", name, None, opts)
        cm = k8s.core.v1.ConfigMap(f"{name}-configmap", configmap_args(args, namespace), child_opts(self, opts))
        self.configmap = cm
        self.name = cm.metadata.name
        self.digest = scripts_digest(args.files)
        self.register_outputs({"name": self.name})
