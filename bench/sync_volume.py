"""Offset-sync bytes a day at 4,000 partitions: the writer before and after issue 26.

    python bench/sync_volume.py [--partitions 4000] [--minutes 5] [--batch-s 1] [--records 100]

Drives the real `OffsetSyncWriter` (and `SyncStore`, `OffsetSyncTopic.write`: the records it
produces are encoded as they would be sent, then counted instead of sent) with `--minutes` of
simulated micro-batches on a simulated clock, one batch every `--batch-s` seconds, each
copying `--records` records of every partition, for three sources:
- continuous: every record mirrored at a constant drift (the common case);
- transactional: a commit marker every 50 records (a source written by EOS producers: the
  drift changes at every marker);
- compacted: every other offset gone (the drift changes at every record, the worst case).
The "before" contender is the previous writer's rule (every range's first and last record,
plus drift changes thinned by offset.lag.max), kept here as the baseline. Bytes are the
records' keys, values and headers; each record adds ~10-20 bytes of batch framing on top.
Printed side by side, scaled from the simulated window to a day.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.failover import offset_syncs
from kmirror_engine.failover.offset_sync_topic import OffsetSyncTopic
from kmirror_engine.failover.offset_sync_writer import OffsetSyncWriter
from kmirror_engine.failover.offset_syncs import Sync, SyncStore
from kmirror_engine.observability.progress import BatchProgress, PartitionProgress


class CountingProducer:
    def __init__(self) -> None:
        self.records = self.bytes = 0

    def produce(self, topic: str, value: bytes, key: bytes, partition: int = 0, headers: Any = ()) -> None:
        self.records += 1
        self.bytes += len(key) + len(value) + sum(len(k) + len(v) for k, v in headers)

    def confirm(self, timeout_s: float) -> None: ...


class CountingLog:
    """A SyncLog that encodes with OffsetSyncTopic and counts instead of sending."""

    def __init__(self) -> None:
        self.topic = OffsetSyncTopic(None, "mm2-offset-syncs.west.internal")  # type: ignore[arg-type]
        self.producer = CountingProducer()
        self.topic._producer = self.producer
        self.last_load: dict[str, int] = {}

    def ensure_exists(self) -> None: ...

    def load(self, store: SyncStore) -> int:
        return 0

    def write(self, *args: Any) -> None:
        self.topic.write(*args)

    def flush(self) -> None: ...

    def snapshot_due(self) -> bool:
        return False


def old_thin(
    pairs: list[tuple[int, int]], lag_max: int | None, anchor: Sync | None, keep_last: bool = False
) -> list[tuple[int, int, bool]]:
    """The previous writer's rule (before issue 26): first and last pair of every range kept."""
    out: list[tuple[int, int, bool]] = []
    last = (anchor.upstream, anchor.downstream) if anchor is not None else None
    dirty = False
    for i, (upstream, downstream) in enumerate(pairs):
        final = i == len(pairs) - 1
        if last is not None and not dirty and not final and downstream - upstream == last[1] - last[0]:
            continue
        assert lag_max is not None
        if not (last is None or i == 0 or final or pairs[i + 1][1] - last[1] > lag_max):
            dirty = True  # a drift change the next pair follows closely: dropped, the stretch is dirty
            continue
        out.append((upstream, downstream, not dirty))
        last, dirty = (upstream, downstream), False
    return out


def pairs_for(kind: str, start_up: int, start_down: int, records: int) -> tuple[tuple[tuple[int, int], ...], int, int]:
    """(the copy loop's pairs, upstream span, downstream span) of one range."""
    if kind == "continuous":
        return ((start_up, start_down), (start_up + records - 1, start_down + records - 1)), records, records
    if kind == "transactional":  # a marker after every 50 records: upstream skips one offset
        recs, up = [], start_up
        for i in range(records):
            recs.append((up, start_down + i))
            up += 2 if i % 50 == 49 else 1
        span = up - start_up
    else:  # compacted
        recs = [(start_up + 2 * i, start_down + i) for i in range(records)]
        span = 2 * records
    out, drift = [], None
    for u, d in recs:
        if d - u != drift:
            out.append((u, d))
            drift = d - u
    if out[-1] != recs[-1]:
        out.append(recs[-1])
    return tuple(out), span, records


def run(kind: str, rule: str, args: argparse.Namespace) -> tuple[int, int]:
    spec = parse_flow_spec(
        {
            "id": "west->east",
            "checkpoint_location": "/tmp/x",
            "topics": ["orders"],
            "topics_exclude": [],
            "replication_policy": {"type": "default"},
            "source": {"alias": "west", "bootstrap_servers": "x:9092"},
            "target": {"alias": "east", "bootstrap_servers": "y:9092"},
        }
    )
    clock = [0.0]
    log = CountingLog()
    saved = offset_syncs.thin_pairs
    if rule == "before":
        offset_syncs.thin_pairs = old_thin  # type: ignore[assignment]
    try:
        writer = OffsetSyncWriter(spec.id, spec.checkpoints, log, metrics=None, clock=lambda: clock[0]).load()  # type: ignore[arg-type]
        up = [0] * args.partitions
        down = [0] * args.partitions
        batches = int(args.minutes * 60 / args.batch_s)
        for b in range(batches):
            parts = []
            for p in range(args.partitions):
                pairs, span_up, span_down = pairs_for(kind, up[p], down[p], args.records)
                parts.append(
                    PartitionProgress(
                        "orders",
                        p,
                        "west.orders",
                        up[p],
                        up[p] + span_up,
                        args.records,
                        args.records * 100,
                        None,
                        pairs,
                    )
                )
                up[p] += span_up
                down[p] += span_down
            writer.record(BatchProgress(b, tuple(parts), 10, {("orders", p): up[p] for p in range(args.partitions)}))
            clock[0] += args.batch_s
    finally:
        offset_syncs.thin_pairs = saved
    scale = 86400 / (args.minutes * 60)
    return int(log.producer.records * scale), int(log.producer.bytes * scale)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=4000)
    parser.add_argument("--minutes", type=float, default=5)
    parser.add_argument("--batch-s", type=float, default=1.0)
    parser.add_argument("--records", type=int, default=100, help="records per partition per batch")
    args = parser.parse_args()
    print(
        f"{args.partitions} partitions, a batch every {args.batch_s} s of {args.records} records per partition, "
        f"checkpoint interval 60 s, offset.lag.max 100; {args.minutes} simulated minutes scaled to a day"
    )
    print(
        f"{'source':<14} {'before: syncs/day':>18} {'bytes/day':>12} {'after: syncs/day':>17} {'bytes/day':>12} "
        f"{'ratio':>7}"
    )
    for kind in ("continuous", "transactional", "compacted"):
        before = run(kind, "before", args)
        after = run(kind, "after", args)
        ratio = before[1] / after[1] if after[1] else float("inf")
        print(
            f"{kind:<14} {before[0]:>18,} {_size(before[1]):>12} {after[0]:>17,} {_size(after[1]):>12} {ratio:>6.1f}x"
        )


def _size(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000:
            return f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} PB"


if __name__ == "__main__":
    main()
