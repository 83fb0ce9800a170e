"""KerberosSecret: the mirror principal's keytab (binary, given base64) and optionally krb5.conf
(rendered from realm + KDCs by kmirror.kerberos when not given).

The topology references it as `kerberos: {principal: P, keytab: {k8s_secret: <secret_name>, key: keytab},
krb5_conf: {k8s_secret: <secret_name>, key: krb5.conf}}`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi

from components.secret_store import SecretStoreArgs, store_secret
from kmirror.kerberos import render_krb5_conf

TOKEN = "kafka-mirror:index:KerberosSecret"


@dataclass
class KerberosSecretArgs:
    principal: str
    keytab_b64: pulumi.Input[str]  # e.g. config.require_secret("mirrormakerKeytabB64") (base64 of the keytab)
    krb5_conf: str | None = None
    realm: str | None = None
    kdcs: list[str] | None = None
    store: SecretStoreArgs = field(default_factory=SecretStoreArgs)


class KerberosSecret(pulumi.ComponentResource):
    """Outputs: `secret_name`, `mount_path`, `principal`, `keytab_path`, `krb5_conf_path`; never the keytab."""

    def __init__(self, name: str, args: KerberosSecretArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, {}, opts)
        krb5_conf = args.krb5_conf
        if krb5_conf is None and args.realm and args.kdcs:
            krb5_conf = render_krb5_conf(args.realm, args.kdcs)
        text = {"krb5.conf": krb5_conf} if krb5_conf is not None else {}
        stored = store_secret(self, name, args.store, dict(text), {"keytab": args.keytab_b64})
        self.secret_name = pulumi.Output.from_input(stored.secret_name)
        self.mount_path = pulumi.Output.from_input(stored.mount_path)
        self.principal = pulumi.Output.from_input(args.principal)
        self.keytab_path = pulumi.Output.from_input(f"{stored.mount_path}keytab")
        self.krb5_conf_path = pulumi.Output.from_input(f"{stored.mount_path}krb5.conf" if text else "")
        self.secret_arn = stored.secret_arn
        self.secret_resource = stored.resource  # dependency handle for pods/steps that mount it
        outputs = {"secret_name": self.secret_name, "mount_path": self.mount_path, "principal": self.principal,
                   "keytab_path": self.keytab_path, "krb5_conf_path": self.krb5_conf_path}  # fmt: skip
        if stored.secret_arn is not None:
            outputs["secret_arn"] = stored.secret_arn
        self.register_outputs(outputs)
