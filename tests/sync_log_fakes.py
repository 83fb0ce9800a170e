"""A SyncLog without a broker: the surface `OffsetSyncWriter` uses (ensure, load, write, flush,
snapshots, close). Tests subclass it and keep what `record` is given, each its own way."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kmirror_engine.failover.offset_syncs import Sync, SyncStore


@dataclass(frozen=True)
class SyncWrite:
    """What one `write` call carried."""

    topic: str
    partition: int
    syncs: list[Sync]
    next_offset: int
    source_end: int | None
    clean_until: int | None


class FakeSyncLog:
    """Loads nothing, never wants a snapshot; `write` hands each call to `record`."""

    def __init__(self) -> None:
        self.last_load: dict[str, int] = {}

    def ensure_exists(self) -> None: ...

    def load(self, store: SyncStore, timeout_s: float = 60.0) -> int:
        return 0

    def catch_up(self, store: SyncStore, timeout_s: float = 60.0) -> int:
        return 0

    def write(
        self,
        topic: str,
        partition: int,
        syncs: list[Any],
        next_offset: int,
        source_end: int | None = None,
        clean_until: int | None = None,
    ) -> None:
        self.record(SyncWrite(topic, partition, syncs, next_offset, source_end, clean_until))

    def record(self, write: SyncWrite) -> None: ...

    def flush(self) -> None: ...

    def snapshot_due(self) -> bool:
        return False

    def close(self) -> None: ...


def emitter_of(spec: Any, store: SyncStore, source_admin: Any, producer: Any, **options: Any) -> Any:
    """The `CheckpointEmitter` a flow spec's checkpoint round builds (`CheckpointRound.for_flow`),
    over `store`, `source_admin` and `producer` (fakes)."""
    from kmirror_engine.failover.checkpoints import CheckpointEmitter

    return CheckpointEmitter(
        spec.route,
        store,
        source_admin,
        producer,
        own_group=spec.consumer_group,
        reverse_of=spec.checkpoints.reverse_of,
        **options,
    )
