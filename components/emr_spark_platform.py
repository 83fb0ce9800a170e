"""EmrSparkPlatform: where a datacenter's mirror steps run on Amazon EMR.

Children: the S3 bucket (optional: an existing one) holding the app bundle (content-addressed),
the entry script, the bootstrap script, the nodes' wheelhouse (every wheel the app needs, for the
nodes' Python and architecture, hash-locked), the secrets sync tool and list; the stack's secrets
in Secrets Manager; and, unless an existing `cluster_id` is given, the EMR cluster (Spark, the
configured release label, a bootstrap action installing the wheelhouse without an index on every
node) with its service role and instance profile.

The steps name the bundle (`--py-files`); the bootstrap action names only fixed S3 locations,
so a new app release replaces steps, never the cluster.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws

from components.emr_specs import (
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
    spark_configurations,
    wheelhouse_key,
)
from components.secret_store import SecretStoreArgs
from components.stack_config import SecretConfig
from components.stack_secrets import MadeSecret, create_stack_secrets
from components.wheelhouse import Wheelhouse, deploy_wheelhouses, normalize

TOKEN = "kafka-mirror:index:EmrSparkPlatform"
TAGS = {"part-of": "kafka-mirror"}


@dataclass(frozen=True)
class AppFiles:
    """Local files uploaded next to the bundle (paths relative to the project root).
    `requirements_path` is resolved into the nodes' wheelhouse (components.wheelhouse)."""

    bundle_path: str
    bundle_sha256: str
    entry_path: str = "scripts/kmirror_main.py"
    bootstrap_path: str = "scripts/emr-bootstrap.sh"
    requirements_path: str = "scripts/app-requirements.txt"
    sync_path: str = "scripts/kmirror-sync-secrets.py"


@dataclass
class EmrSparkPlatformArgs:
    settings: EmrSettings
    files: AppFiles
    create_bucket: bool = True
    cluster_id: str | None = None
    release_label: str = "emr-spark-8.0.0"
    subnet_id: str | None = None
    master_instance_type: str = "m7g.xlarge"
    core_instance_type: str = "m7g.2xlarge"
    core_instance_count: int = 2
    step_concurrency_level: int = 1
    gssapi: bool = False
    secrets: Sequence[tuple[SecretConfig, Mapping[str, Any]]] = ()
    config_secrets: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)
    aws_secret_entries: Sequence[tuple[str, str]] = ()  # (ARN, directory) referenced by {aws_secret}


class EmrSparkPlatform(pulumi.ComponentResource):
    """Outputs: `bucket`, `cluster_id`, `bundle_uri`, `entry_uri`, `secrets` (names only).

    Attributes for `MirrorDeployment`: `settings`, `cluster_id`, `bundle_uri`, `entry_uri`, `ready`.
    """

    platform = "emr"

    def __init__(self, name: str, args: EmrSparkPlatformArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, {}, opts)
        s = args.settings
        self.settings = s
        self.ready: list[pulumi.Resource] = self._bucket(name, args.create_bucket)
        self.bundle_uri, self.entry_uri = self._upload(name, args.files)
        self.wheelhouses = self._wheelhouses(name, args)
        self.bootstrap: dict[str, Any] = {"path": s.uri(BOOTSTRAP_KEY), "args": bootstrap_args(s, args.gssapi)}
        self.secrets: dict[str, MadeSecret] = create_stack_secrets(
            self, name, args.secrets, args.config_secrets, SecretStoreArgs("aws")
        )
        arns = self._secrets_list(name, args.aws_secret_entries)
        self.ready += [m.resource for m in self.secrets.values()]
        # Also an output: an existing cluster's instance role needs exactly this policy.
        self.node_policy = arns.apply(lambda values: json.dumps(instance_policy(s.bucket, values), sort_keys=True))
        if args.cluster_id:
            self.cluster_id: pulumi.Output[str] = pulumi.Output.from_input(args.cluster_id)
        else:
            opts = pulumi.ResourceOptions(parent=self, depends_on=self.ready)
            self.cluster_id = self._cluster(name, args, self.node_policy, opts).id
        self.register_outputs(
            {
                "bucket": s.bucket,
                "cluster_id": self.cluster_id,
                "bundle_uri": self.bundle_uri,
                "entry_uri": self.entry_uri,
                "secrets": sorted(self.secrets),
                "node_policy": self.node_policy,
                # For an existing cluster: run this bootstrap on every node (docs/deploy.md).
                "bootstrap": self.bootstrap,
                "wheelhouse": {w.tag: list(w.files) for w in self.wheelhouses},
            }
        )

    def _bucket(self, name: str, create: bool) -> list[pulumi.Resource]:
        if not create:
            return []
        child = pulumi.ResourceOptions(parent=self)
        bucket = aws.s3.Bucket(f"{name}-bucket", bucket=self.settings.bucket, tags=TAGS, opts=child)
        block = aws.s3.BucketPublicAccessBlock(
            f"{name}-bucket-private",
            bucket=bucket.id,
            block_public_acls=True,
            block_public_policy=True,
            ignore_public_acls=True,
            restrict_public_buckets=True,
            opts=child,
        )
        return [bucket, block]

    def _upload(self, name: str, files: AppFiles) -> tuple[str, str]:
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
            obj = aws.s3.BucketObjectv2(f"{name}-{part}", bucket=self.settings.bucket, key=key, source=source,
                                        opts=on_bucket)  # fmt: skip
            self.ready.append(obj)
        return self.settings.uri(uploads["bundle"][0]), self.settings.uri(uploads["entry"][0])

    def _wheelhouses(self, name: str, args: EmrSparkPlatformArgs) -> list[Wheelhouse]:
        """One wheelhouse per node architecture, each file an object under WHEELHOUSE_PREFIX.

        Logical names carry the distribution, not its version: a dependency update replaces the
        object in place (new key), and the bootstrap arguments stay the same."""
        arches = {instance_architecture(t) for t in (args.master_instance_type, args.core_instance_type)}
        built = deploy_wheelhouses(Path(args.files.requirements_path), sorted(arches), args.gssapi, os.environ)
        on_bucket = pulumi.ResourceOptions(parent=self, depends_on=list(self.ready))
        for house in built:
            for file_name in house.files:
                part = "lock" if not file_name.endswith(".whl") else normalize(file_name.split("-", 1)[0])
                obj = aws.s3.BucketObjectv2(
                    f"{name}-wheel-{house.arch}-{part}",
                    bucket=self.settings.bucket,
                    key=wheelhouse_key(house.arch, file_name),
                    source=pulumi.FileAsset(str(house.path / file_name)),
                    opts=on_bucket,
                )
                self.ready.append(obj)
        return built

    def _secrets_list(self, name: str, aws_entries: Sequence[tuple[str, str]]) -> pulumi.Output[list[str]]:
        """The sync list (`<ARN>\\t<directory>` lines) of every secret the flows read; returns the ARNs."""
        entries: list[tuple[pulumi.Input[str], str]] = list(aws_entries)
        entries += [(m.arn, m.secret_name) for m in self.secrets.values() if m.arn is not None]
        arns = pulumi.Output.all(*[arn for arn, _ in entries])
        directories = [d for _, d in entries]
        content = arns.apply(lambda values: secrets_manifest(zip(values, directories, strict=True)))
        on_bucket = pulumi.ResourceOptions(parent=self, depends_on=list(self.ready))
        self.ready.append(aws.s3.BucketObjectv2(f"{name}-secrets-list", bucket=self.settings.bucket,
                                                key=SECRETS_MANIFEST_KEY, content=content, opts=on_bucket))  # fmt: skip
        return arns

    def _cluster(
        self, name: str, args: EmrSparkPlatformArgs, policy: pulumi.Output[str], opts: pulumi.ResourceOptions
    ) -> aws.emr.Cluster:
        s = args.settings
        child = pulumi.ResourceOptions(parent=self)
        service_role = aws.iam.Role(
            f"{name}-service-role", assume_role_policy=_assume("elasticmapreduce.amazonaws.com"), tags=TAGS, opts=child
        )
        service_attach = aws.iam.RolePolicyAttachment(
            f"{name}-service-policy",
            role=service_role.name,
            policy_arn="arn:aws:iam::aws:policy/service-role/AmazonElasticMapReduceRole",
            opts=child,
        )
        node_role = aws.iam.Role(
            f"{name}-node-role", assume_role_policy=_assume("ec2.amazonaws.com"), tags=TAGS, opts=child
        )
        node_attach = aws.iam.RolePolicyAttachment(
            f"{name}-node-emr-policy",
            role=node_role.name,
            policy_arn="arn:aws:iam::aws:policy/service-role/AmazonElasticMapReduceforEC2Role",
            opts=child,
        )
        inline = aws.iam.RolePolicy(f"{name}-node-app-policy", role=node_role.id, policy=policy, opts=child)
        profile = aws.iam.InstanceProfile(f"{name}-node-profile", role=node_role.name, opts=child)
        return aws.emr.Cluster(
            f"{name}-cluster",
            name=f"kafka-mirror-{name}",
            release_label=args.release_label,
            applications=["Spark"],
            service_role=service_role.arn,
            log_uri=s.uri("logs/"),
            ec2_attributes=aws.emr.ClusterEc2AttributesArgs(instance_profile=profile.arn, subnet_id=args.subnet_id),
            master_instance_group=aws.emr.ClusterMasterInstanceGroupArgs(instance_type=args.master_instance_type),
            core_instance_group=aws.emr.ClusterCoreInstanceGroupArgs(
                instance_type=args.core_instance_type, instance_count=args.core_instance_count
            ),
            bootstrap_actions=[
                aws.emr.ClusterBootstrapActionArgs(
                    name="kafka-mirror",
                    path=s.uri(BOOTSTRAP_KEY),
                    args=self.bootstrap["args"],
                )
            ],
            configurations_json=json.dumps(spark_configurations(s.max_app_attempts)),
            keep_job_flow_alive_when_no_steps=True,
            # Mirror steps never finish: each flow needs its own concurrent step slot.
            step_concurrency_level=args.step_concurrency_level,
            tags=TAGS,
            opts=pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(depends_on=[service_attach, node_attach, inline])
            ),
        )


def _assume(service: str) -> str:
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}],
        }
    )
