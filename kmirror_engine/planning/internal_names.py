"""Names of what the mirror keeps on the target besides mirrored topics: the offset-sync
snapshot topic, exactly-once transactional ids and the group holding exactly-once positions.

Kept apart from the code that uses them so the start-up access check and the ACL list
(`kmirror_engine.planning.internal_topics`) name the same resources the side work and the
copy loops use, without importing either.
"""

from __future__ import annotations

from kmirror.flow.spec import FlowSpec


def snapshot_topic(source_alias: str) -> str:
    """Ends in `.internal`, so no replication policy ever mirrors it."""
    return f"kmirror-offset-syncs-snapshot.{source_alias}.internal"


def _slug(spec: FlowSpec) -> str:
    return spec.id.replace("->", "-to-")


def transactional_id(spec: FlowSpec, task_id: int) -> str:
    """The fenced, deterministic transactional.id of a writer task."""
    return f"kmirror-{_slug(spec)}-{task_id}"


def offsets_group(spec: FlowSpec) -> str:
    """The target consumer group holding the mirrored source next-offsets."""
    return f"kmirror-eos-{_slug(spec)}"


def control_topic() -> str:
    """The target cluster's compacted control topic: key = flow id, value = the newest pause/resume
    record (`kmirror_engine.planning.flow_control`). Ends in `.internal`: never mirrored."""
    return "kmirror-flow-control.internal"
