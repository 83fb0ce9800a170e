"""Driver-side planning of a flow's micro-batches with Kafka clients (no Spark): which source
partitions are mirrored, where each starts, how far a batch goes, and what retention lost.

- `initial_offsets()`: every mirrored partition at `starting_offsets` (earliest, latest, the
  first offset at/after `{timestamp_ms}`, or where a stopped MirrorMaker 2 left it: `{from_mm2}`,
  `kmirror_engine.planning.mm2_takeover`).
- each batch's end (`RangePlanner.next_end`): refreshes topic discovery, creates/grows target
  topics, and admits at most `max_records_per_trigger` offsets, shared by backlog. New
  topics/partitions start at their earliest offset. With `--once` the end offsets frozen at
  start are never passed.
- `plan(start, end)`: writer tasks of offset ranges; detects data loss (source log start >
  planned start): raises DataLossError naming topic, partition and the lost range, or with
  `fail_on_data_loss=false` skips to the log start and reports the skipped count
  (`kmirror_engine.planning.data_loss`).

- `rate_shares(tasks)`: each range's share of the flow's rate limits (issue 26). A bytes limit is
  split by estimated bytes, a records limit by offsets (`split_rate_limits`); the bytes per
  offset of each partition are sampled from the source (`RecordSizes`) and kept a while
  (`kmirror_engine.planning.rate_shares`).

The Spark glue (`spark_app.source`, `spark_app.stream_readers`) turns its plans into rows; the
planner itself reads the flow's `planning` and `topic_sync` views, and the `copy` view's limits.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import ConnectionFailure, DataLossError
from kmirror.flow.spec import ClusterEndpoint, FlowSpec
from kmirror.flow.views import CopySettings, FlowRoute, PlanningSettings, TopicSyncSettings
from kmirror.mm2.takeover import TakeoverPoint
from kmirror_engine.planning.created_topics import CreatedTopics
from kmirror_engine.planning.data_loss import report_data_loss, unknown_topics
from kmirror_engine.planning.discovery import MirroredTopic, TopicDiscovery
from kmirror_engine.planning.flow_control import ControlReader
from kmirror_engine.planning.offset_queries import query_offsets, with_retries
from kmirror_engine.planning.ranges import OffsetRange, Offsets, admit, plan_tasks
from kmirror_engine.planning.rate_shares import RecordSizes, split_rate_limits
from kmirror_engine.planning.target_topics import TargetTopics

log = logging.getLogger("kmirror.source")


class RangePlanner:
    """Driver-side planning with Kafka clients: discovery, target topics, offsets, data loss."""

    def __init__(
        self,
        route: FlowRoute,
        planning: PlanningSettings,
        topic_sync: TopicSyncSettings,
        copy: CopySettings,
        consumer_group: str,
        once: bool,
        task_count: int,
        source_admin: Any,
        target_admin: Any,
        created: CreatedTopics | None = None,
        control: ControlReader | None = None,
        record_sizes: RecordSizes | None = None,
        on_takeover: Callable[[Sequence[TakeoverPoint]], object] | None = None,
    ) -> None:
        """A planner over the clients given (no I/O here; `for_flow` builds the real ones).
        `route`: the flow's id, clusters, topic selection and remote names; `planning`: where it
        starts, batch and task sizes; `topic_sync`: how target topics are created; `copy`: its rate
        limits and exactly-once; `consumer_group`: the source group whose commits tell replayed
        offsets. `created`: the created-topics registry (None: not recorded); `control`: the flow's
        pause/resume reader (None: never paused); `record_sizes`: the byte-limit sampler (default:
        never sampled); `on_takeover`: writes kafka-mirror's first offset syncs at an MM2 takeover
        (the failover side's, passed in by the Spark glue: planning never imports failover)."""
        self.route, self.planning, self.copy, self.consumer_group = route, planning, copy, consumer_group
        self.once, self.task_count, self.on_takeover = once, task_count, on_takeover
        self.source_admin = source_admin
        self.read_committed = planning.read_committed
        self.discovery = TopicDiscovery(
            self.source_admin,
            route.source,
            route.topics,
            route.policy,
            route.target.alias,
            planning.topic_refresh_interval_ms,
        )
        self.target_topics = TargetTopics(
            self.source_admin,
            target_admin,
            route.target,
            topic_sync.replication_factor,
            topic_sync.configs,
            created=created,
        )
        self.frozen_end: Offsets | None = None
        self.skipped_records = 0
        self.replays_checked = False  # the first batch after a start may replay delivered offsets
        self.skipped_before: dict[tuple[str, int], int] = {}  # of the last plan(): offsets lost before each range
        self.log_end: dict[tuple[str, int], int] = {}  # of the last next_end(): the source's end offsets
        # pause/resume (issue 46): the flow's newest control record, read once per trigger
        self.control: Any = control
        self.record_sizes = record_sizes or RecordSizes(None)

    @classmethod
    def for_flow(
        cls,
        spec: FlowSpec,
        once: bool,
        task_count: int,
        on_takeover: Callable[[FlowSpec, Sequence[TakeoverPoint]], object] | None = None,
    ) -> RangePlanner:
        """The planner of `spec` over its real clusters: admin clients, the created-topics
        registry, the control reader and, for a byte-limited flow, the record-size sampler."""
        from kmirror_engine.clients.factory import admin_client

        sampler = (
            (lambda: cls._size_sampler(spec.source, spec.copy, spec.consumer_group))
            if spec.copy.max_bytes_per_second
            else None
        )
        return cls(
            spec.route,
            spec.planning,
            spec.topic_sync,
            spec.copy,
            spec.consumer_group,
            once,
            task_count,
            admin_client(spec.source),
            admin_client(spec.target),
            created=CreatedTopics(spec.target, spec.source.alias, spec.id),
            control=ControlReader(spec.id, spec.target),
            record_sizes=RecordSizes(sampler),
            on_takeover=None if on_takeover is None else (lambda points: on_takeover(spec, points)),
        )

    def _retry(self, call: Any, what: str) -> Any:
        return with_retries(call, f"{self.route.flow_id}: {what}", bounded=self.once)

    def _query(self, tps: Any, which: str | int) -> Offsets:
        return query_offsets(self.source_admin, self.route.source, tps, which, self.read_committed)

    def _offsets(self, which: str | int, what: str, among: Any = None) -> Offsets:
        """`which` offsets of the mirrored partitions (only those `among`, when given), retried.

        Each retry re-reads the topic listing (forced after a failure): Kafka refuses ListOffsets
        for a topic deleted since the last listing, and a retry of the same request would then
        fail forever. Partitions that are gone are left out of the result.
        """
        attempts = 0

        def run() -> Offsets:
            nonlocal attempts
            topics = self.discovery.topics(force=attempts > 0)
            attempts += 1
            present = [(t.source_topic, p) for t in topics.values() for p in range(t.partitions)]
            listed = set(present)  # once: a set per partition made this quadratic (3 s for 4,000 partitions)
            wanted = present if among is None else [tp for tp in among if tp in listed]
            return self._query(wanted, which)

        return self._retry(run, what)

    def mirrored(self) -> dict[str, MirroredTopic]:
        """Topics to mirror now; their remote topics exist afterwards."""

        def run() -> dict[str, MirroredTopic]:
            topics = self.discovery.topics()
            self.target_topics.ensure(topics)
            return topics

        return self._retry(run, "topic discovery")

    def remote(self, topic: str) -> str:
        return self.route.policy.format_remote_topic(self.route.source.alias, topic)

    def initial_offsets(self) -> Offsets:
        if self.planning.from_mm2 is not None:
            return self._takeover_offsets()
        self.mirrored()
        starting = self.planning.starting_offsets
        which = starting["timestamp_ms"] if isinstance(starting, dict) else starting
        return self._offsets(which, "initial offsets")

    def _takeover_offsets(self) -> Offsets:
        """Where MM2 stopped (`kmirror_engine.planning.mm2_takeover`), read before any remote
        topic is created (a missing one means another naming, refused), then kafka-mirror's first
        offset syncs at the takeover point (`on_takeover`), before anything is copied."""
        from kmirror_engine.planning.mm2_takeover import plan_mm2_takeover

        assert self.planning.from_mm2 is not None
        topics = self._retry(self.discovery.topics, "topic discovery")
        plan = self._retry(
            lambda: plan_mm2_takeover(
                self.route,
                self.read_committed,
                self.planning.from_mm2,
                topics,
                self.source_admin,
                self.target_topics.target_admin,
            ),
            "reading where MirrorMaker 2 stopped",
        )
        self.mirrored()
        if self.on_takeover is not None:
            self._retry(lambda: self.on_takeover(plan.points), "writing the takeover offset syncs")
        return dict(plan.resume)

    def available(self) -> Offsets:
        """End offsets of every mirrored partition now."""
        self.mirrored()
        return self._offsets("latest", "end offsets")

    def freeze(self) -> None:
        """Trigger.AvailableNow: remember today's end; later calls never go past it."""
        self.frozen_end = self.available()
        log.info("%s: mirroring up to %d partitions' current end offsets", self.route.flow_id, len(self.frozen_end))

    def next_end(self, start: Offsets, max_records: int | None) -> Offsets:
        """End offsets of the next batch (== `start` when there is nothing to do, or the flow is paused)."""
        if self.control is not None and self.control.holds():
            return dict(start)  # no copy work: the source offsets stay where they are until resumed
        latest = self.available()
        self.log_end = dict(latest)  # the source's end offsets, travelling with the batch (lag, records at risk)
        if self.frozen_end is not None:
            latest = {tp: min(off, self.frozen_end[tp]) for tp, off in latest.items() if tp in self.frozen_end}
        rewound = [tp for tp, off in latest.items() if tp in start and off < start[tp]]
        for tp in rewound:
            self._on_rewind(tp, start[tp], latest[tp])
        new = [tp for tp in latest if tp not in start]
        fresh = new + rewound  # both are mirrored from their log start
        earliest = self._offsets("earliest", "earliest offsets", among=fresh) if fresh else {}
        full_start = {**start, **earliest}
        end = admit(full_start, latest, max_records)
        # a new partition without records yet is not worth an (empty) batch
        return {tp: off for tp, off in end.items() if tp in start or off > full_start[tp]}

    def plan(self, start: Offsets, end: Offsets) -> list[tuple[OffsetRange, ...]]:
        """Writer tasks for [start, end); raises DataLossError (see module doc)."""
        wanted = [tp for tp, off in end.items() if off != start.get(tp, -1)]
        if not wanted:
            return []
        log_start = self._offsets("earliest", "log start offsets", among=wanted)
        self.skipped_before = {}
        for tp in self._deleted([tp for tp in wanted if tp not in log_start], start, end):
            first = start.get(tp, 0)
            report_data_loss(self.route.flow_id, tp, first, max(0, end[tp] - first), "topic deleted or deselected")
            log.warning(
                "%s: %s[%d] is gone from %r (deleted or no longer selected) with offsets %d..%d planned; "
                "they are not mirrored",
                self.route.flow_id,
                tp[0],
                tp[1],
                self.route.source.alias,
                first,
                end[tp] - 1,
            )
        ranges = []
        for tp in wanted:
            if tp not in log_start:
                continue
            first = start.get(tp, log_start[tp])  # a new partition starts at its log start
            if end[tp] < first:  # went back (see _on_rewind): mirrored again from its log start
                first = log_start[tp]
            planned = first
            first = self._check_loss(tp, first, log_start[tp], end[tp])
            self.skipped_before[tp] = first - planned
            if end[tp] > first:
                ranges.append(OffsetRange(tp[0], tp[1], first, end[tp], self.remote(tp[0])))
        if not self.replays_checked and ranges:
            from kmirror_engine.planning.replays import check_replays

            self.replays_checked = True
            check_replays(self.source_admin, self.route.flow_id, self.consumer_group, ranges, self.copy.exactly_once)
        return plan_tasks(
            ranges,
            self.task_count,
            self.planning.max_records_per_task,
            keep_partitions_whole=self.copy.exactly_once,
        )

    def rate_shares(self, tasks: Sequence[Sequence[OffsetRange]]) -> list[list[float]]:
        """Each planned range's share of the flow's rate limits (`split_rate_limits`); the shares
        of a batch sum to 1. A byte-limited flow samples the partitions it has no fresh figure for."""
        copy = self.copy
        per_offset = (
            self.record_sizes.bytes_per_offset([r for task in tasks for r in task]) if copy.max_bytes_per_second else {}
        )
        return split_rate_limits(tasks, per_offset, records_limited=bool(copy.max_records_per_second))

    @staticmethod
    def _size_sampler(source: ClusterEndpoint, copy: CopySettings, group_id: str) -> Any:
        """A source consumer (assign only) for `RecordSizes`, with small fetches: a sample needs a
        few records per partition, not a full prefetch."""
        from kmirror_engine.clients.factory import consumer_config, new_consumer

        config = {
            **consumer_config(source, copy, group_id),
            "fetch.max.bytes": 4 * 1024 * 1024,
            "max.partition.fetch.bytes": 64 * 1024,
            "enable.partition.eof": True,
        }
        return new_consumer(config, role="record-size-sampler")

    def _deleted(self, missing: list[tuple[str, int]], start: Offsets, end: Offsets) -> list[tuple[str, int]]:
        """Planned partitions the listing no longer has, once a describe confirms their topic is
        deleted (unknown topic) or it is no longer selected. Raises DataLossError for a deleted
        topic's planned offsets when fail_on_data_loss is on. Retried as a ConnectionFailure,
        never dropped: a topic listed with a metadata error, one the describe is not authorized
        to see (an ACL change hides a topic, it does not delete it), any other describe error,
        and a selected topic that exists but was missing from a (partial) listing."""
        if not missing:
            return []
        where = f"cluster {self.route.source.alias!r} ({self.route.source.bootstrap_servers})"

        def check() -> list[tuple[str, int]]:
            try:
                metadata = self.source_admin.list_topics(timeout=10.0)  # all topics: never auto-creates one
            except KafkaException as exc:
                raise ConnectionFailure(
                    f"cluster {self.route.source.alias!r}: listing topics failed: {exc.args[0]}"
                ) from None
            errored = sorted({t for t, _ in missing if t in metadata.topics and metadata.topics[t].error is not None})
            if errored:
                raise ConnectionFailure(
                    f"{where}: planned partitions of {', '.join(errored)} are not readable now "
                    f"({metadata.topics[errored[0]].error})"
                )
            gone = unknown_topics(self.source_admin, sorted({t for t, _ in missing}), where)
            hidden = sorted({t for t, _ in missing if t not in gone and self.discovery.select({t: 1})})
            if hidden:
                raise ConnectionFailure(
                    f"{where}: {', '.join(hidden)} exist(s) and are selected but were missing from the topic "
                    "listing (a partial metadata view); their planned offsets are kept"
                )
            deleted = [tp for tp in missing if tp[0] in gone]
            if deleted and self.planning.fail_on_data_loss:
                t, p = deleted[0]
                first = start.get((t, p), 0)
                raise DataLossError(
                    f"{self.route.flow_id}: data loss on {t}[{p}]: topic {t} was deleted from "
                    f"{self.route.source.alias!r} (describe: unknown topic) with offsets {first}..{end[(t, p)] - 1} "
                    "planned and not mirrored"
                    f"{f' ({len(deleted)} partitions in all)' if len(deleted) > 1 else ''}; set "
                    "fail_on_data_loss: false to drop them (each reported as a kmirror data_loss line)"
                )
            return missing

        return self._retry(check, "deleted topics")

    def _on_rewind(self, tp: tuple[str, int], start: int, latest: int) -> None:
        """The partition's end went below the mirror's position: the topic was deleted and
        recreated, or truncated (unclean leader election). Records of the old log past `start`
        that were not mirrored are gone; raises DataLossError unless fail_on_data_loss is off,
        in which case the new log is mirrored from its start (reported, never silent)."""
        message = (
            f"{self.route.flow_id}: data loss on {tp[0]}[{tp[1]}]: its end offset went back from at least {start} to "
            f"{latest} on {self.route.source.alias!r} (topic deleted and recreated, or truncated); records of the "
            f"old log from offset {start} on that were not mirrored are lost"
        )
        if self.planning.fail_on_data_loss:
            raise DataLossError(message + "; set fail_on_data_loss: false to mirror the new log from its start")
        report_data_loss(self.route.flow_id, tp, start, None, "rewind")
        log.warning("%s; mirroring the new log from its start (fail_on_data_loss=false)", message)

    def _check_loss(self, tp: tuple[str, int], first: int, log_start: int, end: int) -> int:
        if log_start <= first:
            return first
        lost_to = min(log_start, end)
        message = (
            f"{self.route.flow_id}: data loss on {tp[0]}[{tp[1]}]: offsets {first}..{log_start - 1} were deleted "
            f"from {self.route.source.alias!r} (log start {log_start}) before they were mirrored"
        )
        if self.planning.fail_on_data_loss:
            raise DataLossError(message + "; set fail_on_data_loss: false to skip them (they stay lost)")
        self.skipped_records += lost_to - first
        report_data_loss(self.route.flow_id, tp, first, lost_to - first, "retention")
        log.warning(
            "%s; skipped %d records (fail_on_data_loss=false; %d skipped in total)",
            message,
            lost_to - first,
            self.skipped_records,
        )
        return lost_to
