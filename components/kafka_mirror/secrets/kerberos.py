"""KerberosSecret: the mirror principal's keytab (binary, given base64) and optionally krb5.conf
(rendered from realm + KDCs by kmirror.security.kerberos when not given).

The topology references it as `kerberos: {principal: P, keytab: {k8s_secret: <secret_name>, key: keytab},
krb5_conf: {k8s_secret: <secret_name>, key: krb5.conf}}`.
(No `from __future__ import annotations`: Pulumi's component analyzer reads these annotations.)
"""

from typing import Any, TypedDict

import pulumi
from typing_extensions import NotRequired

from kafka_mirror.secrets.store import SecretStoreArgs, store_secret
from kmirror.security.kerberos import render_krb5_conf

TOKEN = "kafka-mirror:index:KerberosSecret"


class KerberosSecretArgs(TypedDict):
    """Arguments of KerberosSecret."""

    principal: pulumi.Input[str]
    """The mirror's Kerberos principal, e.g. `mirrormaker/central@EXAMPLE.COM`."""
    keytab_b64: pulumi.Input[str]
    """The keytab, base64, e.g. `config.require_secret("mirrormakerKeytabB64")`; stored as binary key `keytab`."""
    krb5_conf: NotRequired[pulumi.Input[str]]
    """krb5.conf text (key `krb5.conf`); when absent it is rendered from `realm` and `kdcs`."""
    realm: NotRequired[str]
    """The Kerberos realm, for a rendered krb5.conf."""
    kdcs: NotRequired[list[str]]
    """The KDCs (`host[:port]`), for a rendered krb5.conf."""
    store: NotRequired[SecretStoreArgs]
    """Where the secret goes (default: a Kubernetes Secret `kmirror-<name>` in namespace `kmirror`)."""
    kubeconfig: NotRequired[pulumi.Input[str]]
    """`store.target` kubernetes: the cluster's kubeconfig (keep it a secret); the Secret is made through a
    provider from it, never through the ambient kubeconfig, whose current context may be another cluster
    (default: the program's Kubernetes provider)."""


class KerberosSecret(pulumi.ComponentResource):
    """The mirror principal's keytab and krb5.conf as a Kubernetes or Secrets Manager secret; never outputs
    the keytab."""

    secret_name: pulumi.Output[str]
    """The Secret's name (what the topology's `{k8s_secret: ...}` references name)."""
    mount_path: pulumi.Output[str]
    """Where the app reads the Secret's keys (`/etc/kmirror/secrets/<secret_name>/`)."""
    principal: pulumi.Output[str]
    """The principal given."""
    keytab_path: pulumi.Output[str]
    """Where the app reads the keytab."""
    krb5_conf_path: pulumi.Output[str]
    """Where the app reads krb5.conf (empty when none was given or rendered)."""
    secret_arn: pulumi.Output[str | None]
    """The Secrets Manager ARN (target `aws` only)."""

    def __init__(self, name: str, args: KerberosSecretArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TOKEN, name, {}, opts)
        krb5_conf: Any = args.get("krb5_conf")
        realm, kdcs = args.get("realm"), args.get("kdcs")
        if krb5_conf is None and realm and kdcs:
            krb5_conf = render_krb5_conf(realm, list(kdcs))
        text = {"krb5.conf": krb5_conf} if krb5_conf is not None else {}
        stored = store_secret(
            self, name, args.get("store"), dict(text), {"keytab": args["keytab_b64"]}, kubeconfig=args.get("kubeconfig")
        )
        self.secret_name = pulumi.Output.from_input(stored.secret_name)
        self.mount_path = pulumi.Output.from_input(stored.mount_path)
        self.principal = pulumi.Output.from_input(args["principal"])
        self.keytab_path = pulumi.Output.from_input(f"{stored.mount_path}keytab")
        self.krb5_conf_path = pulumi.Output.from_input(f"{stored.mount_path}krb5.conf" if text else "")
        self.secret_arn = stored.secret_arn  # type: ignore[assignment]  # None on kubernetes: no output
        self.secret_resource = stored.resource  # dependency handle for pods/steps that mount it
        self.register_outputs(
            stored.outputs(
                secret_name=self.secret_name,
                mount_path=self.mount_path,
                principal=self.principal,
                keytab_path=self.keytab_path,
                krb5_conf_path=self.krb5_conf_path,
            )
        )
