"""Offset translation rules: MM2's rule where the history is unknown, exact where it is
continuous; never backwards, never past mirrored data, safe after thinning and lost syncs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kmirror_engine.failover.offset_syncs import Sync, SyncStore


def segment_syncs(records: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """What the copy loop reports for a range: first record, every drift change, last record."""
    out: list[tuple[int, int]] = []
    drift = None
    for up, down in records:
        if down - up != drift:
            out.append((up, down))
            drift = down - up
    if records and out[-1] != records[-1]:
        out.append(records[-1])
    return out


def test_exact_shift_when_the_target_already_held_records() -> None:
    store = SyncStore()
    # source offsets 0..9 landed at 3..12 (three unrelated records were there first)
    store.add_segment("t", 0, 0, 10, [(0, 3), (9, 12)])
    assert [store.translate("t", 0, u) for u in (0, 4, 9, 10, 500)] == [3, 7, 12, 13, 13]


def test_mm2_rule_between_syncs_that_are_not_continuous() -> None:
    store = SyncStore()
    store.add_segment("t", 0, 0, 10, [(0, 3), (9, 12)])
    store.add_segment("t", 0, 20, 30, [(20, 40), (29, 49)])  # offsets 10..19 never reported: unknown
    assert store.translate("t", 0, 15) == 13  # MM2: sync.downstream + 1
    assert store.translate("t", 0, 20) == 40
    assert store.translate("t", 0, 25) == 45
    assert store.syncs("t", 0)[2] == Sync(20, 40, continuous=False)


def test_gap_in_the_source_is_clamped_to_the_next_record() -> None:
    store = SyncStore()
    # records 0..4 at 0..4, offsets 5..9 compacted away, record 10 at 5
    store.add_segment("t", 0, 0, 11, [(0, 0), (10, 5)])
    # pairs only name drift changes; the last record before the gap (4, 4) had drift 0
    assert [store.translate("t", 0, u) for u in (3, 5, 7, 10)] == [3, 5, 5, 5]


def test_before_the_oldest_sync_is_untranslatable() -> None:
    store = SyncStore()
    store.add_segment("t", 0, 100, 110, [(100, 0), (109, 9)])
    assert store.translate("t", 0, 99) is None
    assert store.translate("other", 0, 5) is None


def test_rewind_starts_the_history_over() -> None:
    store = SyncStore()
    store.add_segment("t", 0, 0, 10, [(0, 0), (9, 9)])
    store.add_segment("t", 0, 0, 10, [(0, 10), (9, 19)])  # mirrored again from the start
    assert store.syncs("t", 0) == [Sync(0, 10, False), Sync(9, 19, True)]
    assert store.translate("t", 0, 5) == 15


def test_replayed_syncs_give_the_same_translation() -> None:
    live, reloaded = SyncStore(), SyncStore()
    for start, end, pairs in [(0, 10, [(0, 3), (9, 12)]), (10, 20, [(10, 13), (12, 20), (19, 27)])]:
        for sync in live.add_segment("t", 0, start, end, pairs):
            reloaded.add_loaded("t", 0, sync, end)
    assert [reloaded.translate("t", 0, u) for u in range(25)] == [live.translate("t", 0, u) for u in range(25)]
    assert reloaded.mirrored_until("t", 0) == 20


def test_bounded_history_keeps_the_oldest_and_the_newest() -> None:
    store = SyncStore(max_per_partition=40, dense_tail=10)
    for i in range(200):  # every batch shifts by one more foreign record: every sync is a drift point
        store.add_segment("t", 0, i * 10, i * 10 + 10, [(i * 10, i * 11), (i * 10 + 9, i * 11 + 9)])
    syncs = store.syncs("t", 0)
    assert len(syncs) <= 40
    assert syncs[0] == Sync(0, 0, False)
    assert syncs[-1].upstream == 1999
    # a group far behind still translates: MM2's rule where the history was thinned ...
    assert store.translate("t", 0, 5) == 1
    # ... exactly where it is dense
    assert store.translate("t", 0, 1995) == 1995 + 199
    assert store.translate("t", 0, 1905) == 1905 + 190


History = tuple[list[tuple[int, int]], list[tuple[int, int, bool]]]


@st.composite
def histories(draw: st.DrawFn) -> History:
    """Records (upstream, downstream) with gaps on both sides, split into ranges; some ranges'
    syncs are lost (never reported)."""
    n = draw(st.integers(1, 60))
    up_gaps = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    down_gaps = draw(st.lists(st.integers(1, 4), min_size=n, max_size=n))
    records, up, down = [], draw(st.integers(0, 5)), draw(st.integers(0, 5))
    for du, dd in zip(up_gaps, down_gaps, strict=True):
        up, down = up + du, down + dd
        records.append((up, down))
    cuts = sorted(set(draw(st.lists(st.integers(1, n), max_size=8))) | {n})
    ranges, begin = [], 0
    for cut in cuts:
        ranges.append((begin, cut, draw(st.booleans()) if begin else True))
        begin = cut
    return records, ranges


def feed(store: SyncStore, records: list[tuple[int, int]], ranges: list[tuple[int, int, bool]]) -> None:
    for begin, end, reported in ranges:
        start = records[begin - 1][0] + 1 if begin else 0
        next_offset = records[end - 1][0] + 1 if end < len(records) else records[-1][0] + 3
        if reported:
            store.add_segment("t", 0, start, next_offset, segment_syncs(records[begin:end]))


@settings(max_examples=300, deadline=None)
@given(histories(), st.sampled_from([(1024, 512), (6, 2)]))
def test_never_past_mirrored_data_and_never_backwards(history: History, bounds: tuple[int, int]) -> None:
    records, ranges = history
    store = SyncStore(*bounds)
    feed(store, records, ranges)
    previous = -1
    for u in range(0, records[-1][0] + 4):
        got = store.translate("t", 0, u)
        if got is None:
            assert previous == -1, "untranslatable only before the oldest sync"
            continue
        following = [d for up, d in records if up >= u]
        limit = following[0] if following else records[-1][1] + 1
        assert got <= limit, f"translate({u}) = {got} skips mirrored record at downstream {limit}"
        assert got >= previous, f"translate({u}) = {got} moved back from {previous}"
        previous = got


@settings(max_examples=200, deadline=None)
@given(histories())
def test_exact_when_every_range_was_reported(history: History) -> None:
    records, ranges = history
    store = SyncStore()
    feed(store, records, [(b, e, True) for b, e, _ in ranges])
    for u in range(records[0][0], records[-1][0] + 3):
        before = [d for up, d in records if up < u]
        following = [d for up, d in records if up >= u]
        got = store.translate("t", 0, u)
        assert got is not None
        assert (before[-1] if before else -1) < got <= (following[0] if following else records[-1][1] + 1)
        if u in dict(records):
            assert got == dict(records)[u]


def compacted_range(start_up: int, start_down: int, records: int) -> list[tuple[int, int]]:
    """Every other upstream offset compacted away: the drift changes at every record."""
    return [(start_up + 2 * i, start_down + i) for i in range(records)]


def test_offset_lag_max_bounds_the_syncs_of_a_compacted_source_and_keeps_range_ends_exact() -> None:
    store, persisted, records = SyncStore(offset_lag_max=100), 0, []
    for batch in range(20):  # 20 batches of 500 records, each record a drift change
        rng = compacted_range(batch * 1000, batch * 500, 500)
        records += rng
        persisted += len(store.add_segment("t", 0, batch * 1000, batch * 1000 + 1000, segment_syncs(rng)))
    assert persisted <= 20 * (500 // 100 + 2)  # was 10,000: one per record
    for up, down in records:
        got = store.translate("t", 0, up)
        assert got is not None and down - 100 < got <= down  # re-reads fewer than offset_lag_max records
    assert all(store.translate("t", 0, b * 1000 + 998) == b * 500 + 499 for b in range(20))  # batch edges: exact


def test_offset_lag_max_keeps_a_continuous_history_exact_and_tiny() -> None:
    store = SyncStore(offset_lag_max=100)
    added = [
        store.add_segment("t", 0, b * 10, b * 10 + 10, [(b * 10, b * 10 + 3), (b * 10 + 9, b * 10 + 12)])
        for b in range(50)
    ]
    assert added[0] == [Sync(0, 3)] and not any(added[1:])  # the drift never changed: one sync in all
    assert store.clean_until("t", 0) == 500
    assert [store.translate("t", 0, u) for u in (0, 5, 250, 499, 500)] == [3, 8, 253, 502, 503]


def test_a_head_sync_is_kept_only_when_asked() -> None:
    store = SyncStore(offset_lag_max=100)
    store.add_segment("t", 0, 0, 10, [(0, 3), (9, 12)])
    assert store.add_segment("t", 0, 10, 20, [(10, 13), (19, 22)], keep_last=True) == [Sync(19, 22, continuous=True)]
    assert store.add_segment("t", 0, 20, 30, [(20, 23), (29, 32)]) == []


def test_a_filtered_tail_is_outside_the_clean_tail() -> None:
    """Records 10..14 were filtered out (not mirrored): a group there resumes at the next
    mirrored record's downstream offset (10), never past it."""
    store = SyncStore(offset_lag_max=0)  # every drift change kept
    store.add_segment("t", 0, 0, 15, [(0, 0), (9, 9)])
    assert store.clean_until("t", 0) == 10
    assert [store.translate("t", 0, u) for u in (9, 10, 12, 14)] == [9, 10, 10, 10]
    store.add_segment("t", 0, 15, 20, [(15, 10), (19, 14)])
    assert [store.translate("t", 0, u) for u in (12, 15, 19, 20)] == [10, 10, 14, 15]


@settings(max_examples=300, deadline=None)
@given(histories(), st.sampled_from([0, 1, 3, 100]))
def test_thinned_translation_is_safe_bounded_and_exact_at_the_head(history: History, lag_max: int) -> None:
    records, ranges = history
    store = SyncStore(offset_lag_max=lag_max)
    feed(store, records, [(b, e, True) for b, e, _ in ranges])
    previous = -1
    for u in range(records[0][0], records[-1][0] + 3):
        following = [d for up, d in records if up >= u]
        limit = following[0] if following else records[-1][1] + 1
        got = store.translate("t", 0, u)
        assert got is not None and previous <= got <= limit
        if following:
            reread = [d for _, d in records if got <= d < limit]
            assert len(reread) < max(lag_max, 1), f"translate({u}) = {got} re-reads {reread}"
        previous = got
    up, down = records[-1]
    assert store.translate("t", 0, up) == down, "the newest mirrored record (the head) translates exactly"
    assert store.translate("t", 0, up + 1) == down + 1, "a caught-up group translates exactly"


def persisted_copy(
    records: list[tuple[int, int]], ranges: list[tuple[int, int, bool]], lag_max: int
) -> tuple[SyncStore, SyncStore]:
    """The writer's store, and a store loaded back from what it persisted (as OffsetSyncTopic
    writes and loads: the next offset on every sync, the clean tail on a range's last one)."""
    writer, loaded = SyncStore(offset_lag_max=lag_max), SyncStore(offset_lag_max=lag_max)
    for i, (begin, end, _) in enumerate(ranges):
        start = records[begin - 1][0] + 1 if begin else 0
        next_offset = records[end - 1][0] + 1 if end < len(records) else records[-1][0] + 3
        added = writer.add_segment("t", 0, start, next_offset, segment_syncs(records[begin:end]), keep_last=i % 3 == 0)
        for j, sync in enumerate(added):
            clean = writer.clean_until("t", 0) if j == len(added) - 1 else None
            loaded.add_loaded("t", 0, sync, next_offset, clean)
    return writer, loaded


@settings(max_examples=300, deadline=None)
@given(histories(), st.sampled_from([1, 3, 100]))
def test_a_store_loaded_back_translates_like_the_writer_inside_what_it_read(history: History, lag_max: int) -> None:
    """The driver's second writer and a restarted mirror load the persisted syncs: inside the
    history they read (up to its mirrored_until) they must translate exactly as the writer's
    own store, or the two checkpoint writers would disagree; beyond it they stay safe."""
    records, ranges = history
    writer, loaded = persisted_copy(records, [(b, e, True) for b, e, _ in ranges], lag_max)
    known = loaded.mirrored_until("t", 0)
    assert known is not None
    for u in range(records[0][0], records[-1][0] + 3):
        following = [d for up, d in records if up >= u]
        limit = following[0] if following else records[-1][1] + 1
        got = loaded.translate("t", 0, u)
        assert got is not None and got <= limit
        if u <= known:
            assert got == writer.translate("t", 0, u), f"translate({u}): loaded {got}, writer's differs"
