"""The typed shapes of the components' core inputs: what a user writes by hand (a cluster's security,
a flow's Spark resources, the AWS settings) and what a platform hands a MirrorDeployment (its
deployment target). Pulumi's analyzer turns each TypedDict into an object type of the schema
(`kafka-mirror:index:<Name>`, camelCase properties), so another language's SDK type-checks them;
the Python side receives the snake_case keys it always did (the provider maps the names).

Kept as maps, because no fixed type fits: a ReplicationTopology's `topology` (the topology file,
keyed by the user's cluster and flow names), a flow spec (`ReplicationTopology.flowSpecs[<id>]`,
an output whose keys are the app's flow-spec contract, docs/spark-app.md), and a deployment
target's `settings` (the platform's own settings, produced by the platform, never written by hand).
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

from typing import Any, TypedDict

from typing_extensions import NotRequired


class SecretRef(TypedDict):
    """A reference to a secret, never its value: exactly one of `file`, `env`, `k8sSecret` (with `key`),
    `awsSecret` (with `key`) or `pulumiConfig`."""

    file: NotRequired[str]
    """An absolute path on the app's nodes."""
    env: NotRequired[str]
    """An environment variable of the app (not for fields that must be files)."""
    k8s_secret: NotRequired[str]
    """A Kubernetes Secret in the app's namespace (with `key`)."""
    aws_secret: NotRequired[str]
    """A Secrets Manager secret ARN (with `key`)."""
    key: NotRequired[str]
    """The key inside the Kubernetes or Secrets Manager secret."""
    pulumi_config: NotRequired[str]
    """A (secret) Pulumi config key of the stack."""


class ClusterTls(TypedDict):
    """TLS towards the cluster (protocol SSL or SASL_SSL); every certificate and key is a reference."""

    ca: NotRequired[SecretRef]
    """The CA certificate (PEM) the brokers' certificates chain to."""
    cert: NotRequired[SecretRef]
    """The client certificate (PEM), with `key`."""
    key: NotRequired[SecretRef]
    """The client's private key (PEM), with `cert`."""
    key_password: NotRequired[SecretRef]
    """The password of an encrypted `key`."""
    pkcs12: NotRequired[SecretRef]
    """A PKCS#12 keystore instead of `cert` + `key` (a file)."""
    pkcs12_password: NotRequired[SecretRef]
    """The keystore's password."""
    verify_hostname: NotRequired[bool]
    """Check the brokers' host names against their certificates (default true)."""


class ClusterScram(TypedDict):
    """SASL/SCRAM credentials (protocol SASL_PLAINTEXT or SASL_SSL)."""

    mechanism: str
    """`SCRAM-SHA-256` or `SCRAM-SHA-512`."""
    username: str
    """The mirror's SCRAM user."""
    password: SecretRef
    """A reference to the user's password."""


class ClusterPlain(TypedDict):
    """SASL/PLAIN credentials, over TLS (protocol SASL_SSL): Confluent Cloud API keys, Event Hubs connection
    strings."""

    username: str
    """The user (an API key; `$ConnectionString` for Event Hubs)."""
    password: SecretRef
    """A reference to the password (the API secret, the connection string)."""


class ClusterOauthbearer(TypedDict):
    """SASL/OAUTHBEARER with OIDC client credentials (librdkafka's `sasl.oauthbearer.method=oidc`): tokens are
    fetched from the token endpoint and refreshed before they expire."""

    token_endpoint: str
    """The OIDC provider's token URL."""
    client_id: str
    """The mirror's OIDC client id."""
    client_secret: SecretRef
    """A reference to the client secret."""
    scope: NotRequired[str]
    """The scopes to ask for, space-separated."""
    extensions: NotRequired[dict[str, str]]
    """SASL extensions sent with the token (e.g. Confluent Cloud's `logicalCluster`, `identityPoolId`)."""
    principal: NotRequired[str]
    """The principal the brokers see (the token's subject) for ACLs; default: the client id."""


class ClusterMskIam(TypedDict):
    """AWS MSK IAM (protocol SASL_SSL): OAUTHBEARER tokens signed by the app with its AWS credentials (IRSA on
    EKS, the instance profile on EMR) and refreshed before they expire; no secret."""

    region: str
    """The cluster's AWS region (the token is signed for it)."""
    role_arn: NotRequired[str]
    """An IAM role the app assumes before signing (not with `profile`)."""
    profile: NotRequired[str]
    """A named AWS profile to sign with (not with `role_arn`)."""
    cluster_arn: NotRequired[str]
    """The MSK cluster's ARN: `kmirror acls` scopes the IAM policy to it (default: any cluster of the region)."""


class ClusterKerberos(TypedDict):
    """SASL/GSSAPI (Kerberos) credentials (protocol SASL_PLAINTEXT or SASL_SSL)."""

    principal: str
    """The mirror's principal, e.g. `mirrormaker/host@REALM`."""
    keytab: SecretRef
    """A reference to the principal's keytab (a file)."""
    krb5_conf: NotRequired[SecretRef]
    """A krb5.conf to use (a file), instead of `realm` + `kdcs`."""
    realm: NotRequired[str]
    """The realm kmirror renders krb5.conf for (with `kdcs`)."""
    kdcs: NotRequired[list[str]]
    """The realm's KDCs, `host[:port]` (with `realm`)."""
    service_name: NotRequired[str]
    """The brokers' service name (default `kafka`)."""


class ClusterSecurity(TypedDict):
    """A cluster's `security` section (docs/security.md): the protocol and references to secrets, never their
    values."""

    protocol: str
    """`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT` or `SASL_SSL`."""
    tls: NotRequired[ClusterTls]
    """TLS settings (SSL, SASL_SSL)."""
    scram: NotRequired[ClusterScram]
    """SCRAM credentials (SASL_*)."""
    kerberos: NotRequired[ClusterKerberos]
    """Kerberos credentials (SASL_*)."""
    plain: NotRequired[ClusterPlain]
    """SASL/PLAIN credentials (SASL_SSL)."""
    oauthbearer: NotRequired[ClusterOauthbearer]
    """SASL/OAUTHBEARER OIDC client credentials (SASL_*)."""
    msk_iam: NotRequired[ClusterMskIam]
    """AWS MSK IAM (SASL_SSL)."""


class FlowSpark(TypedDict):
    """A flow's Spark resources (the topology's `spark` setting); unset fields take the platform's defaults."""

    executors: NotRequired[int]
    """Number of executors."""
    driver_cores: NotRequired[int]
    """Driver cores."""
    driver_memory: NotRequired[str]
    """Driver memory, e.g. `1g`."""
    executor_cores: NotRequired[int]
    """Cores per executor."""
    executor_memory: NotRequired[str]
    """Executor memory, e.g. `2g`."""
    options: NotRequired[dict[str, str]]
    """Extra Spark confs (name -> value)."""


class AwsAssumeRole(TypedDict):
    """One role of the assume-role chain (assumed in order)."""

    role_arn: str
    """The role's ARN."""
    external_id: NotRequired[str]
    """The external id the role's trust policy requires."""
    session_name: NotRequired[str]
    """The session name."""


class AwsSettings(TypedDict):
    """The stack's AWS settings (what its `aws:*` config says)."""

    region: NotRequired[str]
    """The region of the EMR cluster."""
    profile: NotRequired[str]
    """The AWS profile."""
    assume_roles: NotRequired[list[AwsAssumeRole]]
    """Roles assumed in order."""


class EksDeploymentTarget(TypedDict):
    """Where a MirrorDeployment runs on Kubernetes: `EksSparkPlatform.deploymentTarget`, passed as it is."""

    platform: str
    """`eks`."""
    settings: dict[str, Any]
    """The platform's settings for its apps (namespace, image, ...), produced by the platform: a map."""
    app_role: NotRequired[str]
    """The IAM role the apps' service account assumes (IRSA), by ARN: a flow's MSK IAM policy is attached to it."""


class EmrDeploymentTarget(TypedDict):
    """Where a MirrorDeployment runs on EMR: `EmrSparkPlatform.deploymentTarget`, passed as it is."""

    platform: str
    """`emr`."""
    settings: dict[str, Any]
    """The platform's settings for its steps (bucket, region, ...), produced by the platform: a map."""
    cluster_id: str
    """The EMR cluster the steps run on."""
    bundle_uri: str
    """The app bundle's S3 URI."""
    entry_uri: str
    """The entry script's S3 URI."""
    step_function: str
    """The Lambda function that adds, replaces and stops the steps."""
    step_reader: NotRequired[str]
    """The read-only Lambda function that reports a flow's step state on every program run (drift)."""
    app_role: NotRequired[str]
    """The nodes' instance profile (ARN; its role has the same name) of a cluster the platform creates: a flow's MSK
    IAM policy is attached to that role."""
