#!/usr/bin/env bash
# The image build, as CodeBuild runs it (buildspec.yml: `bash build.sh`) in the stack's project,
# from the source archive the stack uploaded (every file of this directory; image_tag.py --files).
#
# Environment (the project's variables, set by components/aws/image.py):
#   REPOSITORY_URI   <account>.dkr.ecr.<region>.amazonaws.com/<name>, the stack's repository
#   REPOSITORY_NAME  <name>
#   RLINF_REVISION   the RLinf commit (the trainer profile's pin)
#   BUILD_TARGET     RLinf docker/Dockerfile's BUILD_TARGET
#   IMAGE_TAG        the tag the stack derived from the three inputs (image_tag.py)
#
# Steps: the tag is derived again from what this build holds, and a mismatch stops it (nothing is
# ever pushed under a tag its inputs do not give); a tag already in the repository ends the build
# (same inputs never build twice); RLinf is checked out at the revision (a full commit id, checked
# after checkout); RLinf's image is built for the target with NO_MIRROR=1 (its Dockerfile would
# otherwise point apt, PyPI and the Hugging Face hub at mirrors in China: docker/Dockerfile
# NO_MIRROR); the overlay goes on top (Dockerfile, pins.env); the image is pushed once, under its
# immutable tag. Exit status non-zero on any failure: the build's log (CloudWatch Logs) says where.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${REPOSITORY_URI:?set by the CodeBuild project}" "${REPOSITORY_NAME:?set by the CodeBuild project}"
: "${RLINF_REVISION:?set by the CodeBuild project}" "${BUILD_TARGET:?set by the CodeBuild project}"
: "${IMAGE_TAG:?set by the CodeBuild project}"
# shellcheck source=pins.env source-path=SCRIPTDIR
. "$here/pins.env"

derived=$(python3 "$here/image_tag.py" --revision "$RLINF_REVISION" --target "$BUILD_TARGET" --dir "$here")
if [ "$derived" != "$IMAGE_TAG" ]; then
    echo "error: this build's inputs give the tag $derived, the project asks for $IMAGE_TAG:" \
         "the source archive and the project's variables are from different deploys; run \`pulumi up\` again" >&2
    exit 1
fi
echo "image ${REPOSITORY_URI}:${IMAGE_TAG} (RLinf ${RLINF_REVISION}, target ${BUILD_TARGET})"

if aws ecr describe-images --repository-name "$REPOSITORY_NAME" --image-ids "imageTag=${IMAGE_TAG}" \
        --query 'imageDetails[0].imageDigest' --output text 2>/dev/null; then
    echo "already in the repository: nothing to build"
    exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
context="$work/context"
mkdir -p "$context"

git clone --quiet "$RLINF_REPOSITORY" "$context/RLinf"
git -C "$context/RLinf" checkout --quiet --detach "$RLINF_REVISION"
if [ "$(git -C "$context/RLinf" rev-parse HEAD)" != "$RLINF_REVISION" ]; then
    echo "error: RLinf checked out at $(git -C "$context/RLinf" rev-parse HEAD), not $RLINF_REVISION" >&2
    exit 1
fi
git clone --quiet "$SAMPLE_REPOSITORY" "$work/sample"
git -C "$work/sample" checkout --quiet --detach "$SAMPLE_COMMIT"
cp -a "$work/sample/examples/scripts" "$context/eks-scripts"
cp "$here/install_efa_stack.sh" "$here/install_sources.sh" "$context/"

docker build --build-arg "BUILD_TARGET=${BUILD_TARGET}" --build-arg NO_MIRROR=1 \
    -t "rltrain-base:${IMAGE_TAG}" -f "$context/RLinf/docker/Dockerfile" "$context/RLinf"
docker build --build-arg "IMAGE_TAG=${IMAGE_TAG}" \
    --build-arg "EFA_INSTALLER_VERSION=${EFA_INSTALLER_VERSION}" \
    --build-arg "AWS_OFI_NCCL_VERSION=${AWS_OFI_NCCL_VERSION}" \
    --build-arg "GDRCOPY_VERSION=${GDRCOPY_VERSION}" \
    --build-arg "NCCL_VERSION=${NCCL_VERSION}" \
    --build-arg "NCCL_CUDA_ARCHS=${NCCL_CUDA_ARCHS}" \
    --label "org.opencontainers.image.revision=${RLINF_REVISION}" \
    --label "rltrain.target=${BUILD_TARGET}" \
    -t "${REPOSITORY_URI}:${IMAGE_TAG}" -f "$here/Dockerfile" "$context"

aws ecr get-login-password --region "${AWS_REGION:-$AWS_DEFAULT_REGION}" \
    | docker login --username AWS --password-stdin "${REPOSITORY_URI%%/*}"
docker push "${REPOSITORY_URI}:${IMAGE_TAG}"
echo "pushed ${REPOSITORY_URI}:${IMAGE_TAG}"
