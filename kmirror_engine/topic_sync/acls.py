"""ACL sync, as MM2's `sync.topic.acls.enabled` (on by default there and here, `sync_topic_acls`):
every `sync_topic_acls_interval_ms` (and once per `--once` run), the literal READ/ALL ACLs of the
mirrored source topics become READ ACLs of their remote topics on the target
(`kmirror.security.acls.remote_read_acls`: never WRITE, ALL downgraded to READ).

Add-only, as MM2: an ACL removed at the source stays on the target (the mirror cannot tell an ACL
it copied from one an operator set). Each ACL created is one `kmirror acl_sync {json}` line on
stderr; `created` counts them. The mirror's principal needs Describe on the source's cluster
(DescribeAcls) and Alter on the target's (CreateAcls). Brokers without an authorizer (tansu) list
no ACLs, so there is nothing to copy from them.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO

from kmirror.errors import KmirrorError
from kmirror.flow.spec import FlowSpec
from kmirror.security.acls import TopicAcl, remote_read_acls

log = logging.getLogger("kmirror.acl_sync")
PREFIX = "kmirror acl_sync "
TIMEOUT_S = 30.0


def _topic_acl_filter() -> Any:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    # None: any name, principal and host (the stubs say str; the client takes None, as Kafka's null)
    return AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.LITERAL, None, None,  # type: ignore[arg-type]
                            AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip


def list_topic_acls(admin: Any, alias: str) -> list[TopicAcl]:
    """Every literal topic ACL of a cluster; KmirrorError naming the cluster on failure."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaException

    try:
        bindings = admin.describe_acls(_topic_acl_filter(), request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    except (KafkaException, FutureTimeout) as exc:
        raise KmirrorError(f"listing topic ACLs of {alias!r} failed: {exc} (the mirror needs Describe on its "
                           "cluster resource)") from None  # fmt: skip
    return [TopicAcl(b.name, b.principal, b.host, b.operation.name, b.permission_type.name) for b in bindings]


def _binding(acl: TopicAcl) -> Any:
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return AclBinding(ResourceType.TOPIC, acl.topic, ResourcePatternType.LITERAL, acl.principal, acl.host,
                      AclOperation[acl.operation], AclPermissionType[acl.permission])  # fmt: skip


class AclSync:
    """One flow's ACL sync; `run()` does one round and returns the ACLs it created."""

    def __init__(self, spec: FlowSpec, admin_factory: Any = None, out: TextIO | None = None) -> None:
        if admin_factory is None:
            from kmirror_engine.clients.factory import admin_client as admin_factory
        self.spec, self.out = spec, out
        self.source_admin, self.target_admin = admin_factory(spec.source), admin_factory(spec.target)
        self.created = 0

    def run(self) -> list[TopicAcl]:
        from concurrent.futures import TimeoutError as FutureTimeout

        from confluent_kafka import KafkaException

        from kmirror_engine.planning.discovery import TopicDiscovery

        spec = self.spec
        discovery = TopicDiscovery(self.source_admin, spec.source, spec.topic_selection, spec.policy,
                                   spec.target.alias, 0)  # fmt: skip
        remote = {t.source_topic: t.target_topic for t in discovery.topics().values()}
        wanted = remote_read_acls(list_topic_acls(self.source_admin, spec.source.alias), remote)
        present = set(list_topic_acls(self.target_admin, spec.target.alias))
        missing = [acl for acl in wanted if acl not in present]
        if not missing:
            return []
        futures = self.target_admin.create_acls([_binding(acl) for acl in missing], request_timeout=TIMEOUT_S)
        for binding, future in futures.items():
            acl = TopicAcl(binding.name, binding.principal, binding.host, binding.operation.name,
                           binding.permission_type.name)  # fmt: skip
            try:
                future.result(timeout=TIMEOUT_S)
            except (KafkaException, FutureTimeout) as exc:
                raise KmirrorError(f"{spec.id}: creating ACL {acl} on {spec.target.alias!r} failed: {exc} "
                                   "(the mirror needs Alter on the target's cluster resource)") from None  # fmt: skip
            self.created += 1
            record = {"flow": spec.id, "topic": acl.topic, "principal": acl.principal, "host": acl.host,
                      "operation": acl.operation, "permission": acl.permission}  # fmt: skip
            log.info("%s: created %s", spec.id, record)
            print(PREFIX + json.dumps(record), file=self.out or sys.stderr, flush=True)
        return missing
