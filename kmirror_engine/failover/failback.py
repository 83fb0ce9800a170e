"""Failback: after a failover A->B, consumers on B read the remote topics (`A.orders`); when A is
back they move home to `orders` on A. Their position on B is translated back through the
inverse of the A->B offset syncs (as MM2 does for upstream topics in its checkpoints).

`translate_back` is the inverse of `SyncStore.translate`, with the same guarantee the other
way: a group moved home skips no record it had not read on B. For a group at downstream offset
`d` on B, with `s` the greatest sync whose downstream offset is <= d:
- d == s.downstream: exactly s.upstream (the record there is the next one to read);
- the history is continuous from s to the next sync n: min(s.upstream + (d - s.downstream),
  n.upstream), the exact upstream offset;
- otherwise (a gap, or past the newest sync): s.upstream + 1 (the record at s was read; what
  follows on A may be re-read, never skipped);
- before the oldest sync: untranslatable (None): the group has read no mirrored record.

The same translation feeds `kmirror failback` (`plan_failback`, from the flow's own route) and a
reverse flow's checkpoints for upstream topics (`remote_homecomings`, from the reverse flow's
policy and the forward syncs it reads; `checkpoints.CheckpointEmitter.homecoming_checkpoints`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kmirror.flow.replication_policy import ReplicationPolicy
from kmirror.flow.views import FlowRoute
from kmirror_engine.failover.offset_syncs import SyncStore, translate_through


@dataclass(frozen=True)
class Homecoming:
    """One partition of a group on the target, and where it resumes on the source."""

    remote_topic: str  # on the target (B), e.g. A.orders
    partition: int
    source_topic: str  # on the source (A), e.g. orders
    downstream_offset: int  # the group's committed offset on B
    upstream_offset: int | None  # where it resumes on A; None: untranslatable


def translate_back(store: SyncStore, topic: str, partition: int, downstream_offset: int) -> int | None:
    """The source offset a group at `downstream_offset` of topic's remote copy resumes from on
    the source; None when the group stands before every mirrored record."""
    syncs = store.syncs(topic, partition)
    return translate_through(syncs, downstream_offset, back=True) if syncs else None


def homecomings(
    route: FlowRoute, store: SyncStore, target_offsets: dict[tuple[str, int], tuple[int, str]]
) -> list[Homecoming]:
    """A group's committed offsets on the target, on this flow's remote topics, translated back;
    sorted. Offsets on other topics (the target's own, other flows') are left out."""
    return remote_homecomings(route.policy, route.source.alias, store, target_offsets)


def remote_homecomings(
    policy: ReplicationPolicy, home_alias: str, store: SyncStore, offsets: dict[tuple[str, int], tuple[int, str]]
) -> list[Homecoming]:
    """`homecomings` for a flow from `home_alias` named by its policy and sync history alone: what a
    reverse flow's checkpoint rounds use (they run on the forward flow's target, without its spec)."""
    out = []
    for (remote, partition), (offset, _metadata) in sorted(offsets.items()):
        source_topic = policy.upstream_topic(remote) or remote  # identity policy: same name
        if policy.format_remote_topic(home_alias, source_topic) != remote:
            continue
        if store.mirrored_until(source_topic, partition) is None and not store.syncs(source_topic, partition):
            continue  # a topic this flow never mirrored (an identity-policy target's own topic)
        upstream = translate_back(store, source_topic, partition, offset)
        out.append(Homecoming(remote, partition, source_topic, offset, upstream))
    return out


def plan_failback(route: FlowRoute, group: str) -> list[Homecoming]:
    """Where `group` (committed on the target) resumes on the source; reads the target only."""
    from kmirror_engine.clients.factory import admin_client
    from kmirror_engine.failover.group_sync import committed_offsets
    from kmirror_engine.failover.offset_sync_snapshots import SyncLog

    store = SyncStore()
    SyncLog(route.target, route.source.alias).load(store)
    return homecomings(route, store, committed_offsets(admin_client(route.target), group, route.target.alias))
