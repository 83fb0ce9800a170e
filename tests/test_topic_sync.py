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
from kmirror.security.acls import TopicAcl, remote_read_acls
from kmirror_engine.topic_sync.acls import AclSync
from kmirror_engine.topic_sync.configs import ConfigChange, config_changes
from kmirror_engine.topic_sync.ticker import SyncTicker


def entry(value: str | None, default: bool = False, read_only: bool = False) -> Any:
    return SimpleNamespace(value=value, is_default=default, is_read_only=read_only, is_sensitive=False)


def test_config_changes_set_what_differs_delete_what_the_source_no_longer_sets_and_skip_excludes() -> None:
    source = {"retention.ms": entry("7200000"), "cleanup.policy": entry("delete", default=True),
              "max.message.bytes": entry("2000000"), "min.insync.replicas": entry("2"),
              "segment.bytes": entry("1073741824", read_only=True)}  # fmt: skip
    target = {"retention.ms": entry("3600000"), "cleanup.policy": entry("compact"),
              "max.message.bytes": entry("2000000"), "min.insync.replicas": entry("1"),
              "compression.type": entry("zstd")}  # fmt: skip
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


def done(value: Any) -> Future:
    future: Future = Future()
    future.set_result(value)
    return future


class FakeAclAdmin:
    """The calls AclSync makes, shaped like confluent_kafka.admin.AdminClient's."""

    def __init__(self, topics: dict[str, int], bindings: list[AclBinding]) -> None:
        self.topics, self.bindings = topics, list(bindings)
        self.filters: list[Any] = []
        self.created: list[AclBinding] = []

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(topics={n: SimpleNamespace(error=None, partitions=dict.fromkeys(range(c)))
                                       for n, c in self.topics.items()})  # fmt: skip

    def describe_acls(self, acl_filter: Any, request_timeout: float) -> Future:
        self.filters.append(acl_filter)
        return done([b for b in self.bindings if b.restype == acl_filter.restype])

    def create_acls(self, bindings: list[AclBinding], request_timeout: float) -> dict[AclBinding, Future]:
        self.created += bindings
        self.bindings += bindings
        return {b: done(None) for b in bindings}


def binding(topic: str, principal: str, operation: AclOperation, permission: AclPermissionType) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", operation, permission)


SPEC = parse_flow_spec({
    "id": "west->east", "checkpoint_location": "/tmp/x", "topics": ["orders", "pay.*"], "topics_exclude": [],
    "source": {"alias": "west", "bootstrap_servers": "127.0.0.1:1"},
    "target": {"alias": "east", "bootstrap_servers": "127.0.0.1:2"},
    "replication_policy": {"type": "default"},
})  # fmt: skip


def test_acl_sync_creates_only_missing_read_acls_and_prints_one_line_each() -> None:
    source = FakeAclAdmin({"orders": 2, "pay.eu": 1, "other": 1}, [
        binding("orders", "User:alice", AclOperation.READ, AclPermissionType.ALLOW),
        binding("pay.eu", "User:bob", AclOperation.ALL, AclPermissionType.ALLOW),
        binding("pay.eu", "User:bob", AclOperation.WRITE, AclPermissionType.ALLOW),
        binding("other", "User:alice", AclOperation.READ, AclPermissionType.ALLOW),
    ])  # fmt: skip
    target = FakeAclAdmin({}, [binding("west.orders", "User:alice", AclOperation.READ, AclPermissionType.ALLOW)])
    out = io.StringIO()
    sync = AclSync(SPEC, admin_factory=lambda endpoint: source if endpoint.alias == "west" else target, out=out)
    assert sync.run() == [TopicAcl("west.pay.eu", "User:bob", "*", "READ", "ALLOW")]
    assert target.created == [binding("west.pay.eu", "User:bob", AclOperation.READ, AclPermissionType.ALLOW)]
    # the listing asks for literal topic ACLs of any principal, host, operation and permission
    (wanted,) = source.filters
    assert (wanted.restype, wanted.name, wanted.resource_pattern_type, wanted.operation, wanted.permission_type) == (
        ResourceType.TOPIC,
        None,
        ResourcePatternType.LITERAL,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert [json.loads(line.split(" ", 2)[2]) for line in out.getvalue().splitlines()] == [
        {"flow": "west->east", "topic": "west.pay.eu", "principal": "User:bob", "host": "*", "operation": "READ",
         "permission": "ALLOW"}]  # fmt: skip
    assert sync.run() == [] and sync.created == 1  # in step: the next round creates nothing


def test_a_failed_sync_round_is_counted_and_retried_never_raised() -> None:
    class Refusing(FakeAclAdmin):
        def describe_acls(self, acl_filter: Any, request_timeout: float) -> Future:
            future: Future = Future()
            future.set_exception(KmirrorError("SECURITY_DISABLED"))
            return future

    admin = Refusing({"orders": 1}, [])
    spec = parse_flow_spec({**SPEC.to_dict(), "sync_topic_configs": False, "sync_topic_acls_interval_ms": 5000})
    now = [100.0]
    ticker = SyncTicker(spec, once=True, admin_factory=lambda endpoint: admin, clock=lambda: now[0]).start()
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
