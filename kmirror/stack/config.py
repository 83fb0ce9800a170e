"""The one reader of a stack's `kafka-mirror:*` configuration, for the CLI, the policy pack and the
Pulumi program (no pulumi import):

    kafka-mirror:datacenter: east                   # required: flows whose run_in is this are deployed
    kafka-mirror:topology: stacks/topology.yaml     # default
    kafka-mirror:spark: {platform: eks | emr, ...}  # kmirror.stack.models: EksSparkConfig / EmrSparkConfig
    kafka-mirror:secrets: {NAME: {type: scram | kerberos | tls | generic, ...}}   # SECRET_TYPES below

`parse_stack_config` validates the keys in one pass: the Pulumi program gives it what
`pulumi.Config("kafka-mirror")` holds; `read_stack_config` gives it a stack file
(`stacks/Pulumi.<stack>.yaml`), so `kmirror plan --stack NAME` shows exactly what
`pulumi up -s NAME` deploys without the Pulumi CLI. Planning needs only `datacenter` and
`topology` (`plan_only=True`: the CLI and the policy pack's estate); a deploy needs every key.
Relative topology paths of a stack file are relative to the project (the folder of `stacks/`).

`spark` is checked by its platform's pydantic model, then by the rules that span several keys
(`_eks_rules`, `_emr_rules`). A secret's NAME is the Kubernetes Secret's name / the directory the
app reads, i.e. what the topology references as `{k8s_secret: NAME, key: ...}`.

Every problem is collected and raised once as a `kmirror.errors.ValidationError` whose paths
name the config key (`kafka-mirror:spark.cluster.nodes`), with "did you mean" for typos.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pydantic
import yaml
from pydantic import BaseModel

from kmirror.errors import Problem, Problems, ValidationError, did_you_mean
from kmirror.option_table import bound_message, unknown_key_message, unknown_keys
from kmirror.stack.models import MODELS, PLATFORMS
from kmirror.stack.platform_rules import (  # noqa: F401 (re-exported: their import path before the split)
    KMS_KEY_ARN,
    _bucket_key_problems,
    _eks_rules,
    _emr_rules,
    _first_up_problems,
)

DEFAULT_TOPOLOGY = "stacks/topology.yaml"
NAMESPACE = "kafka-mirror"
NS = NAMESPACE
STACKS_DIR = "stacks"
SECRET_TYPES = {
    "scram": ({"username", "password"}, {"username", "password"}),
    "kerberos": ({"principal", "keytab_b64"}, {"principal", "keytab_b64", "krb5_conf", "realm", "kdcs"}),
    "tls": ({"ca_pem"}, {"ca_pem", "cert_pem", "key_pem", "key_password", "pkcs12_b64", "pkcs12_password"}),
    # Any key names: {KEY: {config: CONFIG_KEY, base64: true|false} | {value: "not secret"}}
    "generic": ({"keys"}, {"keys"}),
}
# Fields that must come from Pulumi secret config (`{config: KEY}`), never inline.
SECRET_FIELDS = {"password", "keytab_b64", "key_pem", "key_password", "pkcs12_b64", "pkcs12_password"}
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class SecretConfig:
    """One secret component to create; values are `{config: KEY}` references or plain strings."""

    name: str
    type: str
    fields: dict[str, Any]


@dataclass(frozen=True)
class StackConfig:
    """A stack's validated `kafka-mirror:*` settings."""

    datacenter: str
    topology: str  # as configured (parse_stack_config); resolved against the project (read_stack_config)
    platform: str = ""
    spark: dict[str, Any] = field(default_factory=dict)  # the keys the stack set, validated (nested as dicts)
    secrets: tuple[SecretConfig, ...] = field(default_factory=tuple)
    model: Any = None  # the EksSparkConfig / EmrSparkConfig, defaults filled in (not with plan_only)
    name: str = ""  # the stack (read_stack_config)
    config: dict[str, Any] = field(default_factory=dict)  # the file's whole `config:`, e.g. aws:region

    def get(self, key: str, default: Any = None) -> Any:
        return self.spark.get(key, default)


def _model_at(model: Any, loc: tuple[Any, ...]) -> Any:
    """The pydantic model class found by following `loc` (field names, list indexes) from `model`."""
    for part in loc:
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or part not in model.model_fields:
            continue  # an index or a union branch: stay on the nearest model
        annotation = model.model_fields[part].annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        for arg in list(candidates):
            candidates += list(getattr(arg, "__args__", ()))
        model = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), model)
    return model


def _message(error: Any, root: type[BaseModel]) -> str:
    kind, ctx, value = error["type"], error.get("ctx") or {}, error.get("input")
    if kind == "extra_forbidden":
        allowed = list(_model_at(root, tuple(error["loc"][:-1])).model_fields)
        return unknown_key_message(error["loc"][-1], allowed, list_allowed=True)
    if kind == "missing":
        owner, key = _model_at(root, tuple(error["loc"][:-1])), error["loc"][-1]
        described = owner.model_fields[key].description if key in owner.model_fields else None
        return f"required: {described or 'this key is missing'}"
    if kind in ("greater_than_equal", "less_than_equal"):
        bounds = f">= {ctx['ge']}" if "ge" in ctx else f"<= {ctx['le']}"
        return bound_message(bounds, value)
    if kind in ("int_type", "bool_type", "string_type", "list_type", "dict_type", "model_type"):
        wanted = {
            "int": "an integer",
            "bool": "true or false",
            "string": "a string",
            "list": "a list",
            "dict": "a mapping",
            "model": "a mapping",
        }[kind.split("_")[0]]
        return f"must be {wanted}, got {value!r}"
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')}, got {value!r}"
    return f"{error['msg']}, got {value!r}"


def _model_problems(spark: Mapping[str, Any], path: str) -> tuple[Any, list[Problem]]:
    model = MODELS[str(spark["platform"])]
    try:
        return model.model_validate(dict(spark)), []
    except pydantic.ValidationError as exc:
        problems = [
            Problem(".".join([path, *[str(p) for p in e["loc"]]]), _message(e, model))
            for e in exc.errors(include_url=False)
        ]
        return None, problems


def _spark_problems(spark: Mapping[str, Any], path: str) -> tuple[Any, list[Problem]]:
    platform = spark.get("platform")
    if platform not in PLATFORMS:
        return None, [Problem(f"{path}.platform", f"must be one of {', '.join(PLATFORMS)}, got {platform!r}")]
    model, problems = _model_problems(spark, path)
    root = spark.get("checkpoint_root")
    if isinstance(root, str) and "://" not in root and not root.startswith("/"):
        problems.append(Problem(f"{path}.checkpoint_root", f"must be a URI or absolute path, got {root!r}"))
    problems += PLATFORM_RULES[platform](spark, path)
    return model, problems


# The rules across keys of each platform (beside its model, kmirror.stack.models.MODELS).
PLATFORM_RULES: dict[str, Callable[[Mapping[str, Any], str], list[Problem]]] = {"eks": _eks_rules, "emr": _emr_rules}


def _secret_problems(name: str, raw: Any, path: str) -> list[Problem]:
    if not _NAME_RE.fullmatch(name):
        return [Problem(path, f"secret name must be a short lowercase DNS label, got {name!r}")]
    if not isinstance(raw, dict) or raw.get("type") not in SECRET_TYPES:
        return [Problem(f"{path}.type", f"must be one of {', '.join(SECRET_TYPES)}, got {raw!r}")]
    required, allowed = SECRET_TYPES[raw["type"]]
    fields = {k: v for k, v in raw.items() if k != "type"}
    problems = unknown_keys(fields, allowed, path, list_allowed=True)
    problems += [Problem(f"{path}.{k}", "required key is missing") for k in sorted(required - set(fields))]
    if raw["type"] == "generic":
        return problems + _generic_problems(fields.get("keys"), f"{path}.keys")
    for key, value in fields.items():
        is_ref = isinstance(value, dict) and set(value) == {"config"} and isinstance(value["config"], str)
        if key in SECRET_FIELDS and not is_ref:
            problems.append(
                Problem(
                    f"{path}.{key}",
                    "must be {config: KEY} naming a secret config value "
                    "(pulumi config set --secret KEY ...), never inline",
                )
            )
    return problems


def _generic_problems(keys: Any, path: str) -> list[Problem]:
    if not isinstance(keys, dict) or not keys:
        return [Problem(path, f"must map file names to {{config: KEY}} or {{value: TEXT}}, got {keys!r}")]
    problems = []
    for key, value in keys.items():
        if not isinstance(key, str) or not re.fullmatch(r"[-._a-zA-Z0-9]+", key):
            problems.append(Problem(f"{path}.{key}", "must be a secret key name ([-._a-zA-Z0-9]+)"))
        elif not isinstance(value, dict) or not (
            (
                set(value) <= {"config", "base64"}
                and isinstance(value.get("config"), str)
                and isinstance(value.get("base64", False), bool)
            )
            or (set(value) == {"value"} and isinstance(value["value"], str))
        ):
            problems.append(
                Problem(
                    f"{path}.{key}",
                    "must be {config: KEY} (optionally base64: true for binary "
                    "files) or {value: TEXT} for a non-secret value",
                )
            )
    return problems


def parse_stack_config(
    raw: Mapping[str, Any], stack: str = "", *, plan_only: bool = False, in_file: str | None = None
) -> StackConfig:
    """Validate `raw` (config key without namespace -> value, YAML/JSON decoded); raise every problem.

    `plan_only`: check only what planning reads (datacenter, topology). `in_file`: `raw` comes from
    this stack file, so problems name the file, their paths its `config.` keys, and the fix the
    `pulumi config set` command."""
    problems = Problems(in_file or (f"stack {stack}" if stack else "stack config"))
    ns = f"config.{NS}" if in_file else NS
    datacenter = raw.get("datacenter")
    if not isinstance(datacenter, str) or not datacenter:
        fix = f"; run: pulumi config set {NS}:datacenter DC" if in_file else ""
        problems.add(f"{ns}:datacenter", f"required: the datacenter this stack deploys, got {datacenter!r}{fix}")
    topology = raw.get("topology", DEFAULT_TOPOLOGY)
    if not isinstance(topology, str) or not topology:
        problems.add(f"{ns}:topology", f"must be a file path, got {topology!r}")
    spark = raw.get("spark")
    if plan_only:
        problems.raise_if_any()
        platform = spark.get("platform") if isinstance(spark, Mapping) else None
        return StackConfig(str(datacenter), str(topology), platform if isinstance(platform, str) else "")
    model = None
    if not isinstance(spark, dict):
        problems.add(f"{ns}:spark", f"required mapping with platform: eks|emr, got {spark!r}")
        spark = {}
    else:
        model, found = _spark_problems(spark, f"{ns}:spark")
        problems.extend(found)
    secrets_raw = raw.get("secrets") or {}
    if not isinstance(secrets_raw, dict):
        problems.add(f"{ns}:secrets", f"must be a mapping of secret name to settings, got {secrets_raw!r}")
        secrets_raw = {}
    for name, value in secrets_raw.items():
        problems.extend(_secret_problems(str(name), value, f"{ns}:secrets.{name}"))
    problems.raise_if_any()
    secrets = tuple(
        SecretConfig(str(n), v["type"], {k: x for k, x in v.items() if k != "type"})
        for n, v in sorted(secrets_raw.items())
    )
    validated = model.model_dump(exclude_unset=True) if model is not None else {}
    return StackConfig(str(datacenter), str(topology), str(spark["platform"]), validated, secrets, model)


def stack_file(name: str, stacks_dir: str | Path = STACKS_DIR) -> Path:
    return Path(stacks_dir) / f"Pulumi.{name}.yaml"


def available_stacks(stacks_dir: str | Path = STACKS_DIR) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in Path(stacks_dir).glob("Pulumi.*.yaml"))


def read_stack_config(name: str, stacks_dir: str | Path = STACKS_DIR, *, plan_only: bool = True) -> StackConfig:
    """Stack `name`'s file, validated by `parse_stack_config` (by default only what planning reads:
    `kafka-mirror:datacenter` and `kafka-mirror:topology`), its topology path resolved.

    Raises ValidationError (exit 2) naming the file and key when the stack or a key is missing or wrong.
    """
    path = stack_file(name, stacks_dir)
    if not path.is_file():
        stacks = available_stacks(stacks_dir)
        hint = did_you_mean(name, stacks) or f"; stacks here: {', '.join(stacks) or 'none'}"
        raise ValidationError([Problem("--stack", f"no stack config {str(path)!r}{hint}")])
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValidationError([Problem("", f"not valid YAML: {exc}")], str(path)) from None
    config = raw.get("config") if isinstance(raw, dict) else None
    config = config if isinstance(config, dict) else {}
    prefix = f"{NAMESPACE}:"
    keys = {k.removeprefix(prefix): v for k, v in config.items() if isinstance(k, str) and k.startswith(prefix)}
    stack = parse_stack_config(keys, name, plan_only=plan_only, in_file=str(path))
    topology_path = Path(stack.topology)
    if not topology_path.is_absolute():
        topology_path = Path(stacks_dir).resolve().parent / topology_path
    return replace(stack, name=name, topology=str(topology_path), config=config)
