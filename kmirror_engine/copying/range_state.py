"""The Python copy loop's per-range accounting (`RangeState`): what one range in flight produced,
its delivery reports (offset syncs, latency, the broker's refusals turned into failures naming the
record and the ways out) and the hot loop's gates for records the target may refuse.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaError

from kmirror.flow.views import OffsetSkip
from kmirror_engine.copying.ranges import CopyRange, closed_syncs
from kmirror_engine.copying.record_limits import (
    BATCH_OVERHEAD_BYTES,
    RECORD_OVERHEAD_BYTES,
    TargetRules,
    over_limit,
    record_bytes,
)
from kmirror_engine.observability.progress import PartitionProgress

TOO_LARGE = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
# What the target answers for a batch holding a record it will never accept, whatever the retries
# (INVALID_MSG is Kafka's CORRUPT_MESSAGE; _INVALID_DIFFERENT_RECORD: another record of the batch).
REFUSED = frozenset(
    getattr(KafkaError, name)  # _INVALID_DIFFERENT_RECORD is newer than some system librdkafkas (GSSAPI builds)
    for name in ("INVALID_TIMESTAMP", "INVALID_RECORD", "INVALID_MSG", "_INVALID_DIFFERENT_RECORD")
    if hasattr(KafkaError, name)
)
# How long a copy round may run for the timestamp gate of the hot loop to stay exact: records
# within this much of the topic's `message.timestamp.before.max.ms` edge get the full check.
TIMESTAMP_GATE_MARGIN_MS = 600_000


class RangeState:
    """Counters of one range in flight; `on_delivery` is its one bound delivery callback."""

    def __init__(
        self,
        rng: CopyRange,
        failures: list[str],
        rules: TargetRules | None = None,
        limit: int | None = None,
        transactional: bool = False,
        skips: Sequence[OffsetSkip] = (),
    ) -> None:
        self.rng = rng
        self.limit = limit  # the target topic's max.message.bytes (None: unknown)
        # what the target topic refuses record by record (`limit` is its max.message.bytes)
        self.rules = dataclasses.replace(rules or TargetRules(), max_message_bytes=limit)
        # hot-loop gates: a record passing all three cannot be refused, so it skips the full check
        # key+value bytes above which the record's full size is checked against the limit
        self.check_above = limit - BATCH_OVERHEAD_BYTES - RECORD_OVERHEAD_BYTES if limit is not None else 2**62
        self.oldest_ms, self.newest_ms = _timestamp_gate(self.rules, int(time.time() * 1000))
        self.needs_key = bool(self.rules.compacted)
        self.skips = tuple(s for s in skips if s.topic == rng.source_topic and s.partition == rng.partition)
        self.skipped = 0  # records `skip_offsets` named, not copied
        self.returned_home = 0  # records whose provenance names the target as origin, not copied
        self.transactional = transactional
        self.cut: int | None = None  # next offset when the copy stopped early (byte budget)
        # hot-loop copies of the range's fields (one attribute lookup each per record)
        self.end, self.target, self.partition = rng.end_offset, rng.target_topic, rng.partition
        self.pending: deque[int] = deque()  # upstream offsets produced, in delivery order
        self.push = self.pending.append
        self.failures = failures
        self.records = self.bytes = self.dead_lettered = 0
        self.last_timestamp_ms: int | None = None
        self.done = rng.start_offset >= rng.end_offset
        self.drift: int | None = None
        self.syncs: list[tuple[int, int]] = []
        self.last_upstream = -1  # upstream offset of the last delivered record (drift is constant since)
        self.lat_min, self.lat_max = 2**62, -(2**62)
        self.lat_sum = self.lat_count = 0

    # Wall clock (ms) stamped by the copier before every poll/flush, when delivery callbacks run;
    # one clock read per poll instead of one per record. A class attribute: it is just "now".
    now_ms = 0

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        upstream = self.pending.popleft()
        if err is not None:
            self._failed(upstream, err, msg)
            return
        downstream = msg.offset()
        if downstream - upstream != self.drift:
            self.syncs.append((upstream, downstream))
            self.drift = downstream - upstream
        self.last_upstream = upstream
        latency = self.now_ms - msg.timestamp()[1]
        self.lat_sum += latency
        self.lat_count += 1
        if latency > self.lat_max:
            self.lat_max = latency
        if latency < self.lat_min:
            self.lat_min = latency

    def _failed(self, upstream: int, err: KafkaError, msg: Any) -> None:
        if err.code() in TOO_LARGE:
            self._rejected_as_too_large(upstream, err, msg)
            return
        if err.code() in REFUSED:
            self.failures.append(self._refused_with_its_batch(upstream, err))
            return
        self.failures.append(
            f"delivery to {self.rng.target_topic}[{self.rng.partition}] failed for source record "
            f"{self.rng.source_topic}[{self.rng.partition}]@{upstream}: {err.str()}"
        )

    def _refused_with_its_batch(self, upstream: int, err: KafkaError) -> str:
        """The failure for a record the broker refused that `TargetRules` did not foresee (a topic
        config that could not be read, a clock at the edge of the timestamp window). The broker
        refuses a whole batch for one record, so this record may be a bystander: never
        dead-lettered (that would move a good record out of the mirror), the copy fails."""
        r = self.rng
        return (
            f"source record {r.source_topic}[{r.partition}]@{upstream} was refused by {r.target_topic}[{r.partition}] "
            f"with its whole batch ({err.str()}): the record at fault is this one or a later one of the batch. "
            f"Ways out (docs/reliability.md#poison-records): let the mirror read the target topic's configs "
            f"(DescribeConfigs) so it finds such records before producing them and, with dead_letter_topic set, "
            f"dead-letters them; or find the record and skip it with skip_offsets: "
            f'["{r.source_topic}:{r.partition}:<offset>"]'
        )

    def _rejected_as_too_large(self, upstream: int, err: KafkaError, msg: Any) -> None:
        """The broker (or librdkafka) refused the record's batch as too large. Never dead-lettered
        here: a record over a known limit never reaches the producer (`RangeCopier._refused`), so
        the record fits, or the limit is unknown and nothing says it does not (issue 25: a record
        is never dead-lettered on a guess). In a transaction the rejection makes the transaction
        abortable: the task aborts it, the batch fails and nothing of it becomes visible."""
        where = f"source record {self.rng.source_topic}[{self.rng.partition}]@{upstream}"
        full = record_bytes(msg.key(), msg.value(), msg.headers())
        if self.transactional:
            self.failures.append(
                f"{where} ({full} bytes) was rejected by {self.rng.target_topic}[{self.rng.partition}] as too large "
                f"({err.str()}); in exactly-once mode that makes the transaction abortable: it is aborted, nothing of "
                "it is visible to read_committed readers, and the batch fails"
            )
            return
        if self.limit is None:
            self.failures.append(
                f"{where} ({full} bytes) was rejected by {self.rng.target_topic}[{self.rng.partition}] as too large "
                f"({err.str()}) and the topic's max.message.bytes could not be read, so it is not dead-lettered; "
                "ways out (docs/reliability.md#poison-records): let the mirror read the topic's configs "
                "(DescribeConfigs), raise max.message.bytes on the target, or skip it with skip_offsets: "
                f'["{self.rng.source_topic}:{self.rng.partition}:{upstream}"]'
            )
            return
        if not over_limit(full, self.limit):
            self.failures.append(
                f"{where} ({full} bytes) fits {self.rng.target_topic}'s limit of {self.limit} bytes but its batch was "
                f"rejected as too large ({err.str()}); it is not dead-lettered; the producer's batch.size and "
                "message.max.bytes must not exceed the topic's max.message.bytes"
            )
            return
        self.failures.append(
            f"delivery to {self.rng.target_topic}[{self.rng.partition}] failed for {where}: {err.str()}"
        )

    def progress(self) -> PartitionProgress:
        syncs = closed_syncs(self.syncs, self.drift, self.last_upstream)
        return PartitionProgress.for_range(
            self.rng,
            next_offset=self.rng.end_offset if self.cut is None else self.cut,
            records=self.records,
            size=self.bytes,
            last_timestamp_ms=self.last_timestamp_ms,
            offset_syncs=syncs,
            latency=(self.lat_min, self.lat_max, self.lat_sum, self.lat_count),
            dead_lettered=self.dead_lettered,
            skipped_by_option=self.skipped,
            returned_home=self.returned_home,
        )


def _timestamp_gate(rules: TargetRules, now_ms: int) -> tuple[float, float]:
    """Timestamps the hot loop passes without the full check for a round starting at `now_ms`:
    only records within `TIMESTAMP_GATE_MARGIN_MS` of the topic's window (or outside it) are
    checked exactly, so a round running that long still finds every refused one."""
    if not rules.create_time:
        return -math.inf, math.inf
    oldest = -math.inf if rules.before_max_ms is None else now_ms - rules.before_max_ms + TIMESTAMP_GATE_MARGIN_MS
    newest = math.inf if rules.after_max_ms is None else now_ms + rules.after_max_ms
    return oldest, newest
