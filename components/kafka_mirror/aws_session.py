"""The stack's AWS settings (no pulumi import): what its `aws:*` config says, validated.

`aws_settings` reads `aws:region`, `aws:profile` and the assume-role chain into the shape the EMR
platform's `aws` argument takes; the region is the one the cluster lives in, and is required
(a silent us-east-1 would put the platform in another region than its cluster). The flows' steps
are managed by the platform's Lambda function with its own role (`kafka_mirror.emr.step_function`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kmirror.errors import Problem, ValidationError

ROLE_KEYS = {"roleArn": "role_arn", "externalId": "external_id", "sessionName": "session_name"}


def aws_settings(region: str | None, profile: str | None, assume_roles: Any) -> dict[str, Any]:
    """The EMR platform's `aws` argument from the stack's `aws:region`, `aws:profile` and
    `aws:assumeRoles` (a list of `{roleArn, externalId, sessionName}`, assumed in order).

    Raises ValidationError when no region is configured: falling back to us-east-1 would run
    every call against another region than the cluster's."""
    if not region:
        raise ValidationError(
            [Problem("aws:region", "required: the region of the EMR cluster (pulumi config set aws:region REGION)")]
        )
    roles = [assume_roles] if isinstance(assume_roles, Mapping) else list(assume_roles or [])
    chain = []
    for index, role in enumerate(roles):
        if not isinstance(role, Mapping) or not role.get("roleArn"):
            raise ValidationError([Problem(f"aws:assumeRoles[{index}]", f"needs roleArn, got {role!r}")])
        chain.append({ours: str(role[theirs]) for theirs, ours in ROLE_KEYS.items() if role.get(theirs)})
    return {"region": region, "profile": profile or "", "assume_roles": chain}
