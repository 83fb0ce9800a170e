"""Adapters from `rules` (pure) to `pulumi_policy` policies; `__main__.py` serves them.

Kept apart from `__main__.py` because creating a `PolicyPack` starts the analyzer server:
this module can be imported (and its policies run against fake resources) without the engine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    PolicyConfigSchema,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from . import estate, hygiene, iam_emr, paging, rules

PACK_NAME = "kafka-mirror"
PROJECT_DIR_SCHEMA = PolicyConfigSchema(
    properties={
        "project_dir": {
            "type": "string",
            "description": "the project holding stacks/ (default: "
            "$KMIRROR_PROJECT_DIR, else the pack's parent directory)",
        }
    }
)


def _resource_policy(name: str, description: str, rule: Callable[[str, Any], list[str]]) -> ResourceValidationPolicy:
    def validate(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
        for message in rule(args.resource_type, args.props):
            report_violation(message, None)

    return ResourceValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=EnforcementLevel.MANDATORY
    )


def _stack_policy(
    name: str, description: str, rule: Callable[[list[rules.Resource]], list[str]]
) -> StackValidationPolicy:
    def validate(args: StackValidationArgs, report_violation: ReportViolation) -> None:
        for message in rule([(r.resource_type, r.props) for r in args.resources]):
            report_violation(message, None)

    return StackValidationPolicy(
        name=name, description=description, validate=validate, enforcement_level=EnforcementLevel.MANDATORY
    )


def _estate(args: Any) -> estate.Estate:
    return estate.load_estate(estate.project_dir(args.get_config(), os.environ))


def _one_stack_per_flow(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    resources = [(r.resource_type, r.props) for r in args.resources]
    if not resources:
        return
    stack = estate.stack_of_urn(args.resources[0].urn)
    for message in estate.estate_violations(stack, resources, _estate(args)):
        report_violation(message, None)


def _encrypted_buckets(args: StackValidationArgs, report_violation: ReportViolation) -> None:
    resources = [
        hygiene.StackResource(
            r.resource_type,
            r.props,
            r.urn,
            r.name,
            {k: tuple(d.urn for d in v) for k, v in (r.property_dependencies or {}).items()},
        )
        for r in args.resources
    ]
    for message in hygiene.bucket_encryption_violations(resources):
        report_violation(message, None)


def _no_public_eks_endpoint(args: ResourceValidationArgs, report_violation: ReportViolation) -> None:
    if args.resource_type not in (hygiene.EKS_COMPONENT, hygiene.EKS_CLUSTER):
        return
    allowed = estate.public_endpoint_allowed(estate.stack_of_urn(args.urn), _estate(args))
    for message in hygiene.public_endpoint_violations(args.resource_type, args.props, allowed):
        report_violation(message, None)


def _mandatory(kind: type[Any], name: str, description: str, validate: Any, **extra: Any) -> Any:
    return kind(
        name=name, description=description, validate=validate, enforcement_level=EnforcementLevel.MANDATORY, **extra
    )


def build_policies() -> list[Policy]:
    """Every policy of the pack, all mandatory (a violation fails preview and up)."""
    return [
        _resource_policy(
            "restart-policy-always",
            "SparkApplications restart forever: spec.restartPolicy.type is Always.",
            rules.restart_policy_violations,
        ),
        _resource_policy(
            "no-plaintext-secrets",
            "Password-like Spark confs and flow-spec keys hold ${file:..}/${env:..} references, not secrets.",
            rules.plaintext_secret_violations,
        ),
        _stack_policy(
            "one-app-per-flow",
            "Each flow is run by exactly one SparkApplication in the stack.",
            rules.duplicate_flow_violations,
        ),
        _stack_policy(
            "no-identity-cycles",
            "Flows under the identity policy never form a cycle (the planner's validation).",
            rules.identity_cycle_violations,
        ),
        _stack_policy(
            "production-emr-pages",
            "A protected EMR cluster's alarms notify someone and its failed or cancelled steps page.",
            paging.production_emr_paging_violations,
        ),
        _mandatory(
            StackValidationPolicy,
            "one-stack-per-flow",
            "Each app runs a flow the planner places in this stack's datacenter, and no other stack runs it.",
            _one_stack_per_flow,
            config_schema=PROJECT_DIR_SCHEMA,
        ),
        _resource_policy(
            "image-by-digest", "SparkApplication images are pinned by digest.", hygiene.image_digest_violations
        ),
        _mandatory(
            StackValidationPolicy,
            "encrypted-buckets",
            "Every S3 bucket has server-side encryption.",
            _encrypted_buckets,
        ),
        _resource_policy(
            "no-wildcard-iam", "No IAM Allow of '*' or 's3:*' on Resource '*'.", hygiene.wildcard_iam_violations
        ),
        _resource_policy(
            "no-broad-managed-iam",
            "No attachment of an AWS-managed policy granting a whole service or the account.",
            iam_emr.broad_attachment_violations,
        ),
        _resource_policy(
            "protected-emr-encrypted",
            "A termination-protected EMR cluster has a security configuration (encryption).",
            iam_emr.protected_emr_violations,
        ),
        _mandatory(
            ResourceValidationPolicy,
            "no-public-eks-endpoint",
            "EKS API endpoints are private unless the stack config sets cluster.endpoint_public_access.",
            _no_public_eks_endpoint,
            config_schema=PROJECT_DIR_SCHEMA,
        ),
    ]
