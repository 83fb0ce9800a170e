"""Exactly-once mode (`exactly_once: true`): each writer task copies its ranges inside one
Kafka transaction on the target, and records the source next-offsets in the same
transaction (MM2's design: offsets stored on the target).

Contract:
- transactional.id is deterministic, `kmirror-<flow>-<task partition id>`: a replayed task of
  the same batch gets the same id, and `init_transactions` fences any zombie still holding it
  (its open transaction is aborted);
- source next-offsets go to the target consumer group `kmirror-eos-<flow>` via
  `send_offsets_to_transaction`, keyed by (target topic, partition) — source partitions are
  preserved on the target, so the key identifies the source partition;
- before copying, the task reads that group's committed offsets and skips what a previous
  attempt already committed; so if Spark replays a batch (a crash between the Kafka commit
  and Spark's commit log), read_committed consumers see no duplicates and nothing is lost.
Limit: a source partition's ranges of one batch must all be in the same task (the planner
must not split a partition across tasks in this mode), because one committed offset per
partition cannot describe two ranges committed by independent transactions.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from confluent_kafka import TopicPartition

from kmirror.flowspec import FlowSpec
from spark_app.copy import CopyRange, RangeCopier
from spark_app.progress import PartitionProgress

TRANSACTION_TIMEOUT_S = 60.0


def _slug(spec: FlowSpec) -> str:
    return spec.id.replace("->", "-to-")


def transactional_id(spec: FlowSpec, task_id: int) -> str:
    """The fenced, deterministic transactional.id of a writer task."""
    return f"kmirror-{_slug(spec)}-{task_id}"


def offsets_group(spec: FlowSpec) -> str:
    """The target consumer group holding the mirrored source next-offsets."""
    return f"kmirror-eos-{_slug(spec)}"


def committed_offsets(
    offsets_consumer: Any, ranges: Sequence[CopyRange], timeout_s: float
) -> dict[tuple[str, int], int]:
    """Source next-offsets already committed on the target, per (target topic, partition)."""
    keys = sorted({(r.target_topic, r.partition) for r in ranges})
    found = offsets_consumer.committed([TopicPartition(t, p) for t, p in keys], timeout=timeout_s)
    return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset >= 0}


def resume_ranges(ranges: Sequence[CopyRange], committed: dict[tuple[str, int], int]) -> list[CopyRange]:
    """Each range starting at the committed offset when a previous attempt got past its start
    (an empty range, start == end, when it committed the whole range)."""
    out = []
    for r in ranges:
        done = committed.get((r.target_topic, r.partition), -1)
        out.append(dataclasses.replace(r, start_offset=min(max(r.start_offset, done), r.end_offset)))
    return out


class TransactionalCopier:
    """Copies a task's ranges in one transaction with the offsets; aborts on any failure.

    `producer` must be configured with `transactional_id(spec, task_id)`; `offsets_consumer`
    is a target consumer whose group.id is `offsets_group(spec)` (never subscribed).
    """

    def __init__(self, consumer: Any, producer: Any, offsets_consumer: Any, **copier_kwargs: Any) -> None:
        self.producer = producer
        self.offsets_consumer = offsets_consumer
        self.copier = RangeCopier(consumer, producer, **copier_kwargs)

    def copy(self, ranges: Sequence[CopyRange]) -> list[PartitionProgress]:
        """Copy and commit atomically; raises (after aborting) when any step fails."""
        self.producer.init_transactions(TRANSACTION_TIMEOUT_S)  # fences zombies of this id
        todo = resume_ranges(ranges, committed_offsets(self.offsets_consumer, ranges, TRANSACTION_TIMEOUT_S))
        ends: dict[tuple[str, int], int] = {}
        for r in ranges:
            ends[(r.target_topic, r.partition)] = max(r.end_offset, ends.get((r.target_topic, r.partition), -1))
        self.producer.begin_transaction()
        try:
            progress = self.copier.copy(todo)
            offsets = [TopicPartition(t, p, end) for (t, p), end in sorted(ends.items())]
            metadata = self.offsets_consumer.consumer_group_metadata()
            self.producer.send_offsets_to_transaction(offsets, metadata, TRANSACTION_TIMEOUT_S)
            self.producer.commit_transaction(TRANSACTION_TIMEOUT_S)
        except BaseException as exc:
            try:
                self.producer.abort_transaction(TRANSACTION_TIMEOUT_S)
            except Exception as abort_exc:  # the original failure matters more; keep both
                exc.add_note(f"aborting the transaction failed too: {abort_exc}")
            raise
        return [dataclasses.replace(p, start_offset=r.start_offset) for p, r in zip(progress, ranges, strict=True)]
