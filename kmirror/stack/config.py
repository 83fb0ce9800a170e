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
from kmirror.stack.deploy_layout import CHECKPOINT_MOUNT, DIGEST_RE
from kmirror.stack.models import MODELS, PLATFORMS, RWX

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


def _eks_rules(spark: Mapping[str, Any], path: str) -> list[Problem]:
    """Rules across keys of an EKS stack (run on the raw mapping, so they are reported next to
    type errors)."""
    problems = []
    image, pull = spark.get("image"), spark.get("image_pull_policy")
    if isinstance(image, str) and image and not DIGEST_RE.match(image) and pull != "Never":
        # A tag can be moved under a running app: the next executor would run other code.
        problems.append(
            Problem(
                f"{path}.image",
                f"{image!r} is not pinned by digest; use REPO[:TAG]@sha256:<digest> "
                "(CI feeds the pushed image's digest; image_pull_policy: Never for local images)",
            )
        )
    root, pvc = spark.get("checkpoint_root"), spark.get("checkpoint_pvc")
    if root is None and pvc is None:
        problems.append(
            Problem(f"{path}.checkpoint_root", "required (e.g. s3a://BUCKET/checkpoints) unless checkpoint_pvc is set")
        )
    elif isinstance(root, str) and root.startswith("/") and not root.startswith(CHECKPOINT_MOUNT):
        # A path inside the pod is lost with the pod: the mirror would restart from starting_offsets.
        problems.append(
            Problem(
                f"{path}.checkpoint_root",
                f"{root!r} is not durable on Kubernetes; use "
                f"s3a://BUCKET/PREFIX or checkpoint_pvc (mounted at {CHECKPOINT_MOUNT})",
            )
        )
    if isinstance(pvc, dict):
        mode = pvc.get("access_mode", RWX)
        if mode != RWX:
            problems.append(
                Problem(
                    f"{path}.checkpoint_pvc.access_mode",
                    f"{mode!r} refused: the driver and every "
                    "executor of every flow mount the claim, on different nodes; a ReadWriteOnce "
                    "volume (EBS) attaches to one node and the other pods fail with Multi-Attach "
                    "errors. Use ReadWriteMany with an RWX class (EFS: efs-sc) or checkpoint_root: "
                    "s3a://BUCKET/PREFIX",
                )
            )
        if not pvc.get("storage_class"):
            problems.append(
                Problem(
                    f"{path}.checkpoint_pvc.storage_class",
                    "required: a ReadWriteMany storage "
                    "class (the cluster's default class is usually ReadWriteOnce EBS)",
                )
            )
    monitoring: dict[str, Any] = spark["monitoring"] if isinstance(spark.get("monitoring"), dict) else {}
    wanted = [k for k in ("pod_monitor", "prometheus_rule") if monitoring.get(k) is True]  # else: a type error
    if wanted and not monitoring.get("prometheus"):
        # PodMonitors and rules nobody evaluates page nobody: the operator's CRDs alone are not monitoring.
        problems.append(
            Problem(
                f"{path}.monitoring.prometheus",
                f"required with {' and '.join(wanted)}: the "
                "NAMESPACE/NAME of the Prometheus that selects them (with Alertmanager and "
                "kube-state-metrics, e.g. kube-prometheus-stack's monitoring/kube-prometheus-stack-"
                "prometheus); a cluster without one: install it first, or turn these off",
            )
        )
    cluster: dict[str, Any] = spark["cluster"] if isinstance(spark.get("cluster"), dict) else {}
    if cluster.get("create"):
        for key in ("subnet_ids", "vpc_id"):
            if not cluster.get(key):
                problems.append(Problem(f"{path}.cluster.{key}", "required when cluster.create is true"))
        if "kubeconfig" in spark:
            problems.append(Problem(f"{path}.kubeconfig", "a created cluster brings its own kubeconfig; remove this"))
        if cluster.get("public_access_cidrs") and not cluster.get("endpoint_public_access"):
            problems.append(Problem(f"{path}.cluster.public_access_cidrs", "needs endpoint_public_access: true"))
        problems += _first_up_problems(spark, cluster, path)
    else:
        if spark.get("irsa_policy_arns"):
            problems.append(
                Problem(
                    f"{path}.irsa_policy_arns",
                    "only used for the IRSA role a created "
                    "cluster's stack makes (cluster.create: true); attach them to irsa_role_arn "
                    "instead",
                )
            )
        kube = spark.get("kubeconfig")
        if not isinstance(kube, dict) or not (kube.get("config") or kube.get("file")):
            problems.append(
                Problem(
                    f"{path}.kubeconfig",
                    "required for an existing cluster: {config: SECRET_KEY} "
                    '(pulumi config set --secret SECRET_KEY "$(cat kubeconfig)") or {file: PATH, '
                    "context: NAME}; the ambient kubeconfig is never used",
                )
            )
        elif kube.get("config") and kube.get("file"):
            problems.append(Problem(f"{path}.kubeconfig", "give either config or file, not both"))
    return problems


def _first_up_problems(spark: Mapping[str, Any], cluster: Mapping[str, Any], path: str) -> list[Problem]:
    """What keeps a stack that creates its EKS cluster from converging in one `pulumi up`."""
    problems = []
    if not cluster.get("endpoint_public_access") and not cluster.get("deploy_from_vpc"):
        # Pulumi's Kubernetes provider talks to the new API endpoint in the same run: from a hosted
        # runner a private-only endpoint times out after the cluster exists, half-applied.
        problems.append(
            Problem(
                f"{path}.cluster.endpoint_public_access",
                "false (private API endpoint) but nothing "
                "says the deploying runner can reach it: set cluster.deploy_from_vpc: true when "
                "`pulumi up` runs inside the VPC (self-hosted runner, VPN), or endpoint_public_access: "
                "true with public_access_cidrs: [the runners' egress CIDRs]",
            )
        )
    if cluster.get("deploy_from_vpc") and not (
        cluster.get("runner_security_group_id") or cluster.get("runner_cidr_blocks")
    ):
        # pulumi-eks admits only its nodes to the endpoint: inside the VPC the runner still times out.
        problems.append(
            Problem(
                f"{path}.cluster.deploy_from_vpc",
                "true but the runner is not admitted to the "
                "private API endpoint (pulumi-eks opens 443 to the nodes only): set "
                "cluster.runner_security_group_id (the self-hosted runner's security group) or "
                "cluster.runner_cidr_blocks (its subnets)",
            )
        )
    if spark.get("irsa_role_arn"):
        # A role made before this run cannot trust the OIDC provider this run creates: pods get no AWS credentials.
        problems.append(
            Problem(
                f"{path}.irsa_role_arn",
                f"{spark['irsa_role_arn']!r} cannot trust the OIDC provider "
                "of a cluster this stack creates; remove it: the stack then creates the IRSA role "
                "(S3 access to checkpoint_root, plus irsa_policy_arns)",
            )
        )
    return problems


def _emr_rules(spark: Mapping[str, Any], path: str) -> list[Problem]:
    problems = []
    if "cluster_id" not in spark:
        if not spark.get("release_label"):
            problems.append(Problem(f"{path}.release_label", "required when no cluster_id is given (Spark 4.0+)"))
        if "encryption" not in spark:
            problems.append(
                Problem(
                    f"{path}.encryption",
                    "required for a created cluster: {certificates_zip: "
                    "s3://BUCKET/KEY.zip, kms_key_arn: ARN} (encryption in transit and at rest)",
                )
            )
        if "prometheus" in spark and not spark.get("vpc_id"):
            problems.append(Problem(f"{path}.vpc_id", "required with prometheus: the metrics security group's VPC"))
    if spark.get("protect", True) and spark.get("alarms", True) and not spark.get("alarm_actions"):
        # A production (protected) cluster whose alarms notify nobody pages nobody on day one.
        problems.append(
            Problem(
                f"{path}.alarm_actions",
                "required for a production stack (protect: true): the SNS "
                "topic ARNs the CloudWatch alarms and the step FAILED/CANCELLED rule notify, e.g. "
                "[arn:aws:sns:REGION:ACCOUNT:kafka-mirror-oncall]; or protect: false for a test "
                "stack",
            )
        )
    window = spark.get("secret_recovery_window_days")
    if isinstance(window, int) and 0 < window < 7:
        problems.append(
            Problem(f"{path}.secret_recovery_window_days", f"must be 0 (delete at once) or 7-30, got {window}")
        )
    prom = spark.get("prometheus")
    if isinstance(prom, dict) and not (prom.get("security_group_id") or prom.get("cidr_blocks")):
        problems.append(
            Problem(f"{path}.prometheus", "give security_group_id or cidr_blocks of the Prometheus scrapers")
        )
    return problems + _bucket_key_problems(spark, path)


KMS_KEY_ARN = re.compile(r"arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:key/[A-Za-z0-9-]+")


def _bucket_key_problems(spark: Mapping[str, Any], path: str) -> list[Problem]:
    key = spark.get("bucket_kms_key_arn")
    if not isinstance(key, str):
        return []
    if spark.get("create_bucket", True):
        return [
            Problem(
                f"{path}.bucket_kms_key_arn",
                f"{key!r} is the SSE-KMS key of an existing bucket, but this stack creates its bucket (SSE-S3, no "
                "key); remove it, or set create_bucket: false",
            )
        ]
    if not KMS_KEY_ARN.fullmatch(key):
        # IAM policies match a key by its key ARN: an alias, alias ARN or bare key id grants nothing.
        return [
            Problem(
                f"{path}.bucket_kms_key_arn",
                f"must be the key ARN arn:aws:kms:REGION:ACCOUNT:key/KEY_ID (IAM policies name a key by it; "
                f"an alias or key id grants nothing), got {key!r}; `aws kms describe-key --key-id {key}` prints it",
            )
        ]
    return []


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
