"""The room for internal topics: every topic the mirror writes or reads besides mirrored topics,
with its name, what it is for, its layout (partitions, cleanup policy, retention), the ACL
operations the mirror needs on it and the group its readers consume with; plus the other names
the mirror keeps on the target (exactly-once transactional ids and positions group).

The side work creates each topic with `layout(kind)` and the target cluster's sizing
(`kmirror_engine.clients.topic_admin.ensure_topic`); its readers consume with `reader_group`;
the ACL list `kmirror acls` renders and the start-up access check
(`kmirror_engine.planning.internal_topics`) come from `flow_internal_topics`. So a name, a
group or a grant is written in one place only.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from kmirror.flow.replication_policy import HEARTBEATS_TOPIC, checkpoints_topic, offset_syncs_topic
from kmirror.flow.spec import FlowSpec
from kmirror.security.acls import synced_acls_topic

_COMPACT = {"cleanup.policy": "compact"}
# kind -> the topic configs it is created with (beside the cluster's min.insync.replicas).
# Every kind but dead letters is one partition: its readers read partition 0 as one ordered log.
LAYOUTS: dict[str, dict[str, str]] = {
    "offset_syncs": {"cleanup.policy": "delete", "retention.ms": str(7 * 24 * 3600 * 1000)},
    "offset_sync_snapshots": _COMPACT,
    "checkpoints": _COMPACT,  # as MM2 creates it: one partition, compacted
    "heartbeats": _COMPACT,  # as MM2 creates it: one partition, compacted
    "created_topics": _COMPACT,
    "synced_acls": _COMPACT,
    "flow_control": _COMPACT,
    "dead_letters": {},
}
SIZED_PARTITIONS = frozenset({"dead_letters"})  # take the cluster's `internal_topics.partitions`


def layout(kind: str) -> dict[str, str]:
    """The topic configs an internal topic of `kind` is created with (a copy)."""
    return dict(LAYOUTS[kind])


@dataclass(frozen=True)
class InternalTopic:
    """One internal topic of a flow, on its target cluster."""

    name: str
    kind: str  # a key of LAYOUTS
    purpose: str
    operations: tuple[str, ...]  # ACL operations the mirror needs (Kafka's spelling), beside Create/Describe
    checked_at_start: bool = True  # the start-up access check asks for it
    config: dict[str, str] = field(default_factory=dict)

    @property
    def reader_group(self) -> str | None:
        """The group its readers consume with, when the mirror reads it."""
        return reader_group(self.name) if "Read" in self.operations else None


def reader_group(topic: str) -> str:
    """The group id the mirror's readers of internal `topic` consume with (never committed to)."""
    return f"kmirror-reader-{topic}"


def snapshot_topic(source_alias: str) -> str:
    """Ends in `.internal`, so no replication policy ever mirrors it."""
    return f"kmirror-offset-syncs-snapshot.{source_alias}.internal"


def created_topics_topic(source_alias: str) -> str:
    """The registry of remote topics the mirror created from `source_alias` (`.internal`: never mirrored)."""
    return f"kmirror-created-topics.{source_alias}.internal"


def control_topic() -> str:
    """The target cluster's compacted control topic: key = flow id, value = the newest pause/resume
    record (`kmirror_engine.planning.flow_control`). Ends in `.internal`: never mirrored."""
    return "kmirror-flow-control.internal"


def flow_internal_topics(spec: FlowSpec) -> dict[str, InternalTopic]:
    """Every internal topic the flow `spec` uses on its target, by name (its dead-letter topic
    included): what `mirror_acls` grants and the start-up check asks for."""
    source = spec.source.alias
    rw = ("Read", "Write")
    topics = [
        InternalTopic(offset_syncs_topic(source), "offset_syncs", "offset syncs; without them batches fail", rw),
        InternalTopic(
            snapshot_topic(source),
            "offset_sync_snapshots",
            "offset-sync snapshots; without them restarts read the whole history",
            rw,
        ),
        InternalTopic(
            created_topics_topic(source),
            "created_topics",
            "the registry of remote topics the mirror created (config sync)",
            rw,
        ),
    ]
    if spec.checkpoints.emit:
        topics.append(InternalTopic(checkpoints_topic(source), "checkpoints", "MM2 checkpoints", rw))
    if spec.heartbeats.emit:
        topics.append(InternalTopic(HEARTBEATS_TOPIC, "heartbeats", "MM2 heartbeats", ("Write",)))
    if spec.topic_sync.acls:
        topics.append(
            InternalTopic(
                synced_acls_topic(source),
                "synced_acls",
                "the record of ACLs ACL sync created, for revoking them",
                rw,
            )
        )
    if spec.copy.dead_letter_topic:  # without Write a record the target refuses fails its batch after all
        topics.append(
            InternalTopic(
                spec.copy.dead_letter_topic, "dead_letters", "dead letters: records the target refuses", ("Write",)
            )
        )
    # pause/resume (issue 46): the planner reads the flow's control record; `kmirror pause` creates
    # and writes it, so the mirror needs no Create there and the start-up check does not ask
    topics.append(
        InternalTopic(
            control_topic(), "flow_control", "pause/resume control records", ("Read",), checked_at_start=False
        )
    )
    return {
        t.name: InternalTopic(t.name, t.kind, t.purpose, t.operations, t.checked_at_start, layout(t.kind))
        for t in topics
    }


def _slug(flow_id: str) -> str:
    return flow_id.replace("->", "-to-")


def transactional_id(flow_id: str, task_id: int) -> str:
    """The transactional.id writer tasks of earlier versions used (one per task index): still
    fenced at a query's start, so a zombie of such a run cannot commit."""
    return f"kmirror-{_slug(flow_id)}-{task_id}"


def partition_transactional_id(flow_id: str, target_topic: str, partition: int) -> str:
    """The transactional.id copying one target partition: the same in every driver of the flow,
    so whichever writer initialises it last fences every other one (two live drivers of one
    flow cannot both commit a range of the partition)."""
    return f"kmirror-{_slug(flow_id)}-{target_topic}-{partition}"


def run_token(now_ns: int | None = None) -> str:
    """A driver run's token, recorded with the exactly-once offsets it commits: ordered by start
    time (zero-padded ns), then random, so of two drivers the one started later compares greater."""
    return f"{time.time_ns() if now_ns is None else now_ns:020d}-{os.urandom(4).hex()}"


def offsets_group(flow_id: str) -> str:
    """The target consumer group holding the mirrored source next-offsets of flow `flow_id`."""
    return f"kmirror-eos-{_slug(flow_id)}"
