"""Bandwidth limits (max_bytes_per_second, max_records_per_second): the token bucket and the
pacer on an injected clock (no real sleeps), the copy loop paced on fakes, the shares the
planner gives each range (by bytes for a bytes limit, issue 26), paced transactions kept inside
their timeout, option validation, metrics and the progress line.
The end-to-end run on a real broker is tests/e2e/test_rate_limit_e2e.py."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kmirror.errors import ValidationError
from kmirror.flow.settings import setting_problems
from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.copying.exactly_once import TRANSACTION_TIMEOUT_S, TransactionalCopier
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CONSUMER_TUNING, CopyRange
from kmirror_engine.copying.rate_limit import (
    PROBE_RECORDS,
    Pacer,
    TokenBucket,
    paced_consumer_config,
    pacer_for,
    range_shares,
)
from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
from kmirror_engine.planning.ranges import OffsetRange
from kmirror_engine.planning.rate_shares import SIZE_SAMPLE_TTL_S, RecordSizes, split_rate_limits
from tests.kafka_fakes import FakeConsumer, FakeMessage, LimitedBroker
from tests.planner_fakes import FakeAdmin, planner, spec


class FakeClock:
    """Seconds; `sleep` advances it (and records every sleep)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds


# --- token bucket and pacer -------------------------------------------------------------------


def test_token_bucket_goes_into_debt_and_says_how_long_to_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket(100.0, clock=clock)  # 100 tokens/s, capacity 20 (BURST_S = 0.2 s)
    assert bucket.take(50) == pytest.approx(0.5)  # starts empty: 50 owed = 0.5 s
    clock.now += 0.5
    assert bucket.take(0) == 0.0  # debt paid exactly
    clock.now += 0.1
    assert bucket.take(10) == 0.0  # 10 accrued in 0.1 s
    clock.now += 60  # a long idle spell accrues at most the capacity: 20
    assert bucket.take(20) == 0.0
    assert bucket.take(100) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        TokenBucket(0)


def test_token_bucket_holds_the_rate_over_any_stretch_of_takes() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000.0, clock=clock)
    start, taken = clock.now, 0
    for amount in [7, 300, 1, 999, 2500, 40] * 20:
        clock.now += bucket.take(amount)  # the caller waits what it owes before taking more
        taken += amount
        # everything taken so far (but the last take, which is not paid yet) fits the rate
        assert taken - amount <= 1000.0 * (clock.now - start) + 1e-6
    assert clock.now - start == pytest.approx(taken / 1000.0)


def test_pacer_waits_for_the_slower_limit_and_counts_throttled_time() -> None:
    clock = FakeClock()
    pacer = Pacer(bytes_per_s=1000, records_per_s=10, clock=clock, sleep=clock.sleep)
    assert pacer.batch_size(1000) == 1  # 0.1 s of 10 records/s
    assert pacer.charge(5, 100) == pytest.approx(0.5)  # records: 0.5 s, bytes: 0.1 s
    served: list[float] = []
    pacer.wait(0.5, serve=lambda: served.append(clock.now))
    assert clock.now == pytest.approx(1000.5) and len(served) == 10  # in SERVE_S slices, serving each time
    # now bytes are the limit: 2000 B at 1000 B/s, less the 200 B (BURST_S) the bytes bucket saved meanwhile
    assert pacer.charge(1, 2000) == pytest.approx(1.8)
    assert pacer.throttled_s == pytest.approx(0.5)  # time actually waited, not time owed
    assert pacer.owed() == pytest.approx(1.8)
    assert pacer.pay() == pytest.approx(1.8) and pacer.owed() == pytest.approx(0.0, abs=1e-9)
    assert pacer.throttled_s == pytest.approx(2.3)


def test_pacer_batch_size_follows_the_rate_and_the_records_size() -> None:
    pacer = Pacer(bytes_per_s=100_000)
    assert pacer.batch_size(1000) == PROBE_RECORDS  # record size unknown yet
    pacer.charge(10, 1000)  # 100 B per record: 0.1 s of 100 kB/s is 100 records
    assert pacer.batch_size(1000) == 100
    assert Pacer(bytes_per_s=1).batch_size(1000) == PROBE_RECORDS
    assert Pacer(records_per_s=1_000_000).batch_size(1000) == 1000


# --- the copy loop, paced -----------------------------------------------------------------------


class StampingBroker(LimitedBroker):
    """Records the fake time and the bytes produced before each produce call."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(10**9)
        self.clock, self.stamps, self.produced = clock, [], 0  # type: ignore[var-annotated]

    def produce(self, topic: str, value: Any = None, key: Any = None, *args: Any, **kwargs: Any) -> None:
        self.stamps.append((self.clock.now, self.produced))
        self.produced += len(value or b"") + len(key or b"")
        super().produce(topic, value, key, *args, **kwargs)


def test_a_paced_copy_keeps_to_the_limit_in_order_and_drops_nothing() -> None:
    clock = FakeClock()
    values = [f"{i:099d}".encode() for i in range(2000)]  # 100 B + 1 B key each
    source = FakeConsumer([FakeMessage("orders", 0, i, v) for i, v in enumerate(values)])
    target = StampingBroker(clock)
    limit = 10_100  # bytes/s: 100 records/s, so 2000 records take 20 s
    pacer = Pacer(bytes_per_s=limit, clock=clock, sleep=clock.sleep)
    start = clock.now

    [progress] = RangeCopier(source, target, pacer=pacer, stall_timeout_s=5).copy(
        [CopyRange("orders", 0, 0, 2000, "west.orders")]
    )

    assert [value for _, value, _ in target.log] == values  # every record, in order
    assert (progress.records, progress.next_offset) == (2000, 2000)
    assert clock.now - start == pytest.approx(2000 * 101 / limit, rel=0.01)
    assert pacer.throttled_s == pytest.approx(clock.now - start, rel=0.01)
    first_burst = PROBE_RECORDS * 101
    for at, produced in target.stamps:  # at any moment: at most the rate since the start, plus one burst
        assert produced <= limit * (at - start) + first_burst


def test_without_a_pacer_the_same_copy_never_waits() -> None:
    source = FakeConsumer([FakeMessage("orders", 0, i, b"v" * 100) for i in range(500)])
    copier = RangeCopier(source, LimitedBroker(10**9), stall_timeout_s=5)
    assert copier.pacer is None
    [progress] = copier.copy([CopyRange("orders", 0, 0, 500, "west.orders")])
    assert progress.records == 500


# --- shares: the whole batch stays under the limit ---------------------------------------------


def test_range_shares_follow_the_work_and_sum_to_one_over_the_batch() -> None:
    shares = range_shares([[600, 200], [200], [0]])
    assert shares == [[0.6, 0.2], [0.2], [0.0]]
    assert range_shares([]) == [] and range_shares([[0]]) == [[0.0]]


def test_the_loops_of_a_batch_get_shares_of_the_flow_limits_that_add_up_to_them() -> None:
    flow = spec(max_bytes_per_second=1_000_000, max_records_per_second=5000)
    shares = range_shares([[700, 100], [150, 50]])
    loops = [pacer_for(flow.copy, sum(task)) for task in shares]
    assert sum(p.bytes.rate for p in loops if p and p.bytes) == pytest.approx(1_000_000)
    assert sum(p.records.rate for p in loops if p and p.records) == pytest.approx(5000)
    assert pacer_for(spec().copy, 0.5) is None  # no limit: no pacer


def test_the_reader_gives_every_planned_range_its_share() -> None:
    from spark_app.stream_readers import PositionTrackingReader

    reader = PositionTrackingReader("{}", once=True, task_count=2)
    reader._planner = planner(FakeAdmin({"orders": [(0, 1000), (0, 3000)], "new": [(0, 1000)]}))
    tasks = reader.partitions(
        {"orders": {"0": 0, "1": 0}, "new": {"0": 0}}, {"orders": {"0": 1000, "1": 3000}, "new": {"0": 1000}}
    )
    rows = [row for task in tasks for row in task.ranges]  # type: ignore[attr-defined]
    assert len(tasks) == 2
    assert {(r[0], r[1]): r[6] for r in rows} == {("orders", 0): 0.2, ("orders", 1): 0.6, ("new", 0): 0.2}


def test_rows_without_shares_split_the_limit_over_their_task() -> None:
    from kmirror_engine.copying.task_copy import with_rate_shares

    ranges = [CopyRange("a", 0, 0, 300, "w.a"), CopyRange("a", 1, 0, 100, "w.a")]
    assert [r.rate_share for r in with_rate_shares(ranges)] == [0.75, 0.25]
    planned = [CopyRange("a", 0, 0, 300, "w.a", rate_share=0.1)]
    assert with_rate_shares(planned) is planned


def test_a_byte_limited_flow_bounds_its_consumers_prefetch_unless_the_user_set_it() -> None:
    base = {**CONSUMER_TUNING}
    assert paced_consumer_config(spec().copy, base) == base
    paced = paced_consumer_config(spec(max_bytes_per_second=8_000_000).copy, base)
    assert (paced["fetch.max.bytes"], paced["queued.max.messages.kbytes"]) == (2_000_000, 1953)
    small = paced_consumer_config(spec(max_bytes_per_second=1000).copy, base)
    assert small["max.partition.fetch.bytes"] == 1024 * 1024  # never below 1 MiB
    user = paced_consumer_config(
        spec(max_bytes_per_second=1000, consumer={"fetch.max.bytes": 5_000_000}).copy,
        {**base, "fetch.max.bytes": 5_000_000},
    )
    assert user["fetch.max.bytes"] == 5_000_000


# --- options ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["max_bytes_per_second", "max_records_per_second"])
@pytest.mark.parametrize("value", [0, -5, 1.5, "1000", True, [1]])
def test_a_bad_limit_is_refused_naming_the_field_the_value_and_the_fix(name: str, value: Any) -> None:
    with pytest.raises(ValidationError) as caught:
        spec(**{name: value})
    [problem] = caught.value.problems
    assert problem.path == name
    assert repr(value) in problem.message and ">= 1" in problem.message and "leave it out" in problem.message


def test_limits_are_optional_and_accepted_as_whole_numbers() -> None:
    flow = spec(max_bytes_per_second=10_000_000, max_records_per_second=1)
    assert (flow.option("max_bytes_per_second"), flow.option("max_records_per_second")) == (10_000_000, 1)
    assert spec().option("max_bytes_per_second") is None and spec(max_bytes_per_second=None).options
    assert flow.to_dict()["max_bytes_per_second"] == 10_000_000  # travels to the tasks


def test_the_native_loop_and_transforms_are_refused_with_a_limit() -> None:
    with pytest.raises(ValidationError) as caught:
        spec(max_bytes_per_second=1000, copy_loop="native")
    [problem] = caught.value.problems
    assert problem.path == "copy_loop" and "max_bytes_per_second" in problem.message
    assert "set copy_loop to auto" in problem.message
    with pytest.raises(ValidationError) as caught:
        spec(max_records_per_second=10, transform={"sql": "SELECT * FROM records"})
    assert [p.path for p in caught.value.problems] == ["transform"]
    spec(max_bytes_per_second=1000, copy_loop="python")
    spec(max_bytes_per_second=1000, exactly_once=True)


def test_auto_picks_the_python_loop_for_a_limited_flow() -> None:
    from kmirror_engine.copying.native_copy import python_only_reasons, use_native_loop

    flow = spec(max_records_per_second=100)
    assert python_only_reasons(flow.copy) == ["max_records_per_second is set"]
    assert use_native_loop(flow.id, flow.copy) is False


def test_limits_are_topology_settings_checked_with_their_path() -> None:
    assert setting_problems({"max_bytes_per_second": 50_000_000, "max_records_per_second": 10}, "defaults") == []
    [problem] = setting_problems({"max_bytes_per_second": 0}, "flows.west->east")
    assert problem.path == "flows.west->east.max_bytes_per_second" and "got 0" in problem.message


def test_limits_set_in_the_topology_reach_the_flow_spec(tmp_path: Any) -> None:
    from kmirror.estate.planner import flow_spec_for, plan_topology
    from kmirror.estate.topology import load_topology

    path = tmp_path / "topology.yaml"
    path.write_text(
        "clusters:\n"
        "  a: {bootstrap_servers: 'a:9092', datacenter: one}\n"
        "  b: {bootstrap_servers: 'b:9092', datacenter: two}\n"
        "topologies:\n"
        "  - {name: dr, pattern: active-passive, primary: a, standby: b, max_bytes_per_second: 20000000}\n"
        "flows:\n"
        "  'a->b': {max_records_per_second: 5000}\n"
    )
    topology = load_topology(path)
    [flow] = [f for f in plan_topology(topology).flows if f.id == "a->b"]
    parsed = parse_flow_spec(flow_spec_for(topology, flow, "/ckpt"))
    assert (parsed.option("max_bytes_per_second"), parsed.option("max_records_per_second")) == (20_000_000, 5000)


# --- metrics and the progress line -------------------------------------------------------------


def _batch(throttled_ms: int) -> BatchProgress:
    part = PartitionProgress("orders", 0, "west.orders", 0, 100, 100, 2_000_000, None)
    return BatchProgress(4, (part,), 2000, throttled_ms=throttled_ms)


def test_metrics_export_the_limits_and_count_throttled_seconds() -> None:
    from kmirror_engine.observability.metrics import FlowMetrics

    metrics = FlowMetrics("west->east")
    metrics.set_rate_limits(1_000_000, None)
    text = metrics.text()
    assert 'kmirror_rate_limit{flow="west->east",unit="bytes_per_second"} 1e+06' in text
    assert 'unit="records_per_second"' not in text
    assert 'kmirror_throttled_seconds_total{flow="west->east"} 0.0' in text
    record = metrics.observe_batch(_batch(3500), now_ms=0)
    metrics.observe_batch(_batch(500), now_ms=0)
    assert record["throttled_s"] == 3.5
    assert 'kmirror_throttled_seconds_total{flow="west->east"} 4.0' in metrics.text()


def test_the_progress_line_of_a_limited_flow_shows_its_rate_limit_and_throttling() -> None:
    from kmirror_engine.observability.progress_log import progress_record

    limited = spec(max_bytes_per_second=1_000_000)
    record = progress_record(limited.id, limited.copy, _batch(1500), None)
    assert (record["bytes_per_s"], record["max_bytes_per_second"], record["throttled_s"]) == (1_000_000, 1_000_000, 1.5)
    assert "throttled_s" not in progress_record(spec().id, spec().copy, _batch(0), None)


def test_the_commit_sums_the_tasks_throttled_time() -> None:
    from spark_app.sink import MirrorCommitMessage, aggregate

    part = PartitionProgress("orders", 0, "west.orders", 0, 10, 10, 100, None)
    messages = [
        MirrorCommitMessage(0, (part,), 1000, 3000, 1200),
        MirrorCommitMessage(1, (), 1000, 2000, 800),
        MirrorCommitMessage(2, (), None, 0),
    ]
    batch, _, _ = aggregate(messages, 5)  # type: ignore[arg-type]
    assert batch.throttled_ms == 2000


def test_a_task_adds_each_loops_waits_to_its_tally(monkeypatch: pytest.MonkeyPatch) -> None:
    """copy_task_ranges builds one pacer per copy loop and reports what they waited."""
    import kmirror_engine.copying.task_copy as sink
    from kmirror_engine.copying.rate_limit import Throttled

    seen: list[Any] = []

    class Copier:
        def __init__(self, *args: Any, pacer: Any = None, **kwargs: Any) -> None:
            seen.append(pacer)
            self.pacer = pacer

        def copy(self, group: list[CopyRange]) -> list[Any]:
            self.pacer.throttled_s = 1.25
            return [None] * len(group)

    clients = SimpleNamespace(consumer=None, producer=None)
    lease = SimpleNamespace(__enter__=lambda *_: clients, __exit__=lambda *_: None)
    monkeypatch.setattr(sink, "RangeCopier", Copier)
    monkeypatch.setattr(sink, "target_limits", lambda target, topics: {})
    monkeypatch.setattr(sink.CLIENTS, "lease", lambda key, make: type("L", (), dict(vars(lease)))())
    monkeypatch.setattr("kmirror_engine.clients.factory.consumer_config", lambda *a: {}, raising=False)
    monkeypatch.setattr("kmirror_engine.clients.factory.producer_config", lambda *a: {}, raising=False)
    ranges = [CopyRange("a", 0, 0, 300, "w.a", rate_share=0.3), CopyRange("a", 1, 0, 100, "w.a", rate_share=0.1)]
    throttled = Throttled()
    sink.copy_task_ranges(spec(max_bytes_per_second=1000), ranges, 0, throttled)
    assert sorted(p.bytes.rate for p in seen) == [pytest.approx(100), pytest.approx(300)]  # two loops, 40% in all
    assert throttled.seconds == pytest.approx(2.5)


def test_a_paced_transaction_is_cut_by_time_where_the_next_one_resumes() -> None:
    """max_seconds (exactly-once with a limit): the copy stops at the consumer position once the
    time is up, so the transaction commits long before transaction.timeout.ms."""
    import time

    class SlowConsumer(FakeConsumer):
        def consume(self, n: int, timeout: float) -> list[FakeMessage]:
            time.sleep(0.01)  # (real time: the copier's time budget reads the monotonic clock)
            return super().consume(n, timeout)

    clock = FakeClock()
    source = SlowConsumer([FakeMessage("orders", 0, i, b"v") for i in range(500)])
    pacer = Pacer(records_per_s=100, clock=clock, sleep=clock.sleep)  # 10 records per consume
    copier = RangeCopier(source, LimitedBroker(10**9), pacer=pacer, max_seconds=0.1, stall_timeout_s=5)
    [progress] = copier.copy([CopyRange("orders", 0, 0, 500, "west.orders")])
    assert 10 <= progress.records < 500 and progress.next_offset == progress.records  # ~0.1 s of 0.5 s


# --- issue 26: a bytes limit is split by bytes; paced transactions stay inside their timeout ----

MB = 1_000_000


def _copy_seconds(share: float, limit: int, records: int, blob: bytes) -> float:
    """Fake seconds the real copy loop takes for `records` records of `blob` at `share` of `limit`."""
    clock = FakeClock()
    source = FakeConsumer([FakeMessage("media", 0, i, blob) for i in range(records)])  # one blob: 1 MB of memory
    pacer = Pacer(bytes_per_s=limit * share, clock=clock, sleep=clock.sleep)
    start = clock.now
    [progress] = RangeCopier(source, LimitedBroker(10**9), pacer=pacer, stall_timeout_s=5).copy(
        [CopyRange("media", 0, 0, records, "w.media")]
    )
    assert progress.records == records
    return clock.now - start


def test_a_partition_of_large_records_gets_its_byte_share_so_1_gb_takes_about_100_s() -> None:
    """1 GB of 1 MB records next to 1M records of 10 B under 10 MB/s: split by offsets, the large
    partition got 1000/1,001,000 of the limit (27.8 h, the issue's figure); by bytes, ~101 s."""
    limit = 10 * MB
    big, small = OffsetRange("media", 0, 0, 1000, "w.media"), OffsetRange("clicks", 0, 0, 1_000_000, "w.clicks")
    tasks = [[big], [small]]
    [[old_share], _] = range_shares([[r.size for r in task] for task in tasks])
    [[new_share], [small_share]] = split_rate_limits(tasks, {("media", 0): 1e6 + 1, ("clicks", 0): 10.0})
    assert new_share + small_share == pytest.approx(1.0)

    seconds = _copy_seconds(new_share, limit, 1000, b"x" * (MB - 1))  # + the fake's 1-byte key
    assert seconds == pytest.approx((1e9 + 1e7) / limit, rel=0.02)  # ~101 s: the batch's bytes over the limit
    assert 1_000_000 * 10 / (limit * small_share) == pytest.approx(seconds, rel=0.02)  # both loops end together

    old = Pacer(bytes_per_s=limit * old_share, clock=(clock := FakeClock()), sleep=clock.sleep)
    for _ in range(1000):
        clock.now += old.charge(1, MB)
    assert clock.now - 1000.0 > 27.5 * 3600  # the old split: 27.8 h for the same gigabyte


def test_shares_fall_back_to_offsets_and_a_records_limit_keeps_half_its_share() -> None:
    a, b, c = OffsetRange("t", 0, 0, 100, "w.t"), OffsetRange("t", 1, 0, 300, "w.t"), OffsetRange("u", 0, 0, 600, "w.u")
    assert split_rate_limits([[a, b], [c]], {}) == range_shares([[100, 300], [600]])  # no figures: offsets
    # u[0] not sampled: counted at the mean of the others (10 B per offset)
    assert split_rate_limits([[a, b], [c]], {("t", 0): 19.0, ("t", 1): 1.0}) == [
        [pytest.approx(1900 / 8200), pytest.approx(300 / 8200)],
        [pytest.approx(6000 / 8200)],
    ]
    both = split_rate_limits([[a], [c]], {("t", 0): 1000.0, ("u", 0): 1.0}, records_limited=True)
    offsets, by_bytes = [[100 / 700], [600 / 700]], [[100_000 / 100_600], [600 / 100_600]]
    assert sum(s for task in both for s in task) == pytest.approx(1.0)
    for shares, o, b_ in zip(both, offsets, by_bytes, strict=True):
        assert shares[0] >= max(o[0], b_[0]) / 2  # at least half of each limit's own share


class SamplingConsumer:
    """A source for RecordSizes: records per partition, an EOF event at each partition's end."""

    def __init__(self, records: dict[tuple[str, int], list[tuple[int, bytes]]]) -> None:
        self.records, self.assigned, self.paused, self.closed = records, [], [], False  # type: ignore[var-annotated]

    def assign(self, partitions: list[Any]) -> None:
        self.assigned = [(p.topic, p.partition, p.offset) for p in partitions]

    def consume(self, n: int, timeout: float) -> list[Any]:
        out: list[Any] = []
        for t, p, start in self.assigned:
            if (t, p) in self.paused:
                continue
            out += [FakeMessage(t, p, o, v, key=None) for o, v in self.records[(t, p)] if o >= start]
            eof = SimpleNamespace(error=lambda: "EOF", topic=lambda t=t: t, partition=lambda p=p: p)
            out.append(eof)
        return out

    def pause(self, partitions: list[Any]) -> None:
        self.paused += [(tp.topic, tp.partition) for tp in partitions]

    def close(self) -> None:
        self.closed = True


def test_record_sizes_are_sampled_from_each_ranges_start_and_kept_a_while() -> None:
    data = {
        ("media", 0): [(o, b"x" * 1000) for o in range(10, 30)],
        ("clicks", 0): [(5, b"ab"), (7, b"abcd")],  # a hole (markers): 6 B over offsets 5..7
        ("empty", 0): [],
    }
    made: list[SamplingConsumer] = []
    clock = FakeClock()

    def make() -> SamplingConsumer:
        made.append(SamplingConsumer(data))
        return made[-1]

    sizes = RecordSizes(make, clock=clock)
    ranges = [
        OffsetRange("media", 0, 10, 1000, "w.media"),
        OffsetRange("clicks", 0, 5, 8, "w.clicks"),
        OffsetRange("empty", 0, 0, 4, "w.empty"),
    ]
    assert sizes.bytes_per_offset(ranges) == {("media", 0): 1000.0, ("clicks", 0): 2.0}
    assert made[0].closed and made[0].assigned[0] == ("media", 0, 10)
    clock.now += SIZE_SAMPLE_TTL_S - 1
    sizes.bytes_per_offset(ranges[:2])
    assert len(made) == 1  # fresh figures: no new sample
    clock.now += 2
    sizes.bytes_per_offset(ranges[:1])
    assert len(made) == 2 and [a[:2] for a in made[1].assigned] == [("media", 0)]
    assert RecordSizes(None).bytes_per_offset(ranges) == {}  # fake clients: never sampled


def test_a_byte_limited_planner_splits_by_sampled_bytes() -> None:
    source = FakeAdmin({"orders": [(0, 1000), (0, 10)], "new": [(0, 0)]})
    p = planner(source, max_bytes_per_second=1_000_000)
    data = {("orders", 0): [(o, b"v") for o in range(5)], ("orders", 1): [(o, b"v" * 1000) for o in range(5)]}
    p.record_sizes = RecordSizes(lambda: SamplingConsumer(data))
    tasks = p.plan({("orders", 0): 0, ("orders", 1): 0}, {("orders", 0): 1000, ("orders", 1): 10})
    shares = {
        r.partition: s
        for task, ts in zip(tasks, p.rate_shares(tasks), strict=True)
        for r, s in zip(task, ts, strict=True)
    }
    assert shares == {0: pytest.approx(0.0909, abs=1e-3), 1: pytest.approx(0.9091, abs=1e-3)}  # was 0.99 / 0.01
    unlimited = planner(source)
    assert unlimited.record_sizes.make_consumer is None
    assert [s for ts in unlimited.rate_shares(tasks) for s in ts] == [
        pytest.approx(1000 / 1010),
        pytest.approx(10 / 1010),
    ]


class TransactionalBroker(LimitedBroker):
    """A transactional producer on a fake clock: when each transaction began and committed."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(10**9)
        self.clock, self.transactions = clock, []  # type: ignore[var-annotated]
        self.open_at: float | None = None

    def init_transactions(self, timeout: float) -> None: ...

    def begin_transaction(self) -> None:
        self.open_at = self.clock.now

    def send_offsets_to_transaction(self, offsets: Any, metadata: Any, timeout: float) -> None:
        self.offsets = offsets

    def commit_transaction(self, timeout: float) -> None:
        self.flush()
        self.transactions.append((self.open_at, self.clock.now))
        self.open_at = None

    def abort_transaction(self, timeout: float) -> None:
        self.open_at = None


class OffsetsGroup:
    def committed(self, tps: list[Any], timeout: float) -> list[Any]:
        return [
            SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=-1, error=None, metadata=None) for tp in tps
        ]

    def consumer_group_metadata(self) -> str:
        return "group-metadata"


@pytest.mark.parametrize(("record_bytes", "bytes_per_s"), [(MB, 10_000), (1000, 2_000)])
def test_no_pacing_wait_inside_an_open_transaction_outlasts_its_budget(record_bytes: int, bytes_per_s: int) -> None:
    """Exactly-once under a small share: one record of 1 MB at 10 kB/s owes 100 s, the probe's
    first 10 records 1000 s, once far past transaction.timeout.ms (every retry aborted). Now a wait
    that would outlast the transaction's budget cuts it; the debt is paid between transactions."""
    from kmirror_engine.copying.task_copy import PACED_TRANSACTION_S

    assert PACED_TRANSACTION_S <= TRANSACTION_TIMEOUT_S / 2
    clock = FakeClock()
    target = TransactionalBroker(clock)
    inside: list[float] = []  # every sleep taken while a transaction was open
    clock_sleep = clock.sleep

    def sleep(seconds: float) -> None:
        if target.open_at is not None:
            inside.append(clock.now + seconds - target.open_at)
        clock_sleep(seconds)

    blob, count = b"x" * (record_bytes - 1), 60
    source = FakeConsumer([FakeMessage("media", 0, i, blob) for i in range(count)])
    pacer = Pacer(bytes_per_s=bytes_per_s, clock=clock, sleep=sleep)
    copier = TransactionalCopier(
        source, target, OffsetsGroup(), pacer=pacer, max_seconds=PACED_TRANSACTION_S, stall_timeout_s=5
    )
    start = clock.now
    [progress] = copier.copy([CopyRange("media", 0, 0, count, "w.media")])

    assert progress.records == count and [v for _, v, _ in target.log] == [blob] * count  # all, in order
    assert max(end - begin for begin, end in target.transactions) <= PACED_TRANSACTION_S + 1e-6
    assert not inside or max(inside) <= PACED_TRANSACTION_S + 1e-6
    assert len(target.transactions) > 1 and target.offsets[0].offset == count
    assert clock.now - start == pytest.approx(count * record_bytes / bytes_per_s, rel=0.05)  # still at the limit
    assert pacer.throttled_s == pytest.approx(clock.now - start, rel=0.05)
