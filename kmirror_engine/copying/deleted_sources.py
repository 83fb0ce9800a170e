"""A source topic deleted while a writer task copies its planned range.

The planner drops a deleted topic before it plans it (discovery) and checks a planned topic missing
from a listing before the batch's tasks start (`data_loss.unknown_topics`). What is left is a
deletion during the copy itself: the copy loops see it as an unknown partition (the record loops'
consumer error, the batch path's metadata and fetch answers), a failure the task cannot tell from
a broker that lost a partition. `tolerating_deleted_sources` wraps a copy group: when the copy
fails, a DescribeTopics on the source says which of the group's topics are gone, and then, as the
planner does with the same flag:

- `fail_on_data_loss` on (the default): DataLossError naming the topic, partition and planned
  offsets, and the way out (the copy's own failure chained), never the copy's raw error;
- off: those ranges are dropped (a `kmirror data_loss` line each, cause "topic deleted during
  copy", their planned offsets counted as skipped), and the group's other ranges are copied again
  (at least once: what this attempt already delivered for them may be delivered twice).

A failure with no topic of the group gone is raised unchanged (the task fails, Spark retries it).
Exactly-once flows wrap each target partition's copy: its failed transaction was aborted (nothing of
it visible to read_committed readers) and its ranges, all of one source partition, are dropped whole.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from kmirror.errors import DataLossError, KmirrorError
from kmirror.flow.views import FlowRoute
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.observability.progress import PartitionProgress

log = logging.getLogger("kmirror.copy")

DELETED_DURING_COPY = "topic deleted during copy"


def tolerating_deleted_sources(
    route: FlowRoute,
    fail_on_data_loss: bool,
    copy_group: Callable[[list[CopyRange]], list[PartitionProgress]],
    admin_factory: Callable[[], Any] | None = None,
) -> Callable[[list[CopyRange]], list[PartitionProgress]]:
    """`copy_group` of the flow `route`, with a failure caused by a source topic deleted under it
    handled as `fail_on_data_loss` (`spec.planning`) says (module doc). `admin_factory()`: the
    source admin client (default: one of `route.source`)."""

    def copy(group: list[CopyRange]) -> list[PartitionProgress]:
        try:
            return copy_group(group)
        except KmirrorError as exc:
            from kmirror_engine.copying.exactly_once import FencedError, StaleOffsetsError, SupersededError

            if isinstance(exc, DataLossError | FencedError | StaleOffsetsError | SupersededError):
                raise  # a verdict of its own, whatever became of the topic
            gone = _deleted(route, group, admin_factory)
            if not gone:
                raise
            lost = [r for r in group if r.source_topic in gone]
            if fail_on_data_loss:
                first = lost[0]
                more = f" ({len(lost)} ranges in all)" if len(lost) > 1 else ""
                raise DataLossError(
                    f"{route.flow_id}: data loss on {first.source_topic}[{first.partition}]: "
                    f"topic {first.source_topic} was deleted from {route.source.alias!r} "
                    f"(describe: unknown topic) while offsets {first.start_offset}..{first.end_offset - 1} "
                    f"were being copied{more}; set "
                    "fail_on_data_loss: false to drop them (each reported as a kmirror data_loss line). "
                    f"The copy failed with: {exc}"
                ) from exc
            return _dropped(route, group, gone, copy_group)

    return copy


def _deleted(route: FlowRoute, group: Sequence[CopyRange], admin_factory: Callable[[], Any] | None) -> set[str]:
    """The group's source topics the source cluster no longer knows (empty when it cannot tell:
    the copy's own failure is then the one raised)."""
    from kmirror_engine.planning.data_loss import unknown_topics

    if admin_factory is None:
        from kmirror_engine.clients.factory import admin_client

        def admin_factory() -> Any:
            return admin_client(route.source)

    where = f"cluster {route.source.alias!r} ({route.source.bootstrap_servers})"
    try:
        return unknown_topics(admin_factory(), sorted({r.source_topic for r in group}), where)
    except Exception as exc:  # cannot tell: the copy's failure stands
        log.warning("%s: after a failed copy, whether its source topics still exist is unknown: %s", route.flow_id, exc)
        return set()


def _dropped(
    route: FlowRoute,
    group: list[CopyRange],
    gone: set[str],
    copy_group: Callable[[list[CopyRange]], list[PartitionProgress]],
) -> list[PartitionProgress]:
    from kmirror_engine.planning.data_loss import report_data_loss

    for r in (r for r in group if r.source_topic in gone):
        count = r.end_offset - r.start_offset
        report_data_loss(route.flow_id, (r.source_topic, r.partition), r.start_offset, count, DELETED_DURING_COPY)
        log.warning(
            "%s: %s[%d] was deleted from %r while offsets %d..%d were being copied; they are not mirrored "
            "(fail_on_data_loss=false)",
            route.flow_id,
            r.source_topic,
            r.partition,
            route.source.alias,
            r.start_offset,
            r.end_offset - 1,
        )
    kept = [i for i, r in enumerate(group) if r.source_topic not in gone]
    copied = dict(zip(kept, copy_group([group[i] for i in kept]), strict=True)) if kept else {}
    return [copied[i] if i in copied else _skipped(r) for i, r in enumerate(group)]


def _skipped(r: CopyRange) -> PartitionProgress:
    """A dropped range: nothing copied, its planned offsets counted as skipped, resumed past its end."""
    progress = PartitionProgress.for_range(
        r, next_offset=r.end_offset, records=0, size=0, last_timestamp_ms=None, offset_syncs=(), latency=(0, 0, 0, 0)
    )
    return dataclasses.replace(progress, skipped_records=progress.skipped_records + r.end_offset - r.start_offset)
