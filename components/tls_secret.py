"""TlsSecret: the CA bundle and optional client certificate/key (and key password) for a cluster.

Keys: `ca.pem`, `cert.pem`, `key.pem`, `key-password`, `keystore.p12.b64`-style binaries for PKCS#12.
The topology references them as `tls: {ca: {k8s_secret: <secret_name>, key: ca.pem}, ...}`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from components.secret_store import SecretStoreArgs, store_secret

TOKEN = "kafka-mirror:index:TlsSecret"


@dataclass
class TlsSecretArgs:
    ca_pem: pulumi.Input[str]
    cert_pem: pulumi.Input[str] | None = None
    key_pem: pulumi.Input[str] | None = None
    key_password: pulumi.Input[str] | None = None
    pkcs12_b64: pulumi.Input[str] | None = None
    pkcs12_password: pulumi.Input[str] | None = None
    store: SecretStoreArgs = field(default_factory=SecretStoreArgs)


class TlsSecret(pulumi.ComponentResource):
    """Outputs: `secret_name`, `mount_path`, `keys` (the file names present); never a key or password."""

    def __init__(self, name: str, args: TlsSecretArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, {}, opts)
        if (args.cert_pem is None) != (args.key_pem is None):
            raise ValueError(f"TlsSecret {name}: cert_pem and key_pem go together (a client certificate)")
        candidates = {"ca.pem": args.ca_pem, "cert.pem": args.cert_pem, "key.pem": args.key_pem,
                      "key-password": args.key_password, "keystore-password": args.pkcs12_password}  # fmt: skip
        text = {k: v for k, v in candidates.items() if v is not None}
        binary = {"keystore.p12": args.pkcs12_b64} if args.pkcs12_b64 is not None else {}
        stored = store_secret(self, name, args.store, text, binary)
        self.secret_name = pulumi.Output.from_input(stored.secret_name)
        self.mount_path = pulumi.Output.from_input(stored.mount_path)
        self.keys = pulumi.Output.from_input(sorted([*text, *binary]))
        self.secret_arn = stored.secret_arn
        self.secret_resource = stored.resource  # dependency handle for pods/steps that mount it
        outputs = {"secret_name": self.secret_name, "mount_path": self.mount_path, "keys": self.keys}
        if stored.secret_arn is not None:
            outputs["secret_arn"] = stored.secret_arn
        self.register_outputs(outputs)
