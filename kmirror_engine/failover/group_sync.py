"""Consumer-group admin on either cluster: committed offsets, active members, and the
forward-only write of translated offsets into a target group (MM2's `sync.group.offsets`).

Contract of `sync_group`: offsets are written only when the target group has no active
members (as MM2: consumers there own their offsets), and never move a partition backwards:
a partition whose committed target offset is already >= the translated one is kept.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kmirror.errors import KmirrorError
from kmirror_engine.clients.coordinator import says_coordinator_not_yet

ADMIN_TIMEOUT_S = 30.0
IDLE_STATES = frozenset({"EMPTY", "DEAD"})  # DEAD: a group that never existed (Kafka); tansu says EMPTY


class GroupAdminError(KmirrorError):
    """A consumer-group admin request failed; the message names group and cluster."""


class ActiveGroupError(KmirrorError):
    """The group has active members, so its offsets must not be changed."""


@dataclass(frozen=True)
class GroupState:
    group: str
    state: str  # EMPTY, STABLE, ... (confluent-kafka ConsumerGroupState name)
    members: tuple[str, ...]  # "client_id@host" of each active member
    owners: dict[tuple[str, int], str]  # (topic, partition) -> member owning it


@dataclass(frozen=True)
class SyncResult:
    group: str
    written: dict[tuple[str, int], int]  # offsets written
    kept: dict[tuple[str, int], tuple[int, int]]  # (current target offset, translated) left as they were


def _result(future: Any, what: str, timeout_s: float = ADMIN_TIMEOUT_S) -> Any:
    try:
        return future.result(timeout=timeout_s)
    except Exception as exc:
        raise GroupAdminError(f"{what} failed: {exc}") from exc


def list_groups(admin: Any, cluster: str) -> list[str]:
    """Every consumer group id on the cluster, sorted."""
    listing = _result(admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT_S), f"listing groups on {cluster}")
    return sorted(g.group_id for g in listing.valid)


def committed_offsets(admin: Any, group: str, cluster: str) -> dict[tuple[str, int], tuple[int, str]]:
    """(topic, partition) -> (committed offset, metadata); partitions without a commit are left out."""
    from confluent_kafka import ConsumerGroupTopicPartitions

    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=ADMIN_TIMEOUT_S)
    result = _result(futures[group], f"reading offsets of group {group!r} on {cluster}")
    out: dict[tuple[str, int], tuple[int, str]] = {}
    for tp in result.topic_partitions or []:
        if tp.error is not None:
            raise GroupAdminError(f"offset of group {group!r} for {tp.topic}[{tp.partition}] on {cluster}: {tp.error}")
        if tp.offset >= 0:
            out[(tp.topic, tp.partition)] = (tp.offset, tp.metadata or "")
    return out


def describe_group(admin: Any, group: str, cluster: str, retry_s: float = ADMIN_TIMEOUT_S) -> GroupState:
    """The group's state and members. A coordinator's "not yet" (e.g. COORDINATOR_LOAD_IN_PROGRESS
    right after a broker start) is retried for up to `retry_s`, then raised as GroupAdminError."""
    import time

    deadline = time.monotonic() + retry_s
    while True:
        futures = admin.describe_consumer_groups([group], request_timeout=ADMIN_TIMEOUT_S)
        try:
            desc = _result(futures[group], f"describing group {group!r} on {cluster}")
            break
        except GroupAdminError as exc:
            if not says_coordinator_not_yet(str(exc)) or time.monotonic() >= deadline:
                raise
            time.sleep(0.5)
    state = getattr(desc.state, "name", str(desc.state)).upper()
    members, owners = [], {}
    for member in desc.members or []:
        name = f"{member.client_id}@{member.host}"
        members.append(name)
        assignment = getattr(member, "assignment", None)
        for tp in getattr(assignment, "topic_partitions", None) or []:
            owners[(tp.topic, tp.partition)] = name
    return GroupState(group, state, tuple(members), owners)


def is_active(state: GroupState) -> bool:
    return bool(state.members) or state.state not in IDLE_STATES


def sync_group(admin: Any, group: str, translated: dict[tuple[str, int], int], cluster: str) -> SyncResult:
    """Write `translated` (target topic, partition) -> offset into `group` on the target, forward only.

    Raises ActiveGroupError when the group has active members there, GroupAdminError on failures.
    """
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    state = describe_group(admin, group, cluster)
    if is_active(state):
        members = ", ".join(state.members) or "none listed"
        raise ActiveGroupError(
            f"group {group!r} on {cluster} is {state.state} with active members ({members}); "
            "stop its consumers first, offsets of a live group are never changed"
        )
    current = committed_offsets(admin, group, cluster)
    written: dict[tuple[str, int], int] = {}
    kept: dict[tuple[str, int], tuple[int, int]] = {}
    for key, offset in sorted(translated.items()):
        now = current.get(key)
        if now is not None and now[0] >= offset:
            kept[key] = (now[0], offset)
        else:
            written[key] = offset
    if written:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(t, p, o) for (t, p), o in written.items()])
        futures = admin.alter_consumer_group_offsets([request], request_timeout=ADMIN_TIMEOUT_S)
        result = _result(futures[group], f"writing offsets of group {group!r} on {cluster}")
        failed = [f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in result.topic_partitions or [] if tp.error]
        if failed:
            raise GroupAdminError(f"writing offsets of group {group!r} on {cluster} failed for {', '.join(failed)}")
    return SyncResult(group, written, kept)
