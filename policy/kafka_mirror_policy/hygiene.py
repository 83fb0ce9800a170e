"""Hygiene rules as pure functions over (resource type, props); violations as messages.

- `image-by-digest`: a SparkApplication's images are `REPO[:TAG]@sha256:<64 hex>` (a tag can be
  moved under a running mirror; `imagePullPolicy: Never`, a local image never pulled, is exempt,
  as in the stack config's validation).
- `encrypted-buckets` (stack): every S3 bucket has a server-side encryption configuration (a
  `BucketServerSideEncryptionConfiguration` pointing at it, or the legacy inline block).
- `no-wildcard-iam`: no Allow statement with Action `*`, `s3:*` or `kafka-cluster:*` (every MSK
  IAM action: the policies the components make for MSK IAM flows name theirs) on Resource `*` in
  a role's inline policies, a RolePolicy or a managed Policy.
- `no-public-eks-endpoint`: an EKS cluster's API endpoint is private unless the stack config sets
  `kafka-mirror:spark.cluster.endpoint_public_access: true` (pulumi-eks and AWS both default to
  public, so an absent setting counts as public).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kmirror.stack.deploy_layout import DIGEST_RE

from .rules import SPARK_APPLICATION

BUCKETS = ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2")
BUCKET_ENCRYPTION = (
    "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
    "aws:s3/bucketServerSideEncryptionConfigurationV2:BucketServerSideEncryptionConfigurationV2",
)
SSE_ALGORITHMS = ("AES256", "aws:kms", "aws:kms:dsse")
IAM_POLICY_PROPS = {
    "aws:iam/rolePolicy:RolePolicy": "policy",
    "aws:iam/policy:Policy": "policy",
    "aws:iam/userPolicy:UserPolicy": "policy",
    "aws:iam/groupPolicy:GroupPolicy": "policy",
}
IAM_ROLE = "aws:iam/role:Role"
WILDCARD_ACTIONS = ("*", "s3:*", "kafka-cluster:*")
EKS_COMPONENT = "eks:index:Cluster"  # pulumi-eks
EKS_CLUSTER = "aws:eks/cluster:Cluster"


@dataclass(frozen=True)
class StackResource:
    """A resource as a stack policy sees it: `property_dependencies` maps a prop to the URNs it came from."""

    resource_type: str
    props: Mapping[str, Any]
    urn: str = ""
    name: str = ""
    property_dependencies: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def image_digest_violations(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    if resource_type != SPARK_APPLICATION:
        return []
    spec = props.get("spec") or {}
    if spec.get("imagePullPolicy") == "Never":
        return []
    name = (props.get("metadata") or {}).get("name") or "<unnamed>"
    images = [("spec.image", spec.get("image"))]
    images += [(f"spec.{role}.image", (spec.get(role) or {}).get("image")) for role in ("driver", "executor")]
    return [
        f"SparkApplication {name}: {path} {image!r} is not pinned by digest; use REPO[:TAG]@sha256:<digest> "
        "(CI sets the pushed image's digest in kafka-mirror:spark.image)"
        for path, image in images
        if (image is not None or path == "spec.image") and not DIGEST_RE.match(str(image or ""))
    ]


def _encrypts(props: Mapping[str, Any]) -> bool:
    rules = props.get("rules") or []
    return any(
        ((rule or {}).get("applyServerSideEncryptionByDefault") or {}).get("sseAlgorithm") in SSE_ALGORITHMS
        for rule in rules
    )


def _inline_encryption(props: Mapping[str, Any]) -> bool:
    inline = props.get("serverSideEncryptionConfiguration") or {}
    rule = inline.get("rule") or {}
    return (rule.get("applyServerSideEncryptionByDefault") or {}).get("sseAlgorithm") in SSE_ALGORITHMS


def bucket_encryption_violations(resources: Iterable[StackResource]) -> list[str]:
    """Buckets of the stack without an encryption configuration. An encryption configuration
    belongs to a bucket when its `bucket` input came from that bucket (a dependency: the value is
    unknown in a preview of a new bucket) or equals the bucket's name."""
    resources = list(resources)
    encrypted_urns: set[str] = set()
    encrypted_names: set[str] = set()
    for r in resources:
        if r.resource_type in BUCKET_ENCRYPTION and _encrypts(r.props):
            deps = r.property_dependencies.get("bucket") or ()
            encrypted_urns.update(deps)
            if not deps:  # a literal bucket name (an existing bucket)
                encrypted_names.add(str(r.props.get("bucket")))
    out = []
    for r in resources:
        if r.resource_type not in BUCKETS or r.urn in encrypted_urns or _inline_encryption(r.props):
            continue
        if str(r.props.get("bucket") or "") in encrypted_names:
            continue
        out.append(
            f"S3 bucket {r.name or r.urn} has no server-side encryption; add an "
            "aws.s3.BucketServerSideEncryptionConfiguration (sse_algorithm AES256 or aws:kms) for it"
        )
    return out


def _statements(document: Any) -> list[Mapping[str, Any]]:
    if isinstance(document, str):
        try:
            document = json.loads(document)
        except json.JSONDecodeError:
            return []
    if not isinstance(document, Mapping):
        return []
    found = document.get("Statement") or []
    found = [found] if isinstance(found, Mapping) else found
    return [s for s in found if isinstance(s, Mapping)]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _wildcards(where: str, document: Any) -> list[str]:
    out = []
    for index, statement in enumerate(_statements(document)):
        if statement.get("Effect", "Allow") != "Allow" or "*" not in _as_list(statement.get("Resource")):
            continue
        actions = [a for a in _as_list(statement.get("Action")) if a in WILDCARD_ACTIONS]
        if actions:
            out.append(
                f"{where}: Statement[{index}] allows {', '.join(map(repr, actions))} on Resource '*'; "
                "name the actions and the ARNs (the bucket, the secrets) the mirror needs"
            )
    return out


def wildcard_iam_violations(resource_type: str, props: Mapping[str, Any]) -> list[str]:
    """Allow statements granting `*`, `s3:*` or `kafka-cluster:*` on every resource, in roles' inline
    policies and policy resources."""
    if resource_type in IAM_POLICY_PROPS:
        return _wildcards(
            f"{resource_type.rsplit(':', 1)[-1]} {props.get('name') or '<unnamed>'}",
            props.get(IAM_POLICY_PROPS[resource_type]),
        )
    if resource_type == IAM_ROLE:
        out = []
        for inline in props.get("inlinePolicies") or []:
            out += _wildcards(
                f"Role {props.get('name') or '<unnamed>'} inline policy {inline.get('name')}", inline.get("policy")
            )
        return out
    return []


def public_endpoint_violations(resource_type: str, props: Mapping[str, Any], allowed: bool) -> list[str]:
    """A public EKS API endpoint when the stack config does not allow one (absent = public, the default)."""
    if resource_type == EKS_COMPONENT:
        public = props.get("endpointPublicAccess", True)
    elif resource_type == EKS_CLUSTER:
        public = (props.get("vpcConfig") or {}).get("endpointPublicAccess", True)
    else:
        return []
    if public is False or allowed:
        return []
    return [
        f"EKS cluster {props.get('name') or '<unnamed>'}: the API endpoint is public (endpointPublicAccess "
        f"{public!r}); keep it private or set kafka-mirror:spark.cluster.endpoint_public_access: true "
        "(with public_access_cidrs) in the stack config"
    ]
