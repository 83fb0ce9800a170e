"""Config sync and ACL sync (issue 18) with fakes shaped like confluent-kafka's admin API: the
rules, the admin calls they make and the lines they print. The end-to-end side is in
tests/e2e/test_topic_sync_e2e.py (tansu has no authorizer, so ACLs are only shown with fakes)."""

from __future__ import annotations

import io
import json
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from kmirror.errors import KmirrorError
from kmirror.flow.spec import parse_flow_spec
from kmirror.security.acls import AclSyncPlan, TopicAcl, plan_acl_sync, remote_read_acls
from kmirror_engine.topic_sync.acls import AclSync
from kmirror_engine.topic_sync.configs import ConfigChange, config_changes
from kmirror_engine.topic_sync.ticker import SyncTicker
from tests.kafka_fakes import done


def entry(value: str | None, default: bool = False, read_only: bool = False) -> Any:
    return SimpleNamespace(value=value, is_default=default, is_read_only=read_only, is_sensitive=False)


def test_config_changes_set_what_differs_delete_what_the_source_no_longer_sets_and_skip_excludes() -> None:
    source = {
        "retention.ms": entry("7200000"),
        "cleanup.policy": entry("delete", default=True),
        "max.message.bytes": entry("2000000"),
        "min.insync.replicas": entry("2"),
        "segment.bytes": entry("1073741824", read_only=True),
    }
    target = {
        "retention.ms": entry("3600000"),
        "cleanup.policy": entry("compact"),
        "max.message.bytes": entry("2000000"),
        "min.insync.replicas": entry("1"),
        "compression.type": entry("zstd"),
    }
    assert config_changes("west.orders", source, target) == [
        ConfigChange("west.orders", "cleanup.policy", "DELETE", None, "compact"),
        ConfigChange("west.orders", "retention.ms", "SET", "7200000", "3600000"),
        ConfigChange("west.orders", "compression.type", "DELETE", None, "zstd"),
    ]
    # in step: nothing to do; a config both sides leave at their defaults is never touched
    assert config_changes("west.orders", {"retention.ms": entry("1")}, {"retention.ms": entry("1")}) == []
    assert config_changes("t", {"retention.ms": entry("1", default=True)}, {"retention.ms": entry("2", True)}) == []


def test_remote_read_acls_copy_read_and_all_as_read_never_write() -> None:
    acls = [
        TopicAcl("orders", "User:alice", "*", "READ", "ALLOW"),
        TopicAcl("orders", "User:bob", "*", "ALL", "ALLOW"),  # downgraded to READ
        TopicAcl("orders", "User:eve", "*", "READ", "DENY"),
        TopicAcl("orders", "User:writer", "*", "WRITE", "ALLOW"),  # never
        TopicAcl("orders", "User:ops", "*", "DESCRIBE", "ALLOW"),  # not a read ACL
        TopicAcl("secret", "User:alice", "*", "READ", "ALLOW"),  # not mirrored
        TopicAcl("*", "User:all", "*", "READ", "ALLOW"),  # wildcard
    ]
    assert remote_read_acls(acls, {"orders": "west.orders"}) == [
        TopicAcl("west.orders", "User:alice", "*", "READ", "ALLOW"),
        TopicAcl("west.orders", "User:bob", "*", "READ", "ALLOW"),
        TopicAcl("west.orders", "User:eve", "*", "READ", "DENY"),
    ]


class FakeAclAdmin:
    """The calls AclSync makes, shaped like confluent_kafka.admin.AdminClient's."""

    def __init__(self, topics: dict[str, int], bindings: list[AclBinding]) -> None:
        self.topics, self.bindings = topics, list(bindings)
        self.filters: list[Any] = []
        self.created: list[AclBinding] = []
        self.deleted: list[Any] = []

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(
            topics={
                n: SimpleNamespace(error=None, partitions={i: SimpleNamespace(leader=0, error=None) for i in range(c)})
                for n, c in self.topics.items()
            }
        )

    def describe_acls(self, acl_filter: Any, request_timeout: float) -> Future:
        self.filters.append(acl_filter)
        return done([b for b in self.bindings if b.restype == acl_filter.restype])

    def create_acls(self, bindings: list[AclBinding], request_timeout: float) -> dict[AclBinding, Future]:
        self.created += bindings
        self.bindings += bindings
        return {b: done(None) for b in bindings}

    def delete_acls(self, filters: list[Any], request_timeout: float) -> dict[Any, Future]:
        """Exact filters only (as AclSync sends): removes the one binding each names."""
        self.deleted += filters
        gone = {f: [b for b in self.bindings if b == f] for f in filters}
        self.bindings = [b for b in self.bindings if b not in filters]
        return {f: done(found) for f, found in gone.items()}


class MemoryLedger:
    """The synced-ACL record, in memory: what AclSync recorded as synced and not deleted since."""

    def __init__(self, synced: set[TopicAcl] | None = None) -> None:
        self.synced = set(synced or ())
        self.calls: list[tuple[list[TopicAcl], bool]] = []

    def load(self) -> set[TopicAcl]:
        return set(self.synced)

    def record(self, acls: Any, synced: bool) -> None:
        acls = list(acls)
        self.calls.append((acls, synced))
        self.synced = self.synced | set(acls) if synced else self.synced - set(acls)


def binding(topic: str, principal: str, operation: AclOperation, permission: AclPermissionType) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", operation, permission)


SPEC = parse_flow_spec(
    {
        "id": "west->east",
        "checkpoint_location": "/tmp/x",
        "topics": ["orders", "pay.*"],
        "topics_exclude": [],
        "source": {"alias": "west", "bootstrap_servers": "127.0.0.1:1"},
        "target": {"alias": "east", "bootstrap_servers": "127.0.0.1:2"},
        "replication_policy": {"type": "default"},
    }
)


def test_acl_sync_creates_only_missing_read_acls_and_prints_one_line_each() -> None:
    source = FakeAclAdmin(
        {"orders": 2, "pay.eu": 1, "other": 1},
        [
            binding("orders", "User:alice", AclOperation.READ, AclPermissionType.ALLOW),
            binding("pay.eu", "User:bob", AclOperation.ALL, AclPermissionType.ALLOW),
            binding("pay.eu", "User:bob", AclOperation.WRITE, AclPermissionType.ALLOW),
            binding("other", "User:alice", AclOperation.READ, AclPermissionType.ALLOW),
        ],
    )
    target = FakeAclAdmin({}, [binding("west.orders", "User:alice", AclOperation.READ, AclPermissionType.ALLOW)])
    out = io.StringIO()
    ledger = MemoryLedger()
    sync = AclSync(SPEC.route, source, target, ledger, out)
    assert sync.run() == [TopicAcl("west.pay.eu", "User:bob", "*", "READ", "ALLOW")]
    assert target.created == [binding("west.pay.eu", "User:bob", AclOperation.READ, AclPermissionType.ALLOW)]
    # recorded as synced (the hand-made west.orders ACL, already there, is not)
    assert ledger.synced == {TopicAcl("west.pay.eu", "User:bob", "*", "READ", "ALLOW")}
    # the listing asks for topic ACLs of any pattern (prefixed DENYs count), principal, host, operation, permission
    (wanted,) = source.filters
    assert (wanted.restype, wanted.name, wanted.resource_pattern_type, wanted.operation, wanted.permission_type) == (
        ResourceType.TOPIC,
        None,
        ResourcePatternType.ANY,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert [json.loads(line.split(" ", 2)[2]) for line in out.getvalue().splitlines()] == [
        {
            "flow": "west->east",
            "action": "created",
            "topic": "west.pay.eu",
            "principal": "User:bob",
            "host": "*",
            "operation": "READ",
            "permission": "ALLOW",
        }
    ]
    assert sync.run() == [] and sync.created == 1  # in step: the next round creates nothing


def test_a_failed_sync_round_is_counted_and_retried_never_raised() -> None:
    class Refusing(FakeAclAdmin):
        def describe_acls(self, acl_filter: Any, request_timeout: float) -> Future:
            future: Future = Future()
            future.set_exception(KmirrorError("SECURITY_DISABLED"))
            return future

    admin = Refusing({"orders": 1}, [])
    spec = parse_flow_spec(
        {**SPEC.to_dict(), "sync_topic_configs": False, "sync_topic_acls": True, "sync_topic_acls_interval_ms": 5000}
    )
    now = [100.0]
    acl_sync = AclSync(spec.route, admin, admin, MemoryLedger())
    ticker = SyncTicker(spec.id, once=True, syncs=[("ACL sync", acl_sync, 5000)], clock=lambda: now[0]).start()
    assert ticker.failures == 1
    ticker.tick()  # not due yet
    assert ticker.failures == 1
    now[0] += 5.0
    ticker.tick()
    assert ticker.failures == 2


def test_sync_options_are_validated() -> None:
    with pytest.raises(KmirrorError) as caught:
        parse_flow_spec({**SPEC.to_dict(), "sync_topic_configs_interval_ms": 0, "sync_topic_acls": "yes"})
    assert str(caught.value) == (
        "2 problem(s) in flow spec:\n  - sync_topic_acls: must be true or false, got 'yes'\n"
        "  - sync_topic_configs_interval_ms: must be an integer >= 1, got 0"
    )


def test_deny_read_acls_reach_every_remote_topic_they_cover_prefixed_allows_do_not() -> None:
    """A DENY of READ/ALL, literal, prefixed or `*`, becomes a literal DENY READ on each remote
    topic it covers, so a copied ALLOW (of User:*, say) never lets a denied principal read the
    remote topic; a prefixed ALLOW is not copied (a remote topic is never more open)."""
    acls = [
        TopicAcl("orders", "User:*", "*", "READ", "ALLOW"),
        TopicAcl("ord", "User:eve", "*", "READ", "DENY", "PREFIXED"),
        TopicAcl("*", "User:mallory", "10.0.0.1", "ALL", "DENY"),
        TopicAcl("pay", "User:bob", "*", "READ", "ALLOW", "PREFIXED"),  # not copied
        TopicAcl("pay", "User:eve", "*", "WRITE", "DENY", "PREFIXED"),  # not a read ACL
        TopicAcl("sec", "User:eve", "*", "READ", "DENY", "PREFIXED"),  # covers no mirrored topic
    ]
    assert remote_read_acls(acls, {"orders": "west.orders", "pay.eu": "west.pay.eu"}) == [
        TopicAcl("west.orders", "User:*", "*", "READ", "ALLOW"),
        TopicAcl("west.orders", "User:eve", "*", "READ", "DENY"),
        TopicAcl("west.orders", "User:mallory", "10.0.0.1", "READ", "DENY"),
        TopicAcl("west.pay.eu", "User:mallory", "10.0.0.1", "READ", "DENY"),
    ]


def test_plan_acl_sync_revokes_only_acls_it_synced_that_the_source_no_longer_has() -> None:
    alice, bob, carol, dave = (
        TopicAcl("west.orders", f"User:{who}", "*", "READ", "ALLOW") for who in ("alice", "bob", "carol", "dave")
    )
    hand_made = TopicAcl("west.orders", "User:ops", "*", "READ", "ALLOW")
    old_topic = TopicAcl("west.retired", "User:alice", "*", "READ", "ALLOW")
    plan = plan_acl_sync(
        wanted=[alice, bob],
        present=[alice, carol, hand_made, old_topic],
        synced=[alice, carol, dave, old_topic],
        remote_topics=["west.orders"],
    )
    # bob is added; carol (synced, revoked at the source, present) deleted; dave (synced, already
    # gone from the target) forgotten; the hand-made ACL and a topic no longer mirrored untouched
    assert plan == AclSyncPlan(add=(bob,), delete=(carol,), forget=(dave,))
    assert plan_acl_sync([alice], [alice, hand_made], [], ["west.orders"]) == AclSyncPlan((), (), ())


def test_acl_sync_deletes_the_acls_it_created_once_revoked_at_the_source_never_hand_made_ones() -> None:
    source = FakeAclAdmin(
        {"orders": 1},
        [
            binding("orders", "User:alice", AclOperation.READ, AclPermissionType.ALLOW),
            binding("orders", "User:eve", AclOperation.READ, AclPermissionType.DENY),
        ],
    )
    hand_made = binding("west.orders", "User:ops", AclOperation.READ, AclPermissionType.ALLOW)
    target = FakeAclAdmin({}, [hand_made])
    out, ledger = io.StringIO(), MemoryLedger()
    sync = AclSync(SPEC.route, source, target, ledger, out)
    sync.run()
    deny = binding("west.orders", "User:eve", AclOperation.READ, AclPermissionType.DENY)
    allow = binding("west.orders", "User:alice", AclOperation.READ, AclPermissionType.ALLOW)
    assert target.created == [allow, deny] and set(target.bindings) == {hand_made, allow, deny}
    # revoked at the source: both synced ACLs go, the operator's stays; the record forgets them
    source.bindings = []
    assert sync.run() == []
    assert target.bindings == [hand_made]
    assert (sync.created, sync.deleted, ledger.synced) == (2, 2, set())
    assert [
        (line["action"], line["principal"], line["permission"])
        for line in (json.loads(text.split(" ", 2)[2]) for text in out.getvalue().splitlines())
    ] == [
        ("created", "User:alice", "ALLOW"),
        ("created", "User:eve", "DENY"),
        ("deleted", "User:alice", "ALLOW"),
        ("deleted", "User:eve", "DENY"),
    ]
    assert sync.run() == [] and len(target.deleted) == 2  # in step: nothing more to delete


def test_acl_sync_is_opt_in() -> None:
    """Off unless asked: it needs Alter on the target cluster (and deletes ACLs it synced)."""
    assert SPEC.topic_sync.acls is False
    assert parse_flow_spec({**SPEC.to_dict(), "sync_topic_acls": True}).topic_sync.acls is True
