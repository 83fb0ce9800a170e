"""Fault handling that the local brokers cannot produce, tested with fakes: partition growth
(tansu has no CreatePartitions), a partition whose offsets went back, a broker that stops
answering (futures that never complete), and a broker-side "record too large" delivery report
(tansu does not enforce max.message.bytes). The real-broker fault tests: tests/e2e/test_faults.py."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError

from kmirror.errors import ConnectionFailure, DataLossError
from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyError, CopyRange
from kmirror_engine.planning.offset_queries import query_offsets, with_retries
from kmirror_engine.planning.target_topics import TargetTopics
from tests.kafka_fakes import FakeConsumer, FakeMessage, LimitedBroker
from tests.planner_fakes import FakeAdmin, planner


class GrowingAdmin(FakeAdmin):
    """A FakeAdmin that can grow partitions (as Kafka's CreatePartitions does)."""

    def __init__(self, logs: dict[str, list[tuple[int, int]]]) -> None:
        super().__init__(logs)
        self.grown: list[tuple[str, int]] = []

    def create_partitions(self, requests: list[Any]) -> dict[str, Future[Any]]:
        out: dict[str, Future[Any]] = {}
        for r in requests:
            self.logs[r.topic] += [(0, 0)] * (r.new_total_count - len(self.logs[r.topic]))
            self.grown.append((r.topic, r.new_total_count))
            out[r.topic] = Future()
            out[r.topic].set_result(None)
        return out


def test_partitions_added_on_the_source_grow_the_target_and_are_mirrored_from_their_start() -> None:
    source, target = GrowingAdmin({"orders": [(0, 50), (0, 50)]}), GrowingAdmin({})
    p = planner(source)
    p.target_topics.target_admin = target
    p.once = False
    start = p.initial_offsets()
    end = p.next_end(start, None)
    assert target.logs["west.orders"] == [(0, 0)] * 2 and end == {("orders", 0): 50, ("orders", 1): 50}

    source.logs["orders"] += [(10, 30), (0, 5)]  # two new partitions (one already lost its head to retention)
    end2 = p.next_end(end, None)

    assert target.grown == [("west.orders", 4)]
    assert end2 == {("orders", 0): 50, ("orders", 1): 50, ("orders", 2): 30, ("orders", 3): 5}
    ranges = sorted((r.partition, r.start_offset, r.end_offset) for task in p.plan(end, end2) for r in task)
    assert ranges == [(2, 10, 30), (3, 0, 5)]  # from each new partition's log start, not a data-loss error


def test_a_partition_whose_offsets_went_back_fails_naming_it() -> None:
    source = FakeAdmin({"orders": [(0, 30)]})  # recreated: the mirror was at 100
    with pytest.raises(
        DataLossError, match=r"data loss on orders\[0\]: its end offset went back from at least 100 to 30"
    ):
        planner(source).next_end({("orders", 0): 100}, None)


def test_a_partition_whose_offsets_went_back_is_mirrored_again_from_its_start_when_tolerated(
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = FakeAdmin({"orders": [(0, 30)]})
    p = planner(source, fail_on_data_loss=False)
    end = p.next_end({("orders", 0): 100}, None)
    [[rng]] = p.plan({("orders", 0): 100}, end)
    assert end == {("orders", 0): 30} and (rng.start_offset, rng.end_offset) == (0, 30)
    assert 'kmirror data_loss {"flow": "west->east", "topic": "orders", "partition": 0' in capsys.readouterr().err
    assert p.plan(end, p.next_end(end, None)) == []  # and then it carries on from there


def test_retention_past_the_mirror_is_reported_on_stderr_with_the_skipped_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    p = planner(FakeAdmin({"orders": [(120, 200)]}), fail_on_data_loss=False)
    p.plan({("orders", 0): 100}, {("orders", 0): 200})
    err = capsys.readouterr().err
    assert '"first_lost_offset": 100, "skipped": 20, "cause": "retention"' in err


class SilentAdmin:
    """A frozen broker: requests are accepted, answers never come."""

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Future[Any]]:
        return {tp: Future() for tp in request}

    def describe_configs(self, resources: list[Any]) -> dict[Any, Future[Any]]:
        return {r: Future() for r in resources}

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(topics={})

    def create_topics(self, new: list[Any]) -> dict[str, Future[Any]]:
        return {t.topic: Future() for t in new}


def test_a_frozen_broker_is_a_retriable_connection_failure_naming_the_cluster() -> None:
    west = ClusterEndpoint("west", "127.0.0.1:1")
    with pytest.raises(
        ConnectionFailure, match=r"cluster 'west' \(127.0.0.1:1\): listing latest offsets got no answer"
    ):
        query_offsets(SilentAdmin(), west, [("orders", 0)], "latest", timeout_s=0.05)
    attempts: list[int] = []

    def flaky() -> int:
        attempts.append(1)
        if len(attempts) < 3:
            query_offsets(SilentAdmin(), west, [("orders", 0)], "latest", timeout_s=0.01)
        return 7

    assert with_retries(flaky, "end offsets", bounded=False, sleep=lambda s: None) == 7 and len(attempts) == 3
    topics = TargetTopics(SilentAdmin(), SilentAdmin(), ClusterEndpoint("east", "127.0.0.1:2"), timeout_s=0.05)
    with pytest.raises(ConnectionFailure, match="no answer within"):
        topics.ensure({"orders": SimpleNamespace(source_topic="orders", partitions=1, target_topic="west.orders")})


# ---- a broker-side "too large" rejection arrives as a delivery report ----


def _source() -> FakeConsumer:
    return FakeConsumer([FakeMessage("t", 0, i, b"x" * (5000 if i == 2 else 10)) for i in range(5)])


def test_a_record_the_target_broker_rejects_as_too_large_fails_the_copy_naming_it() -> None:
    with pytest.raises(CopyError, match=r"t\[0\]@2.*Message size too large"):
        RangeCopier(_source(), LimitedBroker(1000), stall_timeout_s=5).copy([CopyRange("t", 0, 0, 5, "w.t")])


def test_a_too_large_rejection_with_an_unknown_limit_fails_even_with_a_dead_letter_topic() -> None:
    """Issue 25 item 5: a record is never dead-lettered because a limit was unknown (it went to the
    dead-letter topic as a pointer without its value before)."""
    broker = LimitedBroker(1000)
    with pytest.raises(CopyError, match=r"t\[0\]@2 .* could not be read, so it is not dead-lettered"):
        RangeCopier(_source(), broker, dead_letter_topic="dlq", stall_timeout_s=5).copy(
            [CopyRange("t", 0, 0, 5, "w.t")]
        )
    assert [entry for entry in broker.log if entry[0] == "dlq"] == []


def test_the_progress_line_counts_dead_lettered_records() -> None:
    from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
    from kmirror_engine.observability.progress_log import progress_record
    from tests.planner_fakes import spec

    partition = PartitionProgress("t", 0, "w.t", 0, 5, 4, 40, None, dead_lettered=1)
    record = progress_record(spec().id, spec().copy, BatchProgress(3, (partition,), 100), None)
    assert (record["records"], record["dead_lettered"], record["skipped"]) == (4, 1, 0)


def test_offsets_delivered_before_a_restart_are_reported_as_possible_duplicates() -> None:
    import io

    from kmirror_engine.planning.ranges import OffsetRange
    from kmirror_engine.planning.replays import find_replays, report_replays

    ranges = [
        OffsetRange("t", 0, 100, 400, "w.t"),
        OffsetRange("t", 1, 50, 60, "w.t"),
        OffsetRange("t", 2, 0, 9, "w.t"),
    ]
    committed = {("t", 0): 300, ("t", 1): 80, ("t", 2): 0}
    replays = find_replays("west->east", ranges, committed, exactly_once=False)
    assert [(r.partition, r.first_offset, r.delivered_to, r.possible_duplicates) for r in replays] == [
        (0, 100, 300, 200),
        (1, 50, 80, 10),  # never more than the planned range
    ]
    out = io.StringIO()
    assert report_replays(replays, out) == 210
    assert out.getvalue().startswith('kmirror replay {"flow": "west->east", "topic": "t", "partition": 0')
    eos = find_replays("west->east", ranges, committed, exactly_once=True)
    assert report_replays(eos, io.StringIO()) == 0  # skipped by the transactional copier, not duplicated


class KafkaLikeAdmin(FakeAdmin):
    """Like Kafka: ListOffsets of a topic that does not exist fails; a topic can carry a metadata error."""

    def __init__(self, logs: dict[str, list[tuple[int, int]]]) -> None:
        super().__init__(logs)
        self.errors: dict[str, Any] = {}

    def list_topics(self, timeout: float) -> Any:
        listing = super().list_topics(timeout)
        for name, error in self.errors.items():
            listing.topics[name] = SimpleNamespace(partitions={0: None}, error=error)
        return listing

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Future[Any]]:
        from confluent_kafka import KafkaException

        if any(tp.topic not in self.logs for tp in request):
            failed: Future[Any] = Future()
            failed.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            return dict.fromkeys(request, failed)
        return super().list_offsets(request, **kwargs)


def test_a_topic_deleted_between_planning_and_copying_is_dropped_and_reported_not_retried_forever(
    capsys: pytest.CaptureFixture[str],
) -> None:
    source = KafkaLikeAdmin({"orders": [(0, 100)], "new": [(0, 50)]})
    # the cached listing still has the topic; a confirmed deletion with fail_on_data_loss on is a
    # DataLossError (tests/test_day_two_unit.py)
    p = planner(source, topic_refresh_interval_ms=600_000, fail_on_data_loss=False)
    start = p.initial_offsets()
    end = p.next_end(start, None)
    del source.logs["new"]  # deleted after the batch was planned (or before a replay)

    [[rng]] = p.plan(start, end)
    assert (rng.source_topic, rng.start_offset, rng.end_offset) == ("orders", 0, 100)
    assert '"topic": "new", "partition": 0, "first_lost_offset": 0, "skipped": 50' in capsys.readouterr().err
    assert p.next_end(end, None) == {("orders", 0): 100, ("new", 0): 50}  # the stale listing was refreshed
    assert p.plan(end, p.next_end(end, None)) == []


def test_a_planned_topic_with_a_metadata_error_is_retried_never_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    import kmirror_engine.planning.offset_queries

    source = KafkaLikeAdmin({"orders": [(0, 100)], "new": [(0, 50)]})
    p = planner(source)
    start = p.initial_offsets()
    end = p.next_end(start, None)
    del source.logs["new"]
    source.errors["new"] = KafkaError(KafkaError.LEADER_NOT_AVAILABLE)
    monkeypatch.setattr(kmirror_engine.planning.offset_queries, "ONCE_DEADLINE_S", 0.0)  # --once gives up at once here
    with pytest.raises(ConnectionFailure, match="planned partitions of new are not readable now"):
        p.plan(start, end)


def test_streaming_start_retries_an_unreachable_cluster_with_doubling_backoff_and_reports_each_failure(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import kmirror_engine.clients.security_check
    from spark_app.main import check_clusters
    from tests.planner_fakes import spec

    failures = iter(range(7))

    def unreachable_then_up(source: Any, target: Any, timeout_s: float) -> None:
        if next(failures, None) is not None:
            raise ConnectionFailure("cluster 'east' (127.0.0.1:9): cannot connect")

    class Waits:
        def __init__(self) -> None:
            self.seconds: list[float] = []

        def is_set(self) -> bool:
            return False

        def wait(self, seconds: float) -> bool:
            self.seconds.append(seconds)
            return False

    waits = Waits()
    monkeypatch.setattr(kmirror_engine.clients.security_check, "check_flow_security", unreachable_then_up)
    check_clusters(spec(), once=False, stop=waits)  # type: ignore[arg-type]
    assert waits.seconds == [1, 2, 4, 8, 16, 30, 30]
    assert capsys.readouterr().err.count("kmirror: cluster 'east' (127.0.0.1:9): cannot connect; retrying in") == 7

    def down(source: Any, target: Any, timeout_s: float) -> None:
        raise ConnectionFailure("cluster 'east' (127.0.0.1:9): cannot connect")

    monkeypatch.setattr(kmirror_engine.clients.security_check, "check_flow_security", down)
    with pytest.raises(ConnectionFailure):  # --once: the first failure (after the check's own deadline) is final
        check_clusters(spec(), once=True, stop=waits)  # type: ignore[arg-type]
    assert len(waits.seconds) == 7


def test_skipped_offsets_travel_from_the_planner_to_the_progress_line_and_the_metrics() -> None:
    from kmirror_engine.observability.metrics import FlowMetrics
    from kmirror_engine.observability.progress import BatchProgress
    from kmirror_engine.observability.progress_log import progress_record
    from spark_app.stream_readers import READER_SCHEMA, PositionTrackingReader
    from tests.planner_fakes import spec

    reader = PositionTrackingReader("{}", once=True, task_count=1)
    reader._planner = planner(FakeAdmin({"orders": [(120, 200)]}), fail_on_data_loss=False)
    [task] = reader.partitions({"orders": {"0": 100}}, {"orders": {"0": 200}})
    [row] = task.ranges  # type: ignore[attr-defined]
    # source_end: None, the planner saw no end offsets for this batch (no next_end call here)
    assert "skipped_before BIGINT" in READER_SCHEMA and row == ("orders", 0, 120, 200, "west.orders", 20, 1.0, None)

    source = FakeConsumer([FakeMessage("orders", 0, i, b"v") for i in range(120, 200)])
    [progress] = RangeCopier(source, LimitedBroker(1000), stall_timeout_s=5).copy([CopyRange(*row)])
    batch = BatchProgress(7, (progress,), 10)
    assert (progress.records, progress.skipped_records) == (80, 20)
    assert progress_record(spec().id, spec().copy, batch, None)["skipped"] == 20
    metrics = FlowMetrics("west->east")
    metrics.observe_batch(batch, now_ms=0)
    labels = 'flow="west->east",partition="0",reason="retention",topic="west.orders"'
    assert f"kmirror_skipped_records_total{{{labels}}} 20.0" in metrics.text()


def test_an_unknown_end_offset_is_asked_again_never_taken_for_a_truncation() -> None:
    """Issue 41: a source broker frozen for 20 s made ListOffsets answer librdkafka's invalid
    offset (-1001), and the planner reported "data loss ... end offset went back from at least
    1000 to -1001". An unknown offset is a retriable failure naming the partition; the next
    answer is planned as usual."""

    class FrozenOnce(FakeAdmin):
        frozen = 0

        def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Future[Any]]:
            if not self.frozen:
                return super().list_offsets(request, **kwargs)
            self.frozen -= 1
            out: dict[Any, Future[Any]] = {}
            for tp in request:
                out[tp] = Future()
                out[tp].set_result(SimpleNamespace(offset=-1001))
            return out

    source = FrozenOnce({"orders": [(0, 1000)]})
    p = planner(source)
    p.once = False
    start = p.initial_offsets()
    source.logs["orders"] = [(0, 1200)]
    source.frozen = 2
    with pytest.raises(ConnectionFailure, match=r"no valid offset for 1 partition\(s\), first orders\[0\] \(-1001\)"):
        query_offsets(source, ClusterEndpoint("west", "w:9092"), [("orders", 0)], "latest")
    assert p.next_end(start, None) == {("orders", 0): 1200}  # asked again after 1 s, no DataLossError
