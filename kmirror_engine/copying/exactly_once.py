"""Exactly-once mode (`exactly_once: true`): each writer task copies its ranges inside Kafka
transactions on the target, and records the source next-offsets in the same transaction
(MM2's design: offsets stored on the target).

Contract:
- one transactional.id per target partition, `kmirror-<flow>-<target topic>-<partition>`
  (`partition_transactional_id`): a task copies each of its partitions in that partition's own
  transactions. Every writer of the partition, in any driver of the flow, uses the same id, so
  `init_transactions` fences every other writer still holding it: a zombie task, and a second
  live driver of the flow (two drivers with per-task ids both committed the same range). A
  writer fenced mid-transaction aborts and raises `FencedError` (fatal: its query stops);
  before the first batch of a query the driver fences every partition's id, and the per-task
  ids of earlier versions (`fence_previous_generation`, MM2's KIP-618 zombie fencing);
- each committed offset carries the run (`internal_names.run_token`: start time, then a random part) of the
  driver that committed it: a writer that finds a newer run's offset on its partition raises
  `SupersededError` before copying, so the older of two live drivers stops instead of taking
  the partition back at its next batch;
- source next-offsets go to the target consumer group `kmirror-eos-<flow>` via
  `send_offsets_to_transaction`, keyed by (target topic, partition) — source partitions are
  preserved on the target, so the key identifies the source partition — with the source
  topic's id as the offset's metadata (brokers that keep offset metadata);
- before copying, the task reads that group's committed offsets (a per-partition error raises,
  it is never "nothing committed") and skips what a previous attempt already committed, after
  checking that the committed offset belongs to today's source topic: a different topic id,
  or (no id recorded) an offset past the source partition's end, raises `StaleOffsetsError`
  naming the group to reset. Committed offsets never move backwards;
- a task's copy is cut into several transactions of at most `MAX_TRANSACTION_BYTES` each, so
  no transaction nears `transaction.timeout.ms` (`TRANSACTION_TIMEOUT_MS`, set explicitly);
  with a rate limit also by time (`max_seconds`): a pacing wait that would outlast that budget
  cuts the transaction instead, and the debt is paid between transactions (issue 26: one wait
  for a few large records under a small share could outlast the timeout, so every retry aborted).
Limit: a source partition's ranges of one batch must all be in the same task.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition

from kmirror.errors import KmirrorError
from kmirror_engine.clients.coordinator import COORDINATOR_NOT_YET
from kmirror_engine.clients.factory import TRANSACTION_TIMEOUT_MS
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.observability.progress import PartitionProgress
from kmirror_engine.planning.internal_names import partition_transactional_id, transactional_id

log = logging.getLogger("kmirror.exactly_once")
TRANSACTION_TIMEOUT_S = TRANSACTION_TIMEOUT_MS / 1000
# Bytes per transaction: at 10 MB/s (a slow target) 128 MiB take ~13 s, far inside the timeout.
MAX_TRANSACTION_BYTES = 128 * 1024 * 1024
FENCING_THREADS = 8


class StaleOffsetsError(KmirrorError):
    """Committed exactly-once offsets belong to an earlier incarnation of a source topic."""


class FencedError(KmirrorError):
    """Another writer initialised this partition's transactional id: this one's transaction is aborted."""


class SupersededError(KmirrorError):
    """A newer driver of the flow committed offsets of a partition this (older) driver was about to copy."""


# librdkafka's "fenced by a newer instance" (fatal), and the broker's answers to a stale epoch
FENCED_CODES = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


def fence_previous_generation(
    flow_id: str, id_count: int, make_producer: Callable[[str], Any], partitions: Sequence[tuple[str, int]] = ()
) -> list[str]:
    """init_transactions on every partition's id (`partition_transactional_id`) and on the per-task
    ids of earlier versions (`transactional_id(flow_id, i)`, i < id_count), so no zombie task, of this
    flow's earlier runs or of another driver of it, can commit any more; returns the ids.
    Raises KafkaException when one cannot be fenced (the query must not start then)."""
    ids = [partition_transactional_id(flow_id, t, p) for t, p in partitions]
    ids += [transactional_id(flow_id, i) for i in range(max(1, id_count))]

    def fence(txn_id: str) -> None:
        make_producer(txn_id).init_transactions(TRANSACTION_TIMEOUT_S)

    with ThreadPoolExecutor(FENCING_THREADS, thread_name_prefix="kmirror-fence") as pool:
        list(pool.map(fence, ids))
    log.info("%s: fenced %d transactional ids of earlier runs", flow_id, len(ids))
    return ids


@dataclasses.dataclass(frozen=True)
class Committed:
    offset: int
    topic_id: str | None  # source topic id recorded with the offset (None: not recorded or not kept)
    run: str | None = None  # `run_token` of the driver that committed it (None: not recorded)


def committed_offsets(
    offsets_consumer: Any, ranges: Sequence[CopyRange], timeout_s: float, clock: Callable[[], float] = time.monotonic
) -> dict[tuple[str, int], Committed]:
    """Source next-offsets already committed on the target, per (target topic, partition).

    A coordinator that is moving or still loading (a broker just started or restarted) is asked
    again until `timeout_s` has passed; raises KmirrorError when the group cannot tell for a
    partition (any other per-partition error, or the coordinator still not answering)."""
    keys = sorted({(r.target_topic, r.partition) for r in ranges})
    deadline = clock() + timeout_s
    while True:
        wanted = [TopicPartition(t, p) for t, p in keys]
        try:
            found = offsets_consumer.committed(wanted, timeout=max(deadline - clock(), 1.0))
        except KafkaException as exc:  # the whole request refused
            if exc.args[0].code() not in COORDINATOR_NOT_YET or clock() >= deadline:
                raise
        else:
            failed = [tp for tp in found if tp.error is not None]
            moving = bool(failed) and all(tp.error.code() in COORDINATOR_NOT_YET for tp in failed)
            if not moving or clock() >= deadline:
                break
        time.sleep(min(0.5, max(deadline - clock(), 0.0)))
    if failed:
        tp = failed[0]
        raise KmirrorError(
            f"reading the exactly-once offsets of {tp.topic}[{tp.partition}] failed ({tp.error}"
            f"{f' and {len(failed) - 1} more partition(s)' if len(failed) > 1 else ''}); the batch fails and is "
            "retried rather than copy what may already be committed"
        )
    out = {}
    for tp in (tp for tp in found if tp.offset >= 0):
        recorded = _metadata(tp.metadata)
        out[(tp.topic, tp.partition)] = Committed(tp.offset, _text(recorded, "topic_id"), _text(recorded, "run"))
    return out


def _metadata(metadata: str | None) -> dict[str, Any]:
    """The JSON object committed with an offset ({} when there is none or it is not one)."""
    try:
        value = json.loads(metadata or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _text(recorded: dict[str, Any], field: str) -> str | None:
    value = recorded.get(field)
    return value if isinstance(value, str) else None


def _fenced(exc: BaseException) -> bool:
    """Whether `exc` (or what caused it) is a Kafka error saying this producer was fenced."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 10:
        seen += 1
        error = current.args[0] if isinstance(current, KafkaException) and current.args else None
        if isinstance(error, KafkaError) and error.code() in FENCED_CODES:
            return True
        current = current.__cause__ or current.__context__
    return False


def superseded(committed: dict[tuple[str, int], Committed], run: str | None) -> list[str]:
    """The partitions whose committed offset a newer run than `run` wrote (none when `run` is None)."""
    if run is None:
        return []
    return [f"{t}[{p}] by run {c.run}" for (t, p), c in sorted(committed.items()) if c.run is not None and c.run > run]


def resume_ranges(ranges: Sequence[CopyRange], committed: dict[tuple[str, int], int]) -> list[CopyRange]:
    """Each range starting at the committed offset when a previous attempt got past its start
    (an empty range, start == end, when it committed the whole range)."""
    out = []
    for r in ranges:
        done = committed.get((r.target_topic, r.partition), -1)
        out.append(dataclasses.replace(r, start_offset=min(max(r.start_offset, done), r.end_offset)))
    return out


def stale_offsets(
    ranges: Sequence[CopyRange],
    committed: dict[tuple[str, int], Committed],
    topic_ids: dict[str, str | None],
    source_end: Callable[[str, int], int],
) -> list[str]:
    """Committed offsets that would skip planned offsets but belong to another incarnation of
    the source topic: a different topic id, or (no id to compare) past the partition's end."""
    problems = []
    for r in ranges:
        done = committed.get((r.target_topic, r.partition))
        if done is None or done.offset <= r.start_offset:
            continue  # nothing of the range would be skipped
        today = topic_ids.get(r.source_topic)
        where = f"{r.target_topic}[{r.partition}] holds {done.offset}"
        if done.topic_id is not None and today is not None:
            if done.topic_id != today:
                problems.append(f"{where}, committed for topic id {done.topic_id}; {r.source_topic} is now {today}")
            continue
        end = source_end(r.source_topic, r.partition)
        if done.offset > end:
            problems.append(f"{where}, past the end of {r.source_topic}[{r.partition}] ({end})")
    return problems


class TransactionalCopier:
    """Copies a task's ranges in transactions with the offsets; aborts on any failure.

    `producer` must be configured with the transactional id of the ranges' partition
    (`partition_transactional_id`, named again by `transactional_id` in errors); `offsets_consumer`
    is a target consumer whose group.id is `offsets_group(flow_id)` (never subscribed);
    `source_admin` (optional) describes source topics for their ids; `run`: this driver's
    `run_token` (None: no run recorded or compared).
    """

    def __init__(
        self,
        consumer: Any,
        producer: Any,
        offsets_consumer: Any,
        source_admin: Any = None,
        group: str = "kmirror-eos-<flow>",
        max_transaction_bytes: int = MAX_TRANSACTION_BYTES,
        run: str | None = None,
        transactional_id: str = "",
        **copier_kwargs: Any,
    ) -> None:
        self.consumer, self.producer, self.offsets_consumer = consumer, producer, offsets_consumer
        self.source_admin, self.group = source_admin, group
        self.run, self.transactional_id = run, transactional_id
        self.copier = RangeCopier(
            consumer, producer, transactional=True, max_bytes=max_transaction_bytes, **copier_kwargs
        )

    def copy(self, ranges: Sequence[CopyRange]) -> list[PartitionProgress]:
        """Copy and commit atomically, transaction by transaction; raises (after aborting the
        open transaction) when any step fails, StaleOffsetsError before copying anything."""
        self.producer.init_transactions(TRANSACTION_TIMEOUT_S)  # fences zombies of this id
        committed = committed_offsets(self.offsets_consumer, ranges, TRANSACTION_TIMEOUT_S)
        newer = superseded(committed, self.run)
        if newer:
            raise SupersededError(
                f"a newer driver of this flow committed exactly-once offsets in group {self.group} "
                f"({'; '.join(newer)}; this driver's run is {self.run}): two drivers run one flow. This older one "
                "stops without copying; stop the other first if this one should run (runs are ordered by their start "
                "time: a restart on a host whose clock is behind the last run's start looks older; start it again)"
            )
        ids = self._topic_ids(sorted({r.source_topic for r in ranges}))
        problems = stale_offsets(ranges, committed, ids, self._source_end)
        if problems:
            raise StaleOffsetsError(
                f"exactly-once offsets of group {self.group} belong to an earlier incarnation of "
                f"the source topic: {'; '.join(problems)}; nothing was skipped or copied. Reset that group (delete "
                "it, or its offsets of these partitions) together with the Spark checkpoint, then restart"
            )
        done = {key: c.offset for key, c in committed.items()}
        todo = resume_ranges(ranges, done)
        total: list[PartitionProgress | None] = [None] * len(ranges)
        while True:
            progress = self._transaction(todo, done, ids)
            self._pay_pacing_debt()
            total = [p if t is None else merge_progress(t, p) for t, p in zip(total, progress, strict=True)]
            todo = [dataclasses.replace(r, start_offset=p.next_offset) for r, p in zip(todo, progress, strict=True)]
            if all(r.start_offset >= r.end_offset for r in todo):
                break
        return [dataclasses.replace(p, start_offset=r.start_offset) for p, r in zip(_all(total), ranges, strict=True)]

    def _transaction(
        self, todo: list[CopyRange], done: dict[tuple[str, int], int], ids: dict[str, str | None]
    ) -> list[PartitionProgress]:
        self.producer.begin_transaction()
        try:
            progress = self.copier.copy(todo)
            offsets = []
            for key, (next_offset, source_topic) in sorted(_positions(todo, progress).items()):
                # never backwards: a replay of an older batch keeps what a later one committed
                position = max(next_offset, done.get(key, -1))
                done[key] = position
                fields = {"topic_id": ids.get(source_topic), "run": self.run}
                metadata = json.dumps({k: v for k, v in fields.items() if v}) if any(fields.values()) else ""
                offsets.append(TopicPartition(key[0], key[1], position, metadata=metadata))
            metadata_ = self.offsets_consumer.consumer_group_metadata()
            self.producer.send_offsets_to_transaction(offsets, metadata_, TRANSACTION_TIMEOUT_S)
            self.producer.commit_transaction(TRANSACTION_TIMEOUT_S)
        except BaseException as exc:
            fenced = _fenced(exc)
            try:
                self.producer.abort_transaction(TRANSACTION_TIMEOUT_S)
            except Exception as abort_exc:  # the original failure matters more; keep both
                fenced = fenced or _fenced(abort_exc)
                note = f"aborting the transaction failed too: {abort_exc}"
                if hasattr(exc, "add_note"):  # Python 3.11+ (the Spark 4.0 images run 3.10)
                    exc.add_note(note)
            if fenced:
                where = ", ".join(sorted({f"{r.target_topic}[{r.partition}]" for r in todo}))
                raise FencedError(
                    f"another writer initialised transactional id {self.transactional_id or '?'} ({where}) while "
                    "this one held it: a second driver of this flow, or a newer attempt of this task. This "
                    "writer's transaction is aborted (read_committed consumers never see it) and it stops; run "
                    "one driver per flow"
                ) from exc
            raise
        return progress

    def _pay_pacing_debt(self) -> None:
        """Wait out what the committed transaction still owes the flow's rate limits, between
        transactions: a paced copy cuts its transaction rather than wait past its time budget
        (`RangeCopier.max_seconds`), so no wait runs inside an open transaction for long."""
        pacer = self.copier.pacer
        if pacer is not None:
            pacer.pay(self.producer.poll)

    def _topic_ids(self, topics: list[str]) -> dict[str, str | None]:
        out: dict[str, str | None] = dict.fromkeys(topics)
        if self.source_admin is None or not topics:
            return out
        futures = self.source_admin.describe_topics(TopicCollection(topics), request_timeout=TRANSACTION_TIMEOUT_S)
        for topic, future in futures.items():
            try:
                out[topic] = str(future.result(timeout=TRANSACTION_TIMEOUT_S).topic_id)
            except KafkaException as exc:  # the end-offset check still applies
                log.warning("cannot describe source topic %s for its id: %s", topic, exc)
        return out

    def _source_end(self, topic: str, partition: int) -> int:
        _low, high = self.consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10.0)
        return int(high)


def _positions(ranges: Sequence[CopyRange], progress: Sequence[PartitionProgress]) -> dict[tuple[str, int], Any]:
    """Per (target topic, partition): where the copy stands, the next offset of its first range
    not copied to its end (or the end of its last), and the source topic."""
    out: dict[tuple[str, int], Any] = {}
    stopped: set[tuple[str, int]] = set()
    for r, p in sorted(
        zip(ranges, progress, strict=True), key=lambda rp: (rp[0].target_topic, rp[0].partition, rp[0].start_offset)
    ):
        key = (r.target_topic, r.partition)
        if key in stopped:
            continue
        out[key] = (p.next_offset if p.next_offset < r.end_offset else r.end_offset, r.source_topic)
        if p.next_offset < r.end_offset:
            stopped.add(key)
    return out


def _all(progress: list[PartitionProgress | None]) -> list[PartitionProgress]:
    assert all(p is not None for p in progress)  # every range went through the first transaction
    return [p for p in progress if p is not None]


def merge_progress(first: PartitionProgress, then: PartitionProgress) -> PartitionProgress:
    """One range's progress over two successive transactions."""
    mins = [v for v in (first.latency_min_ms, then.latency_min_ms) if v is not None]
    maxes = [v for v in (first.latency_max_ms, then.latency_max_ms) if v is not None]
    return dataclasses.replace(
        first,
        next_offset=then.next_offset,
        records=first.records + then.records,
        bytes=first.bytes + then.bytes,
        last_timestamp_ms=then.last_timestamp_ms if then.last_timestamp_ms is not None else first.last_timestamp_ms,
        offset_syncs=first.offset_syncs + then.offset_syncs,
        latency_min_ms=min(mins) if mins else None,
        latency_max_ms=max(maxes) if maxes else None,
        latency_sum_ms=first.latency_sum_ms + then.latency_sum_ms,
        latency_count=first.latency_count + then.latency_count,
        dead_lettered=first.dead_lettered + then.dead_lettered,
        skipped_by_option=first.skipped_by_option + then.skipped_by_option,
        returned_home=first.returned_home + then.returned_home,
        source_end=max((e for e in (first.source_end, then.source_end) if e is not None), default=None),
    )
