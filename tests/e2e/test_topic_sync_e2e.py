"""Config sync and ACL sync (issue 18) through the app (`run_flow --once`) on two Apache Kafka
clusters: real config sources (a topic's own settings, the broker's static file, dynamic broker
defaults) and the StandardAuthorizer's ACLs. tansu has neither (its DescribeConfigs flags every
setting as a default and its ACL APIs answer with nothing), so these run on Apache Kafka only.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourcePatternType,
    ResourceType,
)

from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror_engine.planning.created_topics import created_topics_topic, load_created
from kmirror_engine.topic_sync.configs import ConfigSync
from spark_app.main import run_flow
from tests.kafka_helpers import create_topic, produce

pytestmark = [pytest.mark.e2e, pytest.mark.real_kafka, pytest.mark.spark40]


def sync_flow(clusters: Any, unique: str, topics: list[str], checkpoint: Path, **options: Any) -> FlowSpec:
    return parse_flow_spec(
        {
            "id": f"w{unique}->e{unique}",
            "checkpoint_location": str(checkpoint),
            "source": {"alias": f"w{unique}", "bootstrap_servers": clusters.source},
            "target": {"alias": f"e{unique}", "bootstrap_servers": clusters.target},
            "topics": topics,
            "topics_exclude": [],
            "replication_policy": {"type": "default"},
            "emit_heartbeats": False,
            "emit_checkpoints": False,
            **options,
        }
    )


def configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return {name: e.value for name, e in future.result(timeout=30).items()}


def set_on_topic(bootstrap: str, topic: str) -> dict[str, str]:
    """The configs set on the topic itself (source DYNAMIC_TOPIC_CONFIG), as the broker reports."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return {
        name: e.value
        for name, e in future.result(timeout=30).items()
        if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }


def set_broker_default(bootstrap: str, name: str, value: str) -> None:
    """A dynamic default of broker 1 (source DYNAMIC_BROKER_CONFIG on its topics; confluent-kafka
    refuses the cluster-wide resource, whose name is empty)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.BROKER, "1", incremental_configs=[entry])]
    ).values():
        future.result(timeout=30)


def test_broker_defaults_are_never_pinned_on_remote_topics_and_a_settled_sync_changes_nothing(
    clusters: Any, spark: Any, unique: str, tmp_path: Path
) -> None:
    """MM2 copies a topic's own settings only. The source broker's static file (`log.segment.bytes`
    in the harness's server.properties: `segment.bytes` STATIC_BROKER_CONFIG) and a dynamic
    broker default (`log.retention.bytes`: `retention.bytes` DYNAMIC_BROKER_CONFIG) must
    not become settings of the remote topic, and a second round right after changes nothing."""
    set_broker_default(clusters.source, "log.retention.bytes", "10737418240")
    topic = f"cfg-{unique}"
    create_topic(clusters.source, topic, 2, {"retention.ms": "86400000", "cleanup.policy": "compact,delete"})
    source = AdminClient({"bootstrap.servers": clusters.source})
    (future,) = source.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    sources = {name: e.source for name, e in future.result(timeout=30).items()}
    assert sources["segment.bytes"] == ConfigSource.STATIC_BROKER_CONFIG.value
    assert sources["retention.bytes"] == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    spec = sync_flow(clusters, unique, [topic], tmp_path / "cp")
    run_flow(spec, spark=spark, once=True)
    assert set_on_topic(clusters.target, f"w{unique}.{topic}") == {
        "retention.ms": "86400000",
        "cleanup.policy": "compact,delete",
    }
    assert ConfigSync.for_flow(spec.route, spec.topic_sync).run() == []  # settled: no SET, no DELETE every interval


def alter(bootstrap: str, topic: str, **changes: str | None) -> None:
    ops = [
        ConfigEntry(
            k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET if v else AlterConfigOpType.DELETE
        )
        for k, v in changes.items()
    ]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=ops)]
    ).values():
        future.result(timeout=30)


def test_configs_follow_the_source_on_topics_the_mirror_created_and_only_there(
    clusters: Any, spark: Any, unique: str, tmp_path: Path, capfd: Any
) -> None:
    ours, theirs = f"orders-{unique}", f"legacy-{unique}"
    create_topic(clusters.source, ours, 1, {"retention.ms": "86400000", "max.message.bytes": "2000000"})
    create_topic(clusters.source, theirs, 1, {"retention.ms": "86400000"})
    create_topic(clusters.target, f"w{unique}.{theirs}", 1, {"retention.ms": "1000"})  # made by hand: not ours
    produce(clusters.source, ours, [{"value": b"v"}] * 3)
    spec = sync_flow(clusters, unique, [ours, theirs], tmp_path / "cp")
    run_flow(spec, spark=spark, once=True)  # creates w.orders and records it as the mirror's
    created = load_created(spec.target, created_topics_topic(spec.source.alias))
    # MM2 mirrors every heartbeats topic whatever the selection; other tests leave some on this broker
    assert {t for t in created if not t.endswith("heartbeats")} == {f"w{unique}.{ours}"}, created

    alter(clusters.source, ours, retention_ms="7200000")  # changed at the source after creation
    alter(clusters.source, theirs, retention_ms="7200000")
    capfd.readouterr()
    run_flow(spec, spark=spark, once=True)  # the next --once run re-syncs
    remote = configs(clusters.target, f"w{unique}.{ours}")
    assert (remote.get("retention.ms"), remote.get("max.message.bytes")) == ("7200000", "2000000")
    assert set_on_topic(clusters.target, f"w{unique}.{theirs}") == {"retention.ms": "1000"}  # never touched
    lines = [
        json.loads(line.split(" ", 2)[2])
        for line in capfd.readouterr().err.splitlines()
        if line.startswith("kmirror config_sync ")
    ]
    changed = {(line["config"], line["operation"], line["to"]) for line in lines if line["flow"] == spec.id}
    assert ("retention.ms", "SET", "7200000") in changed
    # heartbeats topics (mirrored whatever the selection; other tests leave some) are the mirror's too
    assert all(
        line["topic"] in (f"w{unique}.{ours}",) or line["topic"].endswith("heartbeats")
        for line in lines
        if line["flow"] == spec.id
    ), lines

    # a config the source stops setting is deleted on the remote topic (the interval's round)
    alter(clusters.source, ours, max_message_bytes=None)
    changes = ConfigSync.for_flow(spec.route, spec.topic_sync).run()
    assert [(c.name, c.operation) for c in changes if c.topic == f"w{unique}.{ours}"] == [
        ("max.message.bytes", "DELETE")
    ]
    assert "max.message.bytes" not in set_on_topic(clusters.target, f"w{unique}.{ours}")
    # told to, it also syncs the topic it did not create
    everything = sync_flow(clusters, unique, [ours, theirs], tmp_path / "cp", sync_configs_of_existing_topics=True)
    assert [(c.topic, c.name, c.value) for c in ConfigSync.for_flow(everything.route, everything.topic_sync).run()] == [
        (f"w{unique}.{theirs}", "retention.ms", "7200000")
    ]


def test_read_acls_of_mirrored_topics_reach_the_remote_topics(
    clusters: Any, spark: Any, unique: str, tmp_path: Path
) -> None:
    """The StandardAuthorizer's own ACLs: READ and ALL on a mirrored source topic become READ on
    its remote topic, a DENY (literal or prefixed) too; WRITE, and ACLs of unmirrored topics, are
    not copied. Revoked at the source, what the sync copied is deleted on the target; an ACL an
    operator set on the remote topic by hand stays."""
    topic, other = f"orders-{unique}", f"private-{unique}"
    remote = f"w{unique}.{topic}"
    create_topic(clusters.source, topic, 1)
    create_topic(clusters.source, other, 1)

    def acl(
        name: str,
        principal: str,
        op: AclOperation,
        permission: AclPermissionType = AclPermissionType.ALLOW,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    ) -> AclBinding:
        return AclBinding(ResourceType.TOPIC, name, pattern, principal, "*", op, permission)

    def matching(b: AclBinding) -> AclBindingFilter:
        """The filter that deletes exactly `b`."""
        return AclBindingFilter(
            b.restype, b.name, b.resource_pattern_type, b.principal, b.host, b.operation, b.permission_type
        )

    def acls_after_a_run(**options: Any) -> set[tuple[str, str, str, str]]:
        """The target's ACLs once a --once run of the flow (with `options`) ended."""
        run_flow(sync_flow(clusters, unique, [topic], tmp_path / "cp", **options), spark=spark, once=True)
        return target_acls(clusters.target, unique)

    analytics = acl(topic, f"User:analytics-{unique}", AclOperation.ALL)
    eve = acl(topic, f"User:eve-{unique}", AclOperation.READ, AclPermissionType.DENY)
    mallory = acl(
        f"orders-{unique}"[:-2],
        f"User:mallory-{unique}",
        AclOperation.READ,
        AclPermissionType.DENY,
        ResourcePatternType.PREFIXED,
    )
    source = AdminClient({"bootstrap.servers": clusters.source})
    for future in source.create_acls(
        [
            analytics,
            eve,
            mallory,
            acl(topic, f"User:writer-{unique}", AclOperation.WRITE),
            acl(other, f"User:analytics-{unique}", AclOperation.READ),
        ]
    ).values():
        future.result(timeout=30)
    assert acls_after_a_run(sync_topic_acls=True) == {
        (remote, f"User:analytics-{unique}", "READ", "ALLOW"),
        (remote, f"User:eve-{unique}", "READ", "DENY"),
        (remote, f"User:mallory-{unique}", "READ", "DENY"),  # the prefixed DENY, literal on the remote topic
    }
    # an operator's own grant on the remote topic, and revocations at the source
    target = AdminClient({"bootstrap.servers": clusters.target})
    for future in target.create_acls([acl(remote, f"User:ops-{unique}", AclOperation.READ)]).values():
        future.result(timeout=30)
    for future in source.delete_acls([matching(b) for b in (analytics, eve)]).values():
        future.result(timeout=30)
    assert acls_after_a_run(sync_topic_acls=True) == {
        (remote, f"User:mallory-{unique}", "READ", "DENY"),
        (remote, f"User:ops-{unique}", "READ", "ALLOW"),
    }
    # opted out (the default): nothing more copied, nothing revoked
    for future in source.create_acls([acl(topic, f"User:late-{unique}", AclOperation.READ)]).values():
        future.result(timeout=30)
    for future in source.delete_acls([matching(mallory)]).values():
        future.result(timeout=30)
    assert len(acls_after_a_run()) == 2


def target_acls(bootstrap: str, unique: str) -> set[tuple[str, str, str, str]]:
    """The target's literal topic ACLs of this test's principals (the broker's own answer)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.describe_acls(
        AclBindingFilter(
            ResourceType.TOPIC,
            None,
            ResourcePatternType.LITERAL,
            None,
            None,  # type: ignore[arg-type]
            AclOperation.ANY,
            AclPermissionType.ANY,
        ),
        request_timeout=30,
    ).result(timeout=30)
    return {
        (b.name, b.principal, b.operation.name, b.permission_type.name) for b in found if b.principal.endswith(unique)
    }
