"""TlsSecret: the CA bundle and optional client certificate/key (and key password) for a cluster.

Keys: `ca.pem`, `cert.pem`, `key.pem`, `key-password`, `keystore.p12` (PKCS#12, given base64),
`keystore-password`. The topology references them as `tls: {ca: {k8s_secret: <secret_name>, key: ca.pem}, ...}`.
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

from typing import Any, TypedDict

import pulumi
from typing_extensions import NotRequired

from kafka_mirror.secrets.store import SecretStoreArgs, store_secret

TOKEN = "kafka-mirror:index:TlsSecret"


class TlsSecretArgs(TypedDict):
    """Arguments of TlsSecret."""

    ca_pem: pulumi.Input[str]
    """PEM of the CA(s) that signed the brokers' certificates (key `ca.pem`)."""
    cert_pem: NotRequired[pulumi.Input[str]]
    """PEM of the mirror's client certificate (key `cert.pem`); goes with `key_pem`."""
    key_pem: NotRequired[pulumi.Input[str]]
    """PEM of the client certificate's private key (key `key.pem`), stored as a secret."""
    key_password: NotRequired[pulumi.Input[str]]
    """Password of an encrypted `key_pem` (key `key-password`)."""
    pkcs12_b64: NotRequired[pulumi.Input[str]]
    """A PKCS#12 keystore, base64 (binary key `keystore.p12`)."""
    pkcs12_password: NotRequired[pulumi.Input[str]]
    """The keystore's password (key `keystore-password`)."""
    store: NotRequired[SecretStoreArgs]
    """Where the secret goes (default: a Kubernetes Secret `kmirror-<name>` in namespace `kmirror`)."""
    kubeconfig: NotRequired[pulumi.Input[str]]
    """`store.target` kubernetes: the cluster's kubeconfig (keep it a secret); the Secret is made through a
    provider from it, never through the ambient kubeconfig, whose current context may be another cluster
    (default: the program's Kubernetes provider)."""


class TlsSecret(pulumi.ComponentResource):
    """A cluster's TLS material for the mirror (CA, optional client certificate and key); never outputs a key."""

    secret_name: pulumi.Output[str]
    """The Secret's name (what the topology's `{k8s_secret: ...}` references name)."""
    mount_path: pulumi.Output[str]
    """Where the app reads the Secret's keys (`/etc/kmirror/secrets/<secret_name>/`)."""
    keys: pulumi.Output[list[str]]
    """The file names present (e.g. `ca.pem`, `cert.pem`, `key.pem`)."""
    secret_arn: pulumi.Output[str | None]
    """The Secrets Manager ARN (target `aws` only)."""

    def __init__(self, name: str, args: TlsSecretArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        if (args.get("cert_pem") is None) != (args.get("key_pem") is None):
            raise ValueError(f"TlsSecret {name}: cert_pem and key_pem go together (a client certificate)")
        super().__init__(TOKEN, name, {}, opts)
        candidates: dict[str, Any] = {
            "ca.pem": args["ca_pem"],
            "cert.pem": args.get("cert_pem"),
            "key.pem": args.get("key_pem"),
            "key-password": args.get("key_password"),
            "keystore-password": args.get("pkcs12_password"),
        }
        text = {k: v for k, v in candidates.items() if v is not None}
        pkcs12 = args.get("pkcs12_b64")
        binary = {"keystore.p12": pkcs12} if pkcs12 is not None else {}
        stored = store_secret(self, name, args.get("store"), text, binary, kubeconfig=args.get("kubeconfig"))
        self.secret_name = pulumi.Output.from_input(stored.secret_name)
        self.mount_path = pulumi.Output.from_input(stored.mount_path)
        self.keys = pulumi.Output.from_input(sorted([*text, *binary]))
        self.secret_arn = stored.secret_arn  # type: ignore[assignment]  # None on kubernetes: no output
        self.secret_resource = stored.resource  # dependency handle for pods/steps that mount it
        self.register_outputs(stored.outputs(secret_name=self.secret_name, mount_path=self.mount_path, keys=self.keys))
