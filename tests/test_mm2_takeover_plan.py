"""Taking over from a stopped MirrorMaker 2 (issue 23 part 2), without Kafka: the option, MM2's
Connect offsets records, and where each partition resumes (kmirror/mm2/takeover.py). The real MM2
run is tests/mm2/test_mm2_takeover.py."""

from __future__ import annotations

from typing import Any

import pytest

from kmirror.errors import Problem, ValidationError
from kmirror.flow.spec import parse_flow_spec
from kmirror.flow.views import Mm2Takeover
from kmirror.mm2.formats import FormatError
from kmirror.mm2.takeover import (
    Mm2SourceOffset,
    TakeoverPoint,
    alias_problems,
    committed_offsets,
    decode_source_offset,
    plan_takeover,
)
from tests.planner_fakes import raw_spec

PATH = "starting_offsets.from_mm2"


def flow(**options: Any) -> Any:
    return parse_flow_spec(raw_spec("A", "B", **options))


def test_from_mm2_defaults_to_mm2_dedicated_modes_topic_names() -> None:
    takeover = flow(starting_offsets={"from_mm2": {}}).planning.from_mm2
    assert takeover == Mm2Takeover()
    assert takeover.topics("A", "B") == ("mm2-offsets.A.internal", "mm2-offset-syncs.B.internal")
    # offset-syncs.topic.location = target: MM2 names its syncs topic after the source
    on_target = Mm2Takeover(offset_syncs_cluster="target")
    assert on_target.topics("A", "B") == ("mm2-offsets.A.internal", "mm2-offset-syncs.A.internal")
    named = flow(starting_offsets={"from_mm2": {"offsets_topic": "connect-offsets", "connector": "mm2-a-b"}})
    assert named.planning.from_mm2.topics("A", "B")[0] == "connect-offsets"
    assert named.planning.from_mm2.connector == "mm2-a-b"
    assert flow().planning.from_mm2 is None and flow(starting_offsets="latest").planning.from_mm2 is None


def test_from_mm2_problems_name_the_key_the_value_and_the_fix() -> None:
    with pytest.raises(ValidationError) as caught:
        flow(starting_offsets={"from_mm2": {"offset_topic": "x", "offset_syncs_cluster": "both", "connector": ""}})
    assert [str(p) for p in caught.value.problems] == [
        f"{PATH}.connector: must be a non-empty topic or connector name, got ''",
        f"{PATH}.offset_syncs_cluster: must be one of source, target, got 'both'",
        f"{PATH}.offset_topic: unknown key (did you mean 'offsets_topic'?); allowed: connector, offset_syncs_cluster, "
        "offset_syncs_topic, offsets_topic; see docs/migrate-from-mm2.md",
    ]
    with pytest.raises(ValidationError) as caught:
        flow(starting_offsets={"from_mm2": "mm2-offsets.A.internal"})
    assert "starting_offsets: must be 'earliest', 'latest', {timestamp_ms: <epoch ms>} or {from_mm2: {...}}" in str(
        caught.value
    )


def test_connect_offsets_records_of_mm2s_source_connector_decode() -> None:
    key = b'["MirrorSourceConnector",{"cluster":"A","partition":1,"topic":"orders"}]'
    assert decode_source_offset(key, b'{"offset":299}') == Mm2SourceOffset(
        "MirrorSourceConnector", "A", "orders", 1, 299
    )
    assert decode_source_offset(key, None) == Mm2SourceOffset("MirrorSourceConnector", "A", "orders", 1, None)
    # MM2's checkpoint connector shares the topic with another partition key; other writers' bytes
    checkpoint = b'["MirrorCheckpointConnector",{"group":"g","partition":0,"topic":"A.orders"}]'
    assert decode_source_offset(checkpoint, b'{"offset":1}') is None
    assert decode_source_offset(b"not json", b"x") is None
    with pytest.raises(FormatError, match=r'expected \{"offset": <integer>\}'):
        decode_source_offset(key, b'{"offset":"299"}')
    with pytest.raises(FormatError, match="partition an integer"):
        decode_source_offset(b'["MirrorSourceConnector",{"cluster":"A","partition":"1","topic":"orders"}]', b"{}")


def test_the_last_record_of_a_key_wins_and_a_tombstone_deletes_it() -> None:
    def record(partition: int, offset: int | None, cluster: str = "A", connector: str = "MirrorSourceConnector") -> Any:
        return Mm2SourceOffset(connector, cluster, "orders", partition, offset)

    records = [
        record(0, 10),
        record(1, 20),
        record(0, 15),
        record(1, None),
        record(2, 5, cluster="X"),
        record(3, 7, connector="other"),
    ]
    assert committed_offsets(records, "MirrorSourceConnector", "A") == {("orders", 0): 15}
    assert alias_problems(records, "MirrorSourceConnector", "A", PATH) == []
    expected = (
        "MM2's committed offsets name source cluster(s) 'X', not the flow's source alias 'A': MM2's remote "
        "topics carry its alias, so name the flow's source cluster as MM2 did for the same remote topics to "
        "continue"
    )
    assert alias_problems(records[4:5], "MirrorSourceConnector", "A", PATH) == [Problem(PATH, expected)]


def plan(committed: dict, synced: dict, bounds: dict, remote_ends: dict) -> Any:
    return plan_takeover(bounds, committed, synced, bounds, remote_ends, lambda t: f"A.{t}", PATH)


def test_each_partition_resumes_after_mm2s_committed_offset_else_its_newest_offset_sync() -> None:
    bounds = {("orders", 0): (0, 500), ("orders", 1): (0, 500), ("orders", 2): (40, 60)}
    result = plan(
        {("orders", 0): 249}, {("orders", 0): 299, ("orders", 1): 289}, bounds, {("orders", 0): 300, ("orders", 1): 300}
    )
    assert result.problems == ()
    # partition 2: MM2 never copied it (its remote partition is empty): its log start, nothing twice
    assert result.resume == {("orders", 0): 250, ("orders", 1): 290, ("orders", 2): 40}
    assert result.points == (
        TakeoverPoint("orders", 0, 250, 300, "committed offsets"),  # the committed offset wins over a sync
        TakeoverPoint("orders", 1, 290, 300, "offset syncs"),
    )


def test_partitions_that_cannot_resume_safely_are_refused_never_copied_from_the_start() -> None:
    bounds = {("orders", 0): (0, 500), ("orders", 1): (0, 500), ("orders", 2): (0, 100)}
    result = plan({("orders", 1): 299, ("orders", 2): 299}, {}, bounds, {("orders", 0): 300, ("orders", 2): 300})
    assert result.resume == {} and result.points == ()
    assert [str(p) for p in result.problems] == [
        f"{PATH}: orders[0]: remote partition A.orders[0] holds records (end offset 300) but neither MM2's committed "
        "offsets nor its offset syncs name a source offset for it; resuming from the start would copy them again. "
        "Check offsets_topic and offset_syncs_topic, or choose another starting_offsets knowingly",
        f"{PATH}: orders[1]: MM2's committed offsets say it copied up to offset 299, but remote partition "
        "A.orders[1] holds no record: the flow's replication_policy must name remote topics as MM2 did (MM2's "
        "default: '<source alias>.<topic>')",
        f"{PATH}: orders[2]: MM2's committed offsets say it copied up to offset 299, past the partition's end offset "
        "100: the source topic was recreated since MM2 ran; choose another starting_offsets knowingly",
    ]


def test_a_partition_mm2_copied_to_its_end_resumes_at_the_end() -> None:
    bounds = {("orders", 0): (0, 300)}
    result = plan({("orders", 0): 299}, {}, bounds, {("orders", 0): 300})
    assert result.problems == () and result.resume == {("orders", 0): 300}


def takeover_planner(
    monkeypatch: pytest.MonkeyPatch, committed: list[Mm2SourceOffset], synced: dict, target_logs: dict, written: list
) -> Any:
    """A RangePlanner over fake clusters (tests/planner_fakes.py's FakeAdmin) whose MM2 topics
    hold `committed` and `synced`; `written` collects what `on_takeover` is given."""
    from kmirror_engine.planning import mm2_takeover
    from kmirror_engine.planning.range_planner import RangePlanner
    from tests.planner_fakes import FakeAdmin

    monkeypatch.setattr(mm2_takeover, "mm2_committed", lambda endpoint, topic: committed)
    monkeypatch.setattr(mm2_takeover, "mm2_synced", lambda endpoint, topic: synced)
    monkeypatch.setattr(mm2_takeover, "report_takeover", lambda flow_id, plan: None)
    source, target = FakeAdmin({"orders": [(0, 500), (0, 500)]}), FakeAdmin(target_logs)
    spec = flow(starting_offsets={"from_mm2": {}})
    return RangePlanner(
        spec.route,
        spec.planning,
        spec.topic_sync,
        spec.copy,
        spec.consumer_group,
        once=True,
        task_count=1,
        source_admin=source,
        target_admin=target,
        on_takeover=lambda points: written.append((spec.id, list(points))),
    )


def test_the_planner_starts_at_the_takeover_and_hands_its_points_to_the_sync_writer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    written: list = []
    committed = [Mm2SourceOffset("MirrorSourceConnector", "A", "orders", 0, 299)]
    p = takeover_planner(monkeypatch, committed, {("orders", 1): 279}, {"A.orders": [(0, 300), (0, 280)]}, written)
    assert p.initial_offsets() == {("orders", 0): 300, ("orders", 1): 280}
    assert written == [
        (
            "A->B",
            [
                TakeoverPoint("orders", 0, 300, 300, "committed offsets"),
                TakeoverPoint("orders", 1, 280, 280, "offset syncs"),
            ],
        )
    ]


def test_the_planner_refuses_before_creating_a_remote_topic_or_writing_a_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    written: list = []
    committed = [Mm2SourceOffset("MirrorSourceConnector", "A", "orders", 0, 299)]
    p = takeover_planner(monkeypatch, committed, {}, {}, written)  # MM2 named its remote topics otherwise
    with pytest.raises(ValidationError) as caught:
        p.initial_offsets()
    assert [p.path for p in caught.value.problems] == [PATH]  # partition 1: MM2 never copied it, no problem
    assert (
        "orders[0]: MM2's committed offsets say it copied up to offset 299, but remote partition A.orders[0] "
        "holds no record" in str(caught.value)
    )
    assert written == [] and p.target_topics.target_admin.logs == {}
