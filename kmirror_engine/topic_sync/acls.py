"""ACL sync, as MM2's `sync.topic.acls.enabled` but opt-in (`sync_topic_acls`, default false: it
needs Alter on the target's cluster resource, which an operator grants knowingly).

Every `sync_topic_acls_interval_ms` (and once per `--once` run) the READ ACLs of the mirrored
source topics reach their remote topics (`kmirror.security.acls.remote_read_acls`: literal
ALLOWs of READ/ALL, and DENYs of READ/ALL whether literal, prefixed or `*`, each as a literal
READ ACL on the remote topic; never WRITE) and the ACLs the sync created whose source ACL is gone
are deleted (`plan_acl_sync`).

Revocation rule: the sync deletes only what it created itself. Kafka keeps no creator per ACL,
so each ACL the sync creates is recorded first, keyed by flow and binding, in a compacted
one-partition topic on the target, `kmirror-synced-acls.<source alias>.internal` (value JSON
`{"flow", "synced_ms"}`; a tombstone once deleted). An ACL an operator set by hand is never
recorded (the sync creates only ACLs the target lacks), so it is never deleted, unless it is
the very binding the sync had created. Recorded before creating: a crash in between leaves a
record of an ACL that may not exist, which costs one no-op delete; never an unrecorded ACL.

Each ACL created or deleted is one `kmirror acl_sync {json}` line on stderr (`action` created or
deleted); `created`/`deleted` count them. Brokers without an authorizer (tansu) list no ACLs,
so there is nothing to copy from them.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable
from typing import Any, Protocol, TextIO

from kmirror.errors import ConnectionFailure, KmirrorError
from kmirror.flow.endpoint import ClusterEndpoint
from kmirror.flow.views import FlowRoute
from kmirror.security.acls import AclSyncPlan, TopicAcl, plan_acl_sync, remote_read_acls, synced_acls_topic
from kmirror_engine.planning.internal_names import layout
from kmirror_engine.planning.keyed_reader import read_keyed_to_end

log = logging.getLogger("kmirror.acl_sync")
PREFIX = "kmirror acl_sync "
TIMEOUT_S = 30.0
TOPIC_CONFIG = layout("synced_acls")


def _topic_acl_filter() -> Any:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    # None: any name, principal and host (the stubs say str; the client takes None, as Kafka's null);
    # ANY pattern: prefixed DENYs on the source must reach the remote topics they cover
    anything: Any = None
    return AclBindingFilter(
        ResourceType.TOPIC,
        anything,
        ResourcePatternType.ANY,
        anything,
        anything,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )


def list_topic_acls(admin: Any, alias: str) -> list[TopicAcl]:
    """Every topic ACL of a cluster (literal and prefixed); KmirrorError naming the cluster on failure."""
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaException

    try:
        bindings = admin.describe_acls(_topic_acl_filter(), request_timeout=TIMEOUT_S).result(timeout=TIMEOUT_S)
    except (KafkaException, FutureTimeout) as exc:
        raise KmirrorError(
            f"listing topic ACLs of {alias!r} failed: {exc} (the mirror needs Describe on its cluster resource)"
        ) from None
    return [
        TopicAcl(b.name, b.principal, b.host, b.operation.name, b.permission_type.name, b.resource_pattern_type.name)
        for b in bindings
    ]


def _binding(acl: TopicAcl) -> Any:
    from confluent_kafka.admin import AclBinding

    return AclBinding(*_binding_fields(acl))


def _exact_filter(acl: TopicAcl) -> Any:
    from confluent_kafka.admin import AclBindingFilter

    return AclBindingFilter(*_binding_fields(acl))


def _binding_fields(acl: TopicAcl) -> tuple[Any, ...]:
    """The seven fields of a topic ACL binding (or of the filter matching exactly it)."""
    from confluent_kafka.admin import AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    return (
        ResourceType.TOPIC,
        acl.topic,
        ResourcePatternType[acl.pattern],
        acl.principal,
        acl.host,
        AclOperation[acl.operation],
        AclPermissionType[acl.permission],
    )


class SyncedAclLedger(Protocol):
    """Where the sync records the ACLs it created (module doc)."""

    def load(self) -> set[TopicAcl]: ...

    def record(self, acls: Iterable[TopicAcl], synced: bool) -> None: ...


def _key(flow_id: str, acl: TopicAcl) -> bytes:
    fields = [flow_id, acl.topic, acl.principal, acl.host, acl.operation, acl.permission, acl.pattern]
    return json.dumps(fields).encode()


class SyncedAcls:
    """The record of one flow's synced ACLs on its target (`kmirror-synced-acls.<source>.internal`)."""

    def __init__(self, target: ClusterEndpoint, source_alias: str, flow_id: str) -> None:
        self.target, self.flow_id = target, flow_id
        self.topic = synced_acls_topic(source_alias)
        self._producer: Any = None

    def record(self, acls: Iterable[TopicAcl], synced: bool, timeout_s: float = TIMEOUT_S) -> None:
        """Record `acls` as synced (`synced`) or as deleted (a tombstone); ConnectionFailure when
        a record is not acknowledged (the round fails before the ACL is created or forgotten)."""
        from kmirror_engine.clients.factory import new_delivery_producer
        from kmirror_engine.clients.topic_admin import ensure_topic

        acls = list(acls)
        if not acls:
            return
        ensure_topic(self.target, self.topic, TOPIC_CONFIG)
        if self._producer is None:
            self._producer = new_delivery_producer(
                self.target, role="synced-acls-producer", what="synced ACL record", error=ConnectionFailure
            )
        value = json.dumps({"flow": self.flow_id, "synced_ms": int(time.time() * 1000)}).encode() if synced else None
        for acl in acls:
            self._producer.produce(self.topic, value, _key(self.flow_id, acl))
        self._producer.confirm(timeout_s)

    def load(self, timeout_s: float = TIMEOUT_S) -> set[TopicAcl]:
        """This flow's synced ACLs not deleted since (empty when the record does not exist yet)."""
        latest: dict[bytes, bytes | None] = {}
        for key, value in _read_to_end(self.target, self.topic, timeout_s):
            latest[key] = value
        out = set()
        for key, value in latest.items():
            flow_id, *fields = json.loads(key)
            if value is not None and flow_id == self.flow_id:
                out.add(TopicAcl(*fields))
        return out


def _read_to_end(target: ClusterEndpoint, topic: str, timeout_s: float) -> list[tuple[bytes, bytes | None]]:
    """Every keyed record of one-partition `topic` up to its end as of the read ([] when it does
    not exist yet); ConnectionFailure naming the topic when it cannot be read to its end."""
    hint = " (the revocation record of ACL sync; docs/security.md)"
    return read_keyed_to_end(target, topic, role="synced-acls-reader", timeout_s=timeout_s, hint=hint)


class AclSync:
    """One flow's ACL sync; `run()` does one round and returns the ACLs it created."""

    def __init__(
        self,
        route: FlowRoute,
        source_admin: Any,
        target_admin: Any,
        ledger: SyncedAclLedger,
        out: TextIO | None = None,
    ) -> None:
        """ACL sync of `route`'s remote topics over the clusters' admin clients, recording what it
        synced in `ledger` (no I/O here; `for_flow` builds the real ones). Lines go to `out`
        (default stderr)."""
        self.route, self.out = route, out
        self.source_admin, self.target_admin = source_admin, target_admin
        self.ledger = ledger
        self.created = 0
        self.deleted = 0
        self.last_plan = AclSyncPlan((), ())

    @classmethod
    def for_flow(
        cls,
        route: FlowRoute,
        admin_factory: Any = None,
        out: TextIO | None = None,
        ledger: SyncedAclLedger | None = None,
    ) -> AclSync:
        """`route`'s ACL sync over `admin_factory(endpoint)` (default `admin_client`), recording in
        `ledger` (default the flow's SyncedAcls on its target)."""
        if admin_factory is None:
            from kmirror_engine.clients.factory import admin_client as admin_factory
        source_admin, target_admin = admin_factory(route.source), admin_factory(route.target)
        ledger = ledger or SyncedAcls(route.target, route.source.alias, route.flow_id)
        return cls(route, source_admin, target_admin, ledger, out)

    def plan(self) -> AclSyncPlan:
        """What this round would change (reads the source, the target and the record)."""
        from kmirror_engine.planning.discovery import TopicDiscovery

        route = self.route
        discovery = TopicDiscovery(self.source_admin, route.source, route.topics, route.policy, route.target.alias, 0)
        remote = {t.source_topic: t.target_topic for t in discovery.topics().values()}
        wanted = remote_read_acls(list_topic_acls(self.source_admin, route.source.alias), remote)
        present = list_topic_acls(self.target_admin, route.target.alias)
        return plan_acl_sync(wanted, present, self.ledger.load(), remote.values())

    def run(self) -> list[TopicAcl]:
        plan = self.last_plan = self.plan()
        if plan.add:
            self.ledger.record(plan.add, synced=True)  # recorded first: never an unrecorded synced ACL
            self._create(plan.add)
        if plan.delete:
            self._delete(plan.delete)
        if plan.delete or plan.forget:
            self.ledger.record([*plan.delete, *plan.forget], synced=False)
        return list(plan.add)

    def _create(self, acls: Iterable[TopicAcl]) -> None:
        futures = self.target_admin.create_acls([_binding(acl) for acl in acls], request_timeout=TIMEOUT_S)
        for binding, future in futures.items():
            acl = TopicAcl(
                binding.name,
                binding.principal,
                binding.host,
                binding.operation.name,
                binding.permission_type.name,
                binding.resource_pattern_type.name,
            )
            self._confirm(future, acl, "creating")
            self.created += 1
            self._print("created", acl)

    def _delete(self, acls: Iterable[TopicAcl]) -> None:
        filters = [(acl, _exact_filter(acl)) for acl in acls]
        futures = self.target_admin.delete_acls([f for _, f in filters], request_timeout=TIMEOUT_S)
        for acl, acl_filter in filters:
            self._confirm(futures[acl_filter], acl, "deleting")
            self.deleted += 1
            self._print("deleted", acl)

    def _confirm(self, future: Any, acl: TopicAcl, doing: str) -> None:
        from concurrent.futures import TimeoutError as FutureTimeout

        from confluent_kafka import KafkaException

        try:
            future.result(timeout=TIMEOUT_S)
        except (KafkaException, FutureTimeout) as exc:
            raise KmirrorError(
                f"{self.route.flow_id}: {doing} ACL {acl} on {self.route.target.alias!r} failed: {exc} "
                "(the mirror needs Alter on the target's cluster resource)"
            ) from None

    def _print(self, action: str, acl: TopicAcl) -> None:
        record = {
            "flow": self.route.flow_id,
            "action": action,
            "topic": acl.topic,
            "principal": acl.principal,
            "host": acl.host,
            "operation": acl.operation,
            "permission": acl.permission,
        }
        log.info("%s: %s %s", self.route.flow_id, action, record)
        print(PREFIX + json.dumps(record), file=self.out or sys.stderr, flush=True)
