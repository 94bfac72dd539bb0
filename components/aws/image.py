"""TrainingImage: the training image, built by the stack (`workloads.image: {build: {...}}`).

RLinf's image at the revision the trainer profile pins, for an RLinf Dockerfile target, with the EFA
overlay of components/image/ on top (every version pinned there, pins.env), built in CodeBuild into
an ECR repository of the stack's own, and referenced by the runs by digest. The recipe follows
aws-samples/sample-rlinf-on-eks c8b5e3a (examples/buildspec.yml, examples/Dockerfile,
infrastructure/build/), which builds it from a Terraform layer of its own; here it is part of the
stack, so the image a run uses is reviewed and versioned with the run.

What is created (every child of the component, in the render):

- the ECR repository: immutable tags (a tag names one image for ever: what the tag is derived from
  is what it holds), scan on push, AES-256 at rest; `force_delete`, so `destroy` takes the images
  with it (they are built again from the same inputs, byte-for-byte or not, never data);
- its lifecycle policy: untagged images (a push that failed half-way) expire after a day; of the
  tagged ones the newest KEEP_IMAGES stay. A run always uses the newest tag the stack pushed (a
  new tag is built, then the runs restart on it), so what runs is never expired; the older ones
  are room to roll back without a rebuild (ECR user guide, lifecycle policy parameters:
  `imageCountMoreThan` counts by push time);
- the source bucket and the source archive: exactly the build files the tag is derived from
  (components/image/image_tag.py build_files), zipped by the provider, in a private, versioned,
  encrypted bucket (noncurrent versions expire after SOURCE_VERSIONS_DAYS days); the build is
  started on the archive's version id, so it builds what the tag says;
- the build's log group (/aws/codebuild/<project>, LOG_RETENTION_DAYS days);
- the CodeBuild project (COMPUTE_TYPE with IMAGE, privileged for `docker build`), its variables
  saying what to build (repository, revision, target, tag);
- its role, least privilege: ECR's login token (an action without a resource ARN), push and read
  on this repository only, the source object (read) and its bucket's location and ACL, the log
  group's streams and events. Nothing else: no network, no cluster, no other repository;
- the build itself (components/aws/image_build_run.py): started and awaited by `pulumi up`.

Its output `reference` (`<repository URL>:<tag>@<digest>`) is what every pod of the runs puts in
`image:`: the digest pins the bytes, the tag keeps it readable and changes with any input.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pulumi
import pulumi_aws as aws

from components.aws.image_build_run import ImageBuild
from components.image import image_tag
from components.stack import image_build

# CodeBuild's on-demand compute with the disk a CUDA training image needs: BUILD_GENERAL1_2XLARGE
# has 72 vCPUs, 144 GiB and 824 GB of SSD and "supports Docker images up to 100 GB uncompressed"
# (CodeBuild API reference, ProjectEnvironment computeType). RLinf's embodied image is tens of
# gigabytes before the overlay (FACTS: 15-20 GB compressed), built twice over (base, overlay).
COMPUTE_TYPE = "BUILD_GENERAL1_2XLARGE"
# CodeBuild's curated Ubuntu image with Docker, git, Python 3 and the AWS CLI (CodeBuild user guide,
# build-env-ref-available: aws/codebuild/standard:7.0, Ubuntu 22.04), as the sample's project uses.
IMAGE = "aws/codebuild/standard:7.0"
KEEP_IMAGES = 10
SOURCE_VERSIONS_DAYS = 30
LOG_RETENTION_DAYS = 90
SOURCE_KEY = "training-image/source.zip"
BUILD_DIR = Path(image_tag.__file__).resolve().parent
PROJECT_DIR = BUILD_DIR.parents[1]


def lifecycle_policy() -> str:
    """ECR lifecycle rules (ECR user guide, lifecycle policy parameters): rules apply in priority order."""
    return json.dumps({"rules": [
        {"rulePriority": 1, "description": "untagged images: a push that failed half-way",
         "selection": {"tagStatus": "untagged", "countType": "sinceImagePushed", "countUnit": "days",
                       "countNumber": 1},
         "action": {"type": "expire"}},
        {"rulePriority": 2, "description": f"keep the newest {KEEP_IMAGES} tags: the runs use the newest",
         "selection": {"tagStatus": "tagged", "tagPatternList": ["*"], "countType": "imageCountMoreThan",
                       "countNumber": KEEP_IMAGES},
         "action": {"type": "expire"}},
    ]}, sort_keys=True)


def build_policy(repository_arn: str, bucket_arn: str, log_group_arn: str) -> str:
    """The CodeBuild role's only permissions (see the module docstring)."""
    return json.dumps({"Version": "2012-10-17", "Statement": [
        # GetAuthorizationToken takes no resource ARN (ECR user guide, security_iam_id-based-policy-examples).
        {"Sid": "EcrLogin", "Effect": "Allow", "Action": ["ecr:GetAuthorizationToken"], "Resource": "*"},
        {"Sid": "EcrPushThisRepository", "Effect": "Allow", "Resource": repository_arn, "Action": [
            "ecr:BatchCheckLayerAvailability", "ecr:BatchGetImage", "ecr:CompleteLayerUpload",
            "ecr:DescribeImages", "ecr:GetDownloadUrlForLayer", "ecr:InitiateLayerUpload", "ecr:PutImage",
            "ecr:UploadLayerPart"]},
        # An S3 source: the object (and its versions) and the bucket's ACL and location (CodeBuild user
        # guide, setting-up-service-role).
        {"Sid": "SourceArchive", "Effect": "Allow", "Action": ["s3:GetObject", "s3:GetObjectVersion"],
         "Resource": f"{bucket_arn}/{SOURCE_KEY}"},
        {"Sid": "SourceBucket", "Effect": "Allow", "Action": ["s3:GetBucketAcl", "s3:GetBucketLocation"],
         "Resource": bucket_arn},
        {"Sid": "BuildLogs", "Effect": "Allow", "Action": ["logs:CreateLogStream", "logs:PutLogEvents"],
         "Resource": [log_group_arn, f"{log_group_arn}:*"]},
    ]}, sort_keys=True)


@dataclass(frozen=True)
class TrainingImageArgs:
    cluster_name: str
    region: str
    revision: str
    target: str
    timeout_minutes: int = image_build.DEFAULT_TIMEOUT_MINUTES

    @property
    def repository_name(self) -> str:
        return f"{self.cluster_name}/training"

    @property
    def project_name(self) -> str:
        return f"{self.cluster_name}-training-image"

    @property
    def tag(self) -> str:
        return image_tag.image_tag(self.revision, self.target, BUILD_DIR)

    @property
    def name(self) -> str:
        """What the stack calls the image: `<repository>:<tag>` (config checks, run identities)."""
        return f"{self.repository_name}:{self.tag}"

    def variables(self, repository_url: pulumi.Input[str]) -> list[aws.codebuild.ProjectEnvironmentEnvironmentVariableArgs]:
        values = {"REPOSITORY_URI": repository_url, "REPOSITORY_NAME": self.repository_name,
                  "RLINF_REVISION": self.revision, "BUILD_TARGET": self.target, "IMAGE_TAG": self.tag}
        return [aws.codebuild.ProjectEnvironmentEnvironmentVariableArgs(name=k, value=v, type="PLAINTEXT")
                for k, v in values.items()]


def source_archive() -> pulumi.AssetArchive:
    """The build files, by their path in the archive (what image_tag.py hashes, nothing more). Each
    file by its path from the project directory, where Pulumi runs the program (and reads assets):
    the render then names the same paths on every machine."""
    return pulumi.AssetArchive({p.relative_to(BUILD_DIR).as_posix(): pulumi.FileAsset(p.relative_to(PROJECT_DIR).as_posix())
                                for p in image_tag.build_files(BUILD_DIR)})


class TrainingImage(pulumi.ComponentResource):
    reference: pulumi.Output[str]

    def __init__(self, name: str, args: TrainingImageArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("rltrain:aws:TrainingImage", name, None, opts)
        self.args = args
        child = pulumi.ResourceOptions(parent=self)
        repo = aws.ecr.Repository(
            f"{name}-repository", name=args.repository_name, image_tag_mutability="IMMUTABLE",
            image_scanning_configuration=aws.ecr.RepositoryImageScanningConfigurationArgs(scan_on_push=True),
            encryption_configurations=[aws.ecr.RepositoryEncryptionConfigurationArgs(encryption_type="AES256")],
            force_delete=True, opts=child)
        lifecycle = aws.ecr.LifecyclePolicy(f"{name}-lifecycle", repository=repo.name, policy=lifecycle_policy(),
                                            opts=child)
        bucket = aws.s3.Bucket(f"{name}-source", force_destroy=True, opts=child)
        source_opts = pulumi.ResourceOptions(parent=self, depends_on=[bucket])
        settings = [
            aws.s3.BucketPublicAccessBlock(f"{name}-source-private", bucket=bucket.id, block_public_acls=True,
                                           block_public_policy=True, ignore_public_acls=True,
                                           restrict_public_buckets=True, opts=source_opts),
            aws.s3.BucketVersioning(f"{name}-source-versioning", bucket=bucket.id,
                                    versioning_configuration=aws.s3.BucketVersioningVersioningConfigurationArgs(
                                        status="Enabled"), opts=source_opts),
            aws.s3.BucketServerSideEncryptionConfiguration(
                f"{name}-source-encryption", bucket=bucket.id,
                rules=[aws.s3.BucketServerSideEncryptionConfigurationRuleArgs(
                    apply_server_side_encryption_by_default=aws.s3.
                    BucketServerSideEncryptionConfigurationRuleApplyServerSideEncryptionByDefaultArgs(
                        sse_algorithm="AES256"))], opts=source_opts),
        ]
        settings.append(aws.s3.BucketLifecycleConfiguration(
            f"{name}-source-expiry", bucket=bucket.id,
            rules=[aws.s3.BucketLifecycleConfigurationRuleArgs(
                id="old-sources", status="Enabled", filter=aws.s3.BucketLifecycleConfigurationRuleFilterArgs(prefix=""),
                noncurrent_version_expiration=aws.s3.BucketLifecycleConfigurationRuleNoncurrentVersionExpirationArgs(
                    noncurrent_days=SOURCE_VERSIONS_DAYS))],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[settings[1]])))
        # Versioned before the first object: the build starts on the object's version id.
        source = aws.s3.BucketObjectv2(f"{name}-source-archive", bucket=bucket.id, key=SOURCE_KEY,
                                       source=source_archive(),
                                       opts=pulumi.ResourceOptions(parent=self, depends_on=settings))
        logs = aws.cloudwatch.LogGroup(f"{name}-build-logs", name=f"/aws/codebuild/{args.project_name}",
                                       retention_in_days=LOG_RETENTION_DAYS, opts=child)
        role = aws.iam.Role(f"{name}-build-role", assume_role_policy=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {
                "Service": "codebuild.amazonaws.com"}, "Action": "sts:AssumeRole"}]}, sort_keys=True), opts=child)
        policy = aws.iam.RolePolicy(
            f"{name}-build-policy", role=role.name,
            policy=pulumi.Output.all(repo.arn, bucket.arn, logs.arn).apply(lambda v: build_policy(*v)), opts=child)
        project = aws.codebuild.Project(
            f"{name}-build", name=args.project_name,
            description=f"rltrain training image: RLinf {args.revision[:12]} {args.target} + EFA overlay",
            service_role=role.arn, build_timeout=args.timeout_minutes,
            artifacts=aws.codebuild.ProjectArtifactsArgs(type="NO_ARTIFACTS"),
            environment=aws.codebuild.ProjectEnvironmentArgs(
                compute_type=COMPUTE_TYPE, image=IMAGE, type="LINUX_CONTAINER",
                image_pull_credentials_type="CODEBUILD",
                # `docker build` inside the build container needs the Docker daemon CodeBuild runs only in
                # privileged mode (CodeBuild user guide, sample-docker).
                privileged_mode=True, environment_variables=args.variables(repo.repository_url)),
            source=aws.codebuild.ProjectSourceArgs(type="S3", location=pulumi.Output.concat(bucket.bucket, "/",
                                                                                              SOURCE_KEY)),
            logs_config=aws.codebuild.ProjectLogsConfigArgs(
                cloudwatch_logs=aws.codebuild.ProjectLogsConfigCloudwatchLogsArgs(group_name=logs.name,
                                                                                    status="ENABLED"),
                s3_logs=aws.codebuild.ProjectLogsConfigS3LogsArgs(status="DISABLED")),
            opts=pulumi.ResourceOptions(parent=self, depends_on=[policy]))
        self.build = ImageBuild(
            f"{name}-build-run", region=args.region, project=project.name, repository=repo.name, tag=args.tag,
            source_version=source.version_id, timeout_minutes=args.timeout_minutes,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[project, policy, lifecycle, source]))
        self.repository = repo
        self.project = project
        self.reference = pulumi.Output.concat(repo.repository_url, ":", args.tag, "@", self.build.digest)
        self.register_outputs({"reference": self.reference, "tag": args.tag})


def training_image_args(cfg, cluster_name: str, region: str) -> Optional[TrainingImageArgs]:
    """The image the stack builds, or None when workloads.image is a reference you bring."""
    b = image_build.built(cfg.workloads.image)
    if b is None:
        return None
    w = cfg.workloads
    return TrainingImageArgs(cluster_name=cluster_name, region=region, revision=image_build.revision(w.image, w.profile),
                             target=image_build.target(w.image, w.profile), timeout_minutes=b.timeout_minutes)
