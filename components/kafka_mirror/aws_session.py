"""boto3 clients with exactly the stack's AWS settings (no pulumi import).

The EMR step provider runs in the Pulumi engine's dynamic-provider process, which sees none of
the AWS provider's configuration: `aws_settings` copies what the stack's `aws:*` config says
(region, profile, the assume-role chain) into the resource's inputs, and `client` rebuilds the
same session there. Retries are botocore's (`standard` mode: throttling, 5xx and connection
errors, exponential backoff with jitter), never a hand loop. A test endpoint comes from
botocore's own `AWS_ENDPOINT_URL_EMR` environment variable, so it is no resource input.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import boto3
from botocore.config import Config

from kmirror.errors import Problem, ValidationError

RETRIES = {"mode": "standard", "max_attempts": 10}
ROLE_KEYS = {"roleArn": "role_arn", "externalId": "external_id", "sessionName": "session_name"}


def aws_settings(region: str | None, profile: str | None, assume_roles: Any) -> dict[str, Any]:
    """The step provider's `aws` input from the stack's `aws:region`, `aws:profile` and
    `aws:assumeRoles` (a list of `{roleArn, externalId, sessionName}`, assumed in order).

    Raises ValidationError when no region is configured: falling back to us-east-1 would run
    every call against another region than the cluster's."""
    if not region:
        raise ValidationError([Problem("aws:region", "required: the region of the EMR cluster "
                                       "(pulumi config set aws:region REGION)")])  # fmt: skip
    roles = [assume_roles] if isinstance(assume_roles, Mapping) else list(assume_roles or [])
    chain = []
    for index, role in enumerate(roles):
        if not isinstance(role, Mapping) or not role.get("roleArn"):
            raise ValidationError([Problem(f"aws:assumeRoles[{index}]", f"needs roleArn, got {role!r}")])
        chain.append({ours: str(role[theirs]) for theirs, ours in ROLE_KEYS.items() if role.get(theirs)})
    return {"region": region, "profile": profile or "", "assume_roles": chain}


def session(settings: Mapping[str, Any]) -> boto3.Session:
    """A boto3 session for `settings` (`aws_settings`' shape): the profile, then each role of the chain."""
    current = boto3.Session(profile_name=settings.get("profile") or None, region_name=settings["region"])
    for role in settings.get("assume_roles") or []:
        args: dict[str, Any] = {"RoleArn": role["role_arn"]}
        args["RoleSessionName"] = role.get("session_name", "kafka-mirror")
        if role.get("external_id"):
            args["ExternalId"] = role["external_id"]
        creds = current.client("sts", config=Config(retries=RETRIES)).assume_role(**args)["Credentials"]
        current = boto3.Session(
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
            region_name=settings["region"],
        )
    return current


def client(service: str, settings: Mapping[str, Any]) -> Any:
    """A client of `service` in the settings' region with botocore's standard retries."""
    return session(settings).client(service, config=Config(retries=RETRIES, connect_timeout=10, read_timeout=60))
