"""Which Ray this pod talks to, and how it proves it belongs: an explicit address, never a
discovered one, and Ray's own token authentication.

Ray is only ever reached at an explicit address, never discovered: Ray 2.60's
`ray.init(address="auto")` takes an inherited RAY_ADDRESS first, then the
address the last `ray start` recorded under the temp dir
(ray_current_cluster), then any gcs_server found by scanning the process
table (ray/_private/services.py, get_ray_address_from_environment), any of
which can be another cluster on the same host. So the head connects with
ray.init(address="<RAY_HEAD_HOST or --node-ip-address>:<RAY_PORT>"), workers
run `ray start --address=<RAY_HEAD_HOST>:<RAY_PORT>`, an inherited RAY_ADDRESS
is dropped, and the training command gets RAY_ADDRESS=<that head address>,
which its plain `ray.init()` (or "auto") uses before any discovery. (Also
for trainers: ray.init() replaces the process's SIGTERM handler with one that
exits at once, ray/_private/worker.py init(); a trainer that checkpoints on
SIGTERM installs its handler after ray.init(), as tests/scripts/
resume_trainer.py does.)

Token authentication is Ray's own (2.60): with RAY_AUTH_MODE=token every Ray
gRPC server (GCS, raylet, Ray Client server) checks an "authorization: Bearer
<token>" header and every Ray client sends one (ray/_private/authentication/,
ray/_private/grpc_utils.py). The token comes from RAY_AUTH_TOKEN, else the file
RAY_AUTH_TOKEN_PATH names, else ~/.ray/auth_token (the C++ token loader in
ray/_raylet.so; ray/exceptions.py AuthenticationError). A client without the
right token fails with "Unauthenticated: ... InvalidAuthToken". RAY_AUTH_TOKEN
without RAY_AUTH_MODE=token sends nothing, hence the launcher sets the mode.
"""

from __future__ import annotations

import os
from typing import Mapping

from .common import ConfigError, Launcher

# The Ray variables the launcher manages.
RAY_ADDRESS_ENV = "RAY_ADDRESS"
RAY_AUTH_TOKEN_ENV = "RAY_AUTH_TOKEN"
RAY_AUTH_MODE_ENV = "RAY_AUTH_MODE"
AUTH_TOKEN = "token"
AUTH_DISABLED = "disabled"


def auth_mode(env: Mapping[str, str]) -> str:
    """RAY_AUTH_MODE for this pod's Ray processes: "token" or "disabled".

    Ray 2.60 reads the token from RAY_AUTH_TOKEN (or the file named by
    RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token) but only uses it when
    RAY_AUTH_MODE=token; without that a client sends no token at all.
    """
    token = env.get(RAY_AUTH_TOKEN_ENV)
    raw_mode = env.get(RAY_AUTH_MODE_ENV)
    mode = (raw_mode or "").strip().lower() or None
    if mode not in (None, AUTH_TOKEN, AUTH_DISABLED):
        raise ConfigError(
            f"{RAY_AUTH_MODE_ENV} must be '{AUTH_TOKEN}' or '{AUTH_DISABLED}', "
            f"got {raw_mode!r}"
        )
    if token is not None:
        if not token.strip():
            raise ConfigError(
                f"{RAY_AUTH_TOKEN_ENV} is set but empty; check the Secret it "
                "comes from (unset it to run without token authentication)"
            )
        if mode == AUTH_DISABLED:
            raise ConfigError(
                f"{RAY_AUTH_TOKEN_ENV} is set but {RAY_AUTH_MODE_ENV}="
                f"{raw_mode!r}; unset {RAY_AUTH_MODE_ENV} or set it to "
                f"'{AUTH_TOKEN}'"
            )
        return AUTH_TOKEN
    # Token mode without RAY_AUTH_TOKEN: the operator points Ray at a token
    # file (RAY_AUTH_TOKEN_PATH); Ray itself fails clearly if there is none.
    return mode or AUTH_DISABLED


def prepare_ray_environment(log: Launcher, *, is_head: bool, ray_address: str, mode: str) -> None:
    """Set the variables every Ray process this pod starts inherits: the head's
    `ray_address` (on the head), and RAY_AUTH_MODE `mode` (auth_mode's answer)."""
    inherited = os.environ.get(RAY_ADDRESS_ENV)
    if is_head:
        if inherited and inherited != ray_address:
            log.say(
                f"ignoring the inherited {RAY_ADDRESS_ENV}={inherited}; this "
                f"run's Ray is at {ray_address}"
            )
        # For the training command: ray.init() and ray.init("auto") take
        # RAY_ADDRESS before any discovery.
        os.environ[RAY_ADDRESS_ENV] = ray_address
    elif inherited is not None:
        # `ray start --address` does not read it, but the worker's Ray
        # processes should not see another cluster's address either.
        del os.environ[RAY_ADDRESS_ENV]
    os.environ[RAY_AUTH_MODE_ENV] = mode
    if mode == AUTH_TOKEN:
        source = (
            RAY_AUTH_TOKEN_ENV if RAY_AUTH_TOKEN_ENV in os.environ
            else "RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token"
        )
        log.say(f"Ray token authentication on (token from {source})")
