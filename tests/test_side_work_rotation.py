"""The side work's long-lived clients follow credential rotation (issue 24 item 5), with fakes at
the factory's seam: the offset-sync and snapshot producers, the checkpoint/heartbeat producer and
the group-commit consumer re-read a `${file:...}` SCRAM password at most every `RECHECK_S`
seconds (or at once after an authentication error) and are rebuilt with the new one; a producer
being replaced delivers what it holds first, and what it cannot deliver fails loudly (the batch's
confirm raises), never dropped quietly."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from confluent_kafka import KafkaError, KafkaException

from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror_engine.clients import cache, factory
from kmirror_engine.clients.cache import RenewingProducer, retire_producer
from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
from tests.kafka_fakes import Msg
from tests.planner_fakes import raw_spec


class FakeProducer:
    """Delivers its queued records at flush, unless `stuck` (then they stay queued)."""

    made: ClassVar[list[FakeProducer]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.queued: list[tuple[str, Any]] = []
        self.delivered: list[str] = []
        self.stuck = False
        FakeProducer.made.append(self)

    @property
    def password(self) -> str:
        return str(self.config["sasl.password"])

    def produce(self, topic: str, value: Any = None, key: Any = None, on_delivery: Any = None, **_: Any) -> None:
        self.queued.append((topic, on_delivery))

    def poll(self, timeout: float = 0) -> int:
        return 0

    def flush(self, timeout: float = 0) -> int:
        if self.stuck:
            return len(self.queued)
        for topic, callback in self.queued:
            self.delivered.append(topic)
            if callback is not None:
                callback(None, Msg(topic, len(self.delivered)))
        self.queued = []
        return 0

    def __len__(self) -> int:
        return len(self.queued)

    def purge(self, *args: Any) -> None:
        """librdkafka fails every queued record with `Local: Purged in queue` (served by flush)."""
        purged, self.queued, self.stuck = self.queued, [], False
        for topic, callback in purged:
            callback(KafkaError(KafkaError._PURGE_QUEUE, "Local: Purged in queue"), Msg(topic, -1))

    def auth_error(self) -> None:
        """What librdkafka reports when the broker refuses the credentials."""
        self.config["error_cb"](KafkaError(KafkaError._AUTHENTICATION, "SASL authentication error"))


class FakeConsumer:
    made: ClassVar[list[FakeConsumer]] = []

    def __init__(self, config: dict[str, Any]) -> None:
        self.config, self.closed, self.commits = config, False, 0
        self.refuse: KafkaError | None = None
        FakeConsumer.made.append(self)

    def commit(self, offsets: Any = None, asynchronous: bool = True) -> None:
        if self.refuse is not None:
            raise KafkaException(self.refuse)
        self.commits += 1

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def secret(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A SCRAM password file behind `${file:...}`; clients re-check at every use (RECHECK_S 0)."""
    FakeProducer.made, FakeConsumer.made = [], []
    monkeypatch.setattr(factory, "Producer", FakeProducer)
    monkeypatch.setattr(factory, "Consumer", FakeConsumer)
    monkeypatch.setattr(cache, "RECHECK_S", 0.0)
    path = tmp_path / "scram-password"
    path.write_text("before-rotation")
    return path


def spec(password_file: Path) -> FlowSpec:
    scram = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "mirror",
        "sasl.password": f"${{file:{password_file}}}",
    }
    return parse_flow_spec(raw_spec(config=scram))


def test_offset_syncs_after_a_rotated_password_go_through_a_producer_with_the_new_one(secret: Path) -> None:
    """Before: the producer built at the first sync kept 'before-rotation' for the process's life."""
    from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic
    from kmirror_engine.failover.offset_syncs import Sync

    syncs = OffsetSyncTopic(spec(secret).target, "mm2-offset-syncs.west.internal")
    syncs.write("orders", 0, [Sync(0, 0)], 1)
    syncs.flush()
    secret.write_text("after-rotation")
    syncs.write("orders", 0, [Sync(5, 5)], 6)
    syncs.flush()
    assert [p.password for p in FakeProducer.made] == ["before-rotation", "after-rotation"]
    old, new = FakeProducer.made
    assert (len(old.delivered), len(new.delivered)) == (1, 1) and syncs.written_until == 2


def test_a_producer_being_replaced_delivers_its_records_first_and_its_callbacks_run(secret: Path) -> None:
    """A rotation noticed between two records of one batch: the first record goes out with the
    old producer before the new one is used, and the batch's confirm sees both delivered."""
    from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic
    from kmirror_engine.failover.offset_syncs import Sync

    syncs = OffsetSyncTopic(spec(secret).target, "mm2-offset-syncs.west.internal")
    syncs.write("orders", 0, [Sync(0, 0)], 1)  # queued, not confirmed yet
    secret.write_text("after-rotation")
    syncs.write("orders", 0, [Sync(5, 5)], 6)
    old, new = FakeProducer.made
    assert old.delivered == ["mm2-offset-syncs.west.internal"] and len(new) == 1
    syncs.flush()
    assert syncs.written_until == 1 + 1 and new.delivered == ["mm2-offset-syncs.west.internal"]


def test_records_the_replaced_producer_cannot_deliver_fail_loudly_in_the_batch_confirm(secret: Path) -> None:
    """The old producer's credentials are refused: its record is purged and the confirm of the
    batch raises naming it (the batch is retried), while the next records go out with the new one."""
    from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic
    from kmirror_engine.failover.offset_syncs import OffsetSyncError, Sync

    syncs = OffsetSyncTopic(spec(secret).target, "mm2-offset-syncs.west.internal")
    syncs.write("orders", 0, [Sync(0, 0)], 1)
    old = FakeProducer.made[0]
    old.stuck = True
    secret.write_text("after-rotation")
    syncs.write("orders", 0, [Sync(5, 5)], 6)
    with pytest.raises(
        OffsetSyncError,
        match=r"^1 offset sync\(s\) failed, 0 unconfirmed; first: \['offset sync to "
        r"mm2-offset-syncs.west.internal failed: Local: Purged in queue'\]$",
    ):
        syncs.flush()
    assert [p.password for p in FakeProducer.made] == ["before-rotation", "after-rotation"]
    assert FakeProducer.made[1].delivered == ["mm2-offset-syncs.west.internal"] and old.delivered == []
    syncs.write("orders", 0, [Sync(5, 5)], 6)  # the retried batch
    syncs.flush()


def test_a_client_the_retire_step_cannot_empty_is_kept_never_dropped(tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("one")
    made: list[FakeProducer] = []

    def make(config: Any, renewal: Any) -> FakeProducer:
        made.append(FakeProducer({"sasl.password": config["sasl.password"]}))
        return made[-1]

    producer = RenewingProducer(
        lambda: {"sasl.password": secret.read_text()},
        make,
        lambda old: len(old) == 0,
        role="checkpoints-producer",
        recheck_s=0.0,
    )
    producer.produce("t")
    made[0].stuck = True
    secret.write_text("two")
    producer.produce("t")
    assert len(made) == 1 and len(producer) == 2  # kept, with both records
    made[0].stuck = False
    assert producer.flush(1) == 0 and len(made[0].delivered) == 2
    producer.produce("t")
    assert [p.password for p in made] == ["one", "two"] and producer.rebuilds == 1


def test_the_config_is_read_at_most_every_recheck_interval_or_at_once_after_an_auth_error(tmp_path: Path) -> None:
    reads: list[str] = []
    secret = tmp_path / "password"
    secret.write_text("one")
    now = [100.0]

    def resolve() -> dict[str, Any]:
        reads.append(secret.read_text())
        return {"sasl.password": reads[-1]}

    made: list[tuple[str, Any]] = []

    def make(config: Any, renewal: Any) -> FakeProducer:
        made.append((config["sasl.password"], renewal))
        return FakeProducer(dict(config))

    producer = RenewingProducer(
        resolve, make, retire_producer, role="checkpoints-producer", recheck_s=30.0, clock=lambda: now[0]
    )
    producer.produce("t")
    secret.write_text("two")
    now[0] += 29.0
    producer.produce("t")
    assert reads == ["one"] and producer.rebuilds == 0  # inside the interval: not even read
    made[-1][1].due = True  # what the client's error_cb does on an authentication error
    producer.produce("t")
    assert reads == ["one", "two"] and [m[0] for m in made] == ["one", "two"] and producer.rebuilds == 1
    now[0] += 30.0
    producer.produce("t")
    assert reads == ["one", "two", "two"] and producer.rebuilds == 1  # read again, same key: kept


def test_an_authentication_error_reported_by_librdkafka_marks_the_producer_for_a_recheck(secret: Path) -> None:
    producer = factory.renewing_producer(spec(secret).target, role="offset-syncs-producer")
    producer.recheck_s = 3600.0  # only the error may trigger the re-read here
    producer.produce("t")
    secret.write_text("after-rotation")
    producer.produce("t")
    assert len(FakeProducer.made) == 1
    FakeProducer.made[0].auth_error()
    producer.produce("t")
    assert [p.password for p in FakeProducer.made] == ["before-rotation", "after-rotation"]


def test_snapshots_after_a_rotated_password_go_through_a_producer_with_the_new_one(secret: Path) -> None:
    from kmirror_engine.failover.offset_sync_snapshots import SyncLog
    from kmirror_engine.failover.offset_syncs import SyncStore

    log = SyncLog(spec(secret).target, "west")
    store = SyncStore()
    store.add_segment("orders", 0, 0, 10, [(0, 0), (9, 9)])
    assert log.write_snapshot(store) == 1
    secret.write_text("after-rotation")
    assert log.write_snapshot(store) == 1
    assert [p.password for p in FakeProducer.made] == ["before-rotation", "after-rotation"]


def test_the_checkpoint_and_heartbeat_producer_is_rebuilt_after_a_rotation(secret: Path) -> None:
    from kmirror.errors import KmirrorError
    from kmirror_engine.clients.delivery import DeliveryConfirmingProducer
    from kmirror_engine.failover.failover_listener import FailoverClients

    clients = FailoverClients.connect(spec(secret))
    checkpoints = DeliveryConfirmingProducer(clients.producer, what="checkpoint", error=KmirrorError)
    checkpoints.produce("west.checkpoints.internal", b"v", b"k")
    checkpoints.confirm(5)
    secret.write_text("after-rotation")
    checkpoints.produce("west.checkpoints.internal", b"v", b"k")
    checkpoints.confirm(5)
    assert [p.password for p in FakeProducer.made] == ["before-rotation", "after-rotation"]
    assert FakeProducer.made[0].config["acks"] == "all"  # still made by the safe factory


def batch(batch_id: int, next_offset: int, ends: dict[tuple[str, int], int] | None = None) -> BatchProgress:
    progress = PartitionProgress("orders", 0, "west.orders", 0, next_offset, next_offset, 10, None)
    return BatchProgress(batch_id, (progress,), 10, ends or {})


def test_the_group_commit_consumer_is_rebuilt_after_a_rotation_and_rechecks_after_a_refusal(secret: Path) -> None:
    from kmirror_engine.failover.group_commit import GroupCommitListener

    listener = GroupCommitListener.for_flow(spec(secret))
    listener.on_batch(batch(0, 5))
    secret.write_text("after-rotation")
    listener.on_batch(batch(1, 9))
    first, second = FakeConsumer.made
    assert (first.config["sasl.password"], second.config["sasl.password"]) == ("before-rotation", "after-rotation")
    assert first.closed and not second.closed and (first.commits, second.commits) == (1, 1)
    assert first.config["enable.auto.commit"] is False  # still the flow's consumer config

    consumer = listener._consumer
    consumer.recheck_s = 3600.0
    second.refuse = KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "refused")
    listener.on_batch(batch(2, 12))  # refused: counted, and the next commit re-reads the password
    secret.write_text("third")
    listener.on_batch(batch(3, 15))
    assert listener.failures == 1 and FakeConsumer.made[-1].config["sasl.password"] == "third"
    listener.close(final=True)
    assert FakeConsumer.made[-1].closed


class CountingAdmin:
    def __init__(self) -> None:
        self.calls = 0

    def list_offsets(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        raise AssertionError("the batch carries its source end offsets: no ListOffsets expected")


def test_a_batch_carrying_its_source_end_offsets_makes_no_admin_call(secret: Path) -> None:
    from kmirror_engine.failover.failover_metrics import FailoverMetrics

    admin = CountingAdmin()
    carried = batch(4, 9, {("orders", 0): 12})
    flow = spec(secret)
    metrics = FailoverMetrics(flow.id, flow.copy, flow.source)
    assert metrics.with_source_ends(carried, admin) is carried and admin.calls == 0
