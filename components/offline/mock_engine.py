"""In-process recording engine: runs the real `__main__.py` with the Pulumi engine replaced.

Shared by the offline renderer and the component tests, so what the tests assert is exactly what
reviewers see in `rendered/<stack>/`. No Pulumi CLI, provider plugin, credentials or network.

What the cloud alone knows (ids, ARNs, DNS names, kubeconfigs) is answered with a readable
placeholder `[known after deploy: <resource>.<output>]`; secrets are recorded as `[secret]`, a
secret the stack file does not hold yet as `[secret not set: <command>]` (unset_secrets.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import os
import runpy
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Optional

import pulumi
from pulumi.runtime import mocks as pulumi_mocks
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import resource as sdk_resource
from pulumi.runtime import rpc
from pulumi.runtime.proto import resource_pb2, source_pb2

from components.aws import image_build_run
from components.stack.stackfile import NOT_SET_PREFIX, OFFLINE_KEY, ROOT, SECRET

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
    # `name`: a role attachment takes the role by name; without it the render loses which role
    # an attachment belongs to (and the order it is created in).
    "aws:iam/role:Role": ("id", "arn", "name"),
    # `clusterSecurityGroupId` is the control-plane group pulumi-eks creates, not the one EKS
    # creates (pulumi-eks nodejs/eks/cluster/cluster.ts; FACTS "Deploy semantics").
    "eks:index:Cluster": ("kubeconfig", "kubeconfigJson", "clusterSecurityGroupId"),
    "eks:index:ManagedNodeGroup": ("nodeGroup",),
    # The training image (components/aws/image.py): the repository's URL names the account, the
    # bucket is autonamed, the archive's version id is S3's; the build's digest exists once built.
    "aws:ecr/repository:Repository": ("id", "arn", "repositoryUrl"),
    "aws:s3/bucket:Bucket": ("id", "arn", "bucket"),
    "aws:s3/bucketObjectv2:BucketObjectv2": ("id", "versionId"),
    image_build_run.TYPE: image_build_run.OUTPUTS,
}

# Outputs of remote components that are resources themselves, answered as resource references
# so that reading through them yields their own placeholders. pulumi-eks's `eksCluster` is the
# aws.eks.Cluster: its `vpcConfig.clusterSecurityGroupId` is the cluster security group EKS
# creates, distinct from the component's `clusterSecurityGroupId` above.
_RESOURCE_OUTPUTS: dict[str, dict[str, str]] = {
    "eks:index:Cluster": {"eksCluster": "aws:eks/cluster:Cluster"},
}


def eks_cluster_security_group(cluster: str) -> str:
    """The placeholder of the security group EKS creates for the pulumi-eks Cluster `cluster`."""
    return after_deploy(f"{cluster}.eksCluster", "vpcConfig.clusterSecurityGroupId")


def _resource_output_state(typ: str, owner: str, inputs: dict[str, Any]) -> dict[str, Any]:
    if typ == "aws:eks/cluster:Cluster":
        # The name is an input of the component (known at preview too); the rest only AWS knows.
        return {"name": inputs.get("name") or after_deploy(f"{owner}.eksCluster", "name"),
                "arn": after_deploy(f"{owner}.eksCluster", "arn"),
                # The version the program asked for (the cluster's after `up`).
                "version": inputs.get("version") or after_deploy(f"{owner}.eksCluster", "version"),
                "vpcConfig": {"clusterSecurityGroupId": eks_cluster_security_group(owner),
                              "vpcId": after_deploy(f"{owner}.eksCluster", "vpcConfig.vpcId")}}
    return {}


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
    # Input paths whose change the engine turns into a replacement (`replace_on_changes`).
    replace_on_changes: list[str] = field(default_factory=list)
    # Input paths the engine keeps at their deployed value (`ignore_changes`).
    ignore_changes: list[str] = field(default_factory=list)
    # What the engine orders this resource after: the explicit `depends_on` and the property
    # dependencies it receives in RegisterResource, plus the provider the resource is created
    # through, each as `type::name` (names alone repeat across types).
    depends_on: list[str] = field(default_factory=list)
    provider: Optional[str] = None

    @property
    def ref(self) -> str:
        return f"{self.type}::{self.name}"

    def as_json(self) -> dict[str, Any]:
        row = {
            "type": self.type,
            "name": self.name,
            "parent": self.parent,
            "custom": self.custom,
            "dependsOn": self.depends_on,
            "provider": self.provider,
            "options": {
                "protect": self.protect,
                "retainOnDelete": self.retain_on_delete,
                "deleteBeforeReplace": self.delete_before_replace,
                **({"replaceOnChanges": self.replace_on_changes} if self.replace_on_changes else {}),
                **({"ignoreChanges": self.ignore_changes} if self.ignore_changes else {}),
            },
            "inputs": readable(self.inputs),
        }
        decoded = _decoded(self)
        if decoded:
            row["decoded"] = decoded
        return row


def readable(value: Any) -> Any:
    """The recorded inputs as a reviewer reads them: a multi-line string (a script in a ConfigMap,
    a shell command) becomes its list of lines, so no line of resources.json is a whole file."""
    if isinstance(value, dict):
        return {k: readable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [readable(v) for v in value]
    if isinstance(value, str) and "\n" in value:
        return value.splitlines()
    return value


def _decoded(r: "Record") -> dict[str, Any]:
    """Values the engine receives encoded, shown decoded beside them (never sent anywhere)."""
    if r.type == "aws:ec2/launchTemplate:LaunchTemplate" and isinstance(r.inputs.get("userData"), str):
        try:
            text = base64.b64decode(r.inputs["userData"], validate=True).decode()
        except (ValueError, UnicodeDecodeError):
            return {}
        return {"userData": text.splitlines()}
    return {}


def normalise(value: Any) -> Any:
    """Wire form -> reviewable JSON: secrets hidden, unknowns named, integral floats as ints."""
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_secret_sig:
            inner = value.get("value")
            # Keep the shape of a secret map (which keys a Secret holds is reviewable), hide values;
            # a secret not set yet is no secret: it names the command that sets it.
            return ({str(k): _hidden(inner[k]) for k in sorted(inner)} if isinstance(inner, dict)
                    else _hidden(inner))
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


def _hidden(value: Any) -> str:
    return value if isinstance(value, str) and value.startswith(NOT_SET_PREFIX) else SECRET


def _name_of(urn: str) -> Optional[str]:
    return urn.rsplit("::", 1)[-1] if urn else None


def _referenced(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_resource_sig and value.get("urn"):
            yield ref_of(value["urn"])
            return
        for v in value.values():
            yield from _referenced(v)
    elif isinstance(value, list):
        for v in value:
            yield from _referenced(v)


def ref_of(urn: str) -> str:
    """`type::name` of a URN (the type without its parents' types)."""
    parts = urn.split("::")
    return f"{parts[2].split('$')[-1]}::{parts[3]}" if len(parts) >= 4 else urn


class RecordingMocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        state = dict(args.inputs)
        for out in _OUTPUTS.get(args.typ, ()):
            if out == "id":
                continue
            if state.get(out) is None:  # a dynamic resource declares its outputs as None inputs
                state[out] = after_deploy(args.name, out)
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
        for out, typ in _RESOURCE_OUTPUTS.get(request.type, {}).items():
            state[out] = self._resource_reference(urn, typ, f"{request.name}-{out}",
                                                  _resource_output_state(typ, request.name, inputs))
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
            replace_on_changes=sorted(request.replaceOnChanges),
            ignore_changes=sorted(request.ignoreChanges),
            # Plus resource references among the inputs: a remote component (pulumi-eks) gets none
            # of them as dependencies (the SDK leaves them out), yet its registration waits for
            # the referenced resource's URN, i.e. for that resource to be created.
            depends_on=sorted({ref_of(d) for d in request.dependencies} | set(_referenced(inputs))),
            # "urn::id"; the engine creates the resource through it, so it is an edge as well.
            provider=ref_of(request.provider.rsplit("::", 1)[0]) if request.provider else None,
        ))
        return resource_pb2.RegisterResourceResponse(urn=urn, id=id_ or "", object=obj)

    def _resource_reference(self, owner_urn: str, typ: str, name: str, state: dict[str, Any]) -> dict[str, Any]:
        """Register a resource the engine would hand back by reference (not recorded: the program
        did not create it) and return the wire form of the reference."""
        urn = self.make_urn(owner_urn, typ, name)
        rid = after_deploy(name, "id")
        self.resources[urn] = pulumi_mocks.MockMonitor.ResourceRegistration(urn, rid, state)
        return {rpc._special_sig_key: rpc._special_resource_sig, "urn": urn, "id": rid}


def default_aws_provider(region: str) -> Record:
    """The AWS provider the engine creates for the stack's `aws:region` (a resource in the state:
    `pulumi:providers:aws::default_<version>`). Recorded so that a region move shows: the provider
    is replaced, and with it every regional resource created through it (the mock monitor sees no
    default provider registration, so it is added here)."""
    return Record(type="pulumi:providers:aws", name="default", parent=None, custom=True, protect=False,
                  retain_on_delete=False, delete_before_replace=False, inputs={"region": region})


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


@contextlib.contextmanager
def _no_source_positions() -> Iterator[None]:
    """The SDK captures the Python stack of every resource it registers, a file URI per frame, to tell
    the engine where in the program the resource was made (pulumi 3.272.0, pulumi/runtime/resource.py
    `_get_stack_trace`, called by register_resource and read_resource). The recording engine never
    reads it (RecordingMonitor keeps type, name, inputs and options), and it was about a sixth of a
    render's CPU: while a program runs here the SDK gets an empty stack trace, as for a resource whose
    caller it cannot find. If the SDK no longer has that function, nothing is replaced."""
    saved = getattr(sdk_resource, "_get_stack_trace", None)
    if saved is None:
        yield
        return
    sdk_resource._get_stack_trace = source_pb2.StackTrace
    try:
        yield
    finally:
        sdk_resource._get_stack_trace = saved


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
            # The stack's config, and that the program runs offline (OFFLINE_KEY).
            pulumi.runtime.set_all_config({**config, OFFLINE_KEY: "true"}, sorted(secret_keys))
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
            records = monitor.records
            if config.get("aws:region") and any(r.type.startswith("aws:") for r in records):
                records = [*records, default_aws_provider(config["aws:region"])]
            return RunResult(records=records, stack_outputs=outputs)
        finally:
            loop.close()
            asyncio.set_event_loop(None)

    with _no_source_positions():
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
