#!/usr/bin/env bash
# Build every binary of the simulated cluster (issue 17) from the Go module proxy, pinned by
# cluster/versions.env and the wrapper modules cluster/go/<piece>/{go.mod,go.sum[,main.go]}.
#
# Output, OUTSIDE the repository:
#   ${RLTRAIN_SIM_CACHE:-$HOME/.cache/rltrain-sim}/<key>/bin/   the binaries
#   ${RLTRAIN_SIM_CACHE:-$HOME/.cache/rltrain-sim}/<key>/env.sh what the runner sources: bin dir,
#       versions and the module-cache directories of kueue, kuberay, mpi-operator and kwok (CRDs,
#       webhook manifests and kwok stages are read from there at run time, never copied here).
# <key> is a hash of versions.env, the wrapper modules and the Go version. A second run with the
# same key prints "reusing ..." and does nothing else; an interrupted run resumes per binary.
#
# Go builds run under `nice -n 10` (a shared 2-core machine) with -trimpath and -ldflags '-s -w'
# (no symbol tables: about a third less disk). Every step prints its elapsed seconds.
# Environment: RLTRAIN_SIM_CACHE (cache root), GOMODCACHE/GOCACHE/GOPROXY as for any Go build.
# Options (for ci/install.sh):
#   --if-go       when Go 1.26+ is not installed, say so and succeed (the simulated-cluster tests
#                 then skip), except under CI=1 where a missing Go is a failure;
#   --reuse-only  use a complete cache if there is one, else say so and succeed without building
#                 (RLTRAIN_CI_REUSE=1, a quick local rerun: never a 50-minute build by surprise).
set -euo pipefail
if_go=0 reuse_only=0
for arg in "$@"; do
  case "$arg" in
    --if-go) if_go=1 ;;
    --reuse-only) reuse_only=1 ;;
    *) echo "usage: cluster/build.sh [--if-go] [--reuse-only]" >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
# shellcheck source=/dev/null
. "$here/versions.env"

# Go 1.26 or newer (kueue, kwok and the Pulumi CLI's modules say `go 1.26`); GOTOOLCHAIN=local below
# so that nothing but modules is downloaded.
go_minor="$(go env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')" || true
if [ -z "$go_minor" ] || [ "$go_minor" -lt 26 ]; then
  if [ "$if_go" = 1 ] && [ "${CI:-}" != 1 ]; then
    echo "cluster/build.sh: no Go 1.26+ on PATH, simulated-cluster binaries not built (the tests that need them skip)"
    exit 0
  fi
  echo "cluster/build.sh: needs Go 1.26 or newer on PATH (found: $(go env GOVERSION 2>/dev/null || echo none))" >&2; exit 1
fi
# -buildvcs=false: the wrapper modules sit in this git repository; stamping its commit into the
# binaries would make them differ per commit (and fails where git refuses the checkout's owner).
export GOFLAGS="-trimpath -mod=readonly -buildvcs=false"
export GOTOOLCHAIN=local
# No cgo: static binaries, and no C toolchain needed.
export CGO_ENABLED=0

t_start=$(date +%s)
step_start=0
step() { step_start=$(date +%s); echo "==> $*"; }
done_step() { echo "    $1: $(( $(date +%s) - step_start ))s"; }

# --- consistency of the pins ------------------------------------------------------------------
# requirements.txt is what Python installs; versions.env says what the binaries were built at.
req_pin() { sed -n "s/^$1==\([^ ;#]*\).*/\1/p" "$root/requirements.txt"; }
[ "$(req_pin pulumi)" = "$PULUMI_PY_PIN" ] || {
  echo "build.sh: requirements.txt pins pulumi==$(req_pin pulumi) but versions.env PULUMI_PY_PIN=$PULUMI_PY_PIN; update versions.env (and the CLI line)" >&2; exit 1; }
[ "$(req_pin pulumi-kubernetes)" = "$PULUMI_KUBERNETES_PY_PIN" ] || {
  echo "build.sh: requirements.txt pins pulumi-kubernetes==$(req_pin pulumi-kubernetes) but versions.env PULUMI_KUBERNETES_PY_PIN=$PULUMI_KUBERNETES_PY_PIN" >&2; exit 1; }

# wrapper dir | module | version wanted (as in its go.mod require line)
pins=(
  "etcd go.etcd.io/etcd/server/v3 v$ETCD_VERSION"
  "kubernetes k8s.io/kubernetes v$K8S_VERSION"
  "kubernetes k8s.io/client-go v0.${K8S_VERSION#1.}"
  "kwok sigs.k8s.io/kwok v$KWOK_VERSION"
  "kueue sigs.k8s.io/kueue v$KUEUE_VERSION"
  "kuberay github.com/ray-project/kuberay/ray-operator v$KUBERAY_VERSION"
  "mpi-operator github.com/kubeflow/mpi-operator v$MPI_OPERATOR_VERSION"
  "karpenter sigs.k8s.io/karpenter v$KARPENTER_VERSION"
  "pulumi github.com/pulumi/pulumi/pkg/v3 v$PULUMI_CLI_VERSION"
  "pulumi github.com/pulumi/pulumi/sdk/v3 v$PULUMI_CLI_VERSION"
  "pulumi-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4 $PULUMI_KUBERNETES_PROVIDER_MODULE"
)
for p in "${pins[@]}"; do
  read -r dir mod want <<<"$p"
  # The version the wrapper really builds with (a replace line wins, as for Kubernetes' staging).
  got="$(cd "$here/go/$dir" && go list -m -f '{{if .Replace}}{{.Replace.Version}}{{else}}{{.Version}}{{end}}' "$mod")"
  [ "$got" = "$want" ] || {
    echo "build.sh: cluster/go/$dir builds $mod $got but versions.env says $want; edit both together" >&2; exit 1; }
done

# --- cache key ---------------------------------------------------------------------------------
key="$( { cat "$here/versions.env"; go env GOVERSION GOOS GOARCH;
          (cd "$here/go" && find . -type f | LC_ALL=C sort | while read -r f; do echo "$f"; cat "$f"; done); } \
        | sha256sum | cut -c1-16)"
cache_root="${RLTRAIN_SIM_CACHE:-$HOME/.cache/rltrain-sim}"
cache="$cache_root/$key"
bin="$cache/bin"

print_versions() {
  echo "Kubernetes: $("$bin/kube-apiserver" --version) (kubectl client $("$bin/kubectl" version --client -o json | sed -n 's/.*"gitVersion": "\(.*\)".*/\1/p' | head -1))"
  echo "etcd: $("$bin/etcd" --version | head -1)"
  echo "Pulumi CLI: $("$bin/pulumi" version) (Python SDK pin $PULUMI_PY_PIN)"
  echo "Kubernetes provider: $PULUMI_KUBERNETES_PROVIDER_VERSION ($bin/pulumi-resource-kubernetes; Python SDK pin $PULUMI_KUBERNETES_PY_PIN)"
  echo "kwok v$KWOK_VERSION, Kueue v$KUEUE_VERSION, KubeRay v$KUBERAY_VERSION, MPI operator v$MPI_OPERATOR_VERSION, Karpenter v$KARPENTER_VERSION (kwok provider)"
}

if [ -f "$cache/complete" ]; then
  echo "reusing $cache (key $key: versions.env + cluster/go + $(go env GOVERSION))"
  print_versions
  echo "total: $(( $(date +%s) - t_start ))s"
  exit 0
fi

if [ "$reuse_only" = 1 ]; then
  echo "cluster/build.sh: no complete build in $cache and --reuse-only: nothing built (run cluster/build.sh)"
  exit 0
fi

mkdir -p "$bin" "$cache/src"
echo "building into $cache (key $key); module cache $(go env GOMODCACHE)"

# go build of the main package $2 inside wrapper module dir $1 into bin/$3, ldflags $4.
# Each binary is kept in <cache root>/pieces/<name>-<piece key>, the key hashing only what that
# binary is built from (its wrapper module, package, ldflags, Go version): a change to one pin
# rebuilds that binary alone, and bin/ of every build is hard links into pieces/. Written via a
# temporary name, so an interrupted build resumes per binary.
pieces="$cache_root/pieces"
piece_key() {
  { go env GOVERSION GOOS GOARCH; echo "$2|$4"
    (cd "$1" && find . -type f ! -name '*-embed.json' | LC_ALL=C sort | while read -r f; do echo "$f"; cat "$f"; done)
  } | sha256sum | cut -c1-16
}
gobuild() {
  local dir="$1" pkg="$2" out="$3" ldflags="${4:-}"
  local piece; piece="$pieces/$out-$(piece_key "$dir" "$pkg" "$out" "$ldflags")"
  if [ -x "$piece" ]; then
    echo "    $out: reusing $piece"
  else
    step "build $out ($pkg)"
    mkdir -p "$pieces"
    (cd "$dir" && nice -n 10 go build -ldflags "-s -w $ldflags" -o "$piece.tmp" "$pkg")
    mv "$piece.tmp" "$piece"
    done_step "$out"
  fi
  ln -f "$piece" "$bin/$out"
}

# Module downloads first, timed on their own (the cold build's network part). Only what the
# packages to build need (`go mod download` of a module downloads its whole graph).
fetch() {
  local dir="$1"; shift
  step "download modules for $dir"
  (cd "$here/go/$dir" && go list -deps "$@" >/dev/null)
  done_step "download $dir"
}

# --- env.sh for the runner -------------------------------------------------------------------------
# Written before the builds, so the runner can start as soon as etcd and kube-apiserver exist
# (bin/ fills in the order below; "complete" marks the end).
moddir() { (cd "$here/go/$1" && go mod download -json "$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p'); }
{
  echo "# Written by cluster/build.sh (key $key). Source it: binaries and upstream trees of the simulated cluster."
  echo "export RLTRAIN_SIM_BIN='$bin'"
  echo "export RLTRAIN_SIM_KUEUE_DIR='$(moddir kueue sigs.k8s.io/kueue)'"
  echo "export RLTRAIN_SIM_KUBERAY_DIR='$(moddir kuberay github.com/ray-project/kuberay/ray-operator)'"
  echo "export RLTRAIN_SIM_MPI_OPERATOR_DIR='$(moddir mpi-operator github.com/kubeflow/mpi-operator)'"
  echo "export RLTRAIN_SIM_KWOK_DIR='$(moddir kwok sigs.k8s.io/kwok)'"
  echo "export RLTRAIN_SIM_KARPENTER_DIR='$(moddir karpenter sigs.k8s.io/karpenter)'"
  # Not a dependency of any wrapper: downloaded at the pinned version for its CRDs (EC2NodeClass) and chart.
  echo "export RLTRAIN_SIM_KARPENTER_AWS_DIR='$(cd "$cache" && GOFLAGS='' go mod download -json "github.com/aws/karpenter-provider-aws@v$KARPENTER_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')'"
  echo "export RLTRAIN_SIM_KARPENTER_VERSION='$KARPENTER_VERSION'"
  echo "export RLTRAIN_SIM_K8S_VERSION='$K8S_VERSION'"
  echo "export RLTRAIN_SIM_ETCD_VERSION='$ETCD_VERSION'"
  echo "export RLTRAIN_SIM_PULUMI_CLI_VERSION='$PULUMI_CLI_VERSION'"
  echo "export RLTRAIN_SIM_PULUMI_KUBERNETES_PROVIDER_VERSION='$PULUMI_KUBERNETES_PROVIDER_VERSION'"
} > "$cache/env.sh.tmp"
mv "$cache/env.sh.tmp" "$cache/env.sh"
gv="v$K8S_VERSION"; minor="${K8S_VERSION#1.}"; minor="${minor%%.*}"
# Without these the binaries say v0.0.0-master: /version then reports it, and pulumi-kubernetes
# treats such a cluster as 1.14 (provider/pkg/cluster/version.go) and waits for ServiceAccount
# token Secrets that 1.24+ never creates (FACTS.md "A real cluster on one machine").
k8s_ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $p.gitVersion=$gv -X $p.gitMajor=1 -X $p.gitMinor=$minor -X $p.gitTreeState=clean"
done

# Order: what the sim-run engineer's starter needs first (etcd, API server), then the rest of
# the control plane, kwok, kubectl, the operators, and Pulumi last.
fetch etcd go.etcd.io/etcd/server/v3/etcdmain
gobuild "$here/go/etcd" . etcd
fetch kubernetes k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
for c in kube-apiserver kube-controller-manager kube-scheduler; do
  gobuild "$here/go/kubernetes" "k8s.io/kubernetes/cmd/$c" "$c" "$k8s_ldflags"
done
fetch kwok sigs.k8s.io/kwok/cmd/kwok
gobuild "$here/go/kwok" sigs.k8s.io/kwok/cmd/kwok kwok
gobuild "$here/go/kubernetes" k8s.io/kubernetes/cmd/kubectl kubectl "$k8s_ldflags"
fetch kueue sigs.k8s.io/kueue/cmd/kueue
gobuild "$here/go/kueue" sigs.k8s.io/kueue/cmd/kueue kueue "-X sigs.k8s.io/kueue/pkg/version.GitVersion=v$KUEUE_VERSION"
fetch kuberay github.com/ray-project/kuberay/ray-operator
gobuild "$here/go/kuberay" github.com/ray-project/kuberay/ray-operator kuberay-operator
fetch mpi-operator github.com/kubeflow/mpi-operator/cmd/mpi-operator
gobuild "$here/go/mpi-operator" github.com/kubeflow/mpi-operator/cmd/mpi-operator mpi-operator
# Karpenter's core with the kwok cloud provider: it "launches" a node by creating a Node object
# that kwok then manages (sigs.k8s.io/karpenter v1.14.0 kwok/cloudprovider/cloudprovider.go).
fetch karpenter sigs.k8s.io/karpenter/kwok
gobuild "$here/go/karpenter" sigs.k8s.io/karpenter/kwok karpenter

fetch pulumi github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
gobuild "$here/go/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi pulumi \
  "-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_CLI_VERSION"

# The provider: a build copy of the wrapper outside the repository plus the two embedded files the
# module's own generate.go would write (schema with "version" set; mapping re-serialised compact).
fetch pulumi-kubernetes github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/provider
pk_src="$cache/src/pulumi-kubernetes"
if [ ! -f "$pk_src/terraform-mapping-embed.json" ]; then
  step "prepare provider build dir $pk_src"
  rm -rf "$pk_src" && mkdir -p "$pk_src"
  cp "$here/go/pulumi-kubernetes/"{go.mod,go.sum,main.go} "$pk_src/"
  pk_mod="$(cd "$here/go/pulumi-kubernetes" && go list -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)"
  python3 - "$pk_mod/cmd/pulumi-resource-kubernetes" "$pk_src" "$PULUMI_KUBERNETES_PROVIDER_VERSION" <<'PY'
import json, sys
src, dst, version = sys.argv[1:4]
schema = json.load(open(f"{src}/schema.json"))
schema["version"] = version
json.dump(schema, open(f"{dst}/schema-embed.json", "w"), separators=(",", ":"))
mapping = json.load(open(f"{src}/terraform-mapping.json"))
# Written last: its presence says the build dir is complete.
json.dump(mapping, open(f"{dst}/terraform-mapping-embed.json", "w"), separators=(",", ":"))
PY
  done_step "provider build dir"
fi
gobuild "$pk_src" . pulumi-resource-kubernetes \
  "-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$PULUMI_KUBERNETES_PROVIDER_VERSION"

# The stable path the runner and people use: <cache root>/current -> the last complete build.
ln -sfn "$key" "$cache_root/current"
touch "$cache/complete"

print_versions
echo "total: $(( $(date +%s) - t_start ))s"
