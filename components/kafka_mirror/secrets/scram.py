"""ScramSecret: a SCRAM user's password (and name) for the mirror, as a Kubernetes or Secrets Manager secret.

The topology references it as `scram: {username: U, password: {k8s_secret: <secret_name>, key: password}}`.
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

from typing import TypedDict

import pulumi
from typing_extensions import NotRequired

from kafka_mirror.secrets.store import SecretStoreArgs, store_secret

TOKEN = "kafka-mirror:index:ScramSecret"


class ScramSecretArgs(TypedDict):
    """Arguments of ScramSecret."""

    username: pulumi.Input[str]
    """The SCRAM user the mirror authenticates as (stored under the key `username`)."""
    password: pulumi.Input[str]
    """The user's password, e.g. `config.require_secret("eastScramPassword")`; stored as a secret under `password`."""
    store: NotRequired[SecretStoreArgs]
    """Where the secret goes (default: a Kubernetes Secret `kmirror-<name>` in namespace `kmirror`)."""
    kubeconfig: NotRequired[pulumi.Input[str]]
    """`store.target` kubernetes: the cluster's kubeconfig (keep it a secret); the Secret is made through a
    provider from it, never through the ambient kubeconfig, whose current context may be another cluster
    (default: the program's Kubernetes provider)."""


class ScramSecret(pulumi.ComponentResource):
    """A SCRAM user's credentials for the mirror, as a Kubernetes Secret (EKS) or a Secrets Manager secret (EMR).

    The password never becomes an output; only where the app reads it does.
    """

    secret_name: pulumi.Output[str]
    """The Secret's name (what the topology's `{k8s_secret: ...}` reference names)."""
    mount_path: pulumi.Output[str]
    """Where the app reads the Secret's keys (`/etc/kmirror/secrets/<secret_name>/`)."""
    password_key: pulumi.Output[str]
    """The key holding the password (`password`)."""
    secret_arn: pulumi.Output[str | None]
    """The Secrets Manager ARN (target `aws` only)."""

    def __init__(self, name: str, args: ScramSecretArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, {}, opts)
        text = {"username": args["username"], "password": args["password"]}
        stored = store_secret(self, name, args.get("store"), text, kubeconfig=args.get("kubeconfig"))
        self.secret_name = pulumi.Output.from_input(stored.secret_name)
        self.mount_path = pulumi.Output.from_input(stored.mount_path)
        self.password_key = pulumi.Output.from_input("password")
        self.secret_arn = stored.secret_arn  # type: ignore[assignment]  # None on kubernetes: no output
        self.secret_resource = stored.resource  # dependency handle for pods/steps that mount it
        self.register_outputs(
            stored.outputs(secret_name=self.secret_name, mount_path=self.mount_path, password_key=self.password_key)
        )
