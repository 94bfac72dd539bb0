"""Secrets recognised by value: every plain string of the stack config and every plain env value.

The scanner is `detect-secrets` (PyPI, requirements.txt); its plugins are used programmatically,
so the token shapes are the ones that project maintains, not patterns written here:
- every regex plugin it ships (AWS access keys, GitHub, GitLab, Slack, OpenAI, Stripe, npm, PyPI,
  SendGrid, Twilio, Discord, Telegram, JWTs, private keys, ...), `BasicAuthDetector` for
  `scheme://user:password@host`, `KeywordDetector` (config-file rules) for `password=...` in a URL
  or command; its public-IP plugin is left out (public CIDRs in config are not secrets);
- its two high-entropy plugins, with their own charsets, entropy function and default limits
  (base64 > 4.5 bits, hex > 3.0 bits per character) on every run of their charset of 20 or more
  characters. detect-secrets 1.5 has no Hugging Face or Weights & Biases plugin: an `hf_...` token
  (37 characters, ~5 bits) is caught as base64 entropy, a W&B key (40 hex) as hex entropy;
- its heuristic filters (sequential strings, UUIDs, `${VAR}` and `$VAR` references, strings
  without a letter), as in its default settings.

Tuning, so that what a stack legitimately holds passes: image digests (`sha256:` + 64 hex), ARNs
and AWS resource ids (`cr-...`, `vpc-...`, `subnet-...`) are blanked before the entropy plugins
look; image references are scanned without their tag (a tag is public in any registry listing).
A 40-hex git commit id is refused like a W&B key: the two cannot be told apart.

Nothing here prints a suspected value: `mask` keeps at most 4 characters (and at most a quarter)
of each finding; `redact` masks every finding inside a longer string.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

# Env names that look like credentials must come from secret config, never plain values (D16).
# Whole underscore-separated words, so TOKENIZERS_PARALLELISM (set by the reference) is not caught.
SECRET_LIKE = re.compile(r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY)(_|$)", re.I)
# Entropy findings shorter than this are not reported (git short ids, AWS ids, version strings).
MIN_ENTROPY_LENGTH = 20
# Shapes that are high-entropy but public: blanked before the entropy plugins look.
_PUBLIC_SHAPES = re.compile(
    r"sha(?:256|384|512):[0-9a-fA-F]{32,128}"                      # image / content digests
    r"|arn:aws[a-zA-Z-]*:[a-z0-9-]*:[a-z0-9-]*:(?:\d{12})?:[^\s,;\"']+"  # ARNs
    r"|\b[a-z]{1,12}-[0-9a-f]{8}(?:[0-9a-f]{9})?\b"                  # AWS resource ids (cr-, vpc-, subnet-, ...)
)
# Characters that end the token a finding sits in (for masking the whole token).
_DELIMITERS = set(" \t\r\n\"'`@/?#&,;:=()[]{}<>")
# Plugins not used: public IPs are not secrets here; the entropy plugins run separately.
_SKIPPED_PLUGINS = {"IPPublicDetector", "Base64HighEntropyString", "HexHighEntropyString", "KeywordDetector"}


@dataclass(frozen=True)
class Finding:
    kind: str  # detect-secrets' secret type, e.g. "GitHub Token", "Basic Auth Credentials"
    start: int  # span of the suspected value inside the scanned string
    end: int


@functools.lru_cache(maxsize=1)
def _plugins() -> tuple[list[Any], Any, list[tuple[Any, re.Pattern[str]]]]:
    """(regex plugins, keyword plugin, [(entropy plugin, run-of-charset regex)]), imported on first use."""
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
    from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString, HexHighEntropyString
    from detect_secrets.plugins.keyword import KeywordDetector

    classes = get_mapping_from_secret_type_to_class().values()
    regex = [cls() for cls in sorted(classes, key=lambda c: c.__name__) if cls.__name__ not in _SKIPPED_PLUGINS]
    entropy = [(p, re.compile(f"[{re.escape(p.charset)}]+")) for p in (Base64HighEntropyString(),
                                                                      HexHighEntropyString())]
    return regex, KeywordDetector(), entropy


@functools.lru_cache(maxsize=1)
def _filters() -> tuple[Any, ...]:
    from detect_secrets.filters import heuristic as h
    return (h.is_sequential_string, h.is_potential_uuid, h.is_templated_secret, h.is_prefixed_with_dollar_sign,
            h.is_not_alphanumeric_string)


def _filtered(secret: str) -> bool:
    return any(f(secret) for f in _filters())


def _spans(value: str, secret: str) -> Iterator[tuple[int, int]]:
    start = value.find(secret)
    while start >= 0 and secret:
        yield start, start + len(secret)
        start = value.find(secret, start + 1)


def _widen(value: str, start: int, end: int) -> tuple[int, int]:
    """The whole token around a finding (a plugin may report only part of it, e.g. `ghp`)."""
    while start > 0 and value[start - 1] not in _DELIMITERS:
        start -= 1
    while end < len(value) and value[end] not in _DELIMITERS:
        end += 1
    return start, end


def _candidates(start: int, run: str) -> Iterator[tuple[int, str]]:
    """What the entropy plugins score in one run of their charset: the run itself, or each `/` segment
    of a path. A run that starts with `/` or holds `-` or `_` is a path or a name
    (`s3://bucket/run-2026-04-01/step_0001000`), not standard base64 (an AWS secret access key holds
    `/` and `+`, never `-` or `_`; URL-safe tokens never hold `/`): long paths would otherwise pass
    the limit on their length alone."""
    if "/" in run and (run.startswith("/") or "-" in run or "_" in run):
        pos = start
        for segment in run.split("/"):
            yield pos, segment
            pos += len(segment) + 1
    else:
        yield start, run


def _blank_public(value: str) -> str:
    return _PUBLIC_SHAPES.sub(lambda m: " " * len(m.group(0)), value)


def scan(value: str) -> list[Finding]:
    """Every suspected secret in `value`, by span; empty when it looks clean."""
    if not isinstance(value, str) or not value.strip():
        return []
    from detect_secrets.plugins.keyword import CONFIG_DENYLIST_REGEX_TO_GROUP

    regex, keyword, entropy = _plugins()
    found: dict[tuple[int, int], str] = {}

    def add(kind: str, secret: str, *, widen: bool = True) -> None:
        if not secret or (_filtered(secret) and kind != "Basic Auth Credentials") \
                or (kind == "Basic Auth Credentials" and (secret.startswith("$") or secret.startswith("{"))):
            return
        for s, e in _spans(value, secret):
            span = _widen(value, s, e) if widen else (s, e)
            found.setdefault(span, kind)

    for plugin in regex:
        for secret in plugin.analyze_string(value):
            add(plugin.secret_type, secret, widen=plugin.secret_type != "Basic Auth Credentials")
    for secret in keyword.analyze_string(value, CONFIG_DENYLIST_REGEX_TO_GROUP):
        add(keyword.secret_type, secret.strip(), widen=False)
    blanked = _blank_public(value)
    for plugin, run in entropy:
        for m in run.finditer(blanked):
            for start, token in _candidates(m.start(), m.group(0)):
                if len(token) >= MIN_ENTROPY_LENGTH and not _filtered(token) \
                        and plugin.calculate_shannon_entropy(token) > plugin.entropy_limit:
                    found.setdefault(_widen(value, start, start + len(token)), plugin.secret_type)
    # Overlapping spans (two plugins on one token): keep the outermost.
    spans = sorted(found, key=lambda se: (se[0], -se[1]))
    out: list[Finding] = []
    for s, e in spans:
        if out and s < out[-1].end:
            if e > out[-1].end:
                out[-1] = Finding(out[-1].kind, out[-1].start, e)
            continue
        out.append(Finding(found[(s, e)], s, e))
    return out


def scan_image(image: str) -> list[Finding]:
    """An image reference without its tag and digest (both public), e.g. `user:pw@registry/...`."""
    name = image.split("@", 1)[0] if "@sha" in image else image
    last = name.rsplit("/", 1)
    if ":" in last[-1]:
        name = name[: len(name) - len(last[-1]) + last[-1].index(":")]
    return scan(name)


def mask(secret: str) -> str:
    """At most 4 characters and at most a quarter of a suspected value, then an ellipsis."""
    keep = min(4, len(secret) // 4)
    return secret[:keep] + "…"


def redact(value: str, findings: Iterable[Finding] | None = None) -> str:
    """`value` with every suspected secret in it masked."""
    if findings is None:
        findings = scan(value)
    out, pos = [], 0
    for f in sorted(findings, key=lambda f: f.start):
        out += [value[pos:f.start], mask(value[f.start:f.end])]
        pos = f.end
    return "".join(out) + value[pos:]


def describe(value: Any, limit: int = 80) -> str:
    """A config value for an error message: strings redacted and shortened, containers summarised
    (never their contents: a mapping of env values may hold anything)."""
    if isinstance(value, dict):
        return f"a mapping of {len(value)} key(s)" if value else "an empty mapping"
    if isinstance(value, (list, tuple)):
        return f"a list of {len(value)} item(s)" if value else "an empty list"
    if isinstance(value, str):
        text = redact(value)
        return repr(text if len(text) <= limit else text[: limit - 1] + "…")
    return repr(value)


def message(findings: list[Finding], value: str) -> str:
    """The refusal for one config value: what was found, masked, and where secrets go instead."""
    kinds = ", ".join(sorted({f.kind for f in findings}))
    return (f"looks like it holds a secret ({kinds}: {redact(value, findings)!r}); a plain value ends up in the "
            "manifests, resources.json and CI logs: put the secret in secret config "
            "(pulumi config set --secret rltrain:NAME ...) and map it with rltrain:training.secretEnv")


def _containers(value: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("containers", "initContainers") and isinstance(item, list):
                for c in item:
                    if isinstance(c, dict):
                        yield f"{where} container {c.get('name')}", c
            else:
                yield from _containers(item, where)
    elif isinstance(value, list):
        for item in value:
            yield from _containers(item, where)


def plain_env(manifests: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """Every plain `env[].value` of every container (pod templates inside Jobs, StatefulSets and
    CRDs such as the MPIJob included) that the scanner suspects: (where, message), value masked."""
    out = []
    for doc in manifests:
        meta = doc.get("metadata") or {}
        where = f"{doc.get('kind')}/{meta.get('name')}"
        for name, container in _containers(doc, where):
            for var in container.get("env") or []:
                value = var.get("value") if isinstance(var, dict) else None
                found = scan(value) if isinstance(value, str) else []
                if found:
                    out.append((f"{name} env {var.get('name')}",
                                f"plain value looks like a secret ({', '.join(sorted({f.kind for f in found}))}: "
                                f"{redact(value, found)!r}); deliver it through training.secretEnv"))
    return out
