"""Adapters from `rules` (pure) to `pulumi_policy` policies; `__main__.py` serves them.

Kept apart from `__main__.py` because creating a `PolicyPack` starts the analyzer server:
this module can be imported (and its policies run against fake resources) without the engine.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pulumi_policy import (
    EnforcementLevel,
    Policy,
    ReportViolation,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policy import rules

PACK_NAME = "kafka-mirror"


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
    ]
