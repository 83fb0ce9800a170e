"""Replayed offsets after a restart: counted and reported, never silent.

At-least-once means a batch whose records were delivered, but which Spark's commit log did not
record (the driver died in between), is copied again at restart: its records land twice on
the target. The mirror's source consumer group (`GroupCommitListener`) is committed after every
delivered batch, before Spark's commit log, so at the first batch after a start, any planned
offset below that group's committed offset was already delivered by an earlier run.

`find_replays` compares the two; `report_replays` prints one structured stderr line per
partition (`kmirror replay {json}`; the planner runs in a Python worker whose logging is not
configured, like the progress lines) with the count of records that may now be duplicated
(an upper bound: transaction markers and compaction leave holes). In exactly-once mode the
copier skips those offsets (their transaction committed on the target), and the line says so.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict, dataclass
from typing import Any, TextIO

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException, TopicPartition

from kmirror_engine.planning.ranges import OffsetRange

log = logging.getLogger("kmirror.replays")
REPLAY_PREFIX = "kmirror replay "


@dataclass(frozen=True)
class Replay:
    flow: str
    topic: str
    partition: int
    first_offset: int  # planned start of the replayed range
    delivered_to: int  # the source group's committed offset: delivered before the restart
    possible_duplicates: int  # offsets in [first_offset, min(delivered_to, end)): an upper bound
    exactly_once: bool  # true: not copied again (read_committed consumers see no duplicates)


def committed_offsets(admin: Any, group: str, partitions: Iterable[tuple[str, int]], timeout_s: float) -> dict:
    """The group's committed offsets of `partitions` (missing when none)."""
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p) for t, p in sorted(set(partitions))])
    futures = admin.list_consumer_group_offsets([request], request_timeout=timeout_s)
    result = futures[group].result(timeout=timeout_s)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions if tp.offset >= 0}


def find_replays(
    flow: str, ranges: Iterable[OffsetRange], committed: dict[tuple[str, int], int], exactly_once: bool
) -> list[Replay]:
    """Ranges starting below what the group committed (pure)."""
    first: dict[tuple[str, int], OffsetRange] = {}
    last_end: dict[tuple[str, int], int] = {}
    for rng in ranges:
        key = (rng.source_topic, rng.partition)
        if key not in first or rng.start_offset < first[key].start_offset:
            first[key] = rng
        last_end[key] = max(last_end.get(key, 0), rng.end_offset)
    out = []
    for key, rng in sorted(first.items()):
        done = committed.get(key, -1)
        if done > rng.start_offset:
            count = min(done, last_end[key]) - rng.start_offset
            out.append(Replay(flow, key[0], key[1], rng.start_offset, done, count, exactly_once))
    return out


def report_replays(replays: Iterable[Replay], out: TextIO | None = None) -> int:
    """One `kmirror replay {json}` line per replayed partition; returns the possible duplicates."""
    total = 0
    for replay in replays:
        total += 0 if replay.exactly_once else replay.possible_duplicates
        print(REPLAY_PREFIX + json.dumps(asdict(replay)), file=out or sys.stderr, flush=True)
    return total


def check_replays(admin: Any, flow: str, group: str, ranges: list[OffsetRange], exactly_once: bool) -> int:
    """find + report; a failed lookup is logged (it is observability, not a reason to stop)."""
    try:
        committed = committed_offsets(admin, group, [(r.source_topic, r.partition) for r in ranges], 10.0)
    # counting is observability: a cluster or admin client that cannot answer never stops the mirror
    except (KafkaException, FutureTimeout, AttributeError, TypeError) as exc:
        log.warning("%s: cannot read source group %r to count replayed offsets: %s", flow, group, exc)
        return 0
    total = report_replays(find_replays(flow, ranges, committed, exactly_once))
    if total:
        log.warning(
            "%s: the first batch after the start replays %d delivered offset(s): at-least-once, "
            "the target may hold up to that many duplicates",
            flow,
            total,
        )
    return total
