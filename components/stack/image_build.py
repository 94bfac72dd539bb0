"""Config of the training image the stack builds (`rltrain:workloads.image: {build: {...}}`), fed to
components/aws/image.py.

`workloads.image` is either an image reference, as before (a tag or `@sha256:` digest you built and
pushed yourself), or `build: {target: ...}`: the stack builds RLinf at the revision its trainer
profile pins, for an RLinf Dockerfile target, with the EFA overlay of components/image/, in an ECR
repository and a CodeBuild project of its own, and the runs use that image by digest.

Either way the field holds a string after validation, so every check that reads an image reference
reads one: a built image is a `BuiltImageName`, a `str` naming it (`rltrain/training:build` until the
image component names it `<repository>:<tag>`) that carries its `build` settings and, once the
component exists, the `reference` the pods use (`<repository URL>:<tag>@<digest>`, a Pulumi Output).
`pod_image` gives a pod builder what to put in `image:`.

A module of its own beside the component it feeds (stack/config.py only holds the field); pure
(no Pulumi import: the reference is whatever the component hands over).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Optional

from pydantic import Field, WrapValidator

from components.stack.model_base import _Model

# What a built image is called before the image component names it (a valid, pinned reference, so
# the reference checks of config validation accept it; never deployed: see pod_image).
PENDING = "rltrain/training:build"
# The CodeBuild bound on one build: the sample's project allows 60 minutes for the same two-stage
# build on the same compute type (aws-samples/sample-rlinf-on-eks c8b5e3a infrastructure/build/
# main.tf build_timeout); twice that leaves room for the NCCL compile of four architectures.
DEFAULT_TIMEOUT_MINUTES = 120


class ImageBuild(_Model):
    """What the stack builds: RLinf's Dockerfile for a target, at the trainer profile's revision, with
    the EFA overlay of components/image/ (every version pinned in components/image/pins.env)."""

    target: Optional[str] = Field(None, pattern=r"^[a-z0-9][a-z0-9_-]{0,63}$")
    """RLinf docker/Dockerfile's BUILD_TARGET (`reason`, `embodied-maniskill_libero`, ...); none = the trainer profile's (`rlinf`: embodied-maniskill_libero, `rlinf-reasoning`: reason)"""
    timeout_minutes: int = Field(DEFAULT_TIMEOUT_MINUTES, ge=30, le=480)
    """the CodeBuild project's build timeout; `pulumi up` waits this plus 30 minutes of queueing for a build, then fails with the build's log link (a later `up` waits for the same build)"""


class BuiltImage(_Model):
    """`workloads.image` as the image the stack builds."""

    # The configuration reference's type for workloads.image: a reference, or this section.
    config_type_name: ClassVar[str] = "string or section"

    build: ImageBuild = ImageBuild()
    """the build: `{}` builds the trainer profile's target"""


def _reference_or_build(value: Any, handler: Any) -> Any:
    """A string is an image reference (WorkloadsConfig checks it is pinned); anything else is the
    `build:` section, validated as BuiltImage so that an error names its key
    (`rltrain:workloads.image.build.target`), not a branch of a union."""
    return value if isinstance(value, str) else handler(value)


# workloads.image's type: the section is what the configuration reference documents; a string
# passes through as the reference it has always been.
ImageSetting = Annotated[BuiltImage, WrapValidator(_reference_or_build)]


class BuiltImageName(str):
    """A built image where config validation expects an image reference: the string names it, the
    attributes say how it is built and (once the image component exists) how pods reference it."""

    build: ImageBuild
    reference: Any  # pulumi.Input[str] once the image component exists, else None

    def __new__(cls, name: str, build: ImageBuild, reference: Any = None) -> "BuiltImageName":
        self = super().__new__(cls, name)
        self.build = build
        self.reference = reference
        return self

    # A config is copied (pydantic's deepcopy) and pickled (the policy pack) like any value: the name
    # and its build go along; the reference is a Pulumi Output of one program run, kept as it is by a
    # copy and left out of a pickle.
    def __deepcopy__(self, memo: dict) -> "BuiltImageName":
        return self

    def __copy__(self) -> "BuiltImageName":
        return self

    def __reduce__(self) -> tuple:
        return (BuiltImageName, (str(self), self.build))


def built(image: Any) -> Optional[ImageBuild]:
    """The build settings when `image` (workloads.image, validated) is built by the stack, else None."""
    return image.build if isinstance(image, BuiltImageName) else None


def validated(value: Any) -> Any:
    """workloads.image after its own validation: a BuiltImage becomes its BuiltImageName."""
    return BuiltImageName(PENDING, value.build) if isinstance(value, BuiltImage) else value


def target(image: Any, profile: Any) -> Optional[str]:
    """The RLinf Dockerfile target the stack builds for `workloads.image` and the trainer profile
    (`workloads.profile`), or None (not built, or no profile to take it from)."""
    b = built(image)
    if b is None:
        return None
    return b.target or (profile.image_target if profile else None)


def revision(image: Any, profile: Any) -> Optional[str]:
    """The RLinf commit the stack builds: the trainer profile's pin."""
    return profile.image_revision if profile and built(image) else None


def named(image: Any, name: str, reference: Any) -> "BuiltImageName":
    """`workloads.image` once built: named `name` (`<repository>:<tag>`, what every hash and check
    reads) and referenced by `reference` in pods. Config validation already ran on it."""
    b = built(image)
    assert b is not None, "only a built image is named"
    return BuiltImageName(name, b, reference)


def pod_image(image: str) -> Any:
    """What a pod's `image:` gets for workloads.image: the built image's reference (repository URL,
    tag and digest) once the image component named it, else the string itself."""
    reference = getattr(image, "reference", None)
    return reference if reference is not None else image
