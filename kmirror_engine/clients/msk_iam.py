"""MSK IAM tokens for confluent-kafka: a client config's `kmirror.msk_iam.*` properties become an
`oauth_cb` that signs a `kafka-cluster:Connect` URL with the default AWS credential chain (IRSA on
EKS, the instance profile on EMR; `role_arn` assumes a role first, `profile` names a profile).

librdkafka calls the callback for the first token and again before the token expires (at 80% of
its lifetime); the callback returns the expiry librdkafka wants, in seconds since the epoch, from
the signer's milliseconds. The token is never logged. The signer (aws-msk-iam-sasl-signer-python)
is imported only when a cluster uses MSK IAM.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from kmirror.errors import KmirrorError
from kmirror.security.msk_iam import (
    PREFIX,
    PROFILE_PROPERTY,
    REGION_PROPERTY,
    ROLE_ARN_PROPERTY,
    is_msk_iam,
)

log = logging.getLogger(__name__)
# principal librdkafka reports for the token (MSK takes the identity from the signature, not this)
TOKEN_PRINCIPAL = "kmirror-msk-iam"
Signer = Callable[[], tuple[str, int]]


def _signer(region: str, role_arn: str | None, profile: str | None) -> Signer:
    try:
        from aws_msk_iam_sasl_signer import MSKAuthTokenProvider as provider
    except ImportError as exc:  # pragma: no cover - the app's image installs it
        raise KmirrorError("MSK IAM needs aws-msk-iam-sasl-signer-python: pip install 'kafka-mirror[app]'") from exc
    if role_arn:
        return lambda: provider.generate_auth_token_from_role_arn(region, role_arn, "kafka-mirror")
    if profile:
        return lambda: provider.generate_auth_token_from_profile(region, profile)
    return lambda: provider.generate_auth_token(region)


def token_callback(
    region: str, role_arn: str | None = None, profile: str | None = None, signer: Signer | None = None
) -> Callable[[Any], tuple[str, float]]:
    """confluent-kafka's `oauth_cb`: `(token, expiry in seconds since the epoch)`.

    A credential failure raises KmirrorError naming the region and the credential source (never
    a key); librdkafka reports it as an authentication failure and calls again later."""
    sign = signer or _signer(region, role_arn, profile)
    source = (
        f"role {role_arn}" if role_arn else f"profile {profile!r}" if profile else "the default AWS credential chain"
    )

    def oauth_cb(_config: Any) -> tuple[str, float]:
        try:
            token, expiry_ms = sign()
        except Exception as exc:
            raise KmirrorError(
                f"MSK IAM: no token for region {region} from {source}: "
                f"{type(exc).__name__}: {exc}; check the app's AWS credentials "
                "(IRSA service account, instance profile, AWS_PROFILE)"
            ) from exc
        log.debug("MSK IAM token for %s from %s, expires at %d ms", region, source, expiry_ms)
        return token, expiry_ms / 1000.0

    return oauth_cb


def with_msk_iam(config: Mapping[str, Any], signer: Signer | None = None) -> dict[str, Any]:
    """`config` with its `kmirror.msk_iam.*` properties replaced by the token callback; a config
    without them is returned unchanged (a copy)."""
    if not is_msk_iam(config):
        return dict(config)
    out = {name: value for name, value in config.items() if not name.startswith(PREFIX)}
    region = config.get(REGION_PROPERTY)
    if not region:
        raise KmirrorError(
            f"{REGION_PROPERTY} is missing: MSK IAM signs its token for the cluster's region; "
            "set security.msk_iam.region"
        )
    out["oauth_cb"] = token_callback(str(region), config.get(ROLE_ARN_PROPERTY), config.get(PROFILE_PROPERTY), signer)
    out.setdefault("sasl.mechanisms", "OAUTHBEARER")
    return out
