"""EmrSparkPlatform: where a datacenter's mirror steps run on Amazon EMR.

Children: the S3 bucket (optional: an existing one) holding the app bundle (content-addressed),
the entry script, the bootstrap script, the nodes' wheelhouse (every wheel the app needs, for the
nodes' Python and architecture, hash-locked), the secrets sync tool and list; the stack's secrets
in Secrets Manager; and, unless an existing `cluster_id` is given, the EMR cluster (Spark, the
configured release label, a bootstrap action installing the wheelhouse without an index on every
node) with its service role and instance profile; and the Lambda function that adds, replaces
and stops the flows' steps on the cluster (`kafka_mirror.emr.step_function`).

The steps name the bundle (`--py-files`); the bootstrap action names only fixed S3 locations,
so a new app release replaces steps, never the cluster. The bucket may be another resource's
output: every S3 location is derived from it inside an apply. The uploaded files come from the
installed package (`kafka_mirror.deploy_files`), so no checkout is needed.
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import pulumi
import pulumi_aws as aws

from kafka_mirror.deploy_files import BOOTSTRAP, ENTRY, REQUIREMENTS, SYNC, app_bundle, deploy_file
from kafka_mirror.emr.alarms import create_alarms
from kafka_mirror.emr.cluster import BucketSettings, ClusterSettings, create_bucket, create_cluster
from kafka_mirror.emr.platform_args import EmrSparkPlatformArgs, emr_settings, encryption_problems, primary_nodes
from kafka_mirror.emr.specs import (
    BOOTSTRAP_KEY,
    ENTRY_KEY,
    SECRETS_MANIFEST_KEY,
    SYNC_SCRIPT_KEY,
    EmrSettings,
    bootstrap_args,
    bundle_key,
    instance_architecture,
    instance_policy,
    secrets_manifest,
    wheelhouse_key,
)
from kafka_mirror.emr.step_function import create_step_function, create_step_reader
from kafka_mirror.emr.wheelhouse import Wheelhouse, deploy_wheelhouses, normalize
from kafka_mirror.input_types import EmrDeploymentTarget
from kafka_mirror.secrets.stack import MadeSecret, StackSecrets, create_stack_secrets
from kmirror.errors import Problem, ValidationError

T = TypeVar("T")
TOKEN = "kafka-mirror:index:EmrSparkPlatform"
RELEASE_LABEL = "emr-spark-8.0.0"
MASTER_TYPE = "m7g.xlarge"
CORE_TYPE = "m7g.2xlarge"
PRIMARY_NODES = 3  # EMR's high-availability primary group: one primary can fail without the cluster


@dataclass(frozen=True)
class AppFiles:
    """Local files uploaded next to the bundle. `requirements_path` is resolved into the nodes'
    wheelhouse (kafka_mirror.emr.wheelhouse)."""

    bundle_path: str
    bundle_sha256: str
    entry_path: str
    bootstrap_path: str
    requirements_path: str
    sync_path: str


def packaged_app_files() -> AppFiles:
    """The bundle (`kafka_mirror.deploy_files.app_bundle`) and the packaged scripts."""
    bundle, sha = app_bundle(os.environ)
    scripts = (str(deploy_file(f)) for f in (ENTRY, BOOTSTRAP, REQUIREMENTS, SYNC))
    return AppFiles(str(bundle), sha, *scripts)


class EmrSparkPlatform(pulumi.ComponentResource):
    """Where a datacenter's mirror steps run on Amazon EMR: the bucket with the app, its hash-locked wheelhouse and
    bootstrap, and optionally the cluster.

    Python attributes (in-process users): `settings`, `cluster_id`, `bundle_uri`, `entry_uri`, `ready`,
    `stack_secrets` (stack secret name -> MadeSecret).
    """

    platform = "emr"

    bucket: pulumi.Output[str]
    """The bucket."""
    cluster_id: pulumi.Output[str]
    """The EMR cluster's id (created or given)."""
    bundle_uri: pulumi.Output[str]
    """S3 URI of the app bundle (content-addressed)."""
    entry_uri: pulumi.Output[str]
    """S3 URI of the steps' entry script."""
    secrets: pulumi.Output[list[str]]
    """Names of the secrets created from the stack's `kafka-mirror:secrets` (stack program only)."""
    node_policy: pulumi.Output[str]
    """The IAM policy (JSON) the nodes' role needs; give it to an existing cluster's instance role."""
    bootstrap: pulumi.Output[dict[str, Any]]
    """The bootstrap action (`path`, `args`) every node must run; for an existing cluster."""
    wheelhouse: pulumi.Output[dict[str, list[str]]]
    """The nodes' wheelhouse: tag -> files."""
    step_function: pulumi.Output[str]
    """The Lambda function MirrorDeployment invokes to add, replace and stop a flow's step on the cluster."""
    deployment_target: pulumi.Output[EmrDeploymentTarget]
    """What MirrorDeployment's `emr` argument takes: settings, cluster and app locations, once ready."""

    def __init__(
        self,
        name: str,
        args: EmrSparkPlatformArgs,
        opts: pulumi.ResourceOptions | None = None,
        *,
        stack_secrets: StackSecrets | None = None,
        files: AppFiles | None = None,
    ) -> None:
        """`stack_secrets`: the stack program's secrets; `files`: what to upload (default: the packaged ones)."""
        if problems := encryption_problems(args):
            raise ValidationError(problems, name)
        super().__init__(TOKEN, name, {}, opts)
        s = emr_settings(args)
        self.settings = s
        self.bucket = pulumi.Output.from_input(args["bucket"])
        self._resolved = self.bucket.apply(lambda bucket: replace(s, bucket=bucket))
        self.ready: list[pulumi.Resource] = self._bucket(name, args)
        self._files = files or packaged_app_files()
        self.bundle_uri, self.entry_uri = self._upload(name, self._files)
        self.wheelhouses = self._wheelhouses(name, args)
        gssapi = bool(args.get("gssapi", False))
        bootstrap = self._on_bucket(lambda r: {"path": r.uri(BOOTSTRAP_KEY), "args": bootstrap_args(r, gssapi)})
        self.bootstrap = bootstrap
        store: Any = {"target": "aws", "recovery_window_days": int(args.get("secret_recovery_window_days", 7))}
        if prefix := args.get("secret_name_prefix"):
            store["aws_name_prefix"] = prefix
        self.stack_secrets: dict[str, MadeSecret] = create_stack_secrets(self, name, stack_secrets, store)
        entries = [(arn, directory) for directory, arn in sorted((args.get("aws_secrets") or {}).items())]
        arns = self._secrets_list(name, entries)
        self.ready += [m.resource for m in self.stack_secrets.values()]
        # Also an output: an existing cluster's instance role needs exactly this policy.
        encryption: dict[str, Any] = dict(args.get("encryption") or {})
        bucket_key = args.get("bucket_kms_key_arn")
        self.node_policy = pulumi.Output.all(
            self.bucket, arns, encryption.get("kms_key_arn"), encryption.get("certificates_zip"), bucket_key
        ).apply(lambda v: json.dumps(instance_policy(v[0], v[1], v[2], v[3], v[4]), sort_keys=True))
        app_role: pulumi.Output[Any] = pulumi.Output.from_input(None)  # an existing cluster's role is not known
        if cluster_id := args.get("cluster_id"):
            self.cluster_id = pulumi.Output.from_input(cluster_id)
        else:
            child = pulumi.ResourceOptions(parent=self, depends_on=self.ready)
            cluster = self._cluster(name, args, self.node_policy, child)
            self.cluster_id = cluster.id
            app_role = cluster.ec2_attributes.apply(lambda a: a.instance_profile if a else None)
        self.step_function = create_step_function(self, name, s.region, self.cluster_id, self.bucket, bucket_key).name
        self.step_reader = create_step_reader(self, name, s.region, self.cluster_id).name
        if args.get("alarms", True):
            created = None if args.get("cluster_id") else int(args.get("core_instance_count", 2))
            create_alarms(
                self,
                name,
                self.cluster_id,
                created,
                args.get("alarm_actions") or [],
                pulumi.ResourceOptions(parent=self),
            )
        self.secrets = pulumi.Output.from_input(sorted(self.stack_secrets))
        self.wheelhouse = pulumi.Output.from_input({w.tag: list(w.files) for w in self.wheelhouses})
        target = pulumi.Output.all(
            self._resolved,
            self.cluster_id,
            self.bundle_uri,
            self.entry_uri,
            self.step_function,
            app_role,
            self.step_reader,
        ).apply(
            lambda v: dict(
                platform="emr",
                settings=asdict(v[0]),
                cluster_id=v[1],
                bundle_uri=v[2],
                entry_uri=v[3],
                step_function=v[4],
                step_reader=v[6],
                **({"app_role": v[5]} if v[5] else {}),  # MSK IAM policies attach to its role (MirrorDeployment)
            )
        )
        self.deployment_target = pulumi.Output.all(target, *[r.urn for r in self.ready]).apply(lambda v: v[0])
        self.register_outputs(
            {
                "bucket": self.bucket,
                "cluster_id": self.cluster_id,
                "bundle_uri": self.bundle_uri,
                "entry_uri": self.entry_uri,
                "secrets": self.secrets,
                "node_policy": self.node_policy,
                # For an existing cluster: run this bootstrap on every node (docs/deploy.md).
                "bootstrap": self.bootstrap,
                "wheelhouse": self.wheelhouse,
                "step_function": self.step_function,
                "deployment_target": self.deployment_target,
            }
        )

    def _on_bucket(self, render: Callable[[EmrSettings], T]) -> pulumi.Output[T]:
        """`render(settings)` once the bucket's name is known."""
        return self._resolved.apply(render)

    def _bucket(self, name: str, args: EmrSparkPlatformArgs) -> list[pulumi.Resource]:
        if not args.get("create_bucket", True):
            return []
        settings = BucketSettings(
            protect=bool(args.get("protect", True)),
            log_retention_days=int(args.get("log_retention_days", 30)),
            noncurrent_version_days=int(args.get("noncurrent_version_days", 30)),
        )
        return create_bucket(self, name, self.bucket, settings)

    def _upload(self, name: str, files: AppFiles) -> tuple[pulumi.Output[str], pulumi.Output[str]]:
        """The bundle, entry, bootstrap and sync tool; returns the bundle and entry URIs."""
        uploads = {
            "bundle": (bundle_key(files.bundle_sha256), files.bundle_path),
            "entry": (ENTRY_KEY, files.entry_path),
            "bootstrap": (BOOTSTRAP_KEY, files.bootstrap_path),
            "sync-script": (SYNC_SCRIPT_KEY, files.sync_path),
        }
        on_bucket = pulumi.ResourceOptions(parent=self, depends_on=list(self.ready))
        for part, (key, path) in uploads.items():
            source = pulumi.FileAsset(path)
            obj = aws.s3.BucketObjectv2(f"{name}-{part}", bucket=self.bucket, key=key, source=source, opts=on_bucket)
            self.ready.append(obj)
        bundle, entry = uploads["bundle"][0], uploads["entry"][0]
        return self._on_bucket(lambda r: r.uri(bundle)), self._on_bucket(lambda r: r.uri(entry))

    def _wheelhouses(self, name: str, args: EmrSparkPlatformArgs) -> list[Wheelhouse]:
        """One wheelhouse per node architecture, each file an object under WHEELHOUSE_PREFIX.

        Logical names carry the distribution, not its version: a dependency update replaces the
        object in place (new key), and the bootstrap arguments stay the same."""
        types = (args.get("master_instance_type", MASTER_TYPE), args.get("core_instance_type", CORE_TYPE))
        arches = {instance_architecture(t) for t in types}
        requirements = Path(self._files.requirements_path)
        preview = pulumi.runtime.is_dry_run()
        built = deploy_wheelhouses(requirements, sorted(arches), bool(args.get("gssapi", False)), os.environ, preview)
        for house in built:
            if house.missing:
                pulumi.log.warn(
                    f"preview only: the {house.tag} wheelhouse has no {', '.join(house.missing)} wheel (gssapi: true "
                    "needs the one scripts/build-emr-gssapi-wheel.sh builds into build/gssapi-wheels); `up` refuses "
                    "without it",
                    resource=self,
                )
        on_bucket = pulumi.ResourceOptions(parent=self, depends_on=list(self.ready))
        for house in built:
            for file_name in house.files:
                part = "lock" if not file_name.endswith(".whl") else normalize(file_name.split("-", 1)[0])
                obj = aws.s3.BucketObjectv2(
                    f"{name}-wheel-{house.arch}-{part}",
                    bucket=self.bucket,
                    key=wheelhouse_key(house.arch, file_name),
                    source=pulumi.FileAsset(str(house.path / file_name)),
                    opts=on_bucket,
                )
                self.ready.append(obj)
        return built

    def _secrets_list(self, name: str, aws_entries: Sequence[tuple[str, str]]) -> pulumi.Output[list[str]]:
        """The sync list (`<ARN>\\t<directory>` lines) of every secret the flows read; returns the ARNs."""
        entries: list[tuple[pulumi.Input[str], str]] = list(aws_entries)
        entries += [(m.arn, m.secret_name) for m in self.stack_secrets.values() if m.arn is not None]
        arns = pulumi.Output.all(*[arn for arn, _ in entries])
        directories = [d for _, d in entries]
        content = arns.apply(lambda values: secrets_manifest(zip(values, directories, strict=True)))
        on_bucket = pulumi.ResourceOptions(parent=self, depends_on=list(self.ready))
        self.ready.append(
            aws.s3.BucketObjectv2(
                f"{name}-secrets-list", bucket=self.bucket, key=SECRETS_MANIFEST_KEY, content=content, opts=on_bucket
            )
        )
        return arns

    def _cluster(
        self, name: str, args: EmrSparkPlatformArgs, policy: pulumi.Output[str], opts: pulumi.ResourceOptions
    ) -> aws.emr.Cluster:
        encryption: dict[str, Any] = dict(args.get("encryption") or {})
        prometheus: dict[str, Any] = dict(args.get("prometheus") or {})
        if args.get("subnet_id") is not None and args.get("vpc_id") is None:
            raise ValidationError(
                [
                    Problem(
                        "vpc_id",
                        "required with subnet_id: AmazonEMRServicePolicy_v2 creates "
                        "the cluster's managed security groups only in a VPC tagged "
                        "for-use-with-amazon-emr-managed-policies=true, which the platform tags; "
                        "set the subnet's VPC id",
                    )
                ]
            )
        settings = ClusterSettings(
            release_label=args.get("release_label", RELEASE_LABEL),
            master_instance_type=args.get("master_instance_type", MASTER_TYPE),
            core_instance_type=args.get("core_instance_type", CORE_TYPE),
            core_instance_count=int(args.get("core_instance_count", 2)),
            primary_node_count=primary_nodes(args.get("primary_node_count", PRIMARY_NODES)),
            step_concurrency_level=int(args.get("step_concurrency_level", 1)),
            max_app_attempts=self.settings.max_app_attempts,
            subnet_id=args.get("subnet_id"),
            protect=bool(args.get("protect", True)),
            certificates_zip=encryption.get("certificates_zip"),
            kms_key_arn=encryption.get("kms_key_arn"),
            vpc_id=args.get("vpc_id"),
            prometheus_security_group_id=prometheus.get("security_group_id"),
            prometheus_cidr_blocks=tuple(prometheus.get("cidr_blocks") or ()),
        )
        log_uri = self._on_bucket(lambda r: r.uri("logs/"))
        return create_cluster(self, name, settings, self.bootstrap, log_uri, policy, opts)
