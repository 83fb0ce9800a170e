"""Provenance headers (issue 46): what the record loop stamps and filters, which loop copies such a
flow, and which identity cycles `kmirror validate` accepts. Fast: fakes, no broker."""

from __future__ import annotations

from typing import Any

import pytest

from kmirror.errors import ValidationError
from kmirror.estate.planner import flow_spec_for, parse_topology, plan_topology
from kmirror.flow.spec import flow_spec_problems, parse_flow_spec
from kmirror_engine.copying.provenance import PROVENANCE_HEADER, Provenance, origin_of
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyRange
from tests.kafka_fakes import FakeConsumer, FakeMessage, LimitedBroker
from tests.planner_fakes import raw_spec

USER = ("app.trace", b"t-1")


def test_a_record_produced_on_the_source_gets_its_origin_appended_after_the_users_headers() -> None:
    stamp = Provenance("a", "b").stamp
    assert stamp(None) == [(PROVENANCE_HEADER, b"a")]
    assert stamp([]) == [(PROVENANCE_HEADER, b"a")]
    assert stamp([USER, ("x", None)]) == [USER, ("x", None), (PROVENANCE_HEADER, b"a")]


def test_a_mirrored_record_keeps_its_first_origin_and_never_goes_back_to_it() -> None:
    # a record from c, mirrored c->a, then copied a->b: still from c (however many hops)
    assert Provenance("a", "b").stamp([USER, (PROVENANCE_HEADER, b"c")]) == [USER, (PROVENANCE_HEADER, b"c")]
    # a record from b that a got from b: a->b must not copy it back
    assert Provenance("a", "b").stamp([USER, (PROVENANCE_HEADER, b"b")]) is None
    assert origin_of([USER, (PROVENANCE_HEADER, b"b")]) == "b" and origin_of([USER]) is None


class StampedMessage(FakeMessage):
    def __init__(self, offset: int, headers: list[tuple[str, Any]] | None) -> None:
        super().__init__("events", 0, offset, f"v{offset}".encode())
        self._h = headers

    def headers(self) -> Any:
        return self._h


def test_the_record_loop_copies_own_records_stamped_and_counts_the_ones_from_its_target() -> None:
    """a->b over a log holding a's own records and records a got from b: only a's go to b."""
    from_b, from_c = (PROVENANCE_HEADER, b"b"), (PROVENANCE_HEADER, b"c")
    log = [
        StampedMessage(0, [USER]),
        StampedMessage(1, [from_b]),
        StampedMessage(2, None),
        StampedMessage(3, [USER, from_b]),
        StampedMessage(4, [from_c]),
    ]
    broker = LimitedBroker(10_000)
    copier = RangeCopier(FakeConsumer(log), broker, stall_timeout_s=5, provenance=Provenance("a", "b"))
    (progress,) = copier.copy([CopyRange("events", 0, 0, 5, "events")])
    assert [(value, headers) for _, value, headers in broker.log] == [
        (b"v0", [USER, (PROVENANCE_HEADER, b"a")]),
        (b"v2", [(PROVENANCE_HEADER, b"a")]),
        (b"v4", [(PROVENANCE_HEADER, b"c")]),
    ]
    assert (progress.records, progress.returned_home, progress.next_offset) == (3, 2, 5)
    # offset syncs: source offsets 0, 2, 4 landed at 0, 1, 2 (what translation reads)
    assert progress.offset_syncs[0] == (0, 0) and progress.offset_syncs[-1] == (4, 2)
    # without provenance the same loop copies every record, headers as they are (today's behaviour)
    broker = LimitedBroker(10_000)
    RangeCopier(FakeConsumer(log), broker, stall_timeout_s=5).copy([CopyRange("events", 0, 0, 5, "events")])
    assert [headers for _, _, headers in broker.log] == [m.headers() for m in log]


def test_the_progress_line_and_metrics_count_records_not_copied_back() -> None:
    from kmirror_engine.observability.progress import BatchProgress, PartitionProgress
    from kmirror_engine.observability.progress_log import progress_record
    from tests.planner_fakes import spec

    partition = PartitionProgress("events", 0, "events", 0, 5, 3, 30, None, returned_home=2)
    record = progress_record(spec().id, spec().copy, BatchProgress(3, (partition,), 100), None)
    assert (record["records"], record["returned_home"]) == (3, 2)


CLUSTERS = {
    "a": {"bootstrap_servers": "a:9092", "datacenter": "dc-a"},
    "b": {"bootstrap_servers": "b:9092", "datacenter": "dc-b"},
    "c": {"bootstrap_servers": "c:9092", "datacenter": "dc-c"},
}
IDENTITY = {"type": "identity"}


def problems_of(raw: Any) -> list[str]:
    with pytest.raises(ValidationError) as info:
        parse_topology(raw, "t.yaml")
    return [str(p) for p in info.value.problems]


def test_validate_accepts_identity_active_active_only_with_provenance_headers_on_both_flows() -> None:
    pair = {"name": "aa", "pattern": "active-active", "clusters": ["a", "b"], "replication_policy": IDENTITY}
    (problem,) = problems_of({"clusters": CLUSTERS, "topologies": [pair]})
    assert problem == (
        "topologies: identity replication cycle a -> b -> a: with the identity policy a mirrored topic keeps "
        "its name, so its records would circle forever; flows 'a->b', 'b->a' copy without provenance_headers (a "
        "header naming each record's origin cluster, so that no record is copied back into it): set "
        "provenance_headers: true on them, use the default policy on one of these flows, or remove one"
    )
    on = {"clusters": CLUSTERS, "topologies": [{**pair, "provenance_headers": True}]}
    topology = parse_topology(on)
    plan = plan_topology(topology)
    assert [f.id for f in plan.flows] == ["a->b", "b->a"]
    spec = flow_spec_for(topology, plan.flow("a->b"), "/tmp/ck")
    assert spec["provenance_headers"] is True and spec["replication_policy"] == IDENTITY
    # one direction switched off: still a loop, naming only that flow
    (problem,) = problems_of({**on, "flows": {"b->a": {"provenance_headers": False}}})
    assert "flows 'b->a' copy without provenance_headers" in problem


def test_a_flow_among_the_loops_clusters_without_provenance_keeps_the_cycle_refused() -> None:
    """a<->b with provenance, plus b->c->a without: records can still come home through c."""
    raw = {
        "clusters": CLUSTERS,
        "topologies": [
            {
                "name": "aa",
                "pattern": "active-active",
                "clusters": ["a", "b"],
                "replication_policy": IDENTITY,
                "provenance_headers": True,
            },
            {"name": "ring", "pattern": "chain", "clusters": ["b", "c", "a"], "replication_policy": IDENTITY},
        ],
    }
    cycles = [p for p in problems_of(raw) if "cycle" in p]
    assert cycles and all("flows 'b->c', 'c->a' copy without provenance_headers" in p for p in cycles), cycles
    # with provenance everywhere no cycle is refused, but two identity flows still write one name
    # into a (b->a, and b's records again through c): refused as a fan-in collision, not a cycle
    raw["topologies"][1]["provenance_headers"] = True
    (problem,) = problems_of(raw)
    assert "flows 'b->a' and 'c->a' both write the same topic names into 'a'" in problem


def _spec(**options: Any) -> dict[str, Any]:
    return raw_spec("a", "b", topics=[".*"], replication_policy=IDENTITY, **options)


def test_only_the_python_record_loop_copies_a_flow_with_provenance_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    from kmirror_engine.copying.native_copy import python_only_reasons
    from kmirror_engine.copying.task_copy import AUTO_COPY_LOOP_ENV, takes_batch_path

    assert [str(p) for p in flow_spec_problems(_spec(provenance_headers=True, copy_loop="batch"))] == [
        "copy_loop: is 'batch', but provenance_headers is set and only the record loops serve it; set copy_loop "
        "to auto (it picks a record loop for such a flow) or remove provenance_headers"
    ]
    assert [str(p) for p in flow_spec_problems(_spec(provenance_headers=True, copy_loop="native"))] == [
        "copy_loop: is 'native', but provenance_headers is set and only the Python loop serves it; set copy_loop "
        "to auto (it picks the Python loop for such a flow) or remove provenance_headers"
    ]
    spec = parse_flow_spec(_spec(provenance_headers=True))
    monkeypatch.setenv(AUTO_COPY_LOOP_ENV, "batch")  # the batch sweep: auto flows take the batch path...
    assert not takes_batch_path(spec.copy)  # ...except this one
    assert takes_batch_path(parse_flow_spec(_spec()).copy)
    assert python_only_reasons(spec.copy) == ["provenance_headers is set"]  # auto never picks the native loop
