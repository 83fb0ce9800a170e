"""`kmirror.mm2.sync_store` translates MM2's offset syncs as MM2 does (issue 23, part 1b): unit
checks of its rules, and the same syncs and queries replayed through MM2's own `OffsetSyncStore`
(tests/mm2/Mm2SyncReplay.java, compiled against connect-mirror) must give identical answers."""

from __future__ import annotations

import random
import subprocess

import pytest

from kmirror.mm2.formats import OffsetSync
from kmirror.mm2.sync_store import SLOTS, Mm2SyncStore
from tests.mm2.test_mm2_jars import ROOT, fetch_mm2


def _store(pairs: list[tuple[int, int]], partition: int = 0) -> Mm2SyncStore:
    return Mm2SyncStore(OffsetSync("t", partition, up, down) for up, down in pairs)


def test_exact_at_a_sync_one_past_it_between_syncs_none_before_the_first():
    store = _store([(100, 40), (200, 140)])
    assert store.translate("t", 0, 200) == 140
    assert store.translate("t", 0, 150) == 41  # MM2 never guesses past the sync: records may have been dropped
    assert store.translate("t", 0, 900) == 141
    assert store.translate("t", 0, 99) is None  # older than every sync: MM2 emits no checkpoint
    assert store.translate("t", 1, 150) is None  # a partition MM2 never synced


def test_a_group_far_behind_is_translated_with_an_older_kept_sync_not_the_nearest_one():
    """A sync at every offset 0..1000: MM2 keeps a power-of-two spaced few (at most 64), so a group at
    500 resumes after the kept sync before it, re-reading more than the nearest sync would make it."""
    store = _store([(u, u) for u in range(1001)])
    kept = [s.upstream_offset for s in store.kept("t", 0)]
    assert len(kept) <= SLOTS and kept[0] == 1000 and kept == sorted(kept, reverse=True)
    assert 500 not in kept
    nearest = max(u for u in kept if u <= 500)
    assert store.translate("t", 0, 500) == nearest + 1 < 500
    assert store.translate("t", 0, 1000) == 1000


def test_an_upstream_rewind_forgets_every_older_sync():
    store = _store([(u, u) for u in range(0, 101, 10)] + [(10, 500)])
    assert store.translate("t", 0, 50) == 501
    assert store.translate("t", 0, 5) is None


def _scenarios(seed: int) -> tuple[list[str], list[tuple[int, int, int]]]:
    """Random sync streams on several partitions (small and huge offsets, drift changes, rewinds)
    with queries interleaved: (the replay script, the queries as (partition, upstream, position))."""
    rng = random.Random(seed)
    lines: list[str] = []
    queries: list[tuple[int, int, int]] = []
    starts = {0: 0, 1: 5_000, 2: 1 << 40, 3: (1 << 62) - 50_000}
    for partition, start in starts.items():
        up, drift = start, 0
        for i in range(1500):
            up += rng.choice((1, 1, 2, 7, 50, 100, 333))
            if rng.random() < 0.05:
                drift -= rng.randint(1, 20)  # records dropped downstream
            if partition == 1 and rng.random() < 0.003:
                up = max(start, up - rng.randint(100, 3000))  # the source topic re-created
            lines.append(f"s {partition} {up} {max(up + drift, 0)}")
            if i % 25 == 0:
                for _ in range(8):
                    q = rng.randint(start - 10, up + 400)
                    lines.append(f"q {partition} {q}")
                    queries.append((partition, q, len(lines)))
    return lines, queries


@pytest.mark.e2e
def test_translations_equal_mm2s_own_offset_sync_store(tmp_path):
    jars = fetch_mm2()
    subprocess.run(
        ["javac", "-d", str(tmp_path), "-cp", f"{jars}/*", str(ROOT / "tests/mm2/Mm2SyncReplay.java")],
        check=True,
        timeout=120,
    )
    lines, queries = _scenarios(seed=23)
    java = subprocess.run(
        ["java", "-cp", f"{jars}/*:{tmp_path}", "org.apache.kafka.connect.mirror.Mm2SyncReplay"],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    assert len(java) == len(queries)
    store, ours, done = Mm2SyncStore(), [], 0
    for partition, upstream, position in queries:
        for line in lines[done:position]:
            kind, p, *values = line.split()
            if kind == "s":
                store.add(OffsetSync("t", int(p), int(values[0]), int(values[1])))
        done = position
        answer = store.translate("t", partition, upstream)
        ours.append("none" if answer is None else str(answer))
    mismatches = [(q, j, o) for q, j, o in zip(queries, java, ours, strict=True) if j != o]
    assert not mismatches, f"{len(mismatches)} of {len(queries)} differ from MM2; first: {mismatches[:5]}"
    assert len(set(java)) > 100  # the queries exercise many distinct answers, not one


def test_what_kafka_mirror_cannot_translate_is_translated_from_mm2s_syncs(monkeypatch):
    """`translate_group`'s merge: kafka-mirror's own answers are kept (orders[0]@55); a group
    before its first sync (orders[0]@20: records MM2 copied before a takeover) or on a partition
    it never mirrored (orders[1]) is translated from MM2's syncs; none there: still None."""
    import kmirror_engine.failover.mm2_offset_syncs as mm2_offset_syncs
    from kmirror.flow.spec import parse_flow_spec
    from kmirror_engine.failover.checkpoints import Translation, with_mm2_syncs
    from tests.planner_fakes import raw_spec

    spec = parse_flow_spec(raw_spec("A", "B"))  # A (a:9092) -> B (b:9092), topic orders
    read: list[str] = []

    def load(s):
        read.append(s.source.alias)
        return Mm2SyncStore(
            [
                OffsetSync("orders", 0, 0, 0),
                OffsetSync("orders", 0, 40, 40),
                OffsetSync("orders", 1, 0, 0),
                OffsetSync("orders", 1, 200, 180),
            ]
        )

    monkeypatch.setattr(mm2_offset_syncs, "load_mm2_syncs", load)
    rows = [
        Translation("orders", 0, "A.orders", 55, 11),
        Translation("orders", 0, "A.orders", 20, None),
        Translation("orders", 1, "A.orders", 250, None),
        Translation("orders", 2, "A.orders", 7, None),
    ]
    assert [t.downstream_offset for t in with_mm2_syncs(spec.route, rows)] == [11, 1, 181, None]
    assert read == ["A"]
    assert mm2_offset_syncs.mm2_syncs_topic(spec.route) == "mm2-offset-syncs.B.internal"
    read.clear()
    assert with_mm2_syncs(spec.route, rows[:1]) == rows[:1] and read == []  # nothing to fill: MM2's topic unread
