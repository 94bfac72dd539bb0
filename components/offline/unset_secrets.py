"""Secrets a stack needs that its stack file does not hold yet: shown as not set offline, refused for real.

Stack files carry no placeholder ciphertext (the engine decrypts every `secure:` value before the
program runs, so a fake one fails every real preview). A secret is set per stack, by whoever deploys
it: `pulumi config set --secret rltrain:KEY VALUE`. Until then:
- a real `pulumi preview` / `up` refuses in config validation, before any resource, naming the key
  and that command (components/stack/config.py);
- the offline render takes that same refusal, gives the key a value that reads
  `[secret not set: <the command>]` (so the Secret, the provider or the chart that reads it shows
  it in the record), and renders everything else: CI and reviewers need no secrets.

Which secrets a stack needs is decided by the validation alone (secretEnv, a bring-your-own
kubeconfig, the Grafana password, an alert receiver, ...): nothing here lists them.

`load_stack` reads and validates a stack file this way: what the render, preflight, the scan
report and the tests load a stack with.

    python -m components.offline.unset_secrets STACK   # KEY<TAB>COMMAND per secret not set; exit 2: invalid config
"""

from __future__ import annotations

import contextvars
import re
import sys
from pathlib import Path
from typing import Callable, Mapping, Optional, TypeVar

from components.offline.mock_engine import ROOT
from components.stack import config as config_mod
from components.stack import validate
from components.stack import stackfile

T = TypeVar("T")
# The command a refusal names for a missing secret: `pulumi config set --secret rltrain:KEY ...`.
_SET_SECRET = re.compile(r"pulumi config set --secret (?P<key>[A-Za-z][\w-]*:[A-Za-z][\w-]*)(?:\s.*)?$")


def not_set(command: str) -> str:
    """The offline value of a secret that is not set: names the command that sets it."""
    return f"{stackfile.NOT_SET_PREFIX}{command}]"


def command_of(value: str) -> Optional[str]:
    """The command inside a not-set value, None for any other value."""
    if isinstance(value, str) and value.startswith(stackfile.NOT_SET_PREFIX) and value.endswith("]"):
        return value[len(stackfile.NOT_SET_PREFIX):-1]
    return None


def named_by(err: validate.ConfigError, values: Mapping[str, str]) -> dict[str, str]:
    """{full key: command} of the problems that are a secret missing from `values` (and only that:
    a key present in plain text is a real problem)."""
    found: dict[str, str] = {}
    for where, msg in err.problems:
        m = _SET_SECRET.search(msg)
        if m and m["key"] == where and where not in values:
            found[where] = m.group(0)
    return found


def tolerating(check: Callable[[dict[str, str], set[str]], T], values: Mapping[str, str],
               secret: set[str]) -> tuple[T, dict[str, str], set[str]]:
    """`check(values, secret)`, where a secret the refusal names as missing is given its not-set value
    and the check runs again. Returns (result, values, secret keys) as finally checked; any other
    problem is raised as the check raised it."""
    values, secret = dict(values), set(secret)
    while True:
        try:
            return check(values, secret), values, secret
        except validate.ConfigError as e:
            missing = named_by(e, values)
            if not missing:
                raise
            values.update({k: not_set(cmd) for k, cmd in missing.items()})
            secret |= set(missing)


def program_check(values: Mapping[str, str], secret: set[str]) -> config_mod.StackConfig:
    """The validation the running program does first (`validate.from_pulumi`), on this config, in a
    context of its own: what a real preview would refuse before creating anything."""
    import pulumi

    def _check() -> config_mod.StackConfig:
        pulumi.runtime.set_all_config(dict(values), sorted(secret))
        return validate.from_pulumi()

    return contextvars.Context().run(_check)


def of(values: Mapping[str, str]) -> dict[str, str]:
    """{full key: command} of the secrets given their not-set value in `values`."""
    return {k: cmd for k, v in sorted(values.items()) if (cmd := command_of(v)) is not None}


def load_stack(stack: str, root: Path = ROOT) -> tuple[dict[str, str], set[str], config_mod.StackConfig]:
    """Read and validate one stack file, and as the program validates it; raises ConfigError / StackFileError.

    A secret the stack needs and its file does not hold yet is no error offline: it gets the value
    `[secret not set: <command>]` (this module); a real preview refuses with that command.
    """
    path = root / f"Pulumi.{stack}.yaml"
    if not path.exists():
        raise stackfile.StackFileError(
            f"no stack file {path.name}; stacks: {', '.join(stackfile.stack_names(root)) or 'none'}")
    cfg_values, secret = stackfile.read(path)
    prefix = f"{config_mod.NAMESPACE}:"

    def check(cfg_values: dict[str, str], secret: set[str]) -> config_mod.StackConfig:
        return validate.load(
            {k[len(prefix):]: v for k, v in cfg_values.items() if k.startswith(prefix)},
            secret_keys={k[len(prefix):] for k in secret if k.startswith(prefix)},
            region=cfg_values.get("aws:region"),
        )

    cfg, cfg_values, secret = tolerating(check, cfg_values, secret)
    # A secret only the running program reads (its first line, validate.from_pulumi) is found there.
    _, cfg_values, secret = tolerating(program_check, cfg_values, secret)
    return cfg_values, secret, cfg


def main(argv: Optional[list[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (1, 2):
        print("usage: python -m components.offline.unset_secrets STACK [PROJECT_DIR]", file=sys.stderr)
        return 2
    root = Path(args[1]).resolve() if len(args) == 2 else ROOT
    try:
        values, _, _ = load_stack(args[0], root)
    except validate.ConfigError as e:
        print(f"Pulumi.{args[0]}.yaml: {e.render()}", file=sys.stderr)
        return 2
    except stackfile.StackFileError as e:
        print(str(e), file=sys.stderr)
        return 2
    for key, cmd in of(values).items():
        print(f"{key}\t{cmd}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
