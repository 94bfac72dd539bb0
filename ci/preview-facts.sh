#!/usr/bin/env bash
# The facts a stack's preview needs before anything is installed: the Pulumi CLI version (the SDK
# pin in requirements.txt) and the AWS region (aws:region in Pulumi.STACK.yaml), as step outputs.
#
#   ci/preview-facts.sh STACK
set -euo pipefail
# shellcheck source=/dev/null
. "$(dirname "${BASH_SOURCE[0]}")/lib-github.sh"
cd "$(dirname "${BASH_SOURCE[0]}")/.."

stack="${1:?usage: ci/preview-facts.sh STACK}"
pulumi_version="$(sed -n 's/^pulumi==\([0-9][0-9.]*\).*/\1/p' requirements.txt)"
region="$(sed -n 's/^ *aws:region: *["'\'']\{0,1\}\([a-z0-9-]*\).*/\1/p' "Pulumi.${stack}.yaml")"
if [ -z "$pulumi_version" ] || [ -z "$region" ]; then
  echo "::error::cannot read pulumi== from requirements.txt or aws:region from Pulumi.${stack}.yaml"
  exit 1
fi
output pulumi-version "$pulumi_version"
output region "$region"
