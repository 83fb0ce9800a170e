"""Names of what the mirror keeps on the target besides mirrored topics: the offset-sync
snapshot topic, exactly-once transactional ids and the group holding exactly-once positions.

Kept apart from the code that uses them so the start-up access check and the ACL list
(`kmirror_engine.planning.internal_topics`) name the same resources the side work and the
copy loops use, without importing either.
"""

from __future__ import annotations

import os
import time

from kmirror.flow.spec import FlowSpec


def snapshot_topic(source_alias: str) -> str:
    """Ends in `.internal`, so no replication policy ever mirrors it."""
    return f"kmirror-offset-syncs-snapshot.{source_alias}.internal"


def _slug(spec: FlowSpec) -> str:
    return spec.id.replace("->", "-to-")


def transactional_id(spec: FlowSpec, task_id: int) -> str:
    """The transactional.id writer tasks of earlier versions used (one per task index): still
    fenced at a query's start, so a zombie of such a run cannot commit."""
    return f"kmirror-{_slug(spec)}-{task_id}"


def partition_transactional_id(spec: FlowSpec, target_topic: str, partition: int) -> str:
    """The transactional.id copying one target partition: the same in every driver of the flow,
    so whichever writer initialises it last fences every other one (two live drivers of one
    flow cannot both commit a range of the partition)."""
    return f"kmirror-{_slug(spec)}-{target_topic}-{partition}"


def run_token(now_ns: int | None = None) -> str:
    """A driver run's token, recorded with the exactly-once offsets it commits: ordered by start
    time (zero-padded ns), then random, so of two drivers the one started later compares greater."""
    return f"{time.time_ns() if now_ns is None else now_ns:020d}-{os.urandom(4).hex()}"


def offsets_group(spec: FlowSpec) -> str:
    """The target consumer group holding the mirrored source next-offsets."""
    return f"kmirror-eos-{_slug(spec)}"


def control_topic() -> str:
    """The target cluster's compacted control topic: key = flow id, value = the newest pause/resume
    record (`kmirror_engine.planning.flow_control`). Ends in `.internal`: never mirrored."""
    return "kmirror-flow-control.internal"
