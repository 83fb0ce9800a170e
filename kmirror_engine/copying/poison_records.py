"""The Python copy loop's poison records (docs/reliability.md "Poison records"): a record the
target topic refuses is dead-lettered before it is produced (or fails the copy naming it and the
ways out), a record the flow's `skip_offsets` names is not copied (logged, counted), and a source
batch the consumer cannot read is skipped only when `skip_offsets` names it.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kmirror_engine.copying.range_state import RangeState
from kmirror_engine.copying.ranges import CopyError, CopyRange

# Consumer errors for a source batch that cannot be read (corrupt at the source).
UNREADABLE = frozenset(
    getattr(KafkaError, name) for name in ("_BAD_MSG", "_BAD_COMPRESSION", "INVALID_MSG") if hasattr(KafkaError, name)
)
SKIPPED_PREFIX = "kmirror skipped "


class PoisonRecords:
    """`RangeCopier`'s handling of the records it cannot copy as they are (a mixin: the copier's
    own consumer, producer, dead-letter topic, source alias and failures of the round in flight)."""

    consumer: Any
    producer: Any
    dead_letter_topic: str | None
    source_cluster: str
    _failures: list[str]

    def _refused(self, state: RangeState, msg: Any) -> bool:
        """True when the target topic refuses the record (`TargetRules.refusal`): dead-lettered
        (counted) without being produced, so its batch stays clean; raises CopyError naming the
        record, the reason and the ways out without a dead-letter topic."""
        rng, offset = state.rng, msg.offset()
        reason = state.rules.refusal(msg.key(), msg.value(), msg.headers(), msg.timestamp()[1], int(time.time() * 1000))
        if reason is None:
            return False
        if not self.dead_letter_topic:
            raise CopyError(
                f"cannot produce source record {rng.source_topic}[{rng.partition}]@{offset} to "
                f"{rng.target_topic}[{rng.partition}]: the target refuses it: {reason}. Ways out "
                "(docs/reliability.md#poison-records): set dead_letter_topic (the record goes there with its "
                "origin in headers), skip it with skip_offsets: "
                f'["{rng.source_topic}:{rng.partition}:{offset}"], or change that config of the target topic'
            )
        self._dead_letter(rng, msg, reason)
        state.dead_lettered += 1
        return True

    def _skip_named(self, state: RangeState, msg: Any) -> bool:
        """True (logged, counted) when the flow's `skip_offsets` names this record."""
        offset = msg.offset()
        if not any(s.first <= offset <= s.last for s in state.skips):
            return False
        log_skipped(state.rng, offset, "skip_offsets", msg.timestamp()[1])
        state.skipped += 1
        return True

    def _unreadable(self, msg: Any, err: KafkaError, active: dict[tuple[str, int], RangeState]) -> None:
        """A source batch the consumer cannot read (corrupt): seek past it when `skip_offsets`
        names its offset (logged, counted), else fail naming partition, offset and the way out."""
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        state = active.get((topic, partition))
        if state is not None and offset >= 0 and any(s.first <= offset <= s.last for s in state.skips):
            log_skipped(state.rng, offset, "skip_offsets", None)
            state.skipped += 1
            self.consumer.seek(TopicPartition(topic, partition, offset + 1))
            return
        raise CopyError(
            f"consuming {topic}[{partition}] failed at offset {offset}: {err.str()}; the source holds a record "
            "that cannot be read (a corrupt batch). Way out (docs/reliability.md#poison-records): skip it with "
            f'skip_offsets: ["{topic}:{partition}:{offset}"] (a range "{topic}:{partition}:{offset}-<last>" when '
            "the next offsets fail too)"
        )

    def _dead_letter(self, rng: CopyRange, msg: Any, reason: str) -> None:
        """Send the refused record itself (key, value, headers, timestamp) to the dead-letter topic
        with its provenance; a dead letter the producer or the dead-letter topic refuses (too
        large even there, a timestamp it refuses too) fails the copy naming the source record."""
        key, value, ts, offset = msg.key(), msg.value(), msg.timestamp()[1], msg.offset()
        where = f"source record {rng.source_topic}[{rng.partition}]@{offset}"
        headers = [
            *(msg.headers() or []),
            ("kmirror.origin.cluster", self.source_cluster.encode()),
            ("kmirror.origin.topic", rng.source_topic.encode()),
            ("kmirror.origin.partition", str(rng.partition).encode()),
            ("kmirror.origin.offset", str(offset).encode()),
            ("kmirror.origin.timestamp", str(ts).encode()),
            ("kmirror.origin.bytes", str(len(value or b"") + len(key or b"")).encode()),
            ("kmirror.error", f"refused by {rng.target_topic}: {reason}".encode()),
        ]

        def delivered(err: KafkaError | None, _msg: Any) -> None:
            if err is not None:
                self._failures.append(
                    f"{where} was refused by {rng.target_topic} ({reason}) and then by the "
                    f"dead-letter topic {self.dead_letter_topic}: {err.str()}"
                )

        while True:
            try:
                self.producer.produce(
                    self.dead_letter_topic,
                    value,
                    key,
                    headers=headers,
                    on_delivery=delivered,
                    timestamp=ts if ts > 0 else 0,
                )
                return
            except BufferError:
                self.producer.poll(0.05)  # local queue full: serve delivery reports, then retry
            except KafkaException as exc:
                raise CopyError(
                    f"{where} was refused by {rng.target_topic} ({reason}) and cannot be dead-lettered "
                    f"to {self.dead_letter_topic} either: {exc.args[0].str()}"
                ) from exc


def log_skipped(rng: CopyRange, offset: int, reason: str, timestamp_ms: int | None) -> None:
    """The audit line of a record not copied: `kmirror skipped {json}` on stderr, where the
    progress lines go (a Spark worker's logging is not configured)."""
    line = {
        "event": "skipped",
        "reason": reason,
        "source_topic": rng.source_topic,
        "partition": rng.partition,
        "offset": offset,
        "target_topic": rng.target_topic,
        "timestamp_ms": timestamp_ms,
    }
    print(SKIPPED_PREFIX + json.dumps(line, sort_keys=True), file=sys.stderr, flush=True)
