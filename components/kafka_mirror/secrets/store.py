"""Where a security component's values end up: a Kubernetes Secret (EKS; mounted by the app's
pods at `/etc/kmirror/secrets/<name>/<key>`) or an AWS Secrets Manager secret (EMR; the
bootstrap writes each JSON key to `/etc/kmirror/secrets/<name>/<key>`, base64-decoding keys that
end in `.b64`). Values stay pulumi secrets end to end; only names and paths are outputs.
"""

import json
from dataclasses import dataclass
from typing import Any, TypedDict

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s
from typing_extensions import NotRequired

from kmirror.security.secret_refs import SECRETS_ROOT, dns_label, secret_mount_dir
from kmirror.stack.deploy_layout import DEFAULT_NAMESPACE

TARGETS = ("kubernetes", "aws")


class SecretStoreArgs(TypedDict):
    """Where a secret component stores its values: a Kubernetes Secret (EKS) or an AWS Secrets Manager secret (EMR)."""

    target: NotRequired[str]
    """`kubernetes` (default; mounted by the app's pods) or `aws` (Secrets Manager, fetched by EMR nodes)."""
    secret_name: NotRequired[str]
    """The Secret's name, which the topology references (`{k8s_secret: NAME, key: ...}`); default
    `kmirror-<component name>`."""
    namespace: NotRequired[pulumi.Input[str]]
    """The Kubernetes namespace of the Secret (the apps' namespace); default `kafka-mirror`."""
    labels: NotRequired[dict[str, str]]
    """Extra labels of the Kubernetes Secret."""
    aws_name_prefix: NotRequired[str]
    """aws: prefix of the Secrets Manager name, so stacks sharing an account never collide (also not with
    a secret still in its deletion window); default `kafka-mirror/<project>/<stack>/`."""
    recovery_window_days: NotRequired[int]
    """aws: days a deleted secret can be restored: 0 (deleted at once, the name is free again) or 7-30 (default 7)."""


@dataclass(frozen=True)
class StoredSecret:
    secret_name: str
    mount_path: str
    secret_arn: pulumi.Output[str] | None  # aws only
    resource: pulumi.CustomResource  # the Secret (kubernetes) or SecretVersion (aws) holding the values

    def outputs(self, **own: Any) -> dict[str, Any]:
        """What a secret component registers: its `own` outputs, and `secret_arn` on aws (None on
        kubernetes: no output)."""
        return own if self.secret_arn is None else {**own, "secret_arn": self.secret_arn}


def aws_secret_name(secret_name: str, prefix: str | None = None) -> str:
    """The Secrets Manager name: stack-unique (`kafka-mirror/<project>/<stack>/<name>` by default),
    while the app keeps reading `/etc/kmirror/secrets/<name>/`."""
    if prefix is None:
        prefix = f"kafka-mirror/{pulumi.get_project()}/{pulumi.get_stack()}/"
    return f"{prefix}{secret_name}"


def store_secret(
    parent: pulumi.ComponentResource,
    name: str,
    args: SecretStoreArgs | None,
    text_values: dict[str, pulumi.Input[str]],
    binary_b64_values: dict[str, pulumi.Input[str]] | None = None,
    kubeconfig: pulumi.Input[str] | None = None,
) -> StoredSecret:
    """Create the child Secret holding `text_values` (+ base64 `binary_b64_values`) as pulumi secrets;
    on kubernetes through a provider made from `kubeconfig` when given (else the program's provider).

    Raises ValueError for a `target` other than kubernetes or aws."""
    store: SecretStoreArgs = args or {}
    target = store.get("target", "kubernetes")
    if target not in TARGETS:
        raise ValueError(f"{name}: target must be one of {', '.join(TARGETS)}, got {target!r}")
    secret_name = dns_label(store.get("secret_name") or f"kmirror-{name}")
    binary = binary_b64_values or {}
    opts = pulumi.ResourceOptions(parent=parent)
    if target == "kubernetes":
        secret_opts = pulumi.ResourceOptions(parent=parent, additional_secret_outputs=["data", "stringData"])
        if kubeconfig is not None:
            provider = k8s.Provider(f"{name}-k8s", kubeconfig=pulumi.Output.secret(kubeconfig), opts=opts)
            secret_opts = pulumi.ResourceOptions.merge(secret_opts, pulumi.ResourceOptions(provider=provider))
        secret = k8s.core.v1.Secret(
            f"{name}-secret",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=secret_name,
                namespace=store.get("namespace", DEFAULT_NAMESPACE),
                labels={"app.kubernetes.io/part-of": "kafka-mirror", **(store.get("labels") or {})},
            ),
            type="Opaque",
            string_data={k: pulumi.Output.secret(v) for k, v in text_values.items()},
            data={k: pulumi.Output.secret(v) for k, v in binary.items()},
            opts=secret_opts,
        )
        return StoredSecret(secret_name, secret_mount_dir(secret_name), None, secret)
    sm_secret = aws.secretsmanager.Secret(
        f"{name}-secret",
        name=aws_secret_name(secret_name, store.get("aws_name_prefix")),
        description=f"kafka-mirror {name}",
        recovery_window_in_days=int(store.get("recovery_window_days", 7)),
        tags={"part-of": "kafka-mirror"},
        opts=opts,
    )
    merged: dict[str, Any] = {**text_values, **{f"{k}.b64": v for k, v in binary.items()}}
    payload: pulumi.Output[str] = pulumi.Output.all(**merged).apply(lambda values: json.dumps(values, sort_keys=True))
    version = aws.secretsmanager.SecretVersion(
        f"{name}-secret-version",
        secret_id=sm_secret.id,
        secret_string=pulumi.Output.secret(payload),  # type: ignore[arg-type]  # Output.secret's stub is too narrow
        opts=pulumi.ResourceOptions(parent=parent, additional_secret_outputs=["secretString"]),
    )
    return StoredSecret(secret_name, f"{SECRETS_ROOT}/{secret_name}/", sm_secret.arn, version)
