"""Checkpoints: translated offsets of source consumer groups, written in MM2's Checkpoint
format to `<source>.checkpoints.internal` on the target (what MM2's
`RemoteClusterUtils.translateOffsets` and failover tooling read).

Which groups: every source group matching the flow's `groups`/`groups_exclude`, except the
mirror's own group, with committed offsets on topics the flow mirrors. Which offsets:
`SyncStore.translate` (never past mirrored data; untranslatable partitions are left out).
Emission follows MM2's `checkpointIsMoreRecent`: a partition's checkpoint is emitted the
first time, when its downstream offset advanced, or when the group itself was rewound
upstream; a translation that would move the downstream offset back is never emitted.

A reverse flow (`reverse_of`, the planner's `reverse_flow: true`: B->A beside A->B) also emits
MM2's checkpoints for *upstream* topics: a group on B committed on `A.orders` (the forward flow's
remote topic, which the reverse flow never mirrors) is checkpointed as `orders` on A, translated
through the inverse of the forward flow's syncs (`failback.translate_back`), which the caller
reads from B, where the forward flow writes them. `RemoteClusterUtils`-style readers on A then see
where the group resumes at home.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kmirror.errors import KmirrorError
from kmirror.flow.endpoint import ClusterEndpoint
from kmirror.flow.filters import should_replicate_topic
from kmirror.flow.replication_policy import checkpoints_topic
from kmirror.flow.views import FlowRoute
from kmirror.mm2.formats import Checkpoint, decode_checkpoint, encode_checkpoint
from kmirror_engine.clients.delivery import DeliveryConfirmingProducer
from kmirror_engine.failover.failback import remote_homecomings
from kmirror_engine.failover.group_sync import GroupAdminError, committed_offsets, list_groups
from kmirror_engine.failover.offset_sync_topic import read_partition0
from kmirror_engine.failover.offset_syncs import SyncStore
from kmirror_engine.planning.internal_names import layout

CHECKPOINTS_TOPIC_CONFIG = layout("checkpoints")


class CheckpointError(KmirrorError):
    """Checkpoints could not be written or read."""


@dataclass(frozen=True)
class Translation:
    source_topic: str
    partition: int
    target_topic: str
    upstream_offset: int
    downstream_offset: int | None  # None: untranslatable (the group is before every mirrored record)
    metadata: str = ""


class Translator(Protocol):
    """A sync history that translates (kafka-mirror's `SyncStore`, MM2's `Mm2SyncStore`)."""

    def translate(self, topic: str, partition: int, upstream_offset: int) -> int | None: ...


def translate_offsets(
    route: FlowRoute, store: Translator, offsets: dict[tuple[str, int], tuple[int, str]]
) -> list[Translation]:
    """Translate a group's committed source offsets on the topics `route` mirrors, sorted."""
    policy, selection = route.policy, route.topics
    out = []
    for (topic, partition), (offset, metadata) in sorted(offsets.items()):
        if not should_replicate_topic(selection, policy, topic, route.target.alias):
            continue
        remote = policy.format_remote_topic(route.source.alias, topic)
        out.append(Translation(topic, partition, remote, offset, store.translate(topic, partition, offset), metadata))
    return out


def is_more_recent(new: Checkpoint, last: Checkpoint | None) -> bool:
    """MM2's rule: first checkpoint, upstream rewind of the group, or downstream advance."""
    if last is None:
        return True
    return new.upstream_offset < last.upstream_offset or new.downstream_offset > last.downstream_offset


class CheckpointEmitter:
    """Reads source group offsets, translates them and writes checkpoints to the target."""

    def __init__(
        self,
        route: FlowRoute,
        store: SyncStore,
        source_admin: Any,
        producer: Any,
        within_known_history: bool = False,
        home_syncs: SyncStore | None = None,
        *,
        own_group: str,
        reverse_of: str | None = None,
    ) -> None:
        """Checkpoints of `route`'s groups except `own_group` (the mirror's own source group);
        `reverse_of`: on a reverse flow, the forward flow's source alias (`CheckpointSettings`).
        `within_known_history`: for a second writer (the driver's idle rounds) whose syncs may be
        older than the sink listener's: it only checkpoints offsets inside the history it has read
        (`SyncStore.mirrored_until`), where both writers translate alike, so it never emits a lower
        downstream offset after the listener's. `home_syncs`: on a reverse flow, the forward flow's
        sync history (see the module docstring); None emits no checkpoints for upstream topics."""
        self.route = route
        self.own_group, self.reverse_of = own_group, reverse_of
        self.within_known_history = within_known_history
        self.store = store
        self.home_syncs = home_syncs
        self.source_admin = source_admin
        self.producer = producer
        self.topic = checkpoints_topic(route.source.alias)
        self.last: dict[tuple[str, str, int], Checkpoint] = {}
        self.failed_groups: dict[str, str] = {}  # group -> why its offsets were not read, last emit
        self.delivery = DeliveryConfirmingProducer(producer, what="checkpoint", error=CheckpointError)

    def groups(self) -> list[str]:
        """Source groups this flow checkpoints: selected by groups/groups_exclude, not the mirror's own."""
        selection = self.route.groups
        return [
            g
            for g in list_groups(self.source_admin, self.route.source.alias)
            if selection.matches(g) and g != self.own_group
        ]

    def checkpoints_for(self, group: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> list[Checkpoint]:
        """New checkpoints of one group (pure given the store and what was emitted before)."""
        out = []
        for t in translate_offsets(self.route, self.store, offsets):
            if t.downstream_offset is None:
                continue
            known = self.store.mirrored_until(t.source_topic, t.partition)
            if self.within_known_history and (known is None or t.upstream_offset > known):
                continue
            checkpoint = Checkpoint(
                group, t.target_topic, t.partition, t.upstream_offset, t.downstream_offset, t.metadata
            )
            if is_more_recent(checkpoint, self.last.get((group, t.target_topic, t.partition))):
                out.append(checkpoint)
        return out + self.homecoming_checkpoints(group, offsets)

    def homecoming_checkpoints(self, group: str, offsets: dict[tuple[str, int], tuple[int, str]]) -> list[Checkpoint]:
        """A reverse flow's checkpoints for upstream topics: `group`'s offsets on this flow's source
        on the forward flow's remote topics (`A.orders`), translated back to the target's own topic
        (`orders`) through the inverse of the forward flow's syncs; [] on any other flow. Untranslatable
        partitions (the group read no mirrored record) are left out, as in `checkpoints_for`; a second
        writer only checkpoints offsets up to the newest forward sync it has read (where every reader
        of the forward syncs translates alike)."""
        home = self.reverse_of
        if home is None or self.home_syncs is None:
            return []
        out = []
        for h in remote_homecomings(self.route.policy, home, self.home_syncs, offsets):
            if h.upstream_offset is None:
                continue
            syncs = self.home_syncs.syncs(h.source_topic, h.partition)
            if self.within_known_history and (not syncs or h.downstream_offset > syncs[-1].downstream):
                continue
            metadata = offsets[(h.remote_topic, h.partition)][1]
            checkpoint = Checkpoint(
                group, h.source_topic, h.partition, h.downstream_offset, h.upstream_offset, metadata
            )
            if is_more_recent(checkpoint, self.last.get((group, h.source_topic, h.partition))):
                out.append(checkpoint)
        return out

    def emit(self, groups: Iterable[str] | None = None) -> tuple[list[Checkpoint], int]:
        """Emit due checkpoints of `groups` (default: all selected) and wait for their delivery.

        Returns (checkpoints written, checkpoint latency in ms: offsets read -> delivered). A group
        whose offsets cannot be read (its coordinator moving, ...) is skipped and named in
        `failed_groups`; the others go on. Raises CheckpointError on a failed delivery and
        GroupAdminError when the groups cannot be listed.
        """
        started = time.monotonic()
        emitted: list[Checkpoint] = []
        self.failed_groups = {}
        for group in self.groups() if groups is None else groups:
            try:
                offsets = committed_offsets(self.source_admin, group, self.route.source.alias)
            except GroupAdminError as exc:
                self.failed_groups[group] = str(exc)
                continue
            for checkpoint in self.checkpoints_for(group, offsets):
                key, value = encode_checkpoint(checkpoint)
                self.delivery.produce(self.topic, value, key, partition=0)
                emitted.append(checkpoint)
        self.delivery.confirm(60)
        for c in emitted:
            self.last[(c.group, c.topic, c.partition)] = c
        return emitted, int((time.monotonic() - started) * 1000)


def read_checkpoints(target: ClusterEndpoint, topic: str, timeout_s: float = 30.0) -> list[Checkpoint]:
    """Every checkpoint in `topic` up to its high watermark, in log order (for tools and tests)."""
    return [decode_checkpoint(m.key() or b"", m.value() or b"") for m in read_partition0(target, topic, timeout_s)]


def translate_group(route: FlowRoute, group: str) -> list[Translation]:
    """Live translation of `group`'s committed source offsets (what `kmirror translate` and
    `kmirror failover` use) with the flow's persisted syncs; where they cannot translate (a
    partition kafka-mirror never mirrored, or a group before its first sync: records MM2 copied,
    before a takeover) MM2's offset syncs on the source translate it, by MM2's rules
    (`mm2_offset_syncs`), so an estate MM2 mirrored gives MM2's answer."""
    from kmirror_engine.clients.factory import admin_client
    from kmirror_engine.failover.offset_sync_snapshots import SyncLog

    store = SyncStore()
    SyncLog(route.target, route.source.alias).load(store)  # newest snapshots + the short tail after them
    offsets = committed_offsets(admin_client(route.source), group, route.source.alias)
    return with_mm2_syncs(route, translate_offsets(route, store, offsets))


def with_mm2_syncs(route: FlowRoute, translations: list[Translation]) -> list[Translation]:
    """`translations`, the untranslatable ones translated by MM2's syncs instead (read only when
    there is one); still None where MM2 gives none. kafka-mirror's own answers are kept: they are
    exact where MM2's only bound the offset."""
    if all(t.downstream_offset is not None for t in translations):
        return translations
    from kmirror_engine.failover.mm2_offset_syncs import load_mm2_syncs

    mm2 = load_mm2_syncs(route)
    return [
        t
        if t.downstream_offset is not None
        else replace(t, downstream_offset=mm2.translate(t.source_topic, t.partition, t.upstream_offset))
        for t in translations
    ]
