"""The render's lines about the training image: what the stack builds (repository, RLinf revision,
target, the overlay's pinned versions, the tag) or the image you bring, and the runs that use it.

Read from the render itself (the image component's CodeBuild project variables, the pod templates
of the Kubernetes objects) and from components/image/pins.env, so the lines say what `up` would do.
"""

from __future__ import annotations

from typing import Any, Iterator

from components.aws import image as image_component
from components.aws.image_build_run import ImageBuildProvider
from components.image import image_tag
from components.stack.config import StackConfig

PROJECT_TYPE = "aws:codebuild/project:Project"


def _containers(value: Any) -> Iterator[dict[str, Any]]:
    if isinstance(value, dict):
        for c in value.get("containers") or []:
            if isinstance(c, dict):
                yield c
        for v in value.values():
            yield from _containers(v)
    elif isinstance(value, list):
        for v in value:
            yield from _containers(v)


def users(manifests: list[dict[str, Any]], needle: str) -> list[str]:
    """`Kind name` of every Kubernetes object with a container whose image contains `needle`."""
    return sorted(f"{m.get('kind')} {m.get('metadata', {}).get('name')}" for m in manifests
                  if any(needle in str(c.get("image", "")) for c in _containers(m.get("spec"))))


def lines(cfg: StackConfig, resources: list[dict[str, Any]], manifests: list[dict[str, Any]]) -> list[str]:
    project = next((r for r in resources if r["type"] == PROJECT_TYPE and r.get("parent") == "image"), None)
    if project is None:
        image = str(cfg.workloads.image)
        used = users(manifests, image)
        return [f"training image: {image} (brought by you: workloads.image)",
                f"  used by: {', '.join(used) or 'nothing'}"]
    env = {v["name"]: v["value"] for v in project["inputs"]["environment"]["environmentVariables"]}
    pins = image_tag.pins(image_component.BUILD_DIR)
    tag = env["IMAGE_TAG"]
    used = users(manifests, f":{tag}@")
    return [
        "training image: built by the stack (workloads.image.build; components/image/)",
        f"  repository {env['REPOSITORY_NAME']} (ECR: immutable tags, scan on push)",
        f"  RLinf {env['RLINF_REVISION']}, target {env['BUILD_TARGET']} (NO_MIRROR=1)",
        f"  overlay: EFA installer {pins['EFA_INSTALLER_VERSION']}, aws-ofi-nccl {pins['AWS_OFI_NCCL_VERSION']}, "
        f"GDRCopy {pins['GDRCOPY_VERSION']}, NCCL {pins['NCCL_VERSION']} (sm_{pins['NCCL_CUDA_ARCHS']}), "
        f"run script of sample-rlinf-on-eks@{pins['SAMPLE_COMMIT'][:12]}",
        f"  tag {tag}",
        f"  built by CodeBuild {project['inputs']['name']} ({project['inputs']['environment']['computeType']}, "
        f"timeout {project['inputs']['buildTimeout']} min; `pulumi up` waits for it, "
        f"+{ImageBuildProvider.QUEUE_MARGIN_MINUTES} min queued); runs use it by digest",
        f"  used by: {', '.join(used) or 'nothing'}",
    ]
