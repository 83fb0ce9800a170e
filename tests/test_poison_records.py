"""Poison records (issue 26, issue 25 item 5) with fakes: the `skip_offsets` option, records the
target topic's configs refuse (dead-lettered with their value, or failing naming the ways out),
broker refusals nothing foresaw, and corrupt source batches. The real broker:
tests/e2e/test_poison_records_e2e.py."""

from __future__ import annotations

import io
import json
import time
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError

from kmirror.errors import ValidationError
from kmirror.flow.spec import parse_flow_spec
from kmirror.flow.views import OffsetSkip
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyError, CopyRange
from kmirror_engine.copying.record_limits import TargetRules, capped_producer_config, rules_from_configs
from kmirror_engine.observability.metrics import FlowMetrics
from kmirror_engine.observability.progress import BatchProgress
from tests.kafka_fakes import FakeConsumer, FakeMessage, LimitedBroker
from tests.planner_fakes import raw_spec

NOW_MS = int(time.time() * 1000)
HOUR_MS = 3_600_000


def _flow(**options: Any) -> dict[str, Any]:
    return raw_spec(topics=[".*"], **options)


class StampedMessage(FakeMessage):
    def __init__(self, offset: int, timestamp_ms: int, key: bytes | None = b"k", partition: int = 0) -> None:
        super().__init__("t", partition, offset, f"v{offset}".encode(), key)
        self._ts = timestamp_ms

    def timestamp(self) -> tuple[int, int]:
        return (1, self._ts)


class ErrorMessage(FakeMessage):
    """A consumer event: librdkafka's error for a batch it cannot read at `offset`."""

    def __init__(self, offset: int, code: int) -> None:
        super().__init__("t", 0, offset, None)
        self._err = KafkaError(code, "Local: Bad message format")

    def error(self) -> Any:
        return self._err


class SeekingConsumer(FakeConsumer):
    """A source whose batch at `bad` cannot be read until the consumer seeks past it."""

    def __init__(self, messages: list[FakeMessage], bad: int) -> None:
        super().__init__(messages)
        self.bad, self.seeks = bad, []  # type: ignore[var-annotated]

    def consume(self, n: int, timeout: float) -> list[FakeMessage]:
        if self.position_ == self.bad:
            return [ErrorMessage(self.bad, KafkaError._BAD_MSG)]
        stop = self.bad if self.position_ < self.bad else 2**62  # a fetch stops at the unreadable batch
        out = [m for m in self.messages if self.position_ <= m.offset() < stop][:n]
        self.position_ = out[-1].offset() + 1 if out else self.position_
        return out

    def seek(self, tp: Any) -> None:
        self.seeks.append((tp.topic, tp.partition, tp.offset))
        self.position_ = tp.offset


class RecordingBroker(LimitedBroker):
    """LimitedBroker that also keeps each produce's timestamp and can refuse whole batches."""

    def __init__(self, refuse: int | None = None) -> None:
        super().__init__(10**9)
        self.refuse, self.timestamps = refuse, []  # type: ignore[var-annotated]

    def produce(
        self, topic: str, value: Any = None, key: Any = None, partition: int = 0, on_delivery: Any = None, **kwargs: Any
    ) -> None:
        self.timestamps.append((topic, kwargs.get("timestamp")))
        super().produce(topic, value, key, partition, on_delivery, **kwargs)

    def flush(self, timeout: float = 0) -> int:
        if self.refuse is None:
            return super().flush(timeout)
        pending, self.pending = self.pending, []  # one batch, refused whole like Kafka does
        for topic, value, _key, partition, on_delivery, _headers in pending:
            on_delivery(KafkaError(self.refuse, "Broker: Invalid timestamp"), FakeMessage(topic, partition, -1, value))
        return 0


# ---------- the option ----------


def test_skip_offsets_entries_parse_to_single_offsets_and_ranges() -> None:
    spec = parse_flow_spec(_flow(skip_offsets=["orders:3:1234", "my.topic-v2:0:10-12"]))
    assert spec.copy.skip_offsets == (OffsetSkip("orders", 3, 1234, 1234), OffsetSkip("my.topic-v2", 0, 10, 12))
    assert parse_flow_spec(_flow()).copy.skip_offsets == ()


@pytest.mark.parametrize(
    ("value", "path", "message"),
    [
        (
            ["orders:3"],
            "skip_offsets[0]",
            "must be 'topic:partition:offset' or 'topic:partition:first-last' "
            "(source topic, e.g. 'orders:3:1234-1240'), got 'orders:3'",
        ),
        (["ok:0:1", "orders:x:5"], "skip_offsets[1]", "got 'orders:x:5'"),
        (
            ["orders:1:9-3"],
            "skip_offsets[0]",
            "range 'orders:1:9-3' ends before it starts: write first-last with first <= last",
        ),
        (["orders:1:-3"], "skip_offsets[0]", "got 'orders:1:-3'"),
        ([5], "skip_offsets[0]", "got 5"),
        (
            "orders:3:1234",
            "skip_offsets",
            'must be a list of "topic:partition:offset" or "topic:partition:first-last" strings, got \'orders:3:1234\'',
        ),
    ],
)
def test_a_malformed_skip_offsets_entry_is_refused_naming_its_path_value_and_form(
    value: Any, path: str, message: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        parse_flow_spec(_flow(skip_offsets=value))
    [problem] = caught.value.problems
    assert problem.path == path and message in problem.message


# ---------- skipping in the copy loop ----------


def test_named_offsets_are_skipped_logged_and_counted_and_drift_stays_right(capsys: pytest.CaptureFixture[str]) -> None:
    source = FakeConsumer([FakeMessage("t", 0, i, f"v{i}".encode()) for i in range(6)])
    broker = LimitedBroker(10**6)
    skips = [OffsetSkip("t", 0, 2, 3), OffsetSkip("t", 1, 0, 99), OffsetSkip("other", 0, 0, 99)]
    [progress] = RangeCopier(source, broker, stall_timeout_s=5, skip_offsets=skips).copy(
        [CopyRange("t", 0, 0, 6, "w.t")]
    )

    assert [value for _, value, _ in broker.log] == [b"v0", b"v1", b"v4", b"v5"]
    assert (progress.records, progress.skipped_by_option, progress.next_offset) == (4, 2, 6)
    # upstream 4 landed at downstream 2: the skip is a drift change, kept as an offset sync
    assert progress.offset_syncs == ((0, 0), (4, 2), (5, 3))
    lines = [
        json.loads(line.removeprefix("kmirror skipped "))
        for line in capsys.readouterr().err.splitlines()
        if line.startswith("kmirror skipped ")
    ]
    assert [(line["source_topic"], line["partition"], line["offset"], line["reason"]) for line in lines] == [
        ("t", 0, 2, "skip_offsets"),
        ("t", 0, 3, "skip_offsets"),
    ]


def test_skipped_records_are_exported_with_reason_skip_offsets() -> None:
    from kmirror_engine.observability.progress import PartitionProgress

    metrics = FlowMetrics("west->east", out=io.StringIO())
    p = PartitionProgress("t", 0, "w.t", 0, 6, 4, 40, None, skipped_records=1, skipped_by_option=2)
    metrics.observe_batch(BatchProgress(1, (p,), 100), 0)
    text = metrics.text()
    assert (
        'kmirror_skipped_records_total{flow="west->east",partition="0",reason="skip_offsets",topic="w.t"} 2.0' in text
    )
    assert 'kmirror_skipped_records_total{flow="west->east",partition="0",reason="retention",topic="w.t"} 1.0' in text


def test_a_corrupt_source_batch_fails_naming_partition_offset_and_skip_offsets() -> None:
    source = SeekingConsumer([FakeMessage("t", 0, i, b"v") for i in range(5)], bad=2)
    with pytest.raises(CopyError) as caught:
        RangeCopier(source, LimitedBroker(10**6), stall_timeout_s=5).copy([CopyRange("t", 0, 0, 5, "w.t")])
    assert str(caught.value).startswith("consuming t[0] failed at offset 2: Local: Bad message format; the source ")
    assert 'skip_offsets: ["t:0:2"]' in str(caught.value)


def test_a_corrupt_source_batch_named_in_skip_offsets_is_sought_past() -> None:
    source = SeekingConsumer([FakeMessage("t", 0, i, f"v{i}".encode()) for i in range(5)], bad=2)
    broker = LimitedBroker(10**6)
    [progress] = RangeCopier(source, broker, stall_timeout_s=5, skip_offsets=[OffsetSkip("t", 0, 2, 2)]).copy(
        [CopyRange("t", 0, 0, 5, "w.t")]
    )
    assert source.seeks == [("t", 0, 3)]
    assert [value for _, value, _ in broker.log] == [b"v0", b"v1", b"v3", b"v4"]
    assert (progress.skipped_by_option, progress.next_offset) == (1, 5)


# ---------- what the target refuses ----------

WINDOW = TargetRules(create_time=True, before_max_ms=HOUR_MS, after_max_ms=HOUR_MS)


def _stamped_source() -> FakeConsumer:
    stamps = [NOW_MS, NOW_MS, NOW_MS - 30 * 24 * HOUR_MS, NOW_MS, NOW_MS + 5 * HOUR_MS]
    return FakeConsumer([StampedMessage(i, ts) for i, ts in enumerate(stamps)])


def test_a_record_outside_the_timestamp_window_is_dead_lettered_with_its_value_and_origin() -> None:
    broker = RecordingBroker()
    copier = RangeCopier(
        _stamped_source(),
        broker,
        dead_letter_topic="dlq",
        stall_timeout_s=5,
        rules={"w.t": WINDOW},
        source_cluster="west",
    )
    [progress] = copier.copy([CopyRange("t", 0, 0, 5, "w.t")])

    assert [value for topic, value, _ in broker.log if topic == "w.t"] == [b"v0", b"v1", b"v3"]
    assert (progress.records, progress.dead_lettered, progress.next_offset) == (3, 2, 5)
    dead = [(value, dict(headers)) for topic, value, headers in broker.log if topic == "dlq"]
    assert [value for value, _ in dead] == [b"v2", b"v4"]
    headers = dead[0][1]
    assert headers["h"] == b"1"  # the record's own headers are kept
    assert (headers["kmirror.origin.cluster"], headers["kmirror.origin.topic"]) == (b"west", b"t")
    assert (headers["kmirror.origin.partition"], headers["kmirror.origin.offset"]) == (b"0", b"2")
    assert headers["kmirror.origin.timestamp"] == str(NOW_MS - 30 * 24 * HOUR_MS).encode()
    assert headers["kmirror.error"].startswith(b"refused by w.t: timestamp ")
    assert b"over the topic's message.timestamp.before.max.ms (3600000)" in headers["kmirror.error"]
    assert b"in the future, over the topic's message.timestamp.after.max.ms" in dead[1][1]["kmirror.error"]
    assert ("dlq", NOW_MS - 30 * 24 * HOUR_MS) in broker.timestamps  # the record's own timestamp


def test_without_a_dead_letter_topic_a_refused_record_fails_naming_it_the_reason_and_the_ways_out() -> None:
    broker = RecordingBroker()
    with pytest.raises(CopyError) as caught:
        RangeCopier(_stamped_source(), broker, stall_timeout_s=5, rules={"w.t": WINDOW}).copy(
            [CopyRange("t", 0, 0, 5, "w.t")]
        )
    message = str(caught.value)
    assert message.startswith("cannot produce source record t[0]@2 to w.t[0]: the target refuses it: timestamp ")
    assert "set dead_letter_topic" in message and 'skip_offsets: ["t:0:2"]' in message
    assert [topic for topic, _ in broker.timestamps] == ["w.t", "w.t"]  # the records before it only


def test_a_record_without_a_key_is_dead_lettered_for_a_compacted_topic_only() -> None:
    source = FakeConsumer([FakeMessage("t", 0, 0, b"a"), FakeMessage("t", 0, 1, b"b", key=None)])
    broker = RecordingBroker()
    compacted = {"w.t": TargetRules(compacted=True)}
    [progress] = RangeCopier(source, broker, dead_letter_topic="dlq", stall_timeout_s=5, rules=compacted).copy(
        [CopyRange("t", 0, 0, 2, "w.t")]
    )
    assert [(topic, value) for topic, value, _ in broker.log] == [("w.t", b"a"), ("dlq", b"b")]
    assert progress.dead_lettered == 1
    plain = RecordingBroker()
    RangeCopier(FakeConsumer(source.messages), plain, dead_letter_topic="dlq", stall_timeout_s=5).copy(
        [CopyRange("t", 0, 0, 2, "w.t")]
    )
    assert [topic for topic, _, _ in plain.log] == ["w.t", "w.t"]  # unknown rules: nothing dead-lettered


def test_a_refusal_nothing_foresaw_fails_the_batch_and_dead_letters_no_bystander() -> None:
    """The broker refuses a whole batch for one record (Kafka + librdkafka, every record gets the
    error): without a rule that names the record, none is dead-lettered and the copy fails."""
    broker = RecordingBroker(refuse=KafkaError.INVALID_TIMESTAMP)
    with pytest.raises(CopyError) as caught:
        RangeCopier(_stamped_source(), broker, dead_letter_topic="dlq", stall_timeout_s=5).copy(
            [CopyRange("t", 0, 0, 5, "w.t")]
        )
    assert "source record t[0]@0 was refused by w.t[0] with its whole batch (Broker: Invalid timestamp)" in str(
        caught.value
    )
    assert "skip_offsets" in str(caught.value) and "DescribeConfigs" in str(caught.value)
    assert [topic for topic, _ in broker.timestamps].count("dlq") == 0


def test_a_too_large_refusal_with_an_unknown_limit_is_never_dead_lettered() -> None:
    source = FakeConsumer([FakeMessage("t", 0, i, b"x" * (5000 if i == 1 else 10)) for i in range(3)])
    broker = LimitedBroker(1000)
    with pytest.raises(CopyError, match=r"t\[0\]@1 .* max.message.bytes could not be read, so it is not dead-lettered"):
        RangeCopier(source, broker, dead_letter_topic="dlq", stall_timeout_s=5).copy([CopyRange("t", 0, 0, 3, "w.t")])
    assert [topic for topic, _, _ in broker.log if topic == "dlq"] == []


def test_a_dead_letter_too_large_for_the_producer_fails_loudly() -> None:
    from confluent_kafka import KafkaException

    class SmallProducer(RecordingBroker):
        def produce(self, topic: str, value: Any = None, *args: Any, **kwargs: Any) -> None:
            if topic == "dlq":
                raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"))
            super().produce(topic, value, *args, **kwargs)

    source = FakeConsumer([FakeMessage("t", 0, 0, b"x" * 5000)])
    expected = r"t\[0\]@0 was refused by w.t \(record of 5\d+ bytes .* and cannot be dead-lettered to dlq either"
    with pytest.raises(CopyError, match=expected):
        RangeCopier(source, SmallProducer(), dead_letter_topic="dlq", stall_timeout_s=5, limits={"w.t": 2000}).copy(
            [CopyRange("t", 0, 0, 1, "w.t")]
        )


def test_a_dead_letter_the_dead_letter_topic_refuses_fails_the_copy() -> None:
    class RefusingDlq(RecordingBroker):
        def flush(self, timeout: float = 0) -> int:
            pending, self.pending = self.pending, []
            for topic, value, key, partition, on_delivery, _headers in pending:
                error = (
                    KafkaError(KafkaError.INVALID_TIMESTAMP, "Broker: Invalid timestamp") if topic == "dlq" else None
                )
                on_delivery(error, FakeMessage(topic, partition, 0, value, key))
            return 0

    with pytest.raises(
        CopyError,
        match=r"t\[0\]@2 was refused by w.t \(timestamp .*\) and then by the dead-letter "
        r"topic dlq: Broker: Invalid timestamp",
    ):
        RangeCopier(
            _stamped_source(), RefusingDlq(), dead_letter_topic="dlq", stall_timeout_s=5, rules={"w.t": WINDOW}
        ).copy([CopyRange("t", 0, 0, 5, "w.t")])


def test_target_rules_come_from_the_topic_configs_and_log_append_time_refuses_no_timestamp() -> None:
    def entry(value: str) -> Any:
        return SimpleNamespace(value=value)

    configs = {
        "max.message.bytes": entry("2000"),
        "message.timestamp.type": entry("CreateTime"),
        "message.timestamp.before.max.ms": entry("60000"),
        "message.timestamp.after.max.ms": entry("3600000"),
        "cleanup.policy": entry("compact,delete"),
    }
    rules = rules_from_configs(configs)
    assert rules == TargetRules(2000, True, 60_000, HOUR_MS, True)
    assert rules.refusal(b"k", b"v", [], NOW_MS - 120_000, NOW_MS) is not None
    assert rules.refusal(b"k", b"v", [], NOW_MS - 30_000, NOW_MS) is None
    assert rules.refusal(b"k", b"v", [], -1, NOW_MS) is None  # no timestamp: the producer stamps it
    log_append = rules_from_configs({**configs, "message.timestamp.type": entry("LogAppendTime")})
    assert log_append.refusal(b"k", b"v", [], NOW_MS - 120_000, NOW_MS) is None
    assert rules_from_configs({}) == TargetRules()


def test_a_3x_target_windows_timestamps_by_its_difference_max_ms() -> None:
    """Issue 41: a Kafka 3.x target bounds timestamps with message.timestamp.difference.max.ms
    (before 3.6 the only name; 3.6-3.9 use it where before/after are left at their default).
    Before: only the 4.x names were read, so a 3.x window was unknown and nothing was checked."""

    def entry(value: str) -> Any:
        return SimpleNamespace(value=value)

    unbounded = str(2**63 - 1)
    old = {"message.timestamp.type": entry("CreateTime"), "message.timestamp.difference.max.ms": entry("60000")}
    assert rules_from_configs(old) == TargetRules(None, True, 60_000, 60_000, None)
    assert rules_from_configs(old).refusal(b"k", b"v", [], NOW_MS - 120_000, NOW_MS) is not None
    defaults = {
        **old,
        "message.timestamp.before.max.ms": entry(unbounded),
        "message.timestamp.after.max.ms": entry(unbounded),
    }
    assert rules_from_configs(defaults) == TargetRules(None, True, 60_000, 60_000, None)
    explicit = {**defaults, "message.timestamp.before.max.ms": entry("5000")}
    assert rules_from_configs(explicit) == TargetRules(None, True, 5_000, 60_000, None)
    no_bound = {**defaults, "message.timestamp.difference.max.ms": entry(unbounded)}
    assert rules_from_configs(no_bound) == TargetRules(None, True, 2**63 - 1, 2**63 - 1, None)


def test_the_producer_message_max_bytes_follows_the_largest_known_topic_limit() -> None:
    """Before: librdkafka's 1 MB default stayed, so a 1.5 MB record for a 10 MB topic was refused by
    the producer itself and became a dead-letter pointer without its value."""
    capped = capped_producer_config({"batch.size": 1_000_000}, [10_485_760])
    assert (capped["message.max.bytes"], capped["batch.size"]) == (10_485_760, 1_000_000)
    mixed = capped_producer_config({}, [2000, None, 5000])  # never below 1 MB: dead letters, unknown limits
    assert (mixed["message.max.bytes"], mixed["batch.size"]) == (1_000_000, 2000)
    assert capped_producer_config({"message.max.bytes": 20_000}, [10_485_760])["message.max.bytes"] == 20_000


def test_the_producer_is_capped_by_the_dead_letter_topics_limit_too(monkeypatch: Any) -> None:
    """Issue 41: a record over its target topic's limit could not be dead-lettered when the
    dead-letter topic takes larger records: the producer's message.max.bytes followed only the
    target topics' limits. The dead-letter topic's limit is read and caps the producer as well."""
    from kmirror_engine.copying import task_copy
    from kmirror_engine.copying.record_limits import capped_producer_config
    from tests.planner_fakes import spec

    flow = spec(dead_letter_topic="dlq")
    ranges = [CopyRange("t", 0, 0, 5, "w.t")]
    assert task_copy.limited_topics(flow.copy, ranges) == {"w.t", "dlq"}
    assert task_copy.limited_topics(spec().copy, ranges) == {"w.t"}
    read = {"w.t": 1_000_000, "dlq": 10_485_760}
    monkeypatch.setattr(task_copy, "_LIMITS", {})  # this worker's cache, fresh (and dropped after the test)
    monkeypatch.setattr(task_copy, "topic_rules", lambda admin, topics: {t: TargetRules(read[t]) for t in topics})
    monkeypatch.setattr("kmirror_engine.clients.factory.admin_client", lambda endpoint: None)
    limits = task_copy.target_limits(flow.target, task_copy.limited_topics(flow.copy, ranges))
    assert capped_producer_config({}, limits.values())["message.max.bytes"] >= 10_485_760
