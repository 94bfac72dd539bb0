"""In-process recording engine: runs the real `__main__.py` with the Pulumi engine replaced.

Shared by the offline renderer and the component tests, so what the tests assert is exactly what
reviewers see in `rendered/<stack>/`. No Pulumi CLI, provider plugin, credentials or network.

What the cloud alone knows (ids, ARNs, DNS names, kubeconfigs) is answered with a readable
placeholder `[known after deploy: <resource>.<output>]`; secrets are recorded as `[secret]`.
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import resource_pb2

from components.stack.stackfile import ROOT, SECRET

UNKNOWN = "[unknown before deploy]"


def after_deploy(resource: str, output: str) -> str:
    return f"[known after deploy: {resource}.{output}]"


# Outputs the program reads from resources, per type token, answered with placeholders.
# Remote components (pulumi_eks) have no children under mocks: every output read must be here.
_OUTPUTS: dict[str, tuple[str, ...]] = {
    "aws:ec2/vpc:Vpc": ("id", "arn"),
    "aws:ec2/subnet:Subnet": ("id", "arn"),
    "aws:ec2/securityGroup:SecurityGroup": ("id", "arn"),
    "aws:ec2/launchTemplate:LaunchTemplate": ("id", "arn", "latestVersion"),
    "aws:ec2/placementGroup:PlacementGroup": ("id", "arn"),
    "aws:fsx/lustreFileSystem:LustreFileSystem": ("id", "arn", "dnsName", "mountName"),
    "aws:kms/key:Key": ("id", "arn", "keyId"),
    "aws:iam/role:Role": ("id", "arn"),
    "eks:index:Cluster": ("kubeconfig", "kubeconfigJson", "clusterSecurityGroupId"),
    "eks:index:ManagedNodeGroup": ("nodeGroup",),
}


@dataclass
class Record:
    type: str
    name: str
    parent: Optional[str]
    custom: bool
    protect: bool
    retain_on_delete: bool
    delete_before_replace: bool
    inputs: dict[str, Any]
    depends_on: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "custom": self.custom,
            "options": {
                "protect": self.protect,
                "retainOnDelete": self.retain_on_delete,
                "deleteBeforeReplace": self.delete_before_replace,
            },
            "inputs": self.inputs,
        }


def normalise(value: Any) -> Any:
    """Wire form -> reviewable JSON: secrets hidden, unknowns named, integral floats as ints."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            inner = value.get("value")
            # Keep the shape of a secret map (which keys a Secret holds is reviewable), hide values.
            return {str(k): SECRET for k in sorted(inner)} if isinstance(inner, dict) else SECRET
        if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
            return f"[resource {value.get('urn', '').rsplit('::', 1)[-1]}]"
        return {str(k): normalise(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, pulumi.output.Unknown) or value == rpc.UNKNOWN:
        return UNKNOWN
    return value


def _name_of(urn: str) -> Optional[str]:
    return urn.rsplit("::", 1)[-1] if urn else None


class RecordingMocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        state = dict(args.inputs)
        for out in _OUTPUTS.get(args.typ, ()):
            if out == "id":
                continue
            state.setdefault(out, after_deploy(args.name, out))
        if args.typ.startswith("aws:"):
            state.setdefault("arn", after_deploy(args.name, "arn"))
        rid = after_deploy(args.name, "id") if args.custom else None
        return rid, state

    def call(self, args: pulumi.runtime.MockCallArgs):
        raise NotImplementedError(
            f"the program called {args.token} under the offline render; "
            "take the value from config instead of a cloud lookup"
        )


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """MockMonitor that also records parent and resource options (not passed to Mocks)."""

    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.records: list[Record] = []
        self._stack_urn: Optional[str] = None

    def RegisterResource(self, request):
        # Reimplemented rather than extended: the base class deserializes resource references
        # on the monitor's thread, which builds Resource objects on a foreign event loop. The raw
        # wire form (secrets and references as signature dicts) is what we record anyway.
        urn = self.make_urn(request.parent, request.type, request.name)
        if request.type == "pulumi:pulumi:Stack":
            self._stack_urn = urn
            return resource_pb2.RegisterResourceResponse(urn=urn)
        inputs = json_format.MessageToDict(request.object)
        id_, state = self.mocks.new_resource(pulumi.runtime.MockResourceArgs(
            typ=request.type, name=request.name, inputs=inputs, provider=request.provider,
            resource_id=request.importId, custom=request.custom or False))
        obj = struct_pb2.Struct()
        obj.update(state)
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, id_, state)
        parent = None if request.parent in ("", self._stack_urn) else _name_of(request.parent)
        self.records.append(Record(
            type=request.type,
            name=request.name,
            parent=parent,
            custom=bool(request.custom),
            protect=bool(request.protect),
            retain_on_delete=bool(request.retainOnDelete),
            delete_before_replace=bool(request.deleteBeforeReplace),
            inputs=normalise(inputs),
            depends_on=sorted(_name_of(d) or d for d in request.dependencies),
        ))
        return resource_pb2.RegisterResourceResponse(urn=urn, id=id_ or "", object=obj)


@dataclass
class RunResult:
    records: list[Record]
    stack_outputs: dict[str, Any]

    def by_type(self, type_token: str) -> list[Record]:
        return [r for r in self.records if r.type == type_token]

    def one(self, type_token: str, name: Optional[str] = None) -> Record:
        found = [r for r in self.by_type(type_token) if name is None or r.name == name]
        if len(found) != 1:
            names = [r.name for r in self.by_type(type_token)]
            raise LookupError(f"expected one {type_token} {name or ''}, found {names}")
        return found[0]


def run_program(
    *,
    stack: str,
    config: Mapping[str, str],
    secret_keys: set[str] | frozenset[str] = frozenset(),
    program: Callable[[], None] | None = None,
    project: str = "rltrain",
    project_dir: Path = ROOT,
) -> RunResult:
    """Run the program against the recording engine in a fresh context and event loop.

    `config` holds full keys (`rltrain:gpuNodes`, `aws:region`) with string values, as the Pulumi
    CLI would hand them to the program. Runs are isolated: several stacks render in one process.
    """

    def _run() -> RunResult:
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            mocks = RecordingMocks()
            monitor = RecordingMonitor(mocks)
            pulumi.runtime.settings.ROOT.set(None)
            pulumi.runtime.set_all_config(dict(config), sorted(secret_keys))
            pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=monitor)
            body = program or (lambda: _run_main(project_dir))

            outputs: dict[str, Any] = {}

            async def _resolve_exports() -> None:
                # The mock root stack registered its (empty) outputs at creation; read the exports
                # from it directly, keeping secret ones hidden.
                root = pulumi.runtime.get_root_resource()
                for key, value in sorted(getattr(root, "outputs", {}).items()):
                    out = pulumi.Output.from_input(value)
                    resolved, secret = await out.future(with_unknowns=True), await out.is_secret()
                    outputs[key] = SECRET if secret else normalise(resolved)

            def _program():
                body()
                return _resolve_exports()

            loop.run_until_complete(pulumi.runtime.stack.run_pulumi_func(_program))
            return RunResult(records=monitor.records, stack_outputs=outputs)
        finally:
            loop.close()
            asyncio.set_event_loop(None)

    return contextvars.Context().run(_run)


def _run_main(project_dir: Path) -> None:
    cwd = os.getcwd()
    sys.path.insert(0, str(project_dir))
    try:
        os.chdir(project_dir)
        runpy.run_path(str(project_dir / "__main__.py"), run_name="__main__")
    finally:
        os.chdir(cwd)
        sys.path.remove(str(project_dir))
