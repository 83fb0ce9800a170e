"""Topic discovery with a fake admin client: MM2's replication rule and the refresh interval."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kmirror.errors import ConnectionFailure
from kmirror.flow.filters import NameSelection
from kmirror.flow.replication_policy import policy_from_config
from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.planning.discovery import TopicDiscovery

WEST = ClusterEndpoint("west", "127.0.0.1:1")


class FakeAdmin:
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.calls = 0
        self.down = False

    def list_topics(self, timeout: float) -> Any:
        self.calls += 1
        if self.down:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "connection refused"))
        return SimpleNamespace(
            topics={
                n: SimpleNamespace(partitions={i: SimpleNamespace(leader=0, error=None) for i in range(c)}, error=None)
                for n, c in self.topics.items()
            }
        )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def discovery(admin: FakeAdmin, clock: Clock, target: str = "east") -> TopicDiscovery:
    selection = NameSelection(("orders", "pay.*", "heartbeats", "east.*"), (".*[-.]internal",))
    return TopicDiscovery(admin, WEST, selection, policy_from_config({"type": "default"}), target, 30_000, clock=clock)


def test_selected_topics_are_renamed_and_internal_excluded_and_cycles_skipped() -> None:
    admin = FakeAdmin(
        {
            "orders": 3,
            "pay.eu": 2,
            "pay.audit-internal": 1,
            "__consumer_offsets": 50,
            "other": 1,
            "east.orders": 3,
            "heartbeats": 1,
            "mm2-offset-syncs.east.internal": 1,
        }
    )
    found = discovery(admin, Clock()).topics()
    assert {n: (t.partitions, t.target_topic) for n, t in found.items()} == {
        "orders": (3, "west.orders"),
        "pay.eu": (2, "west.pay.eu"),
        "heartbeats": (1, "west.heartbeats"),
    }  # east.orders came from the target: mirroring it back would loop


def test_refresh_interval_picks_up_new_topics_and_partitions() -> None:
    admin, clock = FakeAdmin({"orders": 1}), Clock()
    d = discovery(admin, clock)
    assert d.topics()["orders"].partitions == 1
    admin.topics = {"orders": 4, "pay.us": 2}
    clock.now = 29.0
    assert set(d.topics()) == {"orders"} and admin.calls == 1  # cached
    clock.now = 30.0
    assert {n: t.partitions for n, t in d.topics().items()} == {"orders": 4, "pay.us": 2}
    assert admin.calls == 2


def test_unreachable_source_names_cluster_at_first_call_and_keeps_cache_later() -> None:
    admin, clock = FakeAdmin({"orders": 1}), Clock()
    admin.down = True
    d = discovery(admin, clock)
    with pytest.raises(ConnectionFailure, match=r"cluster 'west' \(127.0.0.1:1\) is unreachable"):
        d.topics()
    admin.down = False
    assert set(d.topics()) == {"orders"}
    admin.down = True
    clock.now = 100.0
    assert set(d.topics()) == {"orders"}  # a failed refresh keeps the previous listing


def test_heartbeats_replication_off_mirrors_heartbeats_topics_only_when_the_patterns_select_them() -> None:
    admin = FakeAdmin({"orders": 1, "heartbeats": 1, "north.heartbeats": 1})
    policy = policy_from_config({"type": "default"})
    mm2 = TopicDiscovery(admin, WEST, NameSelection(("orders",)), policy, "east", 0)
    assert set(mm2.topics()) == {"orders", "heartbeats", "north.heartbeats"}  # MM2's default
    off = TopicDiscovery(admin, WEST, NameSelection(("orders",), heartbeats=False), policy, "east", 0)
    assert set(off.topics()) == {"orders"}
    named = TopicDiscovery(admin, WEST, NameSelection(("orders", "heartbeats"), heartbeats=False), policy, "east", 0)
    assert set(named.topics()) == {"orders", "heartbeats"}


def test_the_flow_option_reaches_the_selection_and_mm2s_setting_imports() -> None:
    from kmirror.flow.spec import parse_flow_spec
    from kmirror.mm2.config_import import import_mm2

    base = {
        "id": "west->east",
        "topics": ["orders"],
        "source": {"alias": "west", "bootstrap_servers": "w:9092"},
        "target": {"alias": "east", "bootstrap_servers": "e:9092"},
        "checkpoint_location": "/tmp/c",
        "topics_exclude": [],
        "replication_policy": {"type": "default"},
    }
    assert parse_flow_spec(base).topic_selection.heartbeats is True
    assert parse_flow_spec({**base, "heartbeats_replication_enabled": False}).topic_selection.heartbeats is False
    estate, dropped = import_mm2(
        {
            "clusters": "west, east",
            "west->east.enabled": "true",
            "west.bootstrap.servers": "w:9092",
            "east.bootstrap.servers": "e:9092",
            "west->east.heartbeats.replication.enabled": "false",
        }
    )
    assert not dropped
    assert _find_key(estate, "heartbeats_replication_enabled") == [False]


def _find_key(tree: object, key: str) -> list[object]:
    if isinstance(tree, dict):
        return [v for k, v in tree.items() if k == key] + [x for v in tree.values() for x in _find_key(v, key)]
    if isinstance(tree, list):
        return [x for v in tree for x in _find_key(v, key)]
    return []
