"""Typed views of a flow spec: each part of the engine reads its own settings, once.

MirrorMaker hands each task a typed config read at start (`MirrorSourceTaskConfig`,
`emitCheckpointsInterval()`); a flow spec does the same through these views, built from the
options table (`kmirror.flow.spec.OPTIONS`, names, docs and defaults declared once) the first time
a part asks for them:

| view | who reads it |
|---|---|
| `FlowSpec.planning` (`PlanningSettings`) | the range planner: where to start, batch and task sizes, discovery |
| `FlowSpec.copy` (`CopySettings`) | the copy loops: overrides, loop choice, dead letters, skips, limits, transform |
| `FlowSpec.checkpoints` (`CheckpointSettings`) | offset syncs, checkpoints, group offset sync, the metrics endpoint |
| `FlowSpec.heartbeats` (`HeartbeatSettings`) | the heartbeat emitter |
| `FlowSpec.topic_sync` (`TopicSyncSettings`) | topic creation and the config/ACL sync rounds |
| `FlowSpec.route` (`FlowRoute`) | the config/ACL sync and checkpoint rounds: clusters, topics, groups, names |

A view holds plain values (picklable, frozen), so a part that takes one cannot read another
part's settings by accident and a test builds one without a whole flow spec.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kmirror.flow.endpoint import ClusterEndpoint
    from kmirror.flow.filters import NameSelection
    from kmirror.flow.replication_policy import ReplicationPolicy

Read = Callable[[str], Any]  # FlowSpec.option: an option's value or its declared default
# `skip_offsets` entries: topic:partition:offset or topic:partition:first-last (Kafka topic names
# hold no ':', so the last two colons split an entry unambiguously).
_SKIP_RE = re.compile(
    r"^(?P<topic>[A-Za-z0-9._-]{1,249}):(?P<partition>[0-9]+):(?P<first>[0-9]+)(?:-(?P<last>[0-9]+))?$"
)
SKIP_FORM = "'topic:partition:offset' or 'topic:partition:first-last' (source topic, e.g. 'orders:3:1234-1240')"


@dataclass(frozen=True)
class OffsetSkip:
    """Source offsets a `skip_offsets` entry names: [first, last] of one source partition, both included."""

    topic: str
    partition: int
    first: int
    last: int

    def covers(self, topic: str, partition: int, offset: int) -> bool:
        return self.partition == partition and self.first <= offset <= self.last and self.topic == topic


def parse_offset_skip(entry: Any) -> OffsetSkip | str:
    """The skip an entry names, or the message (value found and the fix) when it is malformed;
    `kmirror.flow.spec` reports that message at the entry's path, so the app never sees one."""
    match = _SKIP_RE.fullmatch(entry) if isinstance(entry, str) else None
    if match is None:
        return f"must be {SKIP_FORM}, got {entry!r}"
    first = int(match["first"])
    last = int(match["last"]) if match["last"] is not None else first
    if last < first:
        return f"range {entry!r} ends before it starts: write first-last with first <= last"
    return OffsetSkip(match["topic"], int(match["partition"]), first, last)


def _offset_skips(entries: Any) -> tuple[OffsetSkip, ...]:
    skips = [parse_offset_skip(entry) for entry in entries or ()]
    return tuple(skip for skip in skips if isinstance(skip, OffsetSkip))  # validated at parse time


def _read_committed(consumer: Mapping[str, Any]) -> bool:
    # librdkafka's default isolation.level is read_committed; only an explicit override changes it.
    return consumer.get("isolation.level", "read_committed") == "read_committed"


MM2_SOURCE_CONNECTOR = "MirrorSourceConnector"  # the connector's name in MM2's dedicated mode
MM2_OFFSET_SYNCS_CLUSTER = "source"  # MM2's offset-syncs.topic.location default


@dataclass(frozen=True)
class Mm2Takeover:
    """`starting_offsets: {from_mm2: {...}}`: where a stopped MirrorMaker 2 left each partition.
    Topic names left out are MM2's defaults for the flow's aliases (`topics`)."""

    offsets_topic: str | None = None
    offset_syncs_topic: str | None = None
    offset_syncs_cluster: str = MM2_OFFSET_SYNCS_CLUSTER  # "source" or "target"
    connector: str = MM2_SOURCE_CONNECTOR

    def topics(self, source_alias: str, target_alias: str) -> tuple[str, str]:
        """(Connect offsets topic on the target, offset syncs topic on `offset_syncs_cluster`), as
        MM2 dedicated mode names them: its syncs topic is named after the other cluster."""
        other = target_alias if self.offset_syncs_cluster == "source" else source_alias
        return (
            self.offsets_topic or f"mm2-offsets.{source_alias}.internal",
            self.offset_syncs_topic or f"mm2-offset-syncs.{other}.internal",
        )

    @classmethod
    def parse(cls, starting_offsets: Any) -> Mm2Takeover | None:
        """The takeover a (validated) `starting_offsets` asks for, None for any other start."""
        if not isinstance(starting_offsets, Mapping) or "from_mm2" not in starting_offsets:
            return None
        raw = starting_offsets["from_mm2"]
        return cls(
            raw.get("offsets_topic"),
            raw.get("offset_syncs_topic"),
            raw.get("offset_syncs_cluster", MM2_OFFSET_SYNCS_CLUSTER),
            raw.get("connector", MM2_SOURCE_CONNECTOR),
        )


@dataclass(frozen=True)
class PlanningSettings:
    """What the range planner (driver) reads: offsets to start from, batch and task sizes."""

    starting_offsets: Any
    max_records_per_trigger: int
    max_records_per_task: int
    topic_refresh_interval_ms: int
    fail_on_data_loss: bool
    read_committed: bool
    from_mm2: Mm2Takeover | None = None  # a takeover from MM2 instead of `starting_offsets`

    @classmethod
    def read(cls, option: Read) -> PlanningSettings:
        return cls(
            starting_offsets=option("starting_offsets"),
            max_records_per_trigger=int(option("max_records_per_trigger")),
            max_records_per_task=int(option("max_records_per_task")),
            topic_refresh_interval_ms=int(option("topic_refresh_interval_ms")),
            fail_on_data_loss=bool(option("fail_on_data_loss")),
            read_committed=_read_committed(option("consumer")),
            from_mm2=Mm2Takeover.parse(option("starting_offsets")),
        )


@dataclass(frozen=True)
class CopySettings:
    """What the copy loops (executors) read: client overrides, the loop, what it may drop or pace."""

    producer: Mapping[str, Any]
    consumer: Mapping[str, Any]
    copy_loop: str
    exactly_once: bool
    dead_letter_topic: str | None
    skip_offsets: tuple[OffsetSkip, ...]
    max_bytes_per_second: int | None
    max_records_per_second: int | None
    transform_sql: str | None
    trigger_interval_ms: int
    read_committed: bool
    # the values of the options some copy loop cannot serve (`COPY_LOOP_CANNOT_SERVE`: provenance
    # headers, dead letters...), as set: what picks the loop (`unserved_options`) and provenance reads
    loop_options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def rate_limited(self) -> bool:
        return bool(self.max_bytes_per_second or self.max_records_per_second)

    @classmethod
    def read(cls, option: Read, loop_options: Iterable[str] = ()) -> CopySettings:
        """The copy settings; `loop_options`: the names of `COPY_LOOP_CANNOT_SERVE`, which the
        flow spec passes (`kmirror.flow.spec_checks` imports this module)."""
        transform = option("transform")
        return cls(
            producer=dict(option("producer")),
            consumer=dict(option("consumer")),
            copy_loop=str(option("copy_loop")),
            exactly_once=bool(option("exactly_once")),
            dead_letter_topic=option("dead_letter_topic"),
            skip_offsets=_offset_skips(option("skip_offsets")),
            max_bytes_per_second=option("max_bytes_per_second"),
            max_records_per_second=option("max_records_per_second"),
            transform_sql=None if transform is None else str(transform["sql"]),
            trigger_interval_ms=int(option("trigger_interval_ms")),
            read_committed=_read_committed(option("consumer")),
            loop_options={name: option(name) for name in loop_options},
        )


@dataclass(frozen=True)
class CheckpointSettings:
    """What failover side work reads: checkpoints, offset syncs, group offset sync, metrics."""

    emit: bool
    interval_ms: int
    sync_group_offsets: bool
    offset_lag_max: int
    metrics_port: int | None
    # a reverse flow: the forward flow's source alias, whose remote topics on this flow's source
    # are translated back home (checkpoints for upstream topics, as MM2); None: not a reverse flow
    reverse_of: str | None = None

    @classmethod
    def read(cls, option: Read) -> CheckpointSettings:
        port = option("metrics_port")
        return cls(
            emit=bool(option("emit_checkpoints")),
            interval_ms=int(option("checkpoint_interval_ms")),
            sync_group_offsets=bool(option("sync_group_offsets")),
            offset_lag_max=int(option("offset_lag_max")),
            metrics_port=None if port is None else int(port),
            reverse_of=option("reverse_of"),
        )


@dataclass(frozen=True)
class HeartbeatSettings:
    """What the heartbeat emitter reads."""

    emit: bool
    interval_ms: int

    @classmethod
    def read(cls, option: Read) -> HeartbeatSettings:
        return cls(emit=bool(option("emit_heartbeats")), interval_ms=int(option("heartbeat_interval_ms")))


@dataclass(frozen=True)
class TopicSyncSettings:
    """What topic creation and the config/ACL sync rounds read."""

    configs: bool
    configs_interval_ms: int
    configs_of_existing_topics: bool
    acls: bool
    acls_interval_ms: int
    replication_factor: int | None

    @property
    def any(self) -> bool:
        return self.configs or self.acls

    @classmethod
    def read(cls, option: Read) -> TopicSyncSettings:
        return cls(
            configs=bool(option("sync_topic_configs")),
            configs_interval_ms=int(option("sync_topic_configs_interval_ms")),
            configs_of_existing_topics=bool(option("sync_configs_of_existing_topics")),
            acls=bool(option("sync_topic_acls")),
            acls_interval_ms=int(option("sync_topic_acls_interval_ms")),
            replication_factor=option("replication_factor"),
        )


@dataclass(frozen=True)
class FlowRoute:
    """Where a flow's records go: its id, the two clusters, which source topics it mirrors and
    which groups it checkpoints (`topics`, `groups`), the topics' names on the target (`policy`);
    what a part that finds the flow's topics or groups on its own (the config and ACL sync rounds,
    the checkpoint round) reads."""

    flow_id: str
    source: ClusterEndpoint
    target: ClusterEndpoint
    topics: NameSelection  # the source topics it mirrors
    groups: NameSelection  # the consumer groups it checkpoints
    policy: ReplicationPolicy
