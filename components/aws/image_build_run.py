"""The training image's build, started and awaited by `pulumi up`: a Pulumi dynamic resource.

Why a dynamic resource: pulumi-aws has a CodeBuild project but no resource that runs one
(pulumi_aws 7.51.1 codebuild: Fleet, Project, ReportGroup, ResourcePolicy, SourceCredential,
Webhook), and the runs need the image's digest, which exists only after a build. pulumi-command
(PyPI 1.2.1) would run the AWS CLI instead, but it is one more pinned SDK and a provider plugin the
CLI downloads at `up`; this resource needs only what the program already pins (the Pulumi SDK and
boto3, which the preflight uses). Its provider runs in the deploying process, with the deploying
credentials, and is serialised into the stack's state with dill (pulumi/dynamic/dynamic.py
serialize_provider). dill pickles a class of an importable module by reference, and the provider
process may not import this project (pulumi/pulumi#7453), so the class is pickled by value: it is
re-homed to __main__ while it is serialised (`by_value`, the workaround of pulumi/pulumi#7755), and
everything it runs is a method of the class that imports what it needs inside the method.

What `up` does with it:

- create (the first `up`, or a new tag): the tag already in the repository is used as it is (same
  inputs never build twice: a resource lost from state, or an image a teammate built); a build of
  the same tag still running (an earlier `up` that gave up waiting) is awaited; otherwise a build
  starts from the exact source archive version the tag was derived from. Waits up to the project's
  build timeout plus a queue margin, polling CodeBuild; returns the image's digest.
- a failed or timed-out build fails the create with the build's id, status, failed phase and its
  CloudWatch Logs link; nothing is recorded, so the next `up` runs create again (and starts a new
  build once the cause is fixed, or keeps waiting for one still running).
- diff: a new tag (or repository, or project) replaces it: a new build, a new digest, and the runs
  that reference it are restarted (the impact table says so). Nothing else is compared, so a change
  of this module's code alone builds nothing.
- delete: nothing. The image stays in the repository (its lifecycle rule expires old ones) and
  goes with the repository when the stack is destroyed.

Offline (the render, the tests) nothing of this runs: the mock engine records the inputs and
answers the outputs with placeholders.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import pulumi
from pulumi.dynamic import CreateResult, DiffResult, ResourceProvider

# The outputs, declared as None in the inputs (a dynamic resource exposes only the keys it is given).
OUTPUTS = ("digest", "buildId", "logLink")
# What a change of replaces: everything else (the source version, the wait bound) never builds again.
REPLACE_ON = ("tag", "repository", "project")


class ImageBuildProvider(ResourceProvider):
    """Starts (or finds) the CodeBuild build of one tag and waits for its image's digest.

    `clients(region)` -> (codebuild, ecr) and `sleep(seconds)` are for tests; by default boto3's
    clients and time.sleep. Both are None in the deployed provider (nothing of a test is pickled)."""

    # CodeBuild may queue a build before it runs (quotas on concurrent builds): the wait allows the
    # project's queued timeout on top of its build timeout.
    QUEUE_MARGIN_MINUTES = 30
    POLL_SECONDS = 30

    def __init__(self, clients: Any = None, sleep: Any = None, clock: Any = None) -> None:
        super().__init__()
        self.clients = clients
        self.sleep = sleep
        self.clock = clock

    # -- the AWS calls ---------------------------------------------------------------------------

    def _clients(self, region: str) -> tuple[Any, Any]:
        if self.clients is not None:
            return self.clients(region)
        import boto3

        session = boto3.session.Session(region_name=region)
        return session.client("codebuild"), session.client("ecr")

    def _now(self) -> float:
        if self.clock is not None:
            return self.clock()
        import time

        return time.monotonic()

    def _pause(self, seconds: float) -> None:
        if self.sleep is not None:
            self.sleep(seconds)
            return
        import time

        time.sleep(seconds)

    @staticmethod
    def _digest(ecr: Any, repository: str, tag: str) -> Optional[str]:
        """The digest of `repository:tag`, or None when ECR has no such tag (ImageNotFoundException)."""
        try:
            found = ecr.describe_images(repositoryName=repository, imageIds=[{"imageTag": tag}])
        except Exception as exc:  # botocore's ClientError; its class is not importable here by name
            code = getattr(exc, "response", {}).get("Error", {}).get("Code")
            if code == "ImageNotFoundException":
                return None
            raise
        details = found.get("imageDetails") or []
        return details[0]["imageDigest"] if details else None

    @staticmethod
    def _running(codebuild: Any, project: str, tag: str) -> Optional[dict]:
        """A build of `project` for `tag` that is still in progress (the newest 20 builds are looked at)."""
        ids = codebuild.list_builds_for_project(projectName=project, sortOrder="DESCENDING").get("ids", [])[:20]
        if not ids:
            return None
        for build in codebuild.batch_get_builds(ids=ids).get("builds", []):
            env = {v.get("name"): v.get("value")
                   for v in build.get("environment", {}).get("environmentVariables", [])}
            if build.get("buildStatus") == "IN_PROGRESS" and env.get("IMAGE_TAG") == tag:
                return build
        return None

    @staticmethod
    def log_link(build: dict, region: str) -> str:
        """The build's CloudWatch Logs link (Build.logs.deepLink), else its console page."""
        link = (build.get("logs") or {}).get("deepLink")
        if link:
            return link
        project = build.get("projectName", "")
        build_id = build.get("id", "").replace(":", "%3A")
        return (f"https://{region}.console.aws.amazon.com/codesuite/codebuild/projects/{project}/build/"
                f"{build_id}/log")

    @staticmethod
    def failure(build: dict) -> str:
        """The failed phase and its message, e.g. `BUILD: COMMAND_EXECUTION_ERROR: Error while
        executing command: bash build.sh. Reason: exit status 1`."""
        for phase in build.get("phases") or []:
            if phase.get("phaseStatus") in ("FAILED", "FAULT", "TIMED_OUT", "STOPPED"):
                contexts = "; ".join(f"{c.get('statusCode', '')}: {c.get('message', '')}".strip(": ")
                                     for c in phase.get("contexts") or [])
                return f"{phase.get('phaseType')}: {contexts or phase.get('phaseStatus')}"
        return build.get("buildStatus", "unknown")

    # -- the resource ----------------------------------------------------------------------------

    def wait(self, props: dict) -> dict:
        """The outputs for `props`: the digest of the image, built if it is not there yet."""
        region, project, repository, tag = props["region"], props["project"], props["repository"], props["tag"]
        codebuild, ecr = self._clients(region)
        digest = self._digest(ecr, repository, tag)
        if digest:
            return {"digest": digest, "buildId": "", "logLink": ""}
        build = self._running(codebuild, project, tag)
        if build is None:
            build = codebuild.start_build(projectName=project, sourceVersion=props["sourceVersion"])["build"]
        link = self.log_link(build, region)
        pulumi.log.info(f"image {repository}:{tag}: build {build['id']} ({link})")
        bound_minutes = int(props["timeoutMinutes"]) + self.QUEUE_MARGIN_MINUTES
        deadline = self._now() + bound_minutes * 60
        while build.get("buildStatus") == "IN_PROGRESS":
            if self._now() >= deadline:
                raise Exception(
                    f"image {repository}:{tag}: build {build['id']} still running after {bound_minutes} minutes "
                    f"(workloads.image.build.timeoutMinutes + {self.QUEUE_MARGIN_MINUTES} queued); log: {link}. "
                    "`pulumi up` again waits for the same build instead of starting another")
            self._pause(int(props.get("pollSeconds") or self.POLL_SECONDS))
            build = codebuild.batch_get_builds(ids=[build["id"]])["builds"][0]
        if build.get("buildStatus") != "SUCCEEDED":
            raise Exception(
                f"image {repository}:{tag}: build {build['id']} {build.get('buildStatus')} in "
                f"{self.failure(build)}; log: {link}. Fix the cause and run `pulumi up` again: it starts a new "
                "build of the same tag (nothing was pushed)")
        digest = self._digest(ecr, repository, tag)
        if not digest:
            raise Exception(f"image {repository}:{tag}: build {build['id']} succeeded but the repository has no "
                            f"such tag; log: {link}")
        return {"digest": digest, "buildId": build["id"], "logLink": link}

    def create(self, props: dict) -> CreateResult:
        outs = self.wait(props)
        return CreateResult(id_=f"{props['repository']}:{props['tag']}", outs={**props, **outs})

    def diff(self, _id: str, olds: dict, news: dict) -> DiffResult:
        replaces = [k for k in REPLACE_ON if olds.get(k) != news.get(k)]
        return DiffResult(changes=bool(replaces), replaces=replaces, delete_before_replace=False)

    def delete(self, _id: str, _props: dict) -> None:
        return None


@contextlib.contextmanager
def by_value(cls: type) -> Iterator[None]:
    """While serialised, `cls` and its functions look defined in __main__, which dill pickles by
    value (a function of an importable module it pickles by reference, as it does a class)."""
    functions = [getattr(v, "__func__", v) for v in vars(cls).values()]
    functions = [f for f in functions if callable(f) and hasattr(f, "__module__")]
    saved = [(o, o.__module__) for o in (cls, *functions)]
    for o, _ in saved:
        o.__module__ = "__main__"
    try:
        yield
    finally:
        for o, module in saved:
            o.__module__ = module


# The type token the engine records: pulumi.dynamic.Resource prefixes `pulumi-python:dynamic/<module>`.
TYPE = "pulumi-python:dynamic/rltrain:ImageBuild"


class ImageBuild(pulumi.dynamic.Resource, module="rltrain", name="ImageBuild"):
    """The build of one image tag (see the module docstring). Outputs: digest, buildId, logLink."""

    digest: pulumi.Output[str]
    buildId: pulumi.Output[str]
    logLink: pulumi.Output[str]

    def __init__(self, name: str, *, region: pulumi.Input[str], project: pulumi.Input[str],
                 repository: pulumi.Input[str], tag: str, source_version: pulumi.Input[str],
                 timeout_minutes: int, opts: Optional[pulumi.ResourceOptions] = None,
                 provider: Optional[ImageBuildProvider] = None) -> None:
        props = {"region": region, "project": project, "repository": repository, "tag": tag,
                 "sourceVersion": source_version, "timeoutMinutes": timeout_minutes,
                 **{k: None for k in OUTPUTS}}
        provider = provider or ImageBuildProvider()
        with by_value(type(provider)):  # the resource serialises its provider here (module docstring)
            super().__init__(provider, name, props, opts)
