"""The stack config's rules that span several `kafka-mirror:spark` keys, per platform (`eks_rules`,
`emr_rules`): what the pydantic models (kmirror.stack.models) cannot say field by field, e.g. a
created EKS cluster's first `up` needs, EMR's network and paging, an existing bucket's KMS key.
Split from `kmirror.stack.config` (which runs them after the model; no pulumi import).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kmirror.errors import Problem
from kmirror.stack.deploy_layout import CHECKPOINT_MOUNT, DIGEST_RE
from kmirror.stack.models import RWX

# The runbook's place in this repository: each alert links the copy on the user's own Git host
# (`monitoring.runbook_url`, an absolute URL that Alertmanager and a pager can open; a repository
# path opens nowhere). Checked here for the stack config and by the EKS component for plugin users.
RUNBOOK = "docs/deploy.md#runbook-a-failed-deploy-or-a-stuck-flow"


def runbook_url_problem(url: object, field: str) -> Problem | None:
    """Why `url` cannot be the alerts' runbook link (absolute http(s) URL required), or None."""
    if isinstance(url, str) and re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        return None
    return Problem(
        field,
        f"is {url!r}: required with prometheus_rule, an absolute http(s) URL of the runbook an alert links to "
        f"(this repository's {RUNBOOK} on your Git host, e.g. "
        f"https://github.com/ORG/REPO/blob/main/{RUNBOOK})",
    )


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
    if monitoring.get("prometheus_rule") is True:
        problem = runbook_url_problem(monitoring.get("runbook_url"), f"{path}.monitoring.runbook_url")
        problems += [problem] if problem is not None else []
    cluster: dict[str, Any] = spark["cluster"] if isinstance(spark.get("cluster"), dict) else {}
    problems += runner_label_problems(cluster, f"{path}.cluster")
    problems += _drift_role_problems(cluster, f"{path}.cluster.access")
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


# GitHub-hosted runner images: a VM outside every VPC of the estate (never a VPC runner's label).
_HOSTED_LABEL = re.compile(r"(ubuntu|windows|macos)-(latest|[0-9][0-9.]*)(-[a-z0-9-]+)?")


def runner_label_problems(cluster: Mapping[str, Any], path: str) -> list[Problem]:
    """`runner_labels` names the self-hosted GitHub Actions runner in the VPC (CI's `runs-on` for this
    stack's preview, drift and up, `kmirror stack-info --matrix`): required with deploy_from_vpc, where a
    hosted runner never reaches the private endpoint; only meaningful with it."""
    labels, from_vpc = cluster.get("runner_labels"), cluster.get("deploy_from_vpc") is True
    example = "[self-hosted, kmirror-<datacenter>]"
    if labels is None or labels == []:
        if not from_vpc:
            return []
        return [
            Problem(
                f"{path}.runner_labels",
                f"required with deploy_from_vpc: true: the `runs-on` labels of the self-hosted GitHub Actions runner "
                f"inside the VPC (a hosted ubuntu-latest runner never reaches the private endpoint), e.g. {example}",
            )
        ]
    if not isinstance(labels, list):
        return []  # the model reports the type
    if not from_vpc:
        return [
            Problem(
                f"{path}.runner_labels",
                f"{labels!r} is only used with deploy_from_vpc: true (the stack's CI jobs run on ubuntu-latest "
                "otherwise); remove it, or set deploy_from_vpc: true and admit that runner (runner_security_group_id)",
            )
        ]
    problems = []
    for index, label in enumerate(labels):
        if not isinstance(label, str):
            continue  # the model reports the type
        if not re.fullmatch(r"[^\s,]+", label):
            problems.append(
                Problem(f"{path}.runner_labels.{index}", f"{label!r} is not a runner label (no blanks or commas)")
            )
        elif _HOSTED_LABEL.fullmatch(label):
            problems.append(
                Problem(
                    f"{path}.runner_labels.{index}",
                    f"{label!r} is a GitHub-hosted runner, outside the VPC: it never reaches the private endpoint; "
                    f"name the self-hosted runner in the VPC, e.g. {example}",
                )
            )
    if len(set(map(str, labels))) != len(labels):
        problems.append(Problem(f"{path}.runner_labels", f"{labels!r} names a label twice"))
    return problems


def _drift_role_problems(cluster: Mapping[str, Any], path: str) -> list[Problem]:
    """A drift role reads every Secret of the cluster (AmazonEKSAdminViewPolicy); a pull request's preview
    runs that request's code with the preview role: the two must never be the same role."""
    access = cluster.get("access")
    if not isinstance(access, dict):
        return []
    preview, drift = access.get("preview_roles"), access.get("drift_roles")
    if not isinstance(preview, list) or not isinstance(drift, list):
        return []
    both = sorted({r for r in drift if isinstance(r, str)} & {r for r in preview if isinstance(r, str)})
    if not both:
        return []
    return [
        Problem(
            f"{path}.drift_roles",
            f"{both} is also in preview_roles: a drift role reads every Secret of the cluster, and the preview role "
            "runs pull requests' code; give the nightly drift job its own role (AWS_DRIFT_ROLE_ARN of the `drift` "
            "environment, main only: docs/ci-preview.md, Drift)",
        )
    ]


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
