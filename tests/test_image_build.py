"""The training image the stack builds (issue 46): the tag program as a program, the build definition
(every pin, shellcheck, checkov's Dockerfile framework), the render's image resources, a changed
overlay or revision as a new tag and a run restart in the impact table, the config key, and the
build resource's provider against fake CodeBuild and ECR clients (no AWS, no image build here).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ROOT, rendered

BUILD = ROOT / "components" / "image"
PROGRAM = BUILD / "image_tag.py"
REVISION = "0505431899574619da86f551bad70b71e0ea2177"  # trainers.RLINF_COMMIT
OTHER = "1111111111111111111111111111111111111111"


def tag_of(*args: str, directory: Path = BUILD) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(PROGRAM), *args, "--dir", str(directory)],
                          capture_output=True, text=True, timeout=30)


def tag(revision: str = REVISION, target: str = "reason", directory: Path = BUILD) -> str:
    proc = tag_of("--revision", revision, "--target", target, directory=directory)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


# -- the tag program, run as a program -------------------------------------------------------------


def test_tag_names_target_revision_and_a_hash_and_is_stable():
    first = tag()
    assert re.fullmatch(r"reason-050543189957-[0-9a-f]{12}", first), first
    assert tag() == first  # same inputs, same tag: never built twice
    assert tag(target="embodied-maniskill_libero").startswith("embodied-maniskill_libero-050543189957-")
    assert tag(revision=OTHER) != first and tag(revision=OTHER).startswith("reason-111111111111-")


def test_a_changed_overlay_file_is_a_new_tag(tmp_path):
    copy = tmp_path / "image"
    shutil.copytree(BUILD, copy, ignore=shutil.ignore_patterns("__pycache__"))
    before = tag(directory=copy)
    assert before == tag()  # the copy holds the same build files
    dockerfile = copy / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "\n# one more line\n")
    after_dockerfile = tag(directory=copy)
    assert after_dockerfile != before
    pins = copy / "pins.env"
    pins.write_text(pins.read_text().replace("NCCL_VERSION=v2.21.5-1", "NCCL_VERSION=v2.23.4-1"))
    assert tag(directory=copy) not in (before, after_dockerfile)
    # A new file of the build definition counts; the package marker and byte code never do.
    (copy / "__init__.py").write_text("# changed\n")
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "x.pyc").write_bytes(b"\0")
    unchanged = tag(directory=copy)
    (copy / "extra.sh").write_text("#!/bin/sh\n")
    assert tag(directory=copy) != unchanged


def test_files_lists_the_build_definition():
    proc = tag_of("--revision", REVISION, "--target", "reason", "--files")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [".shellcheckrc", "Dockerfile", "build.sh", "buildspec.yml", "image_tag.py",
                                   "install_efa_stack.sh", "install_sources.sh", "pins.env"]


@pytest.mark.parametrize("args, message", [
    (("--revision", "v0.3", "--target", "reason"), "full 40-character commit id"),
    (("--revision", REVISION, "--target", "Reason Image"), "BUILD_TARGET"),
])
def test_bad_arguments_exit_2(args, message):
    proc = tag_of(*args)
    assert proc.returncode == 2 and message in proc.stderr and not proc.stdout


# -- the build definition ------------------------------------------------------------------------


PINS = {"EFA_INSTALLER_VERSION": "1.47.0", "AWS_OFI_NCCL_VERSION": "1.18.0", "GDRCOPY_VERSION": "v2.5.1",
        "NCCL_VERSION": "v2.21.5-1", "NCCL_CUDA_ARCHS": "80,86,89,90",
        "SAMPLE_COMMIT": "c8b5e3a39d89de783b5eb97eaa57dc30a6307f33"}


def test_every_version_is_pinned_once_and_reaches_the_overlay():
    from components.image import image_tag
    from components.stack import trainers

    pins = image_tag.pins(BUILD)
    assert {k: pins[k] for k in PINS} == PINS
    assert pins["SAMPLE_COMMIT"] == trainers.SAMPLE_COMMIT  # the run script the rlinf profile runs
    text = (BUILD / "pins.env").read_text()
    for key in PINS:
        assert len(re.findall(rf"^{key}=", text, re.M)) == 1
        # a comment above each pin says where the version comes from
        block = text.split(f"\n{key}=")[0].rsplit("\n\n", 1)[-1]
        assert block.lstrip().startswith("#"), key
    build, dockerfile = (BUILD / "build.sh").read_text(), (BUILD / "Dockerfile").read_text()
    for key in ("EFA_INSTALLER_VERSION", "AWS_OFI_NCCL_VERSION", "GDRCOPY_VERSION", "NCCL_VERSION", "NCCL_CUDA_ARCHS"):
        assert f'--build-arg "{key}=${{{key}}}"' in build
        assert f"ARG {key}\n" in dockerfile and f'{key}="${{{key}}}"' in dockerfile
        assert f"${{{key}:?pins.env}}" in (BUILD / "install_efa_stack.sh").read_text()
    # RLinf's image first, for the target, without its mirrors; the tag derived again before anything
    assert "--build-arg NO_MIRROR=1" in build and '--build-arg "BUILD_TARGET=${BUILD_TARGET}"' in build
    assert build.index("image_tag.py") < build.index("docker build")
    assert "bash build.sh" in (BUILD / "buildspec.yml").read_text()


def _shellcheck() -> str | None:
    exe = shutil.which("shellcheck")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("shellcheck missing: .ci/run installs it with apt-get")
        pytest.skip("shellcheck not installed (apt-get install shellcheck)")
    return exe


def test_build_steps_pass_shellcheck():
    """Every shell step of the build (buildspec.yml runs build.sh only), pins.env as the bash it is
    sourced as (its assignments are used by build.sh: SC2034 is not a finding there)."""
    exe = _shellcheck()
    scripts = sorted(BUILD.glob("*.sh"))
    assert [p.name for p in scripts] == ["build.sh", "install_efa_stack.sh", "install_sources.sh"]
    res = subprocess.run([exe, "-x", *map(str, scripts)], capture_output=True, text=True, cwd=BUILD)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([exe, "-s", "bash", "-e", "SC2034", str(BUILD / "pins.env")], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.slow  # checkov's start-up (~10 s)
def test_overlay_dockerfile_passes_checkov():
    from components.offline import scan_report

    exe = scan_report.checkov_executable(ROOT)
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("checkov not found: .ci/run installs it from requirements-scan.txt into .venv-scan "
                        "(or set RLTRAIN_CHECKOV to the executable)")
        pytest.skip("checkov not installed (RLTRAIN_CHECKOV or .venv-scan/bin/checkov)")
    proc = subprocess.run([exe, "--framework", "dockerfile", "-f", str(BUILD / "Dockerfile"), "-o", "json",
                           "--compact", "--skip-download"], capture_output=True, text=True, timeout=600)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    summary = report["summary"]
    assert summary["parsing_errors"] == 0 and summary["passed"] > 0, summary
    assert summary["failed"] == 0, [c["check_id"] for c in report["results"]["failed_checks"]]
    skipped = {c["check_id"]: c["check_result"].get("suppress_comment", "") for c in report["results"]["skipped_checks"]}
    assert set(skipped) == {"CKV_DOCKER_2", "CKV_DOCKER_3"} and all(len(why) > 30 for why in skipped.values())


# -- the render ------------------------------------------------------------------------------------


def _resources(stack: str, typ: str) -> list[dict]:
    return [r for r in rendered(stack).resources if r["type"] == typ]


def _one(stack: str, typ: str) -> dict:
    found = _resources(stack, typ)
    assert len(found) == 1, (typ, len(found))
    return found[0]


def test_p5_renders_the_repository_project_role_and_policy():
    from components.aws import image_build_run

    repo = _one("p5", "aws:ecr/repository:Repository")["inputs"]
    assert repo["name"] == "rltrain-p5/training" and repo["imageTagMutability"] == "IMMUTABLE"
    assert repo["imageScanningConfiguration"] == {"scanOnPush": True} and repo["forceDelete"] is True
    rules = json.loads(_one("p5", "aws:ecr/lifecyclePolicy:LifecyclePolicy")["inputs"]["policy"])["rules"]
    assert [(r["selection"]["tagStatus"], r["selection"]["countType"], r["selection"]["countNumber"])
            for r in rules] == [("untagged", "sinceImagePushed", 1), ("tagged", "imageCountMoreThan", 10)]

    project = _one("p5", "aws:codebuild/project:Project")["inputs"]
    env = project["environment"]
    assert (env["computeType"], env["image"], env["privilegedMode"]) == (
        "BUILD_GENERAL1_2XLARGE", "aws/codebuild/standard:7.0", True)
    variables = {v["name"]: v["value"] for v in env["environmentVariables"]}
    expected_tag = tag(target="embodied-maniskill_libero")
    assert variables == {"REPOSITORY_URI": "[known after deploy: image-repository.repositoryUrl]",
                         "REPOSITORY_NAME": "rltrain-p5/training", "RLINF_REVISION": REVISION,
                         "BUILD_TARGET": "embodied-maniskill_libero", "IMAGE_TAG": expected_tag}
    assert project["source"] == {"type": "S3", "location": "[known after deploy: image-source.bucket]/"
                                                           "training-image/source.zip"}
    assert project["buildTimeout"] == 120 and project["logsConfig"]["cloudwatchLogs"]["status"] == "ENABLED"

    trust = json.loads(next(r for r in _resources("p5", "aws:iam/role:Role")
                            if r["name"] == "image-build-role")["inputs"]["assumeRolePolicy"])
    assert trust["Statement"][0]["Principal"] == {"Service": "codebuild.amazonaws.com"}
    policy = json.loads(_one("p5", "aws:iam/rolePolicy:RolePolicy")["inputs"]["policy"])
    by_sid = {s["Sid"]: s for s in policy["Statement"]}
    assert set(by_sid) == {"EcrLogin", "EcrPushThisRepository", "SourceArchive", "SourceBucket", "BuildLogs"}
    # Only the login token is unscoped (it takes no resource); the rest name the stack's own resources.
    assert [s["Sid"] for s in policy["Statement"] if s["Resource"] == "*"] == ["EcrLogin"]
    assert by_sid["EcrPushThisRepository"]["Resource"] == "[known after deploy: image-repository.arn]"
    assert by_sid["SourceArchive"]["Resource"] == "[known after deploy: image-source.arn]/training-image/source.zip"
    assert not any(a.endswith("*") for s in policy["Statement"] for a in s["Action"])

    archive = _one("p5", "aws:s3/bucketObjectv2:BucketObjectv2")["inputs"]["source"]["assets"]
    assert {k: v["path"] for k, v in archive.items()} == {
        p: f"components/image/{p}" for p in tag_of("--revision", REVISION, "--target", "x", "--files").stdout.split()}

    build = _one("p5", image_build_run.TYPE)["inputs"]
    assert build == {"__provider": "[secret]", "project": "rltrain-p5-training-image", "region": "us-east-1",
                     "repository": "rltrain-p5/training", "tag": expected_tag, "timeoutMinutes": 120,
                     "sourceVersion": "[known after deploy: image-source-archive.versionId]"}


def test_runs_use_the_built_image_by_digest():
    from tests.support import obj

    r = rendered("p5")
    expected = (f"[known after deploy: image-repository.repositoryUrl]:{tag(target='embodied-maniskill_libero')}"
                "@[known after deploy: image-build-run.digest]")
    for name in ("rltrain-training", "rltrain-multinode", "rltrain-staging", "rltrain-validation"):
        assert obj(r, "Job", name)["spec"]["template"]["spec"]["containers"][0]["image"] == expected, name
    # by digest: checkov's tag checks no longer apply, so no skip names them
    skips = obj(r, "Job", "rltrain-training")["metadata"]["annotations"]
    assert not any("CKV_K8S_43" in v or "CKV_K8S_15" in v for v in skips.values())


def test_reasoning_stack_builds_the_reason_target():
    variables = {v["name"]: v["value"] for v in
                 _one("dev-reasoning", "aws:codebuild/project:Project")["inputs"]["environment"]["environmentVariables"]}
    assert variables["BUILD_TARGET"] == "reason" and variables["IMAGE_TAG"] == tag(target="reason")


def test_bring_your_own_stays_a_reference():
    assert not _resources("byo", "aws:ecr/repository:Repository")
    images = {c["image"] for m in rendered("byo").manifests if m["kind"] == "Job"
              for c in m["spec"]["template"]["spec"]["containers"]}
    assert "123456789012.dkr.ecr.us-east-1.amazonaws.com/rlinf-on-eks/rlinf:20260401-085549" in images


def test_render_summary_prints_the_image_and_its_runs():
    from components.offline import render

    text = render.summary(rendered("p5"))
    block = text.split("  training image: ")[1].split("\n  run ")[0]
    assert "repository rltrain-p5/training" in block
    assert f"RLinf {REVISION}, target embodied-maniskill_libero" in block
    assert "EFA installer 1.47.0, aws-ofi-nccl 1.18.0, GDRCopy v2.5.1, NCCL v2.21.5-1" in block
    assert f"tag {tag(target='embodied-maniskill_libero')}" in block
    assert "used by: Job rltrain-multinode, Job rltrain-staging, Job rltrain-training, Job rltrain-validation" in block


def test_validation_checks_the_efa_provider_of_a_multinode_stack():
    from tests.support import obj

    from components.workloads import validation

    # A single-node stack talks over NVLink only: no provider needed (dev-reasoning runs no multi-node).
    assert validation.efa_provider_checked(rendered("p5").cfg)
    assert not validation.efa_provider_checked(rendered("dev-reasoning").cfg)
    assert validation.command(rendered("dev-reasoning").cfg) == validation.COMMAND
    container = obj(rendered("p5"), "Job", "rltrain-validation")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == [*validation.COMMAND, "--efa-provider",
                                    f"rltrain-p5/training:{tag(target='embodied-maniskill_libero')}"]


# -- a changed overlay or revision: a new tag, a new build, the runs restarted -----------------------


@pytest.mark.parametrize("change", ["overlay", "revision"])
def test_a_changed_input_is_a_new_tag_and_a_run_restart(change, monkeypatch):
    from components.aws import image_build_run
    from components.image import image_tag
    from components.offline import impact, render
    from components.stack import image_build

    base = rendered("p5")
    if change == "overlay":  # what any edit of a file of components/image/ does to the tag
        monkeypatch.setattr(image_tag, "files_digest", lambda directory=BUILD: "0" * 64)
    else:
        monkeypatch.setattr(image_build, "revision", lambda image, profile: OTHER)
    after = render.render_stack("p5")
    impacts = {(i.type.split(":")[-1], i.name): i for i in impact.classify(base.resources, after.resources, after.cfg)}
    build = impacts[(image_build_run.TYPE.split(":")[-1], "image-build-run")]
    assert build.kind == impact.REPLACE and "tag" in build.why
    for job in ("workloads-single-node-job", "workloads-multi-node-job", "workloads-staging-job"):
        restart = impacts[("Job", job)]
        assert restart.kind == impact.RUN_RESTART and "containers[0].image" in restart.why, restart
        assert not restart.allowed and restart.opt_in == "rltrain:workloads.allowRunRestart"
    assert impacts[("Project", "image-build")].kind == impact.IN_PLACE  # its variables: the new tag
    table = "\n".join(impact.table(list(impacts.values())))
    assert "run restart         Job workloads-single-node-job" in table


# -- the config key --------------------------------------------------------------------------------


def _load(tmp_path, stack: str, image, trainer=None):
    import yaml

    from tests.test_validate import load_doc

    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    doc["config"]["rltrain:workloads"]["image"] = image
    if trainer:
        doc["config"]["rltrain:workloads"]["trainer"] = trainer
    return load_doc(doc, tmp_path)


def test_build_config_defaults_to_the_profile(tmp_path):
    from components.stack import image_build, validate

    cfg = _load(tmp_path, "p5", {"build": {}})
    w = cfg.workloads
    assert image_build.target(w.image, w.profile) == "embodied-maniskill_libero"
    assert image_build.revision(w.image, w.profile) == REVISION
    assert cfg.workloads.image == image_build.PENDING and image_build.built(cfg.workloads.image).timeout_minutes == 120
    assert validate._image_build(cfg) == []
    cfg = _load(tmp_path, "p5", "registry.example/rl:1")
    assert image_build.built(cfg.workloads.image) is None and image_build.pod_image(cfg.workloads.image) == "registry.example/rl:1"


@pytest.mark.parametrize("image, key, words", [
    ({"build": {"target": "Reason!"}}, "rltrain:workloads.image.build.target", "docs/configuration.md"),
    ({"build": {"timeoutMinutes": 5}}, "rltrain:workloads.image.build.timeoutMinutes", "30"),
    ({"build": {"tag": "x"}}, "rltrain:workloads.image.build.tag", "allowed here: target, timeoutMinutes"),
])
def test_bad_build_config_names_the_key(tmp_path, image, key, words):
    from components.stack import validate

    with pytest.raises(validate.ConfigError) as e:
        _load(tmp_path, "p5", image)
    assert key in str(e.value) and words in str(e.value), str(e.value)


def test_a_build_without_an_account_or_a_profile_is_refused(tmp_path):
    from components.stack import validate

    with pytest.raises(validate.ConfigError) as e:
        _load(tmp_path, "byo", {"build": {"target": "reason"}})
    assert "rltrain:workloads.image" in str(e.value) and "bring your own image" in str(e.value), str(e.value)
    with pytest.raises(validate.ConfigError) as e:
        _load(tmp_path, "p5", {"build": {"target": "reason"}}, trainer="none")
    assert "trainer profile" in str(e.value), str(e.value)


# -- the build resource's provider, against fake CodeBuild and ECR clients ----------------------------


class NotFound(Exception):
    response = {"Error": {"Code": "ImageNotFoundException"}}


class FakeAws:
    """CodeBuild and ECR as the provider calls them (boto3's method names and shapes)."""

    def __init__(self, digest=None, statuses=("IN_PROGRESS", "SUCCEEDED"), running=None):
        self.digest, self.statuses, self.running = digest, list(statuses), running
        self.started, self.polls, self.sleeps = [], 0, []

    # ecr
    def describe_images(self, repositoryName, imageIds):
        if self.digest is None:
            raise NotFound()
        return {"imageDetails": [{"imageDigest": self.digest}]}

    # codebuild
    def list_builds_for_project(self, projectName, sortOrder):
        return {"ids": [self.running["id"]] if self.running else []}

    def _build(self, status):
        b = {"id": "proj:b1", "projectName": "proj", "buildStatus": status,
             "logs": {"deepLink": "https://console.example/logs/b1"},
             "environment": {"environmentVariables": [{"name": "IMAGE_TAG", "value": "t1"}]}}
        if status == "FAILED":
            b["phases"] = [{"phaseType": "SUBMITTED", "phaseStatus": "SUCCEEDED"},
                           {"phaseType": "BUILD", "phaseStatus": "FAILED", "contexts": [
                               {"statusCode": "COMMAND_EXECUTION_ERROR",
                                "message": "Error while executing command: bash build.sh. Reason: exit status 1"}]}]
        return b

    def batch_get_builds(self, ids):
        if self.running and ids == [self.running["id"]] and self.polls == 0 and not self.started:
            self.polls += 1  # the look-up for a running build
            return {"builds": [self.running]}
        status = self._next()
        if status == "SUCCEEDED":
            self.digest = "sha256:" + "ab" * 32
        return {"builds": [self._build(status)]}

    def start_build(self, projectName, sourceVersion):
        self.started.append((projectName, sourceVersion))
        return {"build": self._build(self._next())}

    def _next(self):  # the statuses in turn, the last one for ever
        return self.statuses.pop(0) if len(self.statuses) > 1 else self.statuses[0]


PROPS = {"region": "us-east-1", "project": "proj", "repository": "rltrain-p5/training", "tag": "t1",
         "sourceVersion": "v-42", "timeoutMinutes": 60, "pollSeconds": 30}


def provider(fake: FakeAws, clock=None):
    from components.aws.image_build_run import ImageBuildProvider

    return ImageBuildProvider(clients=lambda region: (fake, fake), sleep=fake.sleeps.append, clock=clock)


def test_an_image_in_the_repository_is_not_built_again():
    fake = FakeAws(digest="sha256:" + "cd" * 32)
    out = provider(fake).create(dict(PROPS)).outs
    assert out["digest"] == "sha256:" + "cd" * 32 and out["buildId"] == "" and not fake.started


def test_a_missing_image_is_built_from_the_archive_version_and_awaited():
    fake = FakeAws(statuses=("IN_PROGRESS", "IN_PROGRESS", "SUCCEEDED"))
    result = provider(fake).create(dict(PROPS))
    assert fake.started == [("proj", "v-42")] and fake.sleeps == [30, 30]
    assert result.id == "rltrain-p5/training:t1"
    assert result.outs["digest"] == "sha256:" + "ab" * 32 and result.outs["logLink"] == "https://console.example/logs/b1"


def test_a_running_build_of_the_same_tag_is_awaited_not_started_again():
    fake = FakeAws(statuses=("SUCCEEDED",))
    fake.running = fake._build("IN_PROGRESS")
    out = provider(fake).create(dict(PROPS)).outs
    assert not fake.started and out["buildId"] == "proj:b1"


def test_a_failed_build_fails_up_with_its_log_link():
    fake = FakeAws(statuses=("IN_PROGRESS", "FAILED"))
    with pytest.raises(Exception) as e:
        provider(fake).create(dict(PROPS))
    msg = str(e.value)
    assert "rltrain-p5/training:t1: build proj:b1 FAILED in BUILD: COMMAND_EXECUTION_ERROR" in msg
    assert "log: https://console.example/logs/b1" in msg and "run `pulumi up` again" in msg


def test_a_build_past_its_bound_fails_up_and_a_rerun_waits_for_it():
    fake = FakeAws(statuses=("IN_PROGRESS",))
    now = iter(range(0, 10**6, 3600))  # every look at the clock an hour later
    with pytest.raises(Exception) as e:
        provider(fake, clock=lambda: next(now)).create(dict(PROPS))
    msg = str(e.value)
    assert "still running after 90 minutes" in msg and "https://console.example/logs/b1" in msg
    assert "waits for the same build" in msg


def test_only_a_new_tag_builds_again():
    p = provider(FakeAws())
    assert p.diff("id", PROPS, {**PROPS, "tag": "t2"}).replaces == ["tag"]
    same = p.diff("id", PROPS, {**PROPS, "sourceVersion": "v-43", "timeoutMinutes": 90})
    assert same.changes is False and same.replaces == []


def test_the_provider_is_serialised_by_value(tmp_path):
    """Pulumi stores the provider in the state (dill) and runs it where nothing of this project can
    be imported: it must load and answer from the bytes alone."""
    from pulumi.dynamic.dynamic import serialize_provider

    from components.aws.image_build_run import ImageBuildProvider, by_value

    with by_value(ImageBuildProvider):  # as pulumi.dynamic.Resource serialises it (image_build_run.py)
        blob = serialize_provider(ImageBuildProvider())
    code = ("import base64, sys, dill\n"
            "assert not any('components' in p for p in sys.modules)\n"
            f"p = dill.loads(base64.b64decode({blob!r}))\n"
            "print(p.diff('i', {'tag': 'a'}, {'tag': 'b'}).replaces)\n"
            "print(p.log_link({'projectName': 'x', 'id': 'x:1'}, 'us-east-1'))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[:2] == ["['tag']", "https://us-east-1.console.aws.amazon.com/codesuite/codebuild/"
                                                      "projects/x/build/x%3A1/log"]
