"""The transform path's producing (kmirror_engine/copying/transform_writer.py): a row routed to a
topic the target lacks creates it as every other path does (issue 44: it used the broker's default
replication factor and skipped the created-topics registry), and offset syncs come from delivery."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from kmirror_engine.copying.transform_writer import TransformWrites
from tests.planner_fakes import FakeAdmin, spec


class Cluster(FakeAdmin):
    """A cluster that keeps what was created and answers topic configs."""

    def __init__(self, partitions: dict[str, int], configs: dict[str, dict[str, str]] | None = None) -> None:
        super().__init__({name: [(0, 0)] * count for name, count in partitions.items()})
        self.configs = configs or {}
        self.new_topics: list[Any] = []

    def create_topics(self, new: list[Any]) -> dict[str, Future[Any]]:
        self.new_topics += new
        return super().create_topics(new)

    def describe_configs(self, resources: list[Any]) -> dict[Any, Future[Any]]:
        out: dict[Any, Future[Any]] = {}
        for r in resources:
            out[r] = Future()
            entries = {k: SimpleNamespace(value=v, is_default=False, is_read_only=False, is_sensitive=False)
                       for k, v in self.configs.get(r.name, {}).items()}  # fmt: skip
            out[r].set_result(entries)
        return out


class Registry:
    """The created-topics registry: what was recorded."""

    def __init__(self) -> None:
        self.recorded: list[tuple[str, str]] = []

    def ensure_exists(self) -> None:
        pass

    def record(self, pairs: list[tuple[str, str]]) -> None:
        self.recorded += pairs


class Producer:
    """Acknowledges every record at the next flush, at downstream offsets from 100 up."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, bytes]] = []
        self.unacked: list[Any] = []

    def produce(self, topic: str, value: bytes, key: bytes, partition: int, on_delivery: Any, **_: Any) -> None:
        self.sent.append((topic, partition, value))
        self.unacked.append(on_delivery)

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        for offset, callback in enumerate(self.unacked, start=100):
            callback(None, SimpleNamespace(offset=lambda o=offset: o))
        self.unacked = []
        return 0


def rows(*items: tuple[str, int, int, bytes]) -> dict[str, list[Any]]:
    return {
        "topic": [t for t, _, _, _ in items],
        "partition": [p for _, p, _, _ in items],
        "offset": [o for _, _, o, _ in items],
        "key": [None] * len(items),
        "value": [v for _, _, _, v in items],
        "headers": [None] * len(items),
        "timestamp": [None] * len(items),
    }


def test_routed_topics_are_created_as_the_flow_asks_and_recorded_in_the_registry() -> None:
    source = Cluster({"orders": 4, "payments": 2}, configs={"payments": {"retention.ms": "3600000"}})
    target = Cluster({"west.orders": 4})
    registry, producer = Registry(), Producer()
    writes = TransformWrites(
        spec(replication_factor=3).route,
        spec(replication_factor=3).topic_sync,
        producer,
        [["orders", 0, 0, 10, "west.orders"]],
        admin_factory=lambda endpoint: source if endpoint.alias == "west" else target,
        created=registry,
    )
    writes.write(rows(("orders", 0, 5, b"kept"), ("alerts", 1, 6, b"routed"), ("payments", 0, 7, b"moved")))
    writes.drain()

    made = {t.topic: t for t in target.new_topics}
    assert sorted(made) == ["west.alerts", "west.payments"]  # the existing remote topic is used as it is
    for topic in made.values():
        assert topic.replication_factor == 3  # the flow's, not the broker's default (-1)
        assert topic.num_partitions == 4  # the largest remote topic of the batch
    assert made["west.payments"].config == {"retention.ms": "3600000"}  # a source topic's configs come along
    assert made["west.alerts"].config == {}  # a name only the transform knows has none
    assert sorted(registry.recorded) == [("west.alerts", "alerts"), ("west.payments", "payments")]
    assert producer.sent == [("west.orders", 0, b"kept"), ("west.alerts", 1, b"routed"), ("west.payments", 0, b"moved")]
    summary = writes.summary(first_ms=0)
    assert summary["parts"] == [
        ["orders", 0, {"records": 1, "bytes": 4, "syncs": [[5, 100]], "last_ts": None, "lat": None}]
    ]
    assert summary["unattributed"] == [2, 11]


def test_a_flow_without_config_sync_or_replication_factor_creates_bare_topics_at_the_brokers_default() -> None:
    source = Cluster({"orders": 1, "payments": 1}, configs={"payments": {"retention.ms": "1"}})
    target = Cluster({"west.orders": 2})
    registry = Registry()
    writes = TransformWrites(
        spec(sync_topic_configs=False).route,
        spec(sync_topic_configs=False).topic_sync,
        Producer(),
        [["orders", 0, 0, 10, "west.orders"]],
        admin_factory=lambda endpoint: source if endpoint.alias == "west" else target,
        created=registry,
    )
    writes.write(rows(("payments", 1, 3, b"x"), ("payments", 0, 4, b"y")))
    writes.drain()
    [made] = target.new_topics
    assert (made.topic, made.num_partitions, made.replication_factor, made.config) == ("west.payments", 2, -1, {})
    assert registry.recorded == [("west.payments", "payments")]  # created once, for both rows
