"""Secret references: how the topology names a secret without containing it.

A REF is one of these mappings (docs/security.md):

- `{file: /abs/path}`                   a local file (demo, tests, pre-provisioned hosts)
- `{env: VAR}`                          an environment variable of the app's process
- `{k8s_secret: NAME, key: KEY}`        a Kubernetes Secret, mounted read-only by the EKS
                                        components at `/etc/kmirror/secrets/NAME/KEY`
- `{aws_secret: ARN, key: KEY}`         a Secrets Manager secret (JSON), written by the EMR
                                        bootstrap to `/etc/kmirror/secrets/<name from ARN>/KEY`
- `{pulumi_config: KEY}`                a Pulumi secret config value, materialised by the
                                        components as the Secret `kmirror-cfg-<key>` (key `value`)

Every REF is turned into a file path the app can read (`ref_location`) or, for values
librdkafka wants inline (passwords, PEM text), into a *reference string* `${file:PATH}` or
`${env:VAR}` (`ref_value`). Reference strings travel through plans and flow specs; only
`resolve_references`, called right before a Kafka client is created, reads the secret.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kmirror.errors import KmirrorError, Problem
from kmirror.option_table import unknown_keys

SECRETS_ROOT = "/etc/kmirror/secrets"
PULUMI_CONFIG_SECRET_KEY = "value"
REF_KINDS = ("file", "env", "k8s_secret", "aws_secret", "pulumi_config")
REF_HINT = "{env: VAR}, {file: PATH}, {k8s_secret: NAME, key: KEY} or {pulumi_config: KEY}"
_REF_KEYS = {
    "file": {"file"},
    "env": {"env"},
    "k8s_secret": {"k8s_secret", "key"},
    "aws_secret": {"aws_secret", "key"},
    "pulumi_config": {"pulumi_config"},
}
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
_REFERENCE_RE = re.compile(r"^\$\{(file|env):([^}]+)\}$")
# Absolute paths of plain segments: no spaces, quotes, `$`, `;`, backticks or newlines, which
# would change meaning where a path reaches a shell (librdkafka's kinit command) or a config file.
PATH_RE = re.compile(r"^(/[A-Za-z0-9._+@=,-]+)+/?$")
PATH_HINT = "an absolute path of letters, digits and . _ + @ = , - (e.g. /etc/kmirror/east.keytab)"


def dns_label(text: str, max_len: int = 63) -> str:
    """`text` as a lowercase DNS label (Kubernetes object names, directory names)."""
    label = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return label[:max_len].strip("-") or "secret"


def secret_mount_dir(secret_name: str) -> str:
    """Where the EKS components mount the Secret `secret_name` inside the app's pods."""
    return f"{SECRETS_ROOT}/{secret_name}/"


def pulumi_config_secret_name(config_key: str) -> str:
    """Name of the Secret the components create for `{pulumi_config: KEY}`."""
    return dns_label(f"kmirror-cfg-{config_key}")


def aws_secret_local_name(arn: str) -> str:
    """Directory name (under SECRETS_ROOT) the EMR bootstrap writes an ARN's keys into.

    `arn:aws:secretsmanager:eu-west-1:123:secret:prod/kafka-AbCdEf` -> `prod-kafka-abcdef`.
    """
    return dns_label(arn.split(":secret:", 1)[-1])


def ref_problems(ref: Any, path: str, *, secret: bool, needs_file: bool = False) -> list[Problem]:
    """Problems of one REF at `path`; a literal string is rejected (with the secret-safe message)."""
    if isinstance(ref, str):
        if secret:
            return [Problem(path, f"a literal secret is not allowed in the topology file; use {REF_HINT}")]
        return [Problem(path, f"must be a reference such as {{file: {ref}}}; use {REF_HINT}")]
    if not isinstance(ref, dict) or not ref:
        return [Problem(path, f"must be a reference mapping: {REF_HINT}; got {type(ref).__name__}")]
    kinds = [k for k in REF_KINDS if k in ref]
    if len(kinds) != 1:
        return [Problem(path, f"must have exactly one of {', '.join(REF_KINDS)}; got keys {sorted(ref)}")]
    kind = kinds[0]
    problems = unknown_keys(ref, _REF_KEYS[kind], path, what=f"key for a {kind} reference")
    problems += [Problem(f"{path}.{k}", "required key is missing") for k in sorted(_REF_KEYS[kind] - set(ref))]
    if problems:
        return problems
    value = ref[kind]
    if not isinstance(value, str) or not value:
        return [Problem(f"{path}.{kind}", f"must be a non-empty string, got {value!r}")]
    if kind == "file" and not value.startswith("/"):
        problems.append(Problem(f"{path}.file", f"must be an absolute path, got {value!r}"))
    elif kind == "file" and not PATH_RE.fullmatch(value):
        problems.append(Problem(f"{path}.file", f"must be {PATH_HINT}, got {value!r}"))
    if kind == "env" and not _ENV_RE.fullmatch(value):
        problems.append(Problem(f"{path}.env", f"must be an environment variable name, got {value!r}"))
    if kind == "env" and needs_file:
        problems.append(
            Problem(path, "this field must be a file; use {file: PATH}, {k8s_secret: ...} or {aws_secret: ...}")
        )
    if kind == "k8s_secret" and not _DNS_RE.fullmatch(value):
        problems.append(
            Problem(f"{path}.k8s_secret", f"must be a Kubernetes object name (lowercase DNS), got {value!r}")
        )
    if kind == "aws_secret" and not value.startswith("arn:aws"):
        problems.append(Problem(f"{path}.aws_secret", f"must be a Secrets Manager ARN (arn:aws:...), got {value!r}"))
    if "key" in ref and (not isinstance(ref["key"], str) or not _SECRET_KEY_RE.fullmatch(ref["key"])):
        problems.append(Problem(f"{path}.key", f"must be a secret key name ([-._a-zA-Z0-9]+), got {ref['key']!r}"))
    return problems


def ref_location(ref: Mapping[str, str]) -> str:
    """The file path the app reads a (valid, non-env) REF from."""
    if "file" in ref:
        return ref["file"]
    if "k8s_secret" in ref:
        return f"{secret_mount_dir(ref['k8s_secret'])}{ref['key']}"
    if "aws_secret" in ref:
        return f"{secret_mount_dir(aws_secret_local_name(ref['aws_secret']))}{ref['key']}"
    if "pulumi_config" in ref:
        return f"{secret_mount_dir(pulumi_config_secret_name(ref['pulumi_config']))}{PULUMI_CONFIG_SECRET_KEY}"
    raise KmirrorError(f"reference {dict(ref)!r} has no file location; use {{file: PATH}} for this field")


def ref_value(ref: Mapping[str, str]) -> str:
    """The reference string (`${env:VAR}` or `${file:PATH}`) standing for the REF's value."""
    if "env" in ref:
        return f"${{env:{ref['env']}}}"
    return f"${{file:{ref_location(ref)}}}"


@dataclass(frozen=True)
class Materialisation:
    """A secret the deployment must place at `path` before the app starts (Pulumi/EMR use this)."""

    kind: str  # k8s_secret | aws_secret | pulumi_config
    source: str  # Secret name, ARN or Pulumi config key
    key: str
    path: str


def materialisation(ref: Mapping[str, str]) -> Materialisation | None:
    """What must be mounted/written for this REF; None for `file` and `env` (already there)."""
    if "k8s_secret" in ref:
        return Materialisation("k8s_secret", ref["k8s_secret"], ref["key"], ref_location(ref))
    if "aws_secret" in ref:
        return Materialisation("aws_secret", ref["aws_secret"], ref["key"], ref_location(ref))
    if "pulumi_config" in ref:
        return Materialisation("pulumi_config", ref["pulumi_config"], PULUMI_CONFIG_SECRET_KEY, ref_location(ref))
    return None


def is_reference(value: Any) -> bool:
    """True for a `${file:PATH}` / `${env:VAR}` reference string."""
    return isinstance(value, str) and _REFERENCE_RE.fullmatch(value) is not None


def resolve_reference(name: str, value: str) -> str:
    """The secret a reference string stands for; raises KmirrorError naming property and reference.

    Files are read as UTF-8 with one trailing newline removed (as `echo secret > file` leaves it).
    The error never contains the resolved value, only where it should have come from.
    """
    match = _REFERENCE_RE.fullmatch(value)
    if match is None:
        return value
    kind, where = match.groups()
    if kind == "env":
        if where not in os.environ:
            raise KmirrorError(
                f"{name}: reference {value} cannot be resolved: environment variable {where} is not set; "
                "set it in the app's environment (or use a {file: PATH} reference)"
            )
        return os.environ[where]
    try:
        with open(where, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as exc:
        raise KmirrorError(
            f"{name}: reference {value} cannot be resolved: {exc.strerror or 'unreadable'}; "
            "create the file (mount the Secret / run the EMR bootstrap) or fix the reference"
        ) from None
    return text[:-1] if text.endswith("\n") else text
