"""Config sync and ACL sync (issue 18) through the app (`run_flow --once`) on two tansu brokers.

How the tests cope with tansu:
- tansu's DescribeConfigs returns only the configs set on a topic, but flags each one
  `is_default=True` (source DEFAULT_CONFIG); Kafka flags exactly those as set. The admin clients
  of the driver are wrapped (`TansuAsKafka`) so that they report tansu's entries as set, as Kafka
  would; every other call, IncrementalAlterConfigs included, is tansu's own, and the results are
  read back from tansu unwrapped.
- tansu has no authorizer (its ACL APIs answer with nothing), so ACLs come from a fake ACL store
  shaped like confluent-kafka's (describe_acls/create_acls); topic discovery is tansu's.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourcePatternType,
    ResourceType,
)

import kmirror_engine.clients.factory
from kmirror.flowspec import FlowSpec, parse_flow_spec
from kmirror_engine.planning.config_sync import ConfigSync
from kmirror_engine.planning.created_topics import created_topics_topic, load_created
from spark_app.main import run_flow
from tests.kafka_helpers import create_topic, produce

pytestmark = pytest.mark.e2e


class _SetFlags:
    def __init__(self, future: Future) -> None:
        self.future = future

    def result(self, timeout: float | None = None) -> dict[str, Any]:
        return {
            name: SimpleNamespace(
                value=e.value, is_default=False, is_read_only=e.is_read_only, is_sensitive=e.is_sensitive
            )
            for name, e in self.future.result(timeout).items()
        }


class TansuAsKafka:
    """An admin client whose DescribeConfigs flags tansu's entries as explicitly set (module doc)."""

    def __init__(self, inner: Any, acls: dict[str, list[AclBinding]] | None = None, alias: str = "") -> None:
        self.inner, self.acls, self.alias = inner, acls, alias

    def describe_configs(self, resources: list[Any], **kwargs: Any) -> dict[Any, Any]:
        return {r: _SetFlags(f) for r, f in self.inner.describe_configs(resources, **kwargs).items()}

    def describe_acls(self, acl_filter: Any, request_timeout: float) -> Future:
        if self.acls is None:  # tansu's own answer: no ACLs
            return self.inner.describe_acls(acl_filter, request_timeout=request_timeout)
        future: Future = Future()
        future.set_result(list(self.acls[self.alias]))
        return future

    def create_acls(self, bindings: list[AclBinding], request_timeout: float) -> dict[AclBinding, Future]:
        assert self.acls is not None
        self.acls[self.alias] += bindings
        out = {}
        for b in bindings:
            out[b] = Future()
            out[b].set_result(None)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def sync_flow(clusters: Any, unique: str, topics: list[str], checkpoint: Path, **options: Any) -> FlowSpec:
    return parse_flow_spec({
        "id": f"w{unique}->e{unique}", "checkpoint_location": str(checkpoint),
        "source": {"alias": f"w{unique}", "bootstrap_servers": clusters.source},
        "target": {"alias": f"e{unique}", "bootstrap_servers": clusters.target},
        "topics": topics, "topics_exclude": [], "replication_policy": {"type": "default"},
        "emit_heartbeats": False, "emit_checkpoints": False, **options,
    })  # fmt: skip


def configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    return {name: e.value for name, e in future.result(timeout=30).items()}


def alter(bootstrap: str, topic: str, **changes: str | None) -> None:
    ops = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET if v else
                       AlterConfigOpType.DELETE) for k, v in changes.items()]  # fmt: skip
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic,
                                                                  incremental_configs=ops)]).values():  # fmt: skip
        future.result(timeout=30)


def test_configs_follow_the_source_on_topics_the_mirror_created_and_only_there(
    clusters: Any, spark: Any, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: Any
) -> None:
    real = kmirror_engine.clients.factory.admin_client
    monkeypatch.setattr(kmirror_engine.clients.factory, "admin_client", lambda endpoint: TansuAsKafka(real(endpoint)))
    ours, theirs = f"orders-{unique}", f"legacy-{unique}"
    create_topic(clusters.source, ours, 1, {"retention.ms": "3600000", "max.message.bytes": "2000000"})
    create_topic(clusters.source, theirs, 1, {"retention.ms": "3600000"})
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
    assert configs(clusters.target, f"w{unique}.{theirs}") == {"retention.ms": "1000"}  # never touched
    lines = [json.loads(line.split(" ", 2)[2]) for line in capfd.readouterr().err.splitlines()
             if line.startswith("kmirror config_sync ")]  # fmt: skip
    changed = {(line["config"], line["operation"], line["to"]) for line in lines if line["flow"] == spec.id}
    assert ("retention.ms", "SET", "7200000") in changed
    # heartbeats topics (mirrored whatever the selection; other tests leave some) are the mirror's too
    assert all(line["topic"] in (f"w{unique}.{ours}",) or line["topic"].endswith("heartbeats")
               for line in lines if line["flow"] == spec.id), lines  # fmt: skip

    # a config the source stops setting is deleted on the remote topic (the interval's round)
    alter(clusters.source, ours, max_message_bytes=None)
    changes = ConfigSync(spec).run()
    assert [(c.name, c.operation) for c in changes if c.topic == f"w{unique}.{ours}"] == [
        ("max.message.bytes", "DELETE")
    ]
    assert "max.message.bytes" not in configs(clusters.target, f"w{unique}.{ours}")
    # told to, it also syncs the topic it did not create
    everything = sync_flow(clusters, unique, [ours, theirs], tmp_path / "cp", sync_configs_of_existing_topics=True)
    assert [(c.topic, c.name, c.value) for c in ConfigSync(everything).run()] == [
        (f"w{unique}.{theirs}", "retention.ms", "7200000")
    ]


def test_read_acls_of_mirrored_topics_reach_the_remote_topics(
    clusters: Any, spark: Any, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    acls: dict[str, list[AclBinding]] = {f"w{unique}": [], f"e{unique}": []}
    real = kmirror_engine.clients.factory.admin_client
    monkeypatch.setattr(kmirror_engine.clients.factory, "admin_client",
                        lambda endpoint: TansuAsKafka(real(endpoint), acls, endpoint.alias))  # fmt: skip
    topic = f"orders-{unique}"
    create_topic(clusters.source, topic, 1)

    def acl(name: str, principal: str, op: AclOperation, permission: AclPermissionType) -> AclBinding:
        return AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL, principal, "*", op, permission)

    acls[f"w{unique}"] += [acl(topic, "User:analytics", AclOperation.ALL, AclPermissionType.ALLOW),
                           acl(topic, "User:writer", AclOperation.WRITE, AclPermissionType.ALLOW)]  # fmt: skip
    run_flow(sync_flow(clusters, unique, [topic], tmp_path / "cp"), spark=spark, once=True)
    assert acls[f"e{unique}"] == [acl(f"w{unique}.{topic}", "User:analytics", AclOperation.READ,
                                      AclPermissionType.ALLOW)]  # fmt: skip
    # opted out per flow: nothing copied
    acls[f"w{unique}"].append(acl(topic, "User:late", AclOperation.READ, AclPermissionType.ALLOW))
    run_flow(sync_flow(clusters, unique, [topic], tmp_path / "cp", sync_topic_acls=False), spark=spark, once=True)
    assert len(acls[f"e{unique}"]) == 1
