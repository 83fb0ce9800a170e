"""Side work never fails a delivered batch (issue 15, item 4), with injected fakes.

A checkpoint round whose deliveries are refused (no ACL on the checkpoints topic), a group
whose offsets cannot be read (coordinator moving), a group sync refused because the group
turned active between describe and alter, a heartbeats topic that cannot be created: the
sink's commit returns (Spark records the batch, nothing is replayed), each failure is counted
in `kmirror_failover_work_failures_total` and printed, and the next round retries. Only the
offset-sync write may still fail the batch. Plus the start-up report of missing ACLs on the
internal topics (tansu answers ACL questions with nothing, so fakes stand in for Kafka).
"""

from __future__ import annotations

import io
import json
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AclOperation

from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.mm2.formats import decode_checkpoint
from kmirror_engine.failover.failover_listener import FailoverClients, FailoverListener
from kmirror_engine.failover.offset_syncs import OffsetSyncError
from kmirror_engine.observability.progress import PartitionProgress
from kmirror_engine.planning.internal_topics import InternalTopicAccess
from spark_app import sink
from spark_app.sink import MirrorCommitMessage, MirrorStreamWriter
from tests.kafka_fakes import done, failed
from tests.sync_log_fakes import FakeSyncLog as BaseSyncLog
from tests.sync_log_fakes import SyncWrite


def flow(**options: Any) -> dict[str, Any]:
    return {
        "id": "west->east",
        "checkpoint_location": "/tmp/x",
        "topics": ["orders"],
        "topics_exclude": [],
        "source": {"alias": "west", "bootstrap_servers": "w:9092"},
        "target": {"alias": "east", "bootstrap_servers": "e:9092", "config": {"sasl.username": "mirror"}},
        "replication_policy": {"type": "default"},
        "groups": ["app.*"],
        "sync_group_offsets": True,
        "checkpoint_interval_ms": 0,
        **options,
    }


class FakeSyncLog(BaseSyncLog):
    def __init__(self) -> None:
        super().__init__()
        self.written: list[tuple[str, int, int]] = []
        self.refuse = False

    def record(self, write: SyncWrite) -> None:
        self.written += [(write.topic, write.partition, s.upstream) for s in write.syncs]

    def flush(self) -> None:
        if self.refuse:
            raise OffsetSyncError("1 offset sync(s) failed, 0 unconfirmed; first: ['TOPIC_AUTHORIZATION_FAILED']")


class RefusingProducer:
    """Delivery reports refuse records for `refused` topics, as Kafka does without a Write ACL."""

    def __init__(self, refused: set[str]) -> None:
        self.refused, self.sent, self.queued = refused, [], []  # type: list[tuple[str, bytes, bytes]]

    def produce(self, topic: str, value: bytes, key: bytes, on_delivery: Any = None, **_: Any) -> None:
        self.queued.append((topic, key, value, on_delivery))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        queued, self.queued = self.queued, []
        for topic, key, value, on_delivery in queued:
            error = KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED) if topic in self.refused else None
            if error is None:
                self.sent.append((topic, key, value))
            if on_delivery is not None:
                on_delivery(error, SimpleNamespace(topic=lambda t=topic: t))
        return 0


class SourceAdmin:
    """Groups app-1 and app-2; reading app-2's offsets fails (its coordinator is moving); end
    offsets (for the lag metric) cannot be read either."""

    def list_offsets(self, request: Any, **_: Any) -> dict[Any, Future[Any]]:
        return {tp: failed(KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))) for tp in request}

    def list_consumer_groups(self, **_: Any) -> Future[Any]:
        return done(SimpleNamespace(valid=[SimpleNamespace(group_id=g) for g in ("app-1", "app-2")]))

    def list_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Future[Any]]:
        (request,) = requests
        if request.group_id == "app-2":
            return {"app-2": failed(KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)))}
        return {request.group_id: done(SimpleNamespace(topic_partitions=[TopicPartition("orders", 0, 4)]))}


class TargetAdmin:
    """The target group is empty when described, but has joined by the time of the alter."""

    def __init__(self) -> None:
        self.altered = 0

    def describe_consumer_groups(self, groups: list[str], **_: Any) -> dict[str, Future[Any]]:
        return {g: done(SimpleNamespace(state=SimpleNamespace(name="EMPTY"), members=[])) for g in groups}

    def list_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Future[Any]]:
        return {r.group_id: done(SimpleNamespace(topic_partitions=[])) for r in requests}

    def alter_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Future[Any]]:
        self.altered += 1
        error = KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS))
        return {r.group_id: failed(error) for r in requests}


def listener_with(
    spec: FlowSpec, producer: Any, sync_log: FakeSyncLog, target: TargetAdmin, ensure: Any = None
) -> FailoverListener:
    clients = FailoverClients(sync_log, producer, SourceAdmin(), target, lambda: [], ensure or (lambda t, c: None))
    return FailoverListener.for_flow(spec, serve_metrics=False, heartbeats=True, clients=clients)


def commit_batch(monkeypatch: pytest.MonkeyPatch, spec: FlowSpec, listener: FailoverListener, batch_id: int) -> None:
    """The sink's driver-side commit (what Spark calls before recording the batch as done)."""
    monkeypatch.setattr(sink, "listeners_for", lambda spec: [listener])
    first = batch_id * 10
    part = PartitionProgress(
        "orders",
        0,
        "west.orders",
        first,
        first + 10,
        10,
        100,
        1_000,
        offset_syncs=((first, first + 3), (first + 9, first + 12)),
    )
    writer = MirrorStreamWriter(json.dumps(spec.to_dict()))
    writer.commit([MirrorCommitMessage(0, (part,), 1_000, 1_100)], batch_id)


def failures(listener: FailoverListener) -> dict[str, float]:
    out = {}
    for line in listener.metrics.text().splitlines():
        if line.startswith("kmirror_failover_work_failures_total{"):
            work = line.split('work="', 1)[1].split('"', 1)[0]
            out[work] = float(line.rsplit(" ", 1)[1])
    return out


def test_failed_checkpoints_group_sync_and_heartbeats_leave_the_batch_committed(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    spec = parse_flow_spec(flow())
    created: list[str] = []

    def ensure(topic: str, config: dict[str, str]) -> None:
        created.append(topic)
        if topic == "heartbeats":
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    producer, sync_log, target = RefusingProducer({"west.checkpoints.internal"}), FakeSyncLog(), TargetAdmin()
    listener = listener_with(spec, producer, sync_log, target, ensure)
    assert failures(listener) == {"heartbeats_setup": 1.0}  # reported at start, the listener still works

    commit_batch(monkeypatch, spec, listener, 0)  # returns: Spark records the batch, nothing is replayed
    assert sync_log.written == [("orders", 0, 0), ("orders", 0, 9)]  # the syncs were persisted
    assert failures(listener) == {"heartbeats_setup": 1.0, "heartbeats": 1.0, "checkpoints": 2.0, "offset_lag": 1.0}
    lines = [
        json.loads(x.split(" ", 2)[2])
        for x in capsys.readouterr().err.splitlines()
        if x.startswith("kmirror failover ")
    ]
    assert {(r["work"], r["error"].split(":")[0]) for r in lines} >= {
        ("checkpoints", "group 'app-2' skipped this round"),
        ("checkpoints", "CheckpointError"),
        ("heartbeats", "KafkaException"),
    }
    assert any("hint" in r for r in lines)

    producer.refused.clear()  # the ACL was granted: the next round delivers; the group turned active
    commit_batch(monkeypatch, spec, listener, 1)
    ((_, key, value),) = [s for s in producer.sent if s[0] == "west.checkpoints.internal"]
    assert decode_checkpoint(key, value).group == "app-1"
    assert target.altered == 1  # group sync tried, failed (group active), counted, batch still committed
    assert failures(listener)["group_offset_sync"] == 1.0
    assert failures(listener)["checkpoints"] == 3.0  # app-2 still unreadable


def test_a_failed_offset_sync_write_is_reported_but_never_fails_the_delivered_batch(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 26: failing the delivered batch made Spark copy it again at every retry and restart
    (a batch of duplicates each time) while the cause lasted; missing ACLs are refused at start."""
    spec = parse_flow_spec(flow(id="west2->east", source={"alias": "west2", "bootstrap_servers": "w:9092"}))
    sync_log = FakeSyncLog()
    listener = listener_with(spec, RefusingProducer(set()), sync_log, TargetAdmin())
    sync_log.refuse = True
    commit_batch(monkeypatch, spec, listener, 0)  # before: raised OffsetSyncError out of the commit
    assert 'kmirror side_work_failed {"error": "OffsetSyncError: ' in capsys.readouterr().err


class AclAdmin:
    """Kafka's KIP-430 answers: operations allowed per topic; one topic unknown; one unauthorized."""

    def __init__(self, cluster_ops: list[AclOperation] | None) -> None:
        self.cluster_ops = cluster_ops

    def describe_topics(self, topics: Any, **kwargs: Any) -> dict[str, Future[Any]]:
        assert kwargs["include_authorized_operations"] is True
        answers = {
            "mm2-offset-syncs.west.internal": done(SimpleNamespace(authorized_operations=[AclOperation.ALL])),
            "kmirror-created-topics.west.internal": done(SimpleNamespace(authorized_operations=[AclOperation.ALL])),
            "kmirror-offset-syncs-snapshot.west.internal": failed(
                KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
            ),
            "west.checkpoints.internal": done(
                SimpleNamespace(authorized_operations=[AclOperation.READ, AclOperation.DESCRIBE])
            ),
            "heartbeats": failed(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))),
        }
        return {t: answers[t] for t in topics.topic_names}

    def create_topics(self, topics: list[Any], validate_only: bool = False, **_: Any) -> dict[str, Future[Any]]:
        """A validate-only CreateTopics: allowed with Create on the cluster; unanswered (None) raises."""
        assert validate_only
        if self.cluster_ops is None:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))
        refused = KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
        return {t.topic: done(None) if AclOperation.CREATE in self.cluster_ops else failed(refused) for t in topics}


def test_missing_acls_on_internal_topics_are_reported_at_start_naming_topic_and_grant() -> None:
    spec = parse_flow_spec(flow())
    out = io.StringIO()
    problems = InternalTopicAccess.for_flow(spec).report(AclAdmin([AclOperation.DESCRIBE]), out)
    assert [(p.topic, p.missing) for p in problems] == [
        ("heartbeats", ("Create", "Describe", "Write")),  # unauthorized: Kafka hides whether it exists
        ("west.checkpoints.internal", ("Write",)),
        ("kmirror-offset-syncs-snapshot.west.internal", ("Create",)),
    ]
    records = [json.loads(line.removeprefix("kmirror warning ")) for line in out.getvalue().splitlines()]
    checkpoints = records[1]
    assert checkpoints["message"] == (
        "flow west->east: the mirror lacks Write on internal topic 'west.checkpoints.internal' on east "
        "(MM2 checkpoints); grant it: kafka-acls.sh --bootstrap-server e:9092 --add --allow-principal "
        "User:mirror --operation Write --topic west.checkpoints.internal"
    )
    # creation allowed: a missing topic is not a problem; a broker that does not answer: nothing
    assert [
        p.topic for p in InternalTopicAccess.for_flow(spec).report(AclAdmin([AclOperation.CREATE]), io.StringIO())
    ] == [
        "heartbeats",
        "west.checkpoints.internal",
    ]
    assert len(InternalTopicAccess.for_flow(spec).report(AclAdmin(None), io.StringIO())) == 2
