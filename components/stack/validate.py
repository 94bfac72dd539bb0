"""Loading the stack config, and every check that reads more than one key.

The models (components/stack/config.py and the sections beside their components) check each key
alone: its type, range, pattern, and the validators on the model. This module checks the rest:
what one key cannot say alone (a reservation id with an on-demand capacity, a maximum below the
widest run, a volume too small for what the runs keep), and what the program's builders would
otherwise refuse while the program runs (a traceback instead of a key path).

`load()` (and `from_pulumi()`, the running program's entry) collects *every* problem, each named by
its key path as written in the stack file (`path()`: `rltrain:gpuNodes.capacity.reservationId`),
the bad value and what is allowed, and raises one `ConfigError` before any resource exists:

- unknown top-level keys, then the models' own refusals, as the stack file's author would say them
  (`words`: "a list", not "a valid tuple"; a value shown is redacted, a mapping never printed);
- every string of every section scanned for secrets by value (secrets_scan);
- the checks of the validated stack, in the order `_checks` lists them.

A new check that reads more than one key is a function in the last section, listed in `_checks`;
a check of one key is a validator on its model. No message prints more than 4 characters of
anything the secrets scanner suspects (`masked`).

Pure: Pulumi is imported only by `from_pulumi`, when the program calls it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import ipaddress
import json
import re
from typing import Any, Iterator, Mapping, Optional
from urllib.parse import urlsplit

from pydantic import BaseModel, ValidationError

from components.stack import catalog, fit, image_build, secrets_scan, stackfile, trainers, versions, volume_budget
from components.stack import runs as runs_mod
from components.stack.config import (GRAFANA_PASSWORD_KEY, NAMESPACE, SECTIONS, SERVING_PROGRAM_FLAGS, StackConfig,
                                     check_pinned_image)
from components.stack.labels import PROTECTED_ENV
from components.stack.secrets_scan import SECRET_LIKE

Problem = tuple[str, str]


# ---------------------------------------------------------------------------------------------
# key paths and the error


def path(*loc: Any) -> str:
    """`rltrain:gpuNodes.capacity.reservationId`, `rltrain:network.availabilityZones[1]`."""
    out = f"{NAMESPACE}:{loc[0]}" if loc else NAMESPACE
    for part in loc[1:]:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


class ConfigError(Exception):
    """Every problem of one stack config, each as (key path, message)."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"invalid stack config ({len(self.problems)} problem(s)):"]
        lines += [f"  {where}: {msg}" for where, msg in self.problems]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# loading


def parse_value(raw: Any) -> Any:
    """Pulumi hands structured config to the program as JSON text."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def load(values: Mapping[str, Any], *, secret_keys: set[str] | frozenset[str] = frozenset(),
         region: Optional[str] = None, program: bool = False) -> StackConfig:
    """Validate the `rltrain:` config of one stack.

    `values` maps keys without the `rltrain:` prefix to their (parsed or JSON) values;
    `secret_keys` are the keys (without prefix) that are Pulumi secrets; `program`: called by the
    running program (from_pulumi), which reads the Grafana password, so it must exist.
    """
    problems: list[Problem] = []
    data = {k: parse_value(v) for k, v in values.items() if k in SECTIONS}
    referenced = set()
    secret_env = (data.get("training") or {}).get("secretEnv") if isinstance(data.get("training"), dict) else None
    if isinstance(secret_env, dict):
        referenced |= {v for v in secret_env.values() if isinstance(v, str)}
    existing = (data.get("cluster") or {}).get("existing") if isinstance(data.get("cluster"), dict) else None
    if isinstance(existing, dict):
        referenced.add(existing.get("kubeconfigSecret", "kubeconfig"))
    referenced.add(GRAFANA_PASSWORD_KEY)
    receiver = (data.get("monitoring") or {}).get("alertReceiver") if isinstance(data.get("monitoring"), dict) else None
    if isinstance(receiver, dict) and isinstance(receiver.get("secretKey"), str):
        referenced.add(receiver["secretKey"])
    multi = (data.get("workloads") or {}).get("multiNode") if isinstance(data.get("workloads"), dict) else None
    if isinstance(multi, dict) and isinstance(multi.get("rayAuthTokenSecret"), str):
        referenced.add(multi["rayAuthTokenSecret"])
    for key in sorted(set(values) - set(SECTIONS)):
        if key in referenced:
            continue
        problems.append((path(key),
                         f"unknown key; allowed: {', '.join(SECTIONS)}, or a secret named by "
                         "training.secretEnv / cluster.existing.kubeconfigSecret"))
    cfg = None
    try:
        cfg = StackConfig.model_validate(data)
    except ValidationError as e:
        problems += _problems_from(e)
    # Secrets by value, in every string of every section (also when the model did not validate).
    scanned = {k: v for k, v in data.items() if isinstance(v, (dict, list, str))}
    problems += secret_values(scanned)
    if cfg is not None:
        problems += _checks(cfg, region, set(values), set(secret_keys), program=program,
                            refused={where for where, _ in problems})
    if problems:
        # No message prints more than 4 characters of anything the scanner suspects.
        raise ConfigError(masked(problems, scanned))
    assert cfg is not None
    return cfg


def from_pulumi() -> StackConfig:
    """Read and validate the `rltrain:` config handed to the running program.

    The Pulumi CLI passes config and its secret keys through the environment (PULUMI_CONFIG,
    PULUMI_CONFIG_SECRET_KEYS); the offline render sets them in-process (`pulumi.runtime.set_all_config`).
    Both are read, so unknown top-level keys are caught either way; which keys are secret, through the
    SDK's public `is_config_secret` (pulumi/runtime/config.py).
    """
    import pulumi
    from pulumi.runtime.config import CONFIG  # the in-process config map (no public accessor lists its keys)

    prefix = f"{NAMESPACE}:"
    if stackfile.OFFLINE_KEY in pulumi.runtime.get_config_env():  # handed over by the CLI: from a stack file
        raise ConfigError([(stackfile.OFFLINE_KEY, "set by the offline render's engine only "
                            "(components/stack/stackfile.py): remove it, it would skip the deploy's account checks")])
    merged = {**pulumi.runtime.get_config_env(), **CONFIG.get()}
    values = {k[len(prefix):]: v for k, v in merged.items() if k.startswith(prefix)}
    secret = set(pulumi.runtime.get_config_secret_keys_env()) | {k for k in merged if pulumi.runtime.is_config_secret(k)}
    secret_keys = {k[len(prefix):] for k in secret if k.startswith(prefix)}
    return load(values, secret_keys=secret_keys, region=pulumi.Config("aws").get("region"), program=True)


def _allowed_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Aliases of the model found by walking `loc` (minus its last part) from `model`."""
    current: Any = model
    for part in loc[:-1]:
        if isinstance(part, int) or not (isinstance(current, type) and issubclass(current, BaseModel)):
            continue
        field = next(
            (f for n, f in current.model_fields.items() if part in (n, f.alias)), None
        )
        if field is None:
            return []
        ann = field.annotation
        inner = [a for a in getattr(ann, "__args__", ()) if isinstance(a, type) and issubclass(a, BaseModel)]
        current = inner[0] if inner else ann
    if isinstance(current, type) and issubclass(current, BaseModel):
        return [f.alias or n for n, f in current.model_fields.items()]
    return []


def _problems_from(err: ValidationError) -> list[Problem]:
    problems = []
    for e in err.errors(include_url=False):
        loc = tuple(e["loc"])
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            allowed = _allowed_keys(StackConfig, loc)
            msg = f"unknown key; allowed here: {', '.join(allowed)}"
        else:  # in words, the value redacted
            msg = words(e, _allowed_keys(StackConfig, loc + ("",)))
        problems.append((path(*loc), msg))
    return problems


# ---------------------------------------------------------------------------------------------
# pydantic errors in the user's words


# Every `pattern=` of the config models, as a sentence (tests/test_validate.py checks none is missing).
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
    runs_mod.NAME_PATTERN: "a run name: at most 40 characters, lowercase letters, digits and '-', starting with a "
                           "letter and ending with a letter or digit",
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
# the checks of the validated stack


def _checks(cfg: StackConfig, region: Optional[str], config_keys: set[str], secret_keys: set[str], *,
            program: bool, refused: set[str]) -> list[Problem]:
    """Every check of the validated stack, in the order their problems are reported. `config_keys`:
    the top-level keys the stack sets (without `rltrain:`); `refused`: the key paths already refused
    (unknown keys, the models' refusals, secrets by value)."""
    first = (_nodes_network_storage(cfg, region, config_keys, secret_keys) + _kueue(cfg) + _serving(cfg)
             + _embodied_evaluation(cfg) + _trainer(cfg) + _runs(cfg) + _loggers(cfg) + _nccl_image(cfg))
    # A key already refused (its value looks like a secret, say) gets no second message from these.
    out = [(where, msg) for where, msg in first if where not in refused]
    out += _monitoring(cfg, config_keys, secret_keys, program=program)
    out += (_no_effect(cfg) + _system_nodes(cfg) + _namespace(cfg) + _pod_security(cfg) + _cidrs(cfg) + _env(cfg)
            + _program(cfg) + _ray(cfg) + _volume_budget(cfg) + _elastic(cfg) + _image_build(cfg))
    return out


def _nodes_network_storage(cfg: StackConfig, region: Optional[str], config_keys: set[str],
                           secret_keys: set[str]) -> list[Problem]:
    """EFA and the capacity's reservation, the public endpoint's CIDRs, the availability zones and an
    existing VPC, the shared volume of a created or a bring-your-own cluster, the secret config keys
    the stack names, and the GPU nodes the multi-node run and the NCCL test need."""
    p: list[Problem] = []
    g = cfg.gpu_nodes
    it = g.instance
    if g.efa and not it.has_efa:
        efa_types = [t for t, v in catalog.CATALOG.items() if v.has_efa]
        p.append((path("gpuNodes", "efa"),
                  f"{it.name} has no EFA devices; EFA types: {', '.join(efa_types)}"))
    cap = g.capacity
    if cap.type == "on-demand" and cap.reservation_id:
        p.append((path("gpuNodes", "capacity", "reservationId"),
                  "a reservation id needs capacity.type capacity-block or odcr (got on-demand)"))
    if cap.type != "on-demand" and not cap.reservation_id:
        p.append((path("gpuNodes", "capacity", "reservationId"),
                  f"capacity.type {cap.type} needs the reservation id (cr-...)"))

    c = cfg.cluster
    if not c.endpoint_public_access and c.public_access_cidrs:
        p.append((path("cluster", "publicAccessCidrs"),
                  "set while endpointPublicAccess is false (private-only endpoint); remove them"))
    if c.endpoint_public_access and not c.public_access_cidrs and not cfg.byo_cluster:
        p.append((path("cluster", "publicAccessCidrs"),
                  "required while endpointPublicAccess is true: list the CIDRs allowed to reach "
                  "the API server, or set endpointPublicAccess: false"))

    n = cfg.network
    if region and not cfg.byo_cluster and not n.existing:
        for i, az in enumerate(n.availability_zones):
            if not re.fullmatch(re.escape(region) + r"[a-z]", az):
                p.append((path("network", "availabilityZones", i),
                          f"{az!r} is not an availability zone of region {region} "
                          f"(expected {region}a, {region}b, ...)"))
    if n.gpu_availability_zone and n.gpu_availability_zone not in n.availability_zones:
        p.append((path("network", "gpuAvailabilityZone"),
                  f"{n.gpu_availability_zone!r} is not one of availabilityZones "
                  f"({', '.join(n.availability_zones)}); GPU nodes and FSx must share one of them"))
    if n.existing and n.existing.gpu_subnet_id not in n.existing.private_subnet_ids:
        p.append((path("network", "existing", "gpuSubnetId"),
                  "must be one of privateSubnetIds"))

    s = cfg.storage
    if cfg.byo_cluster:
        if not (s.existing_claim or s.storage_class):
            p.append((path("storage"),
                      "with cluster.existing no FSx file system is created: set existingClaim "
                      "or storageClass"))
        if c.existing and c.existing.kubeconfig_secret not in secret_keys:
            p.append((path(c.existing.kubeconfig_secret),
                      "missing or not secret: pulumi config set --secret "
                      f"{NAMESPACE}:{c.existing.kubeconfig_secret} \"$(cat kubeconfig)\""))
    elif s.existing_claim or s.storage_class:
        p.append((path("storage", "existingClaim" if s.existing_claim else "storageClass"),
                  "only with cluster.existing; this stack creates its own FSx file system"))
    elif s.fsx is None:
        p.append((path("storage", "fsx"), "required unless cluster.existing is set"))
    if s.existing_claim and s.storage_class:
        p.append((path("storage", "storageClass"), "set either existingClaim or storageClass"))

    for env, key in cfg.training.secret_env.items():
        if key not in secret_keys:
            state = "is not secret" if key in config_keys else "is missing"
            p.append((path(key),
                      f"{state} (named by training.secretEnv.{env}): "
                      f"pulumi config set --secret {NAMESPACE}:{key} VALUE"))
    ray_key = cfg.workloads.multi_node.ray_auth_token_secret
    if cfg.multi_node_runs and ray_key and ray_key not in secret_keys:
        # Without this the program's require_secret fails while it runs (a traceback, not a key path).
        state = "is not secret" if ray_key in config_keys else "is missing"
        p.append((path(ray_key),
                  f"{state} (named by workloads.multiNode.rayAuthTokenSecret): "
                  f"pulumi config set --secret {NAMESPACE}:{ray_key} VALUE"))

    w = cfg.workloads
    if w.multi_node.enabled and cfg.multi_node_count > g.count:
        p.append((path("workloads", "multiNode", "nodes"),
                  f"{cfg.multi_node_count} pods need {cfg.multi_node_count} GPU nodes, "
                  f"gpuNodes.count is {g.count}"))
    if w.multi_node.enabled and g.count < 2:
        p.append((path("workloads", "multiNode", "enabled"),
                  "multi-node training needs gpuNodes.count >= 2"))
    if w.nccl_test.enabled:
        if g.count < 2:
            p.append((path("workloads", "ncclTest", "enabled"),
                      "the NCCL test measures the network between nodes: gpuNodes.count >= 2"))
        if it.nccl_reference is None:
            p.append((path("workloads", "ncclTest", "enabled"),
                      f"no published bus bandwidth for {it.name} to check against; "
                      f"types with one: {', '.join(t for t, v in catalog.CATALOG.items() if v.nccl_reference)}"))
    return p


def _nccl_image(cfg: StackConfig) -> list[Problem]:
    """The NCCL test's image pinned like the training image (config.check_pinned_image)."""
    try:
        check_pinned_image(cfg.workloads.nccl_test.image)
    except ValueError as e:
        return [(path("workloads", "ncclTest", "image"), str(e))]
    return []


def _kueue(cfg: StackConfig) -> list[Problem]:
    """Kueue installed, queueing on and an existing ClusterQueue that agree; runs it can queue whole."""
    p: list[Problem] = []
    k, w = cfg.kueue, cfg.workloads
    if k.install and k.cluster_queue:
        p.append((path("kueue", "install"), f"clusterQueue {k.cluster_queue!r} belongs to a Kueue already on the "
                  "cluster: do not install another (install: false)"))
    if k.install and k.enabled is False:
        p.append((path("kueue", "install"), "installs Kueue while queueing is off (enabled: false): set both "
                  "or neither"))
    if k.cluster_queue and not cfg.byo_cluster:
        p.append((path("kueue", "clusterQueue"), "only with cluster.existing: a created cluster gets the "
                  "stack's own ClusterQueue"))
    if cfg.kueue_enabled and cfg.multi_node_runs and w.multi_node.form == "statefulset":
        p.append((path("workloads", "multiNode", "form"),
                  "statefulset cannot be queued whole (it never finishes: Kueue would hold its nodes forever "
                  "and every other run would queue behind it): use indexed-job, or set rltrain:kueue.enabled "
                  "false (pods are then admitted one at a time, partial admission possible)"))
    if w.training_after_checks and not (w.validation.enabled or w.nccl_test.enabled):
        p.append((path("workloads", "trainingAfterChecks"),
                  "waits for validation and the NCCL test, and neither is enabled"))
    return p


GPU_ALLOWANCE_GIB = 2


def _saved_step(loc: tuple[Any, ...], step: Optional[int], saves: Optional[trainers.SaveFacts],
                       config_name: str) -> list[Problem]:
    """A step the config saves: not after its last step, a multiple of its save interval."""
    if saves is None or step is None:
        return []
    if saves.last_step is not None and step > saves.last_step:
        return [(path(*loc), f"{step} is after the last step of {config_name} ({saves.last_step}): it is never saved")]
    if step < saves.save_interval or step % saves.save_interval:
        lo = max(saves.save_interval, step // saves.save_interval * saves.save_interval)
        return [(path(*loc), f"{step} is not a step {config_name} saves (runner.save_interval {saves.save_interval}: "
                             f"steps {saves.save_interval}, {2 * saves.save_interval}, ...); nearest: {lo}"
                             + (f" or {lo + saves.save_interval}" if step > saves.save_interval else ""))]
    return []


def _embodied_evaluation(cfg: StackConfig) -> list[Problem]:
    """The embodied evaluation: an embodied trainer profile's config, a run that exists, a saved step."""
    w = cfg.workloads
    ev, profile, tc = w.embodied_evaluation, w.profile, w.trainer_config
    key = ("workloads", "embodiedEvaluation")
    if not ev.enabled:
        return []
    embodied = [n for n, pr in trainers.PROFILES.items() if pr.family == "embodied"]
    if profile is None or tc is None or profile.family != "embodied":
        what = f"trainer {w.trainer}" + (f" ({profile.family} family)" if profile else "")
        hint = (": a reasoning model is evaluated through vLLM by workloads.serving.evaluation"
                if profile is not None and profile.family == "reasoning" else "")
        return [(path(*key, "enabled"), f"RLinf's embodied evaluation needs an embodied trainer profile "
                 f"({', '.join(embodied)}) and one of its configs; {what}{hint}")]
    p: list[Problem] = []
    p += _named_run(cfg, key + ("run",), ev.run)
    p += _saved_step((*key, "step"), ev.step, tc.saves, w.config_name)
    return p


def _named_run(cfg: StackConfig, key: tuple[Any, ...], name: str) -> list[Problem]:
    """A run named by serving or an evaluation: a run of the stack (a named one with `enabled: false`
    too: its checkpoints stay) of the stack's trainer config (their model facts are the stack's)."""
    run = cfg.run(name)
    w = cfg.workloads
    if run is None:
        implicit = {"single-node": "workloads.singleNode.enabled", "multi-node": "workloads.multiNode.enabled"}
        why = (f"the {name} run is not enabled ({implicit[name]})" if name in implicit
               else f"{name!r} is not a run of this stack")
        known = ", ".join(r.name for r in cfg.training_runs) or "none"
        return [(path(*key), f"{why}: its checkpoints are not written by this stack; runs: {known}")]
    if (run.trainer, run.config_name) != (w.trainer, w.config_name):
        return [(path(*key), f"run {name} trains {run.trainer} {run.config_name}, not the stack's {w.trainer} "
                 f"{w.config_name}: serving and evaluation read the stack's config (its model, layout and venv)")]
    return []


def _served_model(cfg: StackConfig) -> list[Problem]:
    """A run's step served, against the trainer profile's model and save facts: a family vLLM
    serves, a step the config saves, a tensor parallel size that divides the attention heads."""
    p: list[Problem] = []
    sv, w = cfg.workloads.serving, cfg.workloads
    m, profile, tc = sv.model, w.profile, w.trainer_config
    key = ("workloads", "serving")
    if m.run is None or profile is None or tc is None or tc.model is None:
        return p
    if not tc.model.vllm_servable:
        servable = [f"{pr.name} {n} ({c.model.architecture})" for pr in trainers.PROFILES.values()
                    for n, c in pr.configs.items() if c.model and c.model.vllm_servable]
        p.append((path(*key, "model", "run"),
                  f"trainer {profile.name} config {w.config_name} trains {tc.model.architecture} ({profile.family} "
                  f"family), which vLLM does not serve (not in vllm/model_executor/models/registry.py); "
                  f"servable: {', '.join(servable)}; evaluate an embodied policy in its simulator instead"))
        return p
    p += _saved_step((*key, "model", "step"), m.step, tc.saves, w.config_name)
    # GPU memory: vLLM refuses to start when one max-length sequence's KV cache does not fit beside
    # the weights in gpu_memory_utilization (default 0.9: vllm v0.11.0 vllm/config/cache.py) of each
    # GPU (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory, once per worker). Per GPU:
    # ModelFacts.per_gpu_gib (weights split over the TP ranks, the KV heads too down to one per rank);
    # GPU_ALLOWANCE_GIB for the CUDA context, activations and CUDA graphs (an allowance, not measured).
    it = cfg.gpu_nodes.instance
    length = sv.max_model_len or tc.model.max_position
    weights, kv = tc.model.weights_gib(2), tc.model.kv_cache_gib(length)
    per_gpu = tc.model.per_gpu_gib(length, sv.tp)
    room = it.gpu_memory_gib * 0.9 - GPU_ALLOWANCE_GIB
    if per_gpu > room:
        p.append((path(*key, "maxModelLen"),
                  f"{length} tokens: weights {weights:,.1f} GiB + one sequence's KV cache {kv:,.1f} GiB over "
                  f"{sv.tp} GPU(s) = {per_gpu:,.1f} GiB per GPU > {room:,.1f} GiB usable of a {it.gpu_memory_gib} GiB "
                  f"{it.gpu_model} (90 % gpu_memory_utilization, {GPU_ALLOWANCE_GIB} GiB runtime allowance); "
                  f"lower maxModelLen or raise gpusPerReplica"))
    heads = tc.model.attention_heads
    if heads % sv.tp:
        ok = [n for n in range(1, cfg.gpu_nodes.instance.gpu_count + 1)
              if heads % n == 0 and cfg.gpu_nodes.instance.gpu_count % n == 0]
        p.append((path(*key, "gpusPerReplica"),
                  f"tensor parallel size {sv.tp} does not divide the {heads} attention heads of {tc.model.architecture} "
                  f"({tc.model.source}; vLLM shards heads evenly over the ranks); allowed: {', '.join(map(str, ok))}"))
    return p


def _serving(cfg: StackConfig) -> list[Problem]:
    """workloads.serving: the shape of a replica against the node, the model source, the flags."""
    p: list[Problem] = []
    sv, it = cfg.workloads.serving, cfg.gpu_nodes.instance
    key = ("workloads", "serving")
    if sv.evaluation.enabled and not sv.enabled:
        p.append((path(*key, "evaluation", "enabled"), "evaluates the serving endpoint, and serving.enabled is false"))
    if not sv.enabled:
        return p
    if sv.tensor_parallel_size is not None and sv.tensor_parallel_size != sv.gpus_per_replica:
        p.append((path(*key, "tensorParallelSize"),
                  f"{sv.tensor_parallel_size} != gpusPerReplica {sv.gpus_per_replica}: vLLM shards the model over "
                  "exactly the GPUs of one replica (set both to the same value, or leave tensorParallelSize unset)"))
    if sv.gpus_per_replica > it.gpu_count or it.gpu_count % sv.gpus_per_replica:
        allowed = [n for n in range(1, it.gpu_count + 1) if it.gpu_count % n == 0]
        p.append((path(*key, "gpusPerReplica"),
                  f"{sv.gpus_per_replica} does not divide the {it.gpu_count} GPUs of a {it.name} node; "
                  f"allowed: {', '.join(map(str, allowed))}"))
    # The replicas placed first fit on the empty node group (components/stack/fit.py, as serving's
    # rollout places them); a replica larger than a node is gpusPerReplica's problem, said above.
    g = cfg.gpu_nodes
    _, placed = fit.serving_replicas(cfg)
    if sv.gpus_per_replica <= it.gpu_count and len(placed) < sv.replicas:
        per_node = placed.count(0)  # first fit fills the first node before the next: what one node holds
        p.append((path(*key, "replicas"),
                  f"{sv.replicas} replicas of {sv.gpus_per_replica} GPU(s) need more than the {g.count} GPU node(s) "
                  f"hold ({per_node} per node)"))
    # The checks take a whole pod on every GPU node: with serving holding GPUs on one of them (and the
    # queue's quota leaving those out) they are never admitted.
    for check, on in (("validation", cfg.workloads.validation.enabled), ("ncclTest", cfg.workloads.nccl_test.enabled)):
        if on:
            p.append((path("workloads", check, "enabled"),
                      "runs a whole-node pod on every GPU node, and serving (workloads.serving.enabled) holds GPUs "
                      "on one for good: it would never start. Run it before enabling serving, or disable it"))
    m = sv.model
    if (m.path is None) == (m.run is None):
        p.append((path(*key, "model"), "set either run (with step) or path"))
    if m.run is not None and m.step is None:
        p.append((path(*key, "model", "step"), f"required with run {m.run!r}: the checkpoint step to serve"))
    if m.run is not None:
        p += _named_run(cfg, key + ("model", "run"), m.run)
    if m.path is not None and m.step is not None:
        p.append((path(*key, "model", "step"), "only with run; path names the model directory itself"))
    p += _served_model(cfg)
    for i, arg in enumerate(sv.extra_args):
        flag = arg.split("=", 1)[0].replace("_", "-")
        if flag in SERVING_PROGRAM_FLAGS:
            p.append((path(*key, "extraArgs", i),
                      f"{flag} is set by the program ({', '.join(SERVING_PROGRAM_FLAGS)}): use the serving key instead"))
        elif not arg.startswith("-"):
            p.append((path(*key, "extraArgs", i), "not a flag: write each flag as --name=value"))
    return p


def _trainer(cfg: StackConfig) -> list[Problem]:
    """The trainer profile's configs, venvs and models (components/stack/trainers.py), refused
    here so a wrong name fails the preview instead of every retry of the run (SEED-DEFECTS D18)."""
    p: list[Problem] = []
    w = cfg.workloads
    profile = w.profile
    if profile is None:
        return p
    tc = w.trainer_config
    if tc is None:
        p.append((path("workloads", "configName"),
                  f"{w.config_name!r} is not a config of trainer {profile.name} ({profile.source}); "
                  f"known: {', '.join(profile.configs)}"))
        return p
    if w.venv_name != tc.venv:
        p.append((path("workloads", "venvName"),
                  f"{w.venv_name!r}: config {w.config_name} runs in the image's venv {tc.venv!r} "
                  f"({profile.venv_bin(tc.venv)}); remove venvName or set it to {tc.venv!r}"))
    staged = [profile.stages[s].dest for s in tc.stages]
    if w.model_path not in staged:
        p.append((path("workloads", "modelPath"),
                  f"{w.model_path!r} is not a model config {w.config_name} is staged with; "
                  f"expected {tc.model_path} (remove modelPath for the default)"))
    if w.multi_node.enabled and not tc.spreads:
        multi = [n for n, c in profile.configs.items() if c.spreads]
        p.append((path("workloads", "configName"),
                  f"{w.config_name} places every component under one comma-joined key, which no "
                  f"override can spread over {cfg.multi_node_count} nodes (their GPUs would idle); "
                  f"for multi-node use one of: {', '.join(multi)}"))
    owned = {"PATH", "VIRTUAL_ENV", profile.overrides_env, profile.node_rank_env, profile.resume.checkpoint_env,
             *profile.asset_env}
    for name in sorted(owned & set(w.env)):
        p.append((path("workloads", "env", name),
                  f"set by the program from trainer profile {profile.name} (venv, assets, placement, "
                  "checkpoints); remove it, or use workloads.trainer: none and set everything yourself"))
    return p


def _runs(cfg: StackConfig) -> list[Problem]:
    """The named runs (components/stack/runs.py): unique names, a trainer and config the profiles
    know and the staging Job stages, no override of a key the program sets, no more nodes than the
    stack can ever hold, a warm start from a run of the same shape at a step its config saves."""
    p: list[Problem] = []
    w, g = cfg.workloads, cfg.gpu_nodes
    seen: dict[str, tuple] = {}
    for run in cfg.training_runs:
        if run.name in seen:
            first = path(*seen[run.name])
            p.append((path(*run.key, "name") if not run.implicit else path(*run.key),
                      f"{run.name!r} is already the name of {first}: every run of the stack has a name of its own "
                      "(its Job, checkpoint directory and curves are named after it)"))
        seen.setdefault(run.name, run.key)
    for run in cfg.training_runs:
        if run.implicit:
            continue
        key = run.key
        profile = trainers.get(run.trainer)
        if profile is None:
            if run.trainer != trainers.NO_TRAINER:
                p.append((path(*key, "trainer"), f"unknown trainer profile {run.trainer!r}; known: "
                          f"{', '.join([*trainers.PROFILES, trainers.NO_TRAINER])}"))
            elif run.override_map:
                p.append((path(*key, "overrides"), "a run without a trainer profile (trainer none) has no Hydra "
                          "command line to pass overrides to: set workloads.command and workloads.env instead"))
            continue
        if run.trainer != w.trainer and w.trainer != trainers.NO_TRAINER and "command" in w.model_fields_set:
            p.append((path(*key, "trainer"), f"workloads.command is set for trainer {w.trainer}; a run of "
                      f"{run.trainer} runs that profile's own command: use one trainer per stack, or remove "
                      "workloads.command"))
        tc = profile.configs.get(run.config_name)
        if tc is None:
            p.append((path(*key, "configName"), f"{run.config_name!r} is not a config of trainer {profile.name} "
                      f"({profile.source}); known: {', '.join(profile.configs)}"))
            continue
        stack_tc = w.trainer_config
        if w.staging_enabled and w.profile is not None and stack_tc is not None:
            staged = {w.profile.stages[s].dest for s in stack_tc.stages}
            missing = [s for s in tc.stages if profile.stages[s].dest not in staged]
            if missing:
                p.append((path(*key, "configName"), f"{run.config_name} needs {', '.join(missing)}, which the "
                          f"staging Job does not put on /fsx (it stages workloads.configName {w.config_name}'s): "
                          "use a config of the same models, or stage them first"))
        if run.nodes > g.node_limit:
            what = "gpuNodes.elastic.maxNodes" if g.elastic.enabled else "gpuNodes.count"
            p.append((path(*key, "nodes"), f"{run.nodes} nodes, and the stack never has more than {g.node_limit} "
                      f"({what}): Kueue would never admit the run whole. Allowed: 1-{g.node_limit}"))
        if run.multi_node and not tc.spreads:
            multi = [n for n, c in profile.configs.items() if c.spreads]
            p.append((path(*key, "nodes"), f"{run.config_name} places every component under one comma-joined key, "
                      f"which no override can spread over {run.nodes} nodes; for 2+ nodes use one of: {', '.join(multi)}"))
        owned = trainers.program_keys(profile, tc, run.nodes, g.instance.gpu_count)
        for k in run.override_map:
            bare = runs_mod.bare_key(k)
            hit = next((o for o in owned if bare == o or bare.startswith(o + ".") or o.startswith(bare + ".")), None)
            if hit is not None:
                p.append((path(*key, "overrides", k), f"set by the program ({hit}: {owned[hit]}); every key it sets "
                          f"for this run: {', '.join(sorted(owned))}"))
        rf = run.resume_from
        if rf is not None:
            p += _warm_start(cfg, run, tc)
    return p


def _loggers(cfg: StackConfig) -> list[Problem]:
    """workloads.curves.loggerBackends keeps TensorBoard while the curves read its files."""
    backends = cfg.workloads.curves.logger_backends
    if backends is not None and cfg.curves_enabled and "tensorboard" not in backends:
        return [(path("workloads", "curves", "loggerBackends"), "the curves (TensorBoard, the Grafana panel) read the "
                 "runs' TensorBoard files: keep tensorboard in the list, or set workloads.curves.enabled: false")]
    return []


def _warm_start(cfg: StackConfig, run: Any, tc: trainers.TrainerConfig) -> list[Problem]:
    """resumeFrom: another run of the stack, of the same shape, at a step its config saves. The
    shape is what the checkpoint's tensors and sharding depend on: the trainer, its config (model,
    precision, parallelism) and the node count (the DCP shards and the data loader state were saved
    for that world size: RLinf rlinf/hybrid_engines/fsdp/strategy/base.py, reasoning_runner.py
    data/data.pt). The overrides may differ: that is what a warm start is for. Whether the step is
    complete only the volume knows: components/scripts/warm_start.py checks it when the run starts."""
    rf, key = run.resume_from, run.key + ("resumeFrom",)
    source = cfg.run(rf.run)
    if source is None or rf.run == run.name:
        known = [r.name for r in cfg.training_runs if r.name != run.name]
        return [(path(*key, "run"), f"{rf.run!r} " + ("is this run itself" if rf.run == run.name else
                 "is not a run of this stack") + f"; runs: {', '.join(known) or 'none'} (a removed run's "
                 "checkpoints stay on /fsx: keep its entry with enabled: false to start from them)")]
    diffs = [f"{what} {a} vs {b}" for what, a, b in (("trainer", source.trainer, run.trainer),
                                                      ("config", source.config_name, run.config_name),
                                                      ("nodes", source.nodes, run.nodes)) if a != b]
    if diffs:
        return [(path(*key, "run"), f"{rf.run} has another shape ({'; '.join(diffs)}): its checkpoint's tensors "
                 "and shards do not load into this run; warm-start from a run of the same trainer, config and nodes")]
    saves = tc.saves
    interval = source.override_map.get("runner.save_interval")
    if saves is not None and isinstance(interval, int) and interval > 0:
        saves = dataclasses.replace(saves, save_interval=interval)
    return _saved_step(key + ("step",), rf.step, saves, f"{rf.run} ({source.config_name})")


def _monitoring(cfg: StackConfig, config_keys: set[str], secret_keys: set[str], *,
                       program: bool) -> list[Problem]:
    """`program`: called by the running program (from_pulumi), which reads the Grafana password:
    it must exist. A stack file check alone only refuses it in plain text."""
    p: list[Problem] = []
    m = cfg.monitoring
    if m.storage_class and not cfg.byo_cluster:
        p.append((path("monitoring", "storageClass"),
                  "only with cluster.existing; this stack creates its own gp3 storage class"))
    if m.node_monitoring_agent and not cfg.byo_cluster:
        p.append((path("monitoring", "nodeMonitoringAgent"),
                  "only with cluster.existing; a created cluster always gets the EKS node monitoring agent add-on "
                  "and its DCGM exporter always uses the agent's host engine"))
    if not cfg.monitoring_enabled:
        return p
    if m.namespace == cfg.training.namespace:
        p.append((path("monitoring", "namespace"),
                  f"must differ from training.namespace ({m.namespace!r}): the monitoring namespace "
                  "enforces the privileged Pod Security level its DaemonSets need"))
    needed = [(GRAFANA_PASSWORD_KEY, "the Grafana admin password")]
    if m.alert_receiver:
        needed.append((m.alert_receiver.secret_key, f"monitoring.alertReceiver.secretKey ({m.alert_receiver.type})"))
    for key, what in needed:
        if key == GRAFANA_PASSWORD_KEY and key not in config_keys and not program:
            continue
        if key not in secret_keys:
            state = "is not secret" if key in config_keys else "is missing"
            p.append((path(key), f"{state} ({what}, monitoring is on): "
                      f"pulumi config set --secret {NAMESPACE}:{key} VALUE"))
    r = m.alert_receiver
    if r and r.channel and r.type != "slack":
        p.append((path("monitoring", "alertReceiver", "channel"), f"only for type slack (got {r.type})"))
    return p


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
# Plain env the pod builder always sets besides PROTECTED_ENV (components/stack/labels.py) and the NCCL settings of the catalog
# (RAY_START_EXTRA_ARGS: the launcher forms' multi-node pods; workloads.env's value is kept in it).
# With a trainer profile (components/workloads/trainer.py): PATH, VIRTUAL_ENV, the asset directory, the
# checkpoint directory and the overrides in the trainer's own names (profile rlinf's listed here).
PROGRAM_ENV = frozenset({"PATH", "VIRTUAL_ENV", "MANISKILL_ASSET_DIR", "CKPT_PATH", "HYDRA_OVERRIDES",
                         "CONFIG_NAME", "VENV_NAME", "MODEL_PATH", "EXPERIMENT_NAME", "PYTORCH_CUDA_ALLOC_CONF",
                         "TORCH_NCCL_AVOID_RECORD_STREAMS", "RAY_START_EXTRA_ARGS",
                         # the staging Job's hub (workloads.staging.hfEndpoint)
                         "HF_ENDPOINT"})
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
    """Keys set that have no effect on this kind of stack (bring-your-own cluster, existing VPC or claim,
    monitoring off): refused so the stack file says what is deployed."""
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
        if s.storage_class:  # a dynamically provisioned claim: its replacement is the opt-in's (data loss)
            aws_only[("storage",)] = {"fsx"}
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
    if not cfg.monitoring_enabled:
        for key in _set_keys(cfg.monitoring, ("monitoring",)):
            if key[-1] != "enabled":
                p.append((path(*key), "has no effect while monitoring is off (monitoring.enabled; off by default on a "
                                      "bring-your-own cluster): remove it, or set monitoring.enabled: true"))
    return p


def _system_nodes(cfg: StackConfig) -> list[Problem]:
    """The system node type: an EC2 type, x86_64, not accelerated."""
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
    """The namespaces the stack owns (and deletes on destroy): never one of Kubernetes' own."""
    p = []
    owned = [(("training", "namespace"), cfg.training.namespace, "rltrain"),
             (("monitoring", "namespace"), cfg.monitoring.namespace, "monitoring")]
    for loc, ns, default in owned:
        if ns in RESERVED_NAMESPACES or ns.startswith("kube-"):
            p.append((path(*loc), f"{ns} is reserved for Kubernetes itself: the stack would own it and delete it on "
                                  f"destroy; use a namespace of its own (default: {default})"))
    return p


def _pod_security(cfg: StackConfig) -> list[Problem]:
    """podSecurity `restricted` with enabled workloads whose pods it refuses."""
    if cfg.training.pod_security != "restricted":
        return []
    w = cfg.workloads
    enabled = {"singleNode": w.single_node.enabled or any(not r.multi_node for r in cfg.enabled_runs),
               "multiNode": cfg.multi_node_runs,
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
    """Public-endpoint CIDRs that together cover the internet."""
    cidrs = cfg.cluster.public_access_cidrs
    if len(cidrs) > 1 and covers_internet(cidrs):
        return [(path("cluster", "publicAccessCidrs"),
                 "together these CIDRs open the API endpoint to the whole internet; list your office/VPN "
                 "CIDRs, or set endpointPublicAccess: false")]
    return []


def _env(cfg: StackConfig) -> list[Problem]:
    """workloads.env names that look like credentials (secrets_scan.SECRET_LIKE) or that the program sets,
    and training.secretEnv names that clash with a plain env var of the training pods."""
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


def _program(cfg: StackConfig) -> list[Problem]:
    """What the builders would refuse while the program runs."""
    p: list[Problem] = []
    g, w = cfg.gpu_nodes, cfg.workloads
    most = catalog.max_shm_gib(g.instance, g.efa_devices_per_node)
    if w.shm_size_gib is not None and w.shm_size_gib > most:
        p.append((path("workloads", "shmSizeGiB"),
                  f"{w.shm_size_gib} GiB does not fit: /dev/shm is charged to the pod's memory limit and may take "
                  f"at most a quarter of it, {most} GiB on {g.instance_type}"))
    elif w.shm_size_gib is None and catalog.shm_default_gib(g.instance) > most:
        p.append((path("workloads", "shmSizeGiB"),
                  f"the default /dev/shm ({catalog.shm_default_gib(g.instance)} GiB) does not fit {g.instance_type}: it is "
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
    if g.efa_enabled and g.instance_type not in versions.EFA_PLUGIN_KNOWN_TYPES and cfg.device_plugins:
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


def _volume_budget(cfg: StackConfig) -> list[Problem]:
    """Models, assets and the kept checkpoints of every run within the FSx capacity (volume_budget.py)."""
    b = volume_budget.budget(cfg)
    if b is None or b.fits:
        return []
    margin = cfg.workloads.checkpoints.volume_margin_percent
    runs = ", ".join(f"{run} {g:,.1f} GiB" for run, g in b.runs)
    keep = volume_budget.max_keep(b)
    fixes = [f"{path('storage', 'fsx', 'storageCapacityGiB')}: {volume_budget.capacity_for(b.total_gib, margin)}"]
    if keep >= 1:
        fixes.append(f"{path('workloads', 'checkpoints', 'keep')}: {keep}")
    fixes.append("fewer runs sharing the volume (singleNode / multiNode), or save less often "
                 "(the config's runner.save_interval: more steps between saves, fewer to keep for the same span)")
    tc = cfg.workloads.trainer_config
    each = f"{b.checkpoint_gib:,.1f} GiB each" + (f", saved every {tc.saves.save_interval} steps" if tc and tc.saves else "")
    return [(path("workloads", "checkpoints", "keep"),
             f"the volume does not hold what the runs keep: models and assets {b.staged_gib:,.1f} GiB + export "
             f"{b.export_gib:,.1f} GiB + ({b.keep} + 1) checkpoints per run ({each}: {runs}) = {b.total_gib:,.1f} GiB "
             f"> {b.usable_gib:,.0f} GiB usable of the {b.capacity_gib} GiB FSx ({margin} % "
             f"kept free). Fix: {'; or '.join(fixes)}")]


def widest_run(cfg: StackConfig) -> tuple[int, str]:
    """(nodes, what) of the widest workload the stack runs: validation and the NCCL test take every
    one of `gpuNodes.count` nodes (components/workloads/validation.py, nccl.py), the multi-node run
    its `nodes`."""
    w = cfg.workloads
    widths = [(cfg.gpu_nodes.count, "gpuNodes.count (validation, the NCCL test, the default run width)")]
    if w.multi_node.enabled:
        widths.append((cfg.multi_node_count, "the multi-node run (workloads.multiNode.nodes)"))
    widths += [(r.nodes, f"run {r.name} (workloads.runs[{r.key[-1]}].nodes)") for r in cfg.enabled_runs
               if not r.implicit]
    return max(widths, key=lambda x: x[0])


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _elastic(cfg: StackConfig) -> list[Problem]:
    """What elastic mode (`gpuNodes.elastic`, components/stack/elastic.py) refuses before anything is created."""
    e = cfg.gpu_nodes.elastic
    key = ("gpuNodes", "elastic")
    out: list[Problem] = []
    if not e.enabled:
        for name, set_ in (("maxNodes", e.max_nodes is not None), ("capacityBlock", e.capacity_block is not None),
                           ("existingKarpenter", e.existing_karpenter)):
            if set_:
                out.append((path(*key, name), "only with elastic.enabled: true (the fixed node group ignores it)"))
        return out
    width, what = widest_run(cfg)
    top = cfg.gpu_nodes.node_limit
    if top < width:
        out.append((path(*key, "maxNodes"), f"{top} is smaller than the widest run, {what}: {width} nodes; Kueue would "
                    f"never admit it whole (its quota is the maximum). Allowed: {width}-256"))
    cap = cfg.gpu_nodes.capacity.type
    if cap == "capacity-block":
        w = e.capacity_block
        if w is None:
            out.append((path(*key, "capacityBlock"), "required with capacity.type capacity-block: the block's start "
                        "and end (aws ec2 describe-capacity-reservations --capacity-reservation-ids ID: StartDate, "
                        "EndDate)"))
        else:
            t = _now()
            if not w.start <= t < w.end:
                when = "has not started" if t < w.start else "has ended"
                out.append((path(*key, "capacityBlock"), f"the Capacity Block {when} (window {w.start.isoformat()} "
                            f"to {w.end.isoformat()}, now {t.replace(microsecond=0).isoformat()}): EC2 launches into "
                            "a block only inside its window, so every run would stay queued. Apply inside the window, "
                            "or use capacity.type on-demand / odcr"))
    elif e.capacity_block is not None:
        out.append((path(*key, "capacityBlock"), f"only with capacity.type capacity-block (got {cap})"))
    if cfg.byo_cluster and not e.existing_karpenter:
        out.append((path(*key, "existingKarpenter"), "a bring-your-own cluster needs Karpenter already running with "
                    "a NodePool for the GPU nodes (this stack installs Karpenter, its IAM roles and interruption "
                    "queue only on a cluster it creates): set existingKarpenter: true once it does, or turn "
                    "elastic off"))
    if e.existing_karpenter and not cfg.byo_cluster:
        out.append((path(*key, "existingKarpenter"), "only with cluster.existing: a created cluster gets the stack's "
                    "own Karpenter"))
    if cfg.workloads.serving.enabled:
        # `up` never waits on a GPU launch that is not a queued run's (issue 44): the vLLM server's
        # pods request GPUs outside Kueue, so Karpenter would launch GPU nodes for them at `up` (which
        # waits for the Deployment) and hold them while it serves.
        out.append((path("workloads", "serving", "enabled"), "not with gpuNodes.elastic.enabled: the vLLM server's "
                    "pods request GPUs outside the Kueue queue, so Karpenter would launch GPU nodes for them at `up` "
                    "(which waits for them) and hold them while it serves. Serve from a stack with the fixed node "
                    "group, or turn elastic off"))
    return out


def _image_build(cfg: StackConfig) -> list[Problem]:
    """A built image (`workloads.image.build`, components/stack/image_build.py) needs the stack's own
    cluster (an AWS account to build in) and a trainer profile (the RLinf revision it builds)."""
    if image_build.built(cfg.workloads.image) is None:
        return []
    key = path("workloads", "image")
    p: list[Problem] = []
    if cfg.byo_cluster:
        p.append((key, "build needs the stack's own AWS account and cluster; with cluster.existing, bring your "
                       "own image: a reference with a tag or @sha256 digest"))
    if cfg.workloads.profile is None:
        p.append((key, f"build builds RLinf at the revision a trainer profile pins; workloads.trainer "
                       f"{cfg.workloads.trainer} has none: set a trainer profile, or bring your own image"))
    return p
