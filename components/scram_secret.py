"""ScramSecret: a SCRAM user's password (and name) for the mirror, as a Kubernetes or Secrets Manager secret.

The topology references it as `scram: {username: U, password: {k8s_secret: <secret_name>, key: password}}`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from components.secret_store import SecretStoreArgs, store_secret

TOKEN = "kafka-mirror:index:ScramSecret"


@dataclass
class ScramSecretArgs:
    username: str
    password: pulumi.Input[str]  # e.g. config.require_secret("eastScramPassword")
    store: SecretStoreArgs = field(default_factory=SecretStoreArgs)


class ScramSecret(pulumi.ComponentResource):
    """Outputs: `secret_name`, `mount_path`, `password_key` (and `secret_arn` on aws); never the password."""

    def __init__(self, name: str, args: ScramSecretArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, {}, opts)
        stored = store_secret(self, name, args.store, {"username": args.username, "password": args.password})
        self.secret_name = pulumi.Output.from_input(stored.secret_name)
        self.mount_path = pulumi.Output.from_input(stored.mount_path)
        self.password_key = pulumi.Output.from_input("password")
        self.secret_arn = stored.secret_arn
        self.secret_resource = stored.resource  # dependency handle for pods/steps that mount it
        outputs = {"secret_name": self.secret_name, "mount_path": self.mount_path, "password_key": self.password_key}
        if stored.secret_arn is not None:
            outputs["secret_arn"] = stored.secret_arn
        self.register_outputs(outputs)
