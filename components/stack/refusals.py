"""Config refusals in the user's words, and the checks that need the whole validated stack.

`config.load` calls three things from here:
- `words(error)`: a pydantic error as the stack file's author would say it: "a list", not
  "a valid tuple"; "at most 63 characters: ...", not a regular expression; "this section is empty"
  for a key with nothing under it; a pasted capacity-reservation ARN gets "use the cr-... id". A
  value that is shown is redacted by the secrets scanner, and a mapping or list is never printed.
- `secret_values(data)`: every string of every section, scanned by value (secrets_scan).
- `stack_problems(cfg)`: what one key cannot say alone. Keys with no effect on the stack's kind
  (bring-your-own cluster, existing VPC); reserved namespaces; the system node type; podSecurity
  `restricted` with workloads whose pods it refuses; public-endpoint CIDRs that together cover the
  internet; env names; and the checks the program's builders would otherwise make while the
  program runs (a traceback instead of a key path): /dev/shm that does not fit the pod, protected
  or clashing env names, an EFA type the pinned device plugin does not know; and the volume
  budget (volume_budget.py): models, assets and the kept checkpoints of every run within the FSx capacity.

No Pulumi import here (components/stack is config only); `config` imports this module, so the
`StackConfig` type is only named for type checkers.
"""

from __future__ import annotations

import ipaddress
import math
import re
from typing import TYPE_CHECKING, Any, Iterator, Optional
from urllib.parse import urlsplit

from components.stack import catalog, elastic, secrets_scan, versions, volume_budget

if TYPE_CHECKING:  # pragma: no cover
    from components.stack.config import StackConfig

NAMESPACE = "rltrain"
Problem = tuple[str, str]

# ---------------------------------------------------------------------------------------------
# key paths


def path(*loc: Any) -> str:
    """`rltrain:gpuNodes.capacity.reservationId`, `rltrain:network.availabilityZones[1]`."""
    out = f"{NAMESPACE}:{loc[0]}" if loc else NAMESPACE
    for part in loc[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


# ---------------------------------------------------------------------------------------------
# pydantic errors in words

# Every `pattern=` of the config models, as a sentence (tests/test_config.py checks none is missing).
PATTERN_WORDS = {
    r"^/fsx/[^\s]+$": "a path under /fsx (the shared volume), without spaces",
    r"^/fsx/[^\s]*$": "a path under /fsx (the shared volume), without spaces",
    r"^(\S+\s+){4}\S+$": "a cron schedule of 5 fields, such as '0 */6 * * *'",
    r"^https://[^\s/]+(/\S*)?$": "an https:// URL without spaces, such as 'https://huggingface.co'",
    r"^[^/].*\{step\}.*$": "a relative path containing {step}, such as 'global_step_{step}/actor/huggingface'",
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$":
        "at most 63 characters: lowercase letters, digits and '-', starting and ending with a letter or digit",
    r"^[A-Za-z][A-Za-z0-9-]{0,99}$": "at most 100 characters: letters, digits and '-', starting with a letter",
    r"^vpc-[0-9a-f]+$": "a VPC id such as vpc-0123456789abcdef0",
    r"^subnet-[0-9a-f]+$": "a subnet id such as subnet-0123456789abcdef0",
    r"^cr-[0-9a-f]+$": "a capacity reservation id such as cr-0123456789abcdef0",
    r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$":
        "an S3 bucket name: 3 to 63 characters, lowercase letters, digits, '.' and '-', "
        "starting and ending with a letter or digit",
    r"^/": "an absolute path (starting with /)",
    r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$":
        "at most 253 characters: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
    r"^[A-Za-z][A-Za-z0-9_-]*$": "a config key name: letters, digits, '_' and '-', starting with a letter",
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$":
        "a Kubernetes name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit",
    r"^[0-9]+\.[0-9]+\.[0-9]+$": "a Ray version MAJOR.MINOR.PATCH, such as 2.60.0",
    r"^[A-Za-z_][A-Za-z0-9_]*$": "an environment variable name: letters, digits and '_', not starting with a digit",
    r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$": "an S3 location such as s3://my-bucket/models/",
    r"\{step_dir\}": "text containing {step_dir} (replaced by the newest complete step directory)",
}
_TYPE_WORDS = {
    "tuple_type": "should be a list", "list_type": "should be a list", "set_type": "should be a list",
    "dict_type": "should be a mapping (NAME: value lines)",
    "string_type": "should be text", "int_type": "should be a whole number",
    "int_parsing": "should be a whole number", "int_from_float": "should be a whole number",
    "float_type": "should be a number", "float_parsing": "should be a number",
    "bool_type": "should be true or false", "bool_parsing": "should be true or false",
}
_RESERVATION_ID = re.compile(r"\bcr-[0-9a-f]{8,17}\b")


def _got(value: Any) -> str:
    return f" (got {secrets_scan.describe(value)})"


def words(error: dict[str, Any], section_keys: Optional[list[str]] = None) -> str:
    """One pydantic error (`ValidationError.errors()` item) as a sentence, its value redacted."""
    kind, value, ctx = error["type"], error.get("input"), error.get("ctx") or {}
    if kind == "missing":
        return "required key is missing"
    if kind in ("model_type", "model_attributes_type", "dataclass_type") or (kind == "dict_type" and value is None):
        if value is None or value == "":
            return "this section is empty: give it keys" + (f" ({', '.join(section_keys)})" if section_keys else "") \
                + " or remove it"
        return "should be a section of keys" + (f" ({', '.join(section_keys)})" if section_keys else "") + _got(value)
    if value is None:
        return "has no value: give it one or remove the key"
    if kind in _TYPE_WORDS:
        return _TYPE_WORDS[kind] + _got(value)
    if kind == "literal_error":
        options = [o.strip() for o in str(ctx.get("expected", "")).replace(" or ", ", ").replace("'", "").split(",")]
        hint = ""
        if isinstance(value, (int, float)) and not isinstance(value, bool) and any(o[:1].isdigit() for o in options):
            # YAML reads 1.35 as a number (and 1.30 as 1.3): the version is text
            example = str(value) if str(value) in options else options[-1]
            hint = f"; write it in quotes: \"{example}\""
        return f"should be one of: {', '.join(options)}" + _got(value) + hint
    if kind == "string_pattern_mismatch":
        pattern = str(ctx.get("pattern", ""))
        if pattern == r"^cr-[0-9a-f]+$" and isinstance(value, str) and value.startswith("arn:"):
            found = _RESERVATION_ID.search(value)
            return ("is an ARN: use the cr-… id" + (f" ({found.group(0)})" if found else "")
                    + ", e.g. reservationId: cr-0123456789abcdef0")
        return f"should be {PATTERN_WORDS.get(pattern, 'in the form docs/configuration.md gives for this key')}" + _got(value)
    limits = {"greater_than_equal": ("at least", "ge"), "less_than_equal": ("at most", "le"),
              "greater_than": ("more than", "gt"), "less_than": ("less than", "lt")}
    if kind in limits:
        word, key = limits[kind]
        return f"should be {word} {ctx.get(key)}" + _got(value)
    if kind == "too_short":
        n = ctx.get("min_length")
        noun = "character" if isinstance(value, str) else "item"
        return f"should have at least {n} {noun}{'s' if n != 1 else ''}" + _got(value)
    if kind == "too_long":
        n = ctx.get("max_length")
        noun = "character" if isinstance(value, str) else "item"
        return f"should have at most {n} {noun}{'s' if n != 1 else ''}" + _got(value)
    if kind in ("string_too_short", "string_too_long"):
        n = ctx.get("min_length", ctx.get("max_length"))
        return f"should have {'at least' if kind.endswith('short') else 'at most'} {n} characters" + _got(value)
    if kind in ("value_error", "assertion_error"):
        msg = str(error.get("msg", "")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        return msg + _got(value) if not isinstance(value, (dict, list, tuple)) else msg
    msg = str(error.get("msg", "is not allowed here")).removeprefix("Input ")
    return msg + _got(value)


# ---------------------------------------------------------------------------------------------
# secrets by value


def _strings(value: Any, loc: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str]]:
    if isinstance(value, str):
        yield loc, value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(v, loc + (str(k),))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _strings(v, loc + (i,))


IMAGE_KEYS = {("workloads", "image"), ("workloads", "ncclTest", "image")}


def secret_values(data: dict[str, Any]) -> list[Problem]:
    """Every string under every section, scanned by value; a finding names the key and masks the value."""
    problems = []
    for section, value in data.items():
        for loc, text in _strings(value, (section,)):
            found = secrets_scan.scan_image(text) if loc in IMAGE_KEYS else secrets_scan.scan(text)
            if found:
                problems.append((path(*loc), secrets_scan.message(found, text)))
    return problems


def suspected(data: dict[str, Any]) -> list[str]:
    """Every suspected secret in the config strings, longest first (for `masked`)."""
    found = set()
    for section, value in data.items():
        for loc, text in _strings(value, (section,)):
            for f in secrets_scan.scan_image(text) if loc in IMAGE_KEYS else secrets_scan.scan(text):
                found.add(text[f.start:f.end])
    return sorted(found, key=len, reverse=True)


def masked(problems: list[Problem], data: dict[str, Any]) -> list[Problem]:
    """The problems with every suspected secret of the config masked wherever a message repeats it
    (a field check that quotes the value it refuses, say): no message shows more than 4 characters."""
    secrets = suspected(data)
    out = []
    for where, msg in problems:
        for secret in secrets:
            msg = msg.replace(secret, secrets_scan.mask(secret))
        out.append((where, msg))
    return out


# ---------------------------------------------------------------------------------------------
# checks on the whole stack

RESERVED_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
# EC2 instance type names: family (series, generation, attributes) . size.
INSTANCE_TYPE = re.compile(
    r"^(?P<family>(?P<series>[a-z]+)(?:-\d+[a-z]+\d*)?(?P<gen>\d+)(?P<attrs>[a-z-]*))"
    r"\.(?P<size>nano|micro|small|medium|large|xlarge|[1-9]\d*xlarge|metal(?:-\d+xl)?)$")
# An image reference (distribution/reference grammar): registry host, lowercase path, tag, digest.
IMAGE_REFERENCE = re.compile(
    r"^(?:(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)(?:\.(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?))*"
    r"(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[\w][\w.-]{0,127})?(?:@sha256:[0-9a-f]{64})?$")
# Accelerated families (GPU, Trainium, Inferentia, Gaudi, FPGA, video): never system nodes.
ACCELERATED_SERIES = ("p", "g", "gr", "trn", "inf", "dl", "f", "vt")
# Env set by the program (components/workloads/env.py PROTECTED_ENV; tests check they agree):
# `workloads.env` may not set them.
PROTECTED_ENV = frozenset({
    "NUM_GPUS", "NUM_NODES", "POD_NAMESPACE", "NODE_NAME", "JOB_COMPLETION_INDEX",
    "RAY_HEAD_HOST", "RAY_PORT", "RAY_NODE_WAIT_SECONDS", "RUN_DONE_MARKER",
    "EXPECTED_GPUS", "EXPECTED_EFA", "SHM_MIN_GIB", "FSX_PATH", "CKPT_DIR", "RESUME",
    "RAY_ADDRESS", "RAY_AUTH_TOKEN", "RAY_AUTH_MODE", "RAY_START_TIMEOUT_SECONDS", "RAY_CONNECT_TIMEOUT_SECONDS",
    "RAY_JOIN_DEADLINE_SECONDS", "RAY_PEER_CHECK_SECONDS", "NODE_RANK_ENV", "RAY_DASHBOARD", "STAGE_ITEMS",
    # components/scripts/resume_wrapper.py (components/workloads/trainer.py WRAPPER_ENV)
    "RESUME_STEPS_DIR", "RESUME_STEP_PREFIX", "RESUME_COMPLETE_MARKS", "RESUME_ENV", "RESUME_FORMAT",
    "RESUME_LEDGER", "RESUME_MAX_STALLED_RESTARTS",
})
# Plain env the pod builder always sets besides PROTECTED_ENV and the NCCL settings of the catalog
# (RAY_START_EXTRA_ARGS: the launcher forms' multi-node pods; workloads.env's value is kept in it).
# With a trainer profile (components/workloads/trainer.py): PATH, VIRTUAL_ENV, the asset directory, the
# checkpoint directory and the overrides in the trainer's own names (profile rlinf's listed here).
PROGRAM_ENV = frozenset({"PATH", "VIRTUAL_ENV", "MANISKILL_ASSET_DIR", "CKPT_PATH", "HYDRA_OVERRIDES",
                         "CONFIG_NAME", "VENV_NAME", "MODEL_PATH", "EXPERIMENT_NAME", "PYTORCH_CUDA_ALLOC_CONF",
                         "TORCH_NCCL_AVOID_RECORD_STREAMS", "RAY_START_EXTRA_ARGS",
                         # the staging Job's hub (workloads.staging.hfEndpoint)
                         "HF_ENDPOINT"})
# Mirrors components/workloads/sizing.py (tests check the two agree for every type and size).
MEMORY_HEADROOM = 0.02
SHM_MAX_SHARE = 0.25
# Which workload key runs which pods in the training namespace, and why `restricted` refuses them.
WORKLOAD_POD_SECURITY = {
    "singleNode": "the training pod runs the image as root",
    "multiNode": "the Ray pods run the image as root",
    "ncclTest": "the MPI launcher and workers run as root, the workers add capabilities for sshd",
    "validation": "the validation pod runs the image as root",
}
# Public address space: what "the internet" means for publicAccessCidrs.
_NOT_PUBLIC_V4 = [ipaddress.ip_network(n) for n in (
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
    "224.0.0.0/3")]
_PUBLIC_V6 = [ipaddress.ip_network("2000::/3")]


def _set_keys(model: Any, loc: tuple[str, ...]) -> Iterator[tuple[str, ...]]:
    """Key paths (as written, camelCase) the stack file set explicitly under `model`."""
    for name in sorted(model.model_fields_set):
        field = type(model).model_fields[name]
        yield loc + (field.alias or name,)


def _no_effect(cfg: StackConfig) -> list[Problem]:
    p: list[Problem] = []
    c, n, g, s, t = cfg.cluster, cfg.network, cfg.gpu_nodes, cfg.storage, cfg.training
    if cfg.byo_cluster:
        why = "has no effect on a bring-your-own cluster (cluster.existing): nothing on AWS is created; remove it"
        aws_only = {
            ("cluster",): {"name", "endpointPublicAccess", "publicAccessCidrs", "adminRoleArns", "systemNodes",
                           "allowReplacement"},
            ("gpuNodes",): {"capacity", "rootVolume", "localStorage", "fastImagePull", "allowReplacement",
                            "allowNodeRoll"},
            ("storage",): {"fsx", "allowReplacement"},
            ("training",): {"s3"},
        }
        models = {("cluster",): c, ("gpuNodes",): g, ("storage",): s, ("training",): t}
        for loc, keys in aws_only.items():
            for key in _set_keys(models[loc], loc):
                if key[-1] in keys:
                    p.append((path(*key), why))
        if "network" in cfg.model_fields_set:
            for key in _set_keys(n, ("network",)):
                p.append((path(*key), why))
        if s.existing_claim:
            for key in _set_keys(s, ("storage",)):
                if key[-1] in ("claimName", "claimSizeGiB", "allowClaimExpansion"):
                    p.append((path(*key), "has no effect with existingClaim (that claim is mounted as it is); "
                                          "remove it"))
    else:
        for name, key in (("claim_size_gib", "claimSizeGiB"), ("allow_claim_expansion", "allowClaimExpansion")):
            if name in s.model_fields_set:
                p.append((path("storage", key),
                          "has no effect on a created cluster: the claim's size is the FSx file system's "
                          "(storage.fsx.storageCapacityGiB); remove it"))
        if n.existing is not None:
            for key in _set_keys(n, ("network",)):
                if key[-1] in ("vpcCidr", "availabilityZones", "gpuAvailabilityZone"):
                    p.append((path(*key), "has no effect with network.existing (the VPC and its subnets exist; "
                                          "the GPU nodes and FSx go into gpuSubnetId); remove it"))
    monitoring = getattr(cfg, "monitoring", None)
    if monitoring is not None and getattr(cfg, "monitoring_enabled", True) is False:
        for key in _set_keys(monitoring, ("monitoring",)):
            if key[-1] != "enabled":
                p.append((path(*key), "has no effect while monitoring is off (monitoring.enabled; off by default on a "
                                      "bring-your-own cluster): remove it, or set monitoring.enabled: true"))
    return p


def _system_nodes(cfg: StackConfig) -> list[Problem]:
    if cfg.byo_cluster:
        return []
    name = cfg.cluster.system_nodes.instance_type
    where = path("cluster", "systemNodes", "instanceType")
    m = INSTANCE_TYPE.match(name)
    if not m:
        return [(where, f"{secrets_scan.describe(name)} is not an EC2 instance type (FAMILY.SIZE, e.g. m6i.xlarge)")]
    if m["series"] in ACCELERATED_SERIES or name in catalog.CATALOG:
        return [(where, f"{name} is an accelerated (GPU/accelerator) type: the system nodes run operators and "
                        "add-ons, not training; use a general-purpose type such as m6i.xlarge")]
    if "g" in m["attrs"] or m["family"] == "a1":
        return [(where, f"{name} is an Arm (Graviton) type: the system node group uses the x86_64 EKS AMI; "
                        "use an x86_64 type such as m6i.xlarge")]
    return []


def _namespace(cfg: StackConfig) -> list[Problem]:
    p = []
    owned = [(("training", "namespace"), cfg.training.namespace, "rltrain")]
    monitoring = getattr(cfg, "monitoring", None)
    if monitoring is not None and getattr(monitoring, "namespace", None):
        owned.append((("monitoring", "namespace"), monitoring.namespace, "monitoring"))
    for loc, ns, default in owned:
        if ns in RESERVED_NAMESPACES or ns.startswith("kube-"):
            p.append((path(*loc), f"{ns} is reserved for Kubernetes itself: the stack would own it and delete it on "
                                  f"destroy; use a namespace of its own (default: {default})"))
    return p


def _pod_security(cfg: StackConfig) -> list[Problem]:
    if cfg.training.pod_security != "restricted":
        return []
    w = cfg.workloads
    enabled = {"singleNode": w.single_node.enabled, "multiNode": w.multi_node.enabled,
               "ncclTest": w.nccl_test.enabled, "validation": w.validation.enabled}
    refused = [f"workloads.{k} ({why})" for k, why in WORKLOAD_POD_SECURITY.items() if enabled[k]]
    if not refused:
        return []
    return [(path("training", "podSecurity"),
             "restricted refuses pods that run as root, and these enabled workloads do: " + "; ".join(refused)
             + ". Use baseline (restricted is always audited), or disable them")]


def _intervals(nets: list[Any]) -> list[tuple[int, int]]:
    spans = sorted((int(x.network_address), int(x.broadcast_address)) for x in nets)
    merged: list[tuple[int, int]] = []
    for lo, hi in spans:
        if merged and lo <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged


def _covers(union: list[tuple[int, int]], lo: int, hi: int) -> bool:
    return any(a <= lo and hi <= b for a, b in union)


def covers_internet(cidrs: tuple[str, ...]) -> bool:
    """True when the CIDRs together contain every public IPv4 address, or every public IPv6 one."""
    nets = []
    for c in cidrs:
        try:
            nets.append(ipaddress.ip_network(c, strict=False))
        except ValueError:
            return False  # reported by the field's own check
    v4 = _intervals([x for x in nets if x.version == 4])
    v6 = _intervals([x for x in nets if x.version == 6])
    public_v4 = _intervals([ipaddress.ip_network("0.0.0.0/0")])
    for private in _NOT_PUBLIC_V4:  # the public space as intervals between the reserved blocks
        rest = []
        for lo, hi in public_v4:
            plo, phi = int(private.network_address), int(private.broadcast_address)
            if phi < lo or plo > hi:
                rest.append((lo, hi))
                continue
            if lo < plo:
                rest.append((lo, plo - 1))
            if phi < hi:
                rest.append((phi + 1, hi))
        public_v4 = rest
    if v4 and all(_covers(v4, lo, hi) for lo, hi in public_v4):
        return True
    return bool(v6) and all(_covers(v6, int(x.network_address), int(x.broadcast_address)) for x in _PUBLIC_V6)


def _cidrs(cfg: StackConfig) -> list[Problem]:
    cidrs = cfg.cluster.public_access_cidrs
    if len(cidrs) > 1 and covers_internet(cidrs):
        return [(path("cluster", "publicAccessCidrs"),
                 "together these CIDRs open the API endpoint to the whole internet; list your office/VPN "
                 "CIDRs, or set endpointPublicAccess: false")]
    return []


def _env(cfg: StackConfig) -> list[Problem]:
    from components.stack.secrets_scan import SECRET_LIKE  # the one list of credential-like names

    p: list[Problem] = []
    w, t = cfg.workloads, cfg.training
    for name in sorted(w.env):
        where = path("workloads", "env", name)
        if SECRET_LIKE.search(name):
            p.append((where, "looks like a credential by its name: put the value in secret config and map it with "
                             f"rltrain:training.secretEnv ({name}: KEY) instead of a plain env value"))
        elif name in PROTECTED_ENV:
            p.append((where, "is set by the program (the launcher and the validation script depend on it); "
                             "remove it"))
    it = cfg.gpu_nodes.instance
    plain = set(w.env) | PROTECTED_ENV | PROGRAM_ENV | set(catalog.nccl_env(it, cfg.gpu_nodes.efa_devices_per_node))
    if w.mlflow_tracking_uri:
        plain.add("MLFLOW_TRACKING_URI")
    for name in sorted(set(t.secret_env) & plain):
        p.append((path("training", "secretEnv", name),
                  "is also a plain env var of the training pods (set by the program or by workloads.env): "
                  "use another name, or remove it from workloads.env"))
    return p


def max_shm_gib(it: catalog.InstanceType, efa: int) -> int:
    """The largest /dev/shm (GiB) the training pod can have on `it`: a quarter of its memory limit."""
    alloc = it.allocatable(efa=efa > 0)
    mem_mib = (alloc.memory_mib_conservative - catalog.DAEMONSET_MEMORY_MIB
               - math.ceil(alloc.memory_mib_conservative * MEMORY_HEADROOM))
    limit_mib = (mem_mib // catalog.GIB_IN_MIB) * catalog.GIB_IN_MIB
    return math.floor(limit_mib * SHM_MAX_SHARE / catalog.GIB_IN_MIB)


def _program(cfg: StackConfig) -> list[Problem]:
    """What the builders would refuse while the program runs."""
    from components.stack.catalog import shm_default_gib

    p: list[Problem] = []
    g, w = cfg.gpu_nodes, cfg.workloads
    most = max_shm_gib(g.instance, g.efa_devices_per_node)
    if w.shm_size_gib is not None and w.shm_size_gib > most:
        p.append((path("workloads", "shmSizeGiB"),
                  f"{w.shm_size_gib} GiB does not fit: /dev/shm is charged to the pod's memory limit and may take "
                  f"at most a quarter of it, {most} GiB on {g.instance_type}"))
    elif w.shm_size_gib is None and shm_default_gib(g.instance) > most:
        p.append((path("workloads", "shmSizeGiB"),
                  f"the default /dev/shm ({shm_default_gib(g.instance)} GiB) does not fit {g.instance_type}: it is "
                  f"charged to the pod's memory limit and may take at most a quarter of it; set shmSizeGiB to at "
                  f"most {most}" if most >= 1 else f"{g.instance_type} has too little memory for a /dev/shm"))
    if w.mlflow_tracking_uri:
        try:
            urlsplit(w.mlflow_tracking_uri).port
        except ValueError:
            p.append((path("workloads", "mlflowTrackingUri"), "has a port out of range: ports are 1 to 65535"))
    for i, code in enumerate(w.fail_fast_exit_codes):
        if code == 0:
            p.append((path("workloads", "failFastExitCodes", i),
                      "0 is success: it cannot fail a run; list exit codes 1 to 255"))
        elif not 1 <= code <= 255:
            p.append((path("workloads", "failFastExitCodes", i),
                      f"{code} is not an exit code a container can have: 1 to 255"))
    if cfg.training.service_account == "default":
        p.append((path("training", "serviceAccount"),
                  "default is the service account Kubernetes creates in every namespace: the stack cannot create "
                  "it; use a name of its own (default: training-sa)"))
    for loc, image in ((("workloads", "image"), w.image), (("workloads", "ncclTest", "image"), w.nccl_test.image)):
        if not IMAGE_REFERENCE.match(image):
            p.append((path(*loc), "is not an image reference: [REGISTRY[:PORT]/]REPOSITORY[:TAG][@sha256:DIGEST], "
                                  "the repository in lowercase letters, digits and . _ - separated by /, a tag of at "
                                  "most 128 letters, digits, '_', '.' and '-'" + _got(image)))
    if g.efa_enabled and g.instance_type not in versions.EFA_PLUGIN_KNOWN_TYPES and getattr(cfg, "device_plugins", True):
        p.append((path("gpuNodes", "instanceType"),
                  f"the pinned EFA device plugin ({versions.EFA_DEVICE_PLUGIN.version}) does not list {g.instance_type}, "
                  "so its EFA devices would never be advertised; types it lists: "
                  + ", ".join(versions.EFA_PLUGIN_KNOWN_TYPES)))
    return p


# The Ray version a training image's tag names: `...-ray2.60.0`, `ray-2.52.1-cu128`, `..._rayv2.47`
# (a separator or the tag's start before "ray"), or the leading version of the Ray project's own
# images (rayproject/ray:2.60.0-py311-gpu). Two or three parts; none in a date-stamped tag.
_TAG_RAY_VERSION = re.compile(r"(?:^|[-_.])ray[-_]?v?(?P<v>[0-9]+\.[0-9]+(?:\.[0-9]+)?)(?![.0-9])", re.I)
_LEADING_VERSION = re.compile(r"^v?(?P<v>[0-9]+\.[0-9]+(?:\.[0-9]+)?)(?![.0-9])")
RAY_IMAGE_REPOSITORIES = ("ray", "ray-ml", "ray-llm")
# KubeRay 1.6.2 refuses token authentication (rayClusterSpec.authOptions.mode token) below this Ray
# version (ray-operator/controllers/ray/utils/validation.go, ValidateRayClusterSpec).
RAY_TOKEN_AUTH_MIN = (2, 52, 0)


def image_ray_version(image: str) -> Optional[str]:
    """The Ray version the image's tag carries, or None (no tag, a digest only, no version in it)."""
    last = image.split("@", 1)[0].rsplit("/", 1)[-1]
    if ":" not in last:
        return None
    repository, tag = last.rsplit(":", 1)
    m = _TAG_RAY_VERSION.search(tag)
    if m is None and repository in RAY_IMAGE_REPOSITORIES:
        m = _LEADING_VERSION.match(tag)
    return m["v"] if m else None


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _ray(cfg: StackConfig) -> list[Problem]:
    """The RayJob form's keys: rayVersion required, at least the token-auth minimum, and the image
    tag's Ray version where it names one; the form's keys have no effect in the other forms."""
    p: list[Problem] = []
    w = cfg.workloads
    mn = w.multi_node
    where = path("workloads", "multiNode", "rayVersion")
    if mn.form != "rayjob":
        for key in _set_keys(mn, ("workloads", "multiNode")):
            if key[-1] in ("rayVersion", "installKubeRay"):
                p.append((path(*key), f"has no effect with multiNode.form {mn.form} (only the rayjob form runs KubeRay); "
                                      "remove it, or set form: rayjob"))
        return p
    if "node_wait_seconds" in mn.model_fields_set:
        p.append((path("workloads", "multiNode", "nodeWaitSeconds"),
                  "has no effect with multiNode.form rayjob (KubeRay starts the workers once the head's GCS answers; "
                  "Kueue's podsReadyTimeoutMinutes bounds the start); remove it"))
    if mn.ray_version is None:
        if mn.enabled:
            p.append((where, "required with multiNode.form rayjob: the Ray version in workloads.image (KubeRay's "
                             "rayClusterSpec.rayVersion), e.g. 2.60.0"))
        return p
    if _version(mn.ray_version) < RAY_TOKEN_AUTH_MIN:
        p.append((where, f"{mn.ray_version} is below {'.'.join(map(str, RAY_TOKEN_AUTH_MIN))}: the RayJob requires "
                         "Ray token authentication (rayClusterSpec.authOptions), which KubeRay 1.6.2 refuses below "
                         "it; use an image with a newer Ray"))
    tagged = image_ray_version(w.image)
    if tagged is not None and _version(mn.ray_version)[:len(_version(tagged))] != _version(tagged):
        tag = w.image.split("@", 1)[0].rsplit(":", 1)[1]
        p.append((where, f"{mn.ray_version} disagrees with the Ray version of workloads.image, whose tag {tag!r} "
                         f"carries Ray {tagged}: set rayVersion to the image's Ray (KubeRay builds the Ray "
                         "commands and health checks for it)"))
    return p


def stack_problems(cfg: StackConfig) -> list[Problem]:
    return (_no_effect(cfg) + _system_nodes(cfg) + _namespace(cfg) + _pod_security(cfg) + _cidrs(cfg)
            + _env(cfg) + _program(cfg) + _ray(cfg) + volume_budget.problems(cfg) + elastic.problems(cfg))
