"""Create the stack's secrets (from `kafka-mirror:secrets` and `{pulumi_config: KEY}` references)
as children of a platform component, with the security engineer's components.

On EKS they become Kubernetes Secrets in the apps' namespace; on EMR Secrets Manager secrets
whose ARNs the bootstrap's sync list names. Values stay pulumi secrets throughout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import pulumi

from kafka_mirror.secrets.kerberos import KerberosSecret, KerberosSecretArgs
from kafka_mirror.secrets.scram import ScramSecret, ScramSecretArgs
from kafka_mirror.secrets.store import SecretStoreArgs, store_secret
from kafka_mirror.secrets.tls import TlsSecret, TlsSecretArgs
from kmirror.security.secret_refs import PULUMI_CONFIG_SECRET_KEY, dns_label, pulumi_config_secret_name
from kmirror.stack.config import SecretConfig

STORED_TOKEN = "kafka-mirror:index:StoredSecret"


@dataclass(frozen=True)
class StackSecrets:
    """The stack program's secrets for a platform: each `kafka-mirror:secrets` entry with its
    `resolve_fields`, and the Pulumi config keys referenced as `{pulumi_config: KEY}` with their values."""

    secrets: Sequence[tuple[SecretConfig, Mapping[str, Any]]] = ()
    config_values: Mapping[str, pulumi.Input[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class MadeSecret:
    secret_name: str  # the directory under /etc/kmirror/secrets where the app reads its keys
    resource: pulumi.Resource  # what pods and steps depend on
    arn: pulumi.Output[str] | None  # EMR (Secrets Manager) only


def stack_secret_name(cfg: SecretConfig) -> str:
    """The Secret's name: what the topology references as `{k8s_secret: NAME, key: ...}`."""
    return cfg.name


def resolve_fields(cfg: SecretConfig, require_secret: Any) -> dict[str, Any]:
    """Replace `{config: KEY}` by `require_secret(KEY)` (an Output marked secret). A generic
    secret becomes `{"text": {...}, "binary": {...}}` (binary = base64 values, stored as bytes)."""
    if cfg.type != "generic":
        return {k: require_secret(v["config"]) if isinstance(v, dict) else v for k, v in cfg.fields.items()}
    text: dict[str, Any] = {}
    binary: dict[str, Any] = {}
    for key, value in cfg.fields["keys"].items():
        target = binary if value.get("base64") else text
        target[key] = require_secret(value["config"]) if "config" in value else value["value"]
    return {"text": text, "binary": binary}


class _Stored(pulumi.ComponentResource):
    """Holder of one `store_secret` (generic or config-backed): store_secret needs a component
    parent, and the holder passes the platform's Kubernetes provider down to the Secret."""

    def __init__(self, name: str, opts: pulumi.ResourceOptions) -> None:
        super().__init__(STORED_TOKEN, name, {}, opts)


def _store(
    name: str,
    secret_name: str,
    store: SecretStoreArgs,
    text: Mapping[str, Any],
    binary: Mapping[str, Any],
    opts: pulumi.ResourceOptions,
) -> MadeSecret:
    holder = _Stored(name, opts)
    args: SecretStoreArgs = {**store, "secret_name": secret_name}
    stored = store_secret(holder, name, args, dict(text), dict(binary))
    holder.register_outputs({"secret_name": secret_name, "keys": sorted([*text, *binary])})
    return MadeSecret(secret_name, stored.resource, stored.secret_arn)


def create_stack_secrets(
    parent: pulumi.ComponentResource,
    prefix: str,
    stack_secrets: StackSecrets | None,
    store: SecretStoreArgs,
    providers: Mapping[str, pulumi.ProviderResource] | None = None,
) -> dict[str, MadeSecret]:
    """Secrets keyed by secret name, children `<prefix>-<name>` / `<prefix>-cfg-<key>` of `parent`
    (nothing without `stack_secrets`)."""
    made: dict[str, MadeSecret] = {}
    if stack_secrets is None:
        return made
    opts = pulumi.ResourceOptions(parent=parent, providers=dict(providers or {}))
    for cfg, fields in stack_secrets.secrets:
        name = stack_secret_name(cfg)
        args: Any = {**store, "secret_name": name}
        child = f"{prefix}-{cfg.name}"
        if cfg.type == "generic":
            made[name] = _store(child, name, store, fields["text"], fields["binary"], opts)
            continue
        component: KerberosSecret | ScramSecret | TlsSecret
        if cfg.type == "scram":
            component = ScramSecret(child, cast(ScramSecretArgs, {**fields, "store": args}), opts)
        elif cfg.type == "kerberos":
            component = KerberosSecret(child, cast(KerberosSecretArgs, {**fields, "store": args}), opts)
        else:
            component = TlsSecret(child, cast(TlsSecretArgs, {**fields, "store": args}), opts)
        made[name] = MadeSecret(name, component.secret_resource, cast(Any, component.secret_arn))
    for key, value in sorted(stack_secrets.config_values.items()):
        name = pulumi_config_secret_name(key)
        made[name] = _store(f"{prefix}-cfg-{dns_label(key)}", name, store, {PULUMI_CONFIG_SECRET_KEY: value}, {}, opts)
    return made
