"""Pure specs for EMR deployments: S3 keys, spark-submit step args, cluster configurations, the
nodes' Python and wheel platforms (IAM policies, the security configuration and the bucket lifecycle
are in `kafka_mirror.emr.documents`, re-exported here).

No pulumi import (see `kafka_mirror.eks.specs`). S3 keys of the flow spec and the app bundle are
content-addressed and only the step names them (`--files`, `--py-files`), so a changed spec or app
changes the step's args, and the platform's step function replaces the step (stop old, add new;
`kafka_mirror.emr.step_lambda`) without touching the cluster. The bootstrap action's arguments
are fixed S3 locations (`bootstrap_args`): in the AWS provider any change to `bootstrap_action`
replaces the EMR cluster.
"""

from __future__ import annotations

import ast
import json
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from kafka_mirror.deploy_files import STEP_WRAPPER, deploy_file
from kafka_mirror.eks.specs import app_name, flow_sha256

# Split into kafka_mirror.emr.documents; also importable from here (their import path before the split).
from kafka_mirror.emr.documents import (  # noqa: F401
    EBS_KEY_ACTIONS,
    YARN_MARKER_DAYS,
    YARN_MARKERS,
    bucket_key_statement,
    bucket_lifecycle_rules,
    instance_policy,
    security_configuration,
    service_kms_policy,
    service_pass_role_policy,
)
from kmirror.errors import Problem
from kmirror.stack.deploy_layout import FLOW_FILE
from kmirror.stack.models import STEP_STOP_TIMEOUT_S

APP_PREFIX = "app"
VENV_PYTHON = "/opt/kmirror/venv/bin/python"  # made by scripts/emr-bootstrap.sh on every node
SECRETS_MANIFEST_KEY = "bootstrap/secrets.tsv"
BOOTSTRAP_KEY = "bootstrap/emr-bootstrap.sh"
SYNC_SCRIPT_KEY = "bootstrap/kmirror-sync-secrets.py"
WHEELHOUSE_PREFIX = "bootstrap/wheelhouse"  # + /<wheelhouse_tag>/<wheel> and /<tag>/requirements.lock
ENTRY_KEY = f"{APP_PREFIX}/kmirror_main.py"
# The Python of emr-spark-8.0.0 nodes (Amazon Linux 2023): the release guide's application table
# lists "Python 3.11, 3.12, 3.13"; the bootstrap builds the app's venv with python3.11, the oldest
# of them (https://docs.aws.amazon.com/emr/latest/ReleaseGuide/emr-spark800-release.html).
EMR_PYTHON_VERSION = "3.11"
AL2023_GLIBC_MINOR = 34  # glibc 2.34 on Amazon Linux 2023: manylinux_2_17 ... manylinux_2_34 wheels run
OLDEST_MANYLINUX_MINOR = 17  # manylinux2014
# The secrets sync (scripts/kmirror-sync-secrets.py) runs in the same venv and needs boto3; pip
# itself is in the wheelhouse so the node runs it from its wheel (no ensurepip, no index).
NODE_EXTRA_REQUIREMENTS = ("boto3", "pip")
ARCHITECTURES = ("aarch64", "x86_64")  # `uname -m` on Graviton / Intel and AMD nodes
# Drivers' Prometheus ports: 19500-19799, clear of Hadoop 3's daemons (9864-9871: DataNode and
# NameNode HTTP/IPC), of the other EMR applications' ports (8000-10000: Hue, Livy, Zeppelin,
# JupyterHub, HBase, ...) and of Linux's ephemeral range (32768+).
METRICS_PORT_BASE = 19500
METRICS_PORT_SPAN = 300
HADOOP_PORTS = range(9864, 9872)
# AddJobFlowSteps: "The string values passed into HadoopJarStep object cannot exceed a total of
# 10240 characters" (the inline step wrapper is most of them).
STEP_STRINGS_MAX_CHARS = 10240


@dataclass(frozen=True)
class EmrSettings:
    """Per-platform settings of the steps (from the stack's `kafka-mirror:spark`)."""

    bucket: str
    region: str = "us-east-1"
    metrics_port_base: int = METRICS_PORT_BASE
    metrics_port_span: int = METRICS_PORT_SPAN
    max_app_attempts: int = 1000  # with the validity interval below: restart forever, like restartPolicy Always
    attempt_failures_validity_s: int = 3600
    spark_conf: dict[str, str] = field(default_factory=dict)
    spark_defaults: dict[str, Any] = field(default_factory=dict)
    # The stack's AWS settings (kafka_mirror.aws_session.aws_settings); the steps use the Lambda's role.
    aws: dict[str, Any] = field(default_factory=dict)
    step_stop_timeout_s: int = STEP_STOP_TIMEOUT_S
    step_start_timeout_s: int | None = None  # the step function's wait for RUNNING; None: its default (300 s)

    def uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"


def emr_metrics_port(flow_id: str, settings: EmrSettings) -> int:
    """A port derived from the flow id alone: drivers of several flows may share a YARN node, so
    they cannot all use one port, and an index-based port would move when other flows change."""
    return settings.metrics_port_base + zlib.crc32(flow_id.encode()) % settings.metrics_port_span


def metrics_port_problems(flow_specs: Iterable[Mapping[str, Any]], settings: EmrSettings) -> list[Problem]:
    """Two flows of one cluster whose drivers would listen on the same port."""
    seen: dict[int, str] = {}
    problems = []
    for spec in sorted(flow_specs, key=lambda s: str(s["id"])):
        port = int(spec.get("metrics_port") or emr_metrics_port(spec["id"], settings))
        if port in seen:
            problems.append(
                Problem(
                    f"flows.{spec['id']}.metrics_port",
                    f"port {port} is also used by {seen[port]}; "
                    "set a distinct metrics_port for one of them in the topology's flows section",
                )
            )
        seen.setdefault(port, str(spec["id"]))
    return problems


def flow_object_key(flow_spec: dict[str, Any]) -> str:
    """`flows/<app>/<sha256[:16]>/flow.json`: a new spec is a new object and new step args."""
    return f"flows/{app_name(flow_spec['id'])}/{flow_sha256(flow_spec)[:16]}/{FLOW_FILE}"


def bundle_key(bundle_sha256: str) -> str:
    return f"{APP_PREFIX}/kmirror-bundle-{bundle_sha256[:16]}.zip"


def _conf_args(conf: Mapping[str, Any]) -> list[str]:
    return [arg for key, value in sorted(conf.items()) for arg in ("--conf", f"{key}={value}")]


def yarn_tag(flow_id: str) -> str:
    """`kmirror-west-1-to-east-1`: the YARN application tag of a flow's driver, how its step's
    wrapper finds (and kills) the application. Lowercase, as YARN stores tags; no comma."""
    return "k" + app_name(flow_id)


def step_kill_timeout_s(settings: EmrSettings) -> int:
    """How long the wrapper waits for killed applications to go: half the step function's wait
    for the cancelled step, so the wrapper's report (naming the survivors) reaches the step's log
    before the function gives up."""
    return max(1, settings.step_stop_timeout_s // 2)


@cache
def step_wrapper_source() -> str:
    """The step wrapper (`deploy/kmirror-step.py`) as `python -c` runs it: without its module
    docstring, comment lines and blank lines (EMR's 10240-character cap on a step's strings).
    Plain line filtering, so the same file gives the same step args on every Python version."""
    text = deploy_file(STEP_WRAPPER).read_text()
    tree = ast.parse(text)
    body_start = tree.body[1].lineno if ast.get_docstring(tree) is not None else 1
    lines = text.splitlines()[body_start - 1 :]
    return "\n".join(line for line in lines if line.strip() and not line.lstrip().startswith("#")) + "\n"


def emr_step_input(cluster_id: str, flow_id: str, step_args: list[str], settings: EmrSettings) -> str:
    """The step function's input for one flow (`kafka_mirror.emr.step_lambda.parse_step`): canonical
    JSON, so an unchanged flow is no change of its Invocation (which would call the function)."""
    return app_step_input(cluster_id, app_name(flow_id), step_args, settings)


def app_step_input(cluster_id: str, name: str, step_args: list[str], settings: EmrSettings) -> str:
    """The step function's input for the app `name` (one flow's, or several flows' of one target)."""
    step = {
        "cluster_id": cluster_id,
        "name": name,
        "args": step_args,
        "region": settings.region,
        "stop_timeout_s": settings.step_stop_timeout_s,
        "yarn_marker_prefix": settings.uri(YARN_MARKERS),
    }
    if settings.step_start_timeout_s is not None:  # only when set: no change of the stacks that do not
        step["start_timeout_s"] = settings.step_start_timeout_s
    return json.dumps(step, sort_keys=True, separators=(",", ":"))


def emr_step_args(
    flow_id: str, flow_uri: str, bundle_uri: str, entry_uri: str, spark: dict[str, Any], settings: EmrSettings
) -> list[str]:
    """`command-runner.jar` args of a streaming step running one flow in cluster mode.

    The step's process is the wrapper (`deploy/kmirror-step.py`, inline with the nodes' venv
    python): it runs spark-submit, and on SIGTERM (the step function's cancel) or at its start kills
    every YARN application tagged `yarn_tag(flow_id)` and waits until they are gone, so a
    stopped step means a stopped driver. The tag and `waitAppCompletion` are set after the
    user's options: without them the wrapper could not find the application, or would see
    spark-submit return at once and kill the mirror it just started.
    `--files URI#flow.json` puts the spec in the driver's working directory as `flow.json`.
    YARN restarts a failed driver (max attempts within a validity interval).
    """
    files = [(flow_uri, FLOW_FILE)]
    return app_step_args(app_name(flow_id), files, bundle_uri, entry_uri, spark, settings, f"flow {flow_id!r}")


def app_step_args(
    name: str,
    flow_files: list[tuple[str, str]],
    bundle_uri: str,
    entry_uri: str,
    spark: dict[str, Any],
    settings: EmrSettings,
    owner: str = "",
) -> list[str]:
    """`emr_step_args` of the app `name` running the flows `flow_files` ((S3 URI, file name) each:
    `--files URI#NAME,...`, then `--flow NAME` per flow); its YARN tag is `k<name>`."""
    spark = {**settings.spark_defaults, **spark}
    tag = "k" + name
    conf: dict[str, Any] = {
        "spark.executor.instances": int(spark.get("executors", 1)),
        "spark.executor.cores": int(spark.get("executor_cores", 1)),
        "spark.executor.memory": str(spark.get("executor_memory", "1g")),
        "spark.driver.cores": int(spark.get("driver_cores", 1)),
        "spark.driver.memory": str(spark.get("driver_memory", "1g")),
        "spark.dynamicAllocation.enabled": "false",
        "spark.pyspark.python": VENV_PYTHON,
        "spark.pyspark.driver.python": VENV_PYTHON,
        "spark.yarn.maxAppAttempts": settings.max_app_attempts,
        "spark.yarn.am.attemptFailuresValidityInterval": f"{settings.attempt_failures_validity_s}s",
        **settings.spark_conf,
        **dict(spark.get("options") or {}),
    }
    user_tags = [t for t in str(conf.get("spark.yarn.tags") or "").split(",") if t and t != tag]
    conf["spark.yarn.tags"] = ",".join([*user_tags, tag])
    conf["spark.yarn.submit.waitAppCompletion"] = "true"
    wrapper = [VENV_PYTHON, "-c", step_wrapper_source(), "--tag", tag]
    wrapper += ["--kill-timeout-s", str(step_kill_timeout_s(settings)), "--"]
    args = [
        *wrapper,
        "spark-submit",
        "--deploy-mode",
        "cluster",
        "--master",
        "yarn",
        "--name",
        name,
        *_conf_args(conf),
        "--py-files",
        bundle_uri,
        "--files",
        ",".join(f"{uri}#{file}" for uri, file in flow_files),
        entry_uri,
        *[arg for _, file in flow_files for arg in ("--flow", file)],
    ]
    size = sum(len(arg) for arg in args)
    if size > STEP_STRINGS_MAX_CHARS:
        raise ValueError(
            f"the EMR step args of {owner or f'app {name!r}'} are {size} characters; EMR accepts at most "
            f"{STEP_STRINGS_MAX_CHARS} in total: shorten the flow's spark options"
        )
    return args


def secrets_manifest(entries: Iterable[tuple[str, str]]) -> str:
    """`<secret ARN>\\t<directory under /etc/kmirror/secrets>` lines, sorted, for the bootstrap's sync."""
    return "".join(f"{arn}\t{directory}\n" for arn, directory in sorted(set(entries)))


def spark_configurations(max_app_attempts: int, python: str = VENV_PYTHON) -> list[dict[str, Any]]:
    """EMR `Configurations`: every Spark process uses the bootstrap's venv python, and YARN lets a
    mirror's driver restart as often as its step asks (the ResourceManager caps
    `spark.yarn.maxAppAttempts` at its own maximum, 2 by default)."""
    return [
        {"Classification": "yarn-site", "Properties": {"yarn.resourcemanager.am.max-attempts": str(max_app_attempts)}},
        {
            "Classification": "spark-env",
            "Configurations": [
                {"Classification": "export", "Properties": {"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python}}
            ],
        },
        {
            "Classification": "spark-defaults",
            "Properties": {
                "spark.pyspark.python": python,
                "spark.yarn.appMasterEnv.PYSPARK_PYTHON": python,
                "spark.executorEnv.PYSPARK_PYTHON": python,
            },
        },
    ]


def bootstrap_args(settings: EmrSettings, gssapi: bool) -> list[str]:
    """Arguments of `scripts/emr-bootstrap.sh` (run on every node when it joins the cluster).

    Only fixed S3 locations and settings, never anything content-addressed: an app release or a
    dependency update changes what lies there (or the step), not these arguments, so it never
    replaces the cluster."""
    args = [
        "--wheelhouse",
        settings.uri(WHEELHOUSE_PREFIX),
        "--secrets",
        settings.uri(SECRETS_MANIFEST_KEY),
        "--sync",
        settings.uri(SYNC_SCRIPT_KEY),
        "--region",
        settings.region,
    ]
    return [*args, "--gssapi"] if gssapi else args


def instance_architecture(instance_type: str) -> str:
    """`aarch64` for Graviton types (a `g` among the family's attributes: m7g, c7gn, r6gd, x2gd,
    im4gn, is4gen), else `x86_64` (m5, m7i, c6a, ...). Raises ValueError for a malformed type."""
    match = re.fullmatch(r"([a-z]+)(\d+)([a-z-]*)\.[a-z0-9]+", instance_type)
    if match is None:
        raise ValueError(f"instance type {instance_type!r} is not of the form <family><generation>[attributes].<size>")
    return "aarch64" if "g" in match.group(3) else "x86_64"


def wheelhouse_tag(arch: str) -> str:
    """`cp311-aarch64`: the wheelhouse directory of one node Python and architecture."""
    if arch not in ARCHITECTURES:
        raise ValueError(f"architecture {arch!r} is not one of {', '.join(ARCHITECTURES)}")
    return f"cp{EMR_PYTHON_VERSION.replace('.', '')}-{arch}"


def wheel_platforms(arch: str) -> list[str]:
    """pip `--platform` tags of wheels that run on Amazon Linux 2023 on `arch`, newest first
    (pip does not expand `manylinux_2_34` to older glibc tags by itself; pyarrow and
    confluent-kafka publish only manylinux_2_28 wheels)."""
    wheelhouse_tag(arch)  # validates arch
    glibc = [f"manylinux_2_{minor}_{arch}" for minor in range(AL2023_GLIBC_MINOR, OLDEST_MANYLINUX_MINOR - 1, -1)]
    return [*glibc, f"manylinux2014_{arch}"]


def wheelhouse_key(arch: str, file_name: str) -> str:
    return f"{WHEELHOUSE_PREFIX}/{wheelhouse_tag(arch)}/{file_name}"
