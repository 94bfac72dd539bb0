"""Scripts: each program of components/scripts in its own immutable ConfigMap, named by its content.

The scripts are read from `components/scripts/*.py` on disk and mounted at /scripts (mode 0755):
no shell text embedded in a manifest, no envsubst over it (SEED-DEFECTS D1).

One ConfigMap per script, named `rltrain-script-<name>-<sha256[:10]>` and immutable: a run mounts
only the scripts it runs, and its pod template carries their digest, so editing one script starts
a new run of exactly the workloads that run it (issue: one digest of every script restarted every
run). A changed script is a new ConfigMap (Pulumi creates it before deleting the old one, at the
end of the update, after the runs that used the old one were replaced), never an edit under a
running pod: pulumi-kubernetes replaces a ConfigMap on any `.data` change unless the provider is
told otherwise, and a replaced ConfigMap would be deleted under the pods that mount it (FACTS).
"""

from __future__ import annotations

from typing import Optional

import pulumi
import pulumi_kubernetes as k8s

from components.stack.labels import MANAGED_BY
from components.workloads.script_files import Script, configmap_key
from components.k8s.options import child_opts

def configmap_args(script: Script, namespace: pulumi.Input[str]) -> k8s.core.v1.ConfigMapInitArgs:
    return k8s.core.v1.ConfigMapInitArgs(
        metadata=k8s.meta.v1.ObjectMetaArgs(
            name=script.configmap, namespace=namespace, labels=MANAGED_BY,
            annotations={"rltrain/script-sha256": script.digest},
        ),
        immutable=True,
        data={configmap_key(path): text for path, text in script.files.items()},
    )


class ScriptConfigMaps(pulumi.ComponentResource):
    """One immutable ConfigMap per script of components/scripts (see the module docstring)."""

    def __init__(self, name: str, scripts: dict[str, Script], namespace: pulumi.Input[str],
                 opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:workloads:ScriptConfigMaps", name, None, opts)
        self.configmaps = {
            file: k8s.core.v1.ConfigMap(f"{name}-{script.file.rsplit('.', 1)[0].replace('_', '-')}",
                                        configmap_args(script, namespace), child_opts(self, opts))
            for file, script in sorted(scripts.items())
        }
        self.register_outputs({file: cm.metadata.name for file, cm in self.configmaps.items()})
