#!/usr/bin/env bash
# The EFA stack on top of RLinf's image, run by the overlay Dockerfile as root on its Ubuntu 22.04
# (nvidia/cuda 12.4.1 cudnn-devel, RLinf docker/Dockerfile NVIDIA_BASE_IMAGE) base. The versions
# come in as environment variables from pins.env (build.sh passes them as build arguments).
#
# What and why, in the order the steps run (the same recipe as aws-samples/sample-rlinf-on-eks
# c8b5e3a examples/Dockerfile, written here in our own steps):
#  1. RLinf's base installs Ubuntu's libibverbs (docker/Dockerfile apt line): removed so that the
#     EFA installer's rdma-core is the only verbs library.
#  2. GDRCopy's userspace library (the gdrdrv module is the host's: EKS GPU AMIs load it).
#  3. The EFA installer, userspace only: --skip-kmod (the kernel driver is the host's),
#     --skip-limit-conf (ulimits are the container runtime's), --no-verify (no EFA device exists
#     while an image builds), -g (GPUDirect packages), -d (headers). It brings libfabric with the
#     EFA provider, Open MPI and the aws-ofi-nccl plugin (EC2 user guide, efa-start-nccl).
#  4. The aws-ofi-nccl version the installer brought must be the pinned one.
#  5. NCCL from source at the pinned tag, for the GPU architectures of the catalog's instances.
#  6. cuda-compat removed: with a newer host driver it makes multi-node NCCL hang (aws/aws-ofi-nccl
#     issue 970; KNOWN-FAILURES F10).
#  7. fi_info must list the EFA provider's fabric (libfabric's own check of its providers).
set -euo pipefail

: "${EFA_INSTALLER_VERSION:?pins.env}" "${AWS_OFI_NCCL_VERSION:?pins.env}" "${GDRCOPY_VERSION:?pins.env}"
: "${NCCL_VERSION:?pins.env}" "${NCCL_CUDA_ARCHS:?pins.env}"
export DEBIAN_FRONTEND=noninteractive
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== 1. verbs libraries of the base image"
apt-get update -y
apt-get remove -y --allow-change-held-packages ibverbs-utils libibverbs-dev libibverbs1 libmlx5-1 \
    libnccl2 libnccl-dev || true
apt-get install -y --no-install-recommends autoconf automake build-essential ca-certificates cmake curl \
    environment-modules git libevent-pthreads-2.1-7 libhwloc15 libtool pkg-config tcl udev

echo "== 2. GDRCopy ${GDRCOPY_VERSION}"
git clone --depth 1 --branch "$GDRCOPY_VERSION" https://github.com/NVIDIA/gdrcopy.git "$work/gdrcopy"
make -C "$work/gdrcopy" prefix=/opt/gdrcopy lib lib_install

echo "== 3. EFA installer ${EFA_INSTALLER_VERSION}"
curl -fsSL --retry 3 -o "$work/efa.tar.gz" \
    "https://efa-installer.amazonaws.com/aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz"
echo "sha256 $(sha256sum "$work/efa.tar.gz" | cut -d' ' -f1) aws-efa-installer-${EFA_INSTALLER_VERSION}.tar.gz"
tar -xzf "$work/efa.tar.gz" -C "$work"
(cd "$work/aws-efa-installer" && ./efa_installer.sh -y -g -d --skip-kmod --skip-limit-conf --no-verify)

echo "== 4. aws-ofi-nccl ${AWS_OFI_NCCL_VERSION}"
# The plugin's Debian package is libnccl-ofi, or a variant of that name in containers (the
# installer's NGC branch): every installed package of that prefix must carry the pinned version.
found=$(dpkg-query -W -f '${db:Status-Status} ${Package} ${Version}\n' 'libnccl-ofi*' 2>/dev/null \
    | awk '$1 == "installed" {print $2 " " $3}')
if [ -z "$found" ]; then
    echo "error: the EFA installer ${EFA_INSTALLER_VERSION} installed no libnccl-ofi package" >&2
    exit 1
fi
echo "$found"
while read -r package version; do
    case "$version" in
        "$AWS_OFI_NCCL_VERSION"|"$AWS_OFI_NCCL_VERSION"-*) ;;
        *) echo "error: $package is $version, pins.env says AWS_OFI_NCCL_VERSION=$AWS_OFI_NCCL_VERSION:" \
                "the EFA installer bundles another plugin; update the pin with the installer" >&2
           exit 1 ;;
    esac
done <<< "$found"

echo "== 5. NCCL ${NCCL_VERSION} for sm_${NCCL_CUDA_ARCHS//,/ sm_}"
gencode=""
IFS=, read -r -a archs <<< "$NCCL_CUDA_ARCHS"
for arch in "${archs[@]}"; do
    gencode+=" -gencode=arch=compute_${arch},code=sm_${arch}"
done
git clone --depth 1 --branch "$NCCL_VERSION" https://github.com/NVIDIA/nccl.git /opt/nccl
make -C /opt/nccl -j "$(nproc)" src.build CUDA_HOME=/usr/local/cuda NVCC_GENCODE="${gencode# }"

echo "== 6. cuda-compat"
mapfile -t compat < <(dpkg-query -W -f '${Package}\n' 'cuda-compat*' 2>/dev/null || true)
if [ "${#compat[@]}" -gt 0 ]; then
    apt-get purge -y "${compat[@]}"
fi
rm -rf /var/lib/apt/lists/*
ldconfig

echo "== 7. libfabric's EFA provider"
/opt/amazon/efa/bin/fi_info --version
# Without an EFA device (an image build has none) fi_info cannot open the provider's fabric; the
# provider library itself must be there. The validation Job runs `fi_info -p efa` on the nodes.
ls /opt/amazon/efa/lib/libfabric.so* /opt/amazon/ofi-nccl/lib/*/libnccl-net*.so 2>/dev/null \
    || ls /opt/amazon/efa/lib/libfabric.so* /opt/amazon/ofi-nccl/lib/libnccl-net*.so
