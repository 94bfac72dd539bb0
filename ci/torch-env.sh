#!/usr/bin/env bash
# The torch environment of the export tests, built once and reused (docs/testing.md): a virtual
# environment from requirements-torch.txt under ~/.cache/rltrain-torch/<key>, the key a hash of that
# file and the Python version, marked `complete` only after the install succeeded (a build cut
# short is built again, never used). Prints the environment's python on stdout.
#   --reuse-only  print it if complete, else exit 1 without building
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
req="$ROOT/requirements-torch.txt"
py="${RLTRAIN_TORCH_BASE_PYTHON:-python3}"
key="$({ cat "$req"; "$py" -c 'import sys; print(sys.version)'; } | sha256sum | cut -c1-16)"
cache="${RLTRAIN_TORCH_CACHE:-$HOME/.cache/rltrain-torch}"
env_dir="$cache/$key"
if [ -f "$env_dir/complete" ] && [ -x "$env_dir/bin/python" ]; then
  echo "$env_dir/bin/python"
  exit 0
fi
if [ "${1:-}" = "--reuse-only" ]; then
  echo "torch environment: no complete build at $env_dir (run ci/torch-env.sh)" >&2
  exit 1
fi
start=$(date +%s)
rm -rf "$env_dir"
mkdir -p "$cache"
"$py" -m venv "$env_dir"
"$env_dir/bin/python" -m pip install --quiet --upgrade pip==24.3.1 >&2
"$env_dir/bin/python" -m pip install --quiet --no-cache-dir -r "$req" >&2
"$env_dir/bin/python" -c 'import torch, transformers, tokenizers' >&2
touch "$env_dir/complete"
echo "torch environment: built $env_dir in $(( $(date +%s) - start )) s" >&2
echo "$env_dir/bin/python"
