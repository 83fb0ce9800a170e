"""Failback with injected fakes: the inverse translation never skips a record the group had not
read on the target, and `kmirror failback` applies failover's safety rules the other way."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kmirror_cli.cli import main
from kmirror_engine.failover import failback
from kmirror_engine.failover.failback import Homecoming, homecomings, translate_back
from kmirror_engine.failover.offset_syncs import SyncStore
from tests.test_failover_target_only import TargetAdmin, spec


def shifted_store() -> SyncStore:
    """orders[0]: upstream 0..9 mirrored to 3..12 (three foreign records first), one continuous range."""
    store = SyncStore()
    store.add_segment("orders", 0, 0, 10, [(0, 3), (9, 12)])
    return store


def test_translate_back_inverts_the_shift_exactly() -> None:
    store = shifted_store()
    assert [translate_back(store, "orders", 0, d) for d in (3, 4, 7, 12)] == [0, 1, 4, 9]
    assert translate_back(store, "orders", 0, 13) == 10  # read everything mirrored: resume after it
    assert translate_back(store, "orders", 0, 2) is None  # only foreign records read so far
    assert translate_back(store, "orders", 1, 5) is None  # never mirrored
    for d in range(3, 14):  # round trip: what failover gave, failback takes back
        u = translate_back(store, "orders", 0, d)
        assert u is not None and store.translate("orders", 0, u) == d


def test_translate_back_after_a_gap_rereads_rather_than_skips() -> None:
    store = SyncStore()
    store.add_segment("orders", 0, 0, 5, [(0, 0), (4, 4)])
    store.add_segment("orders", 0, 8, 10, [(8, 5), (9, 6)])  # 5..7 never copied (compacted away)
    assert translate_back(store, "orders", 0, 5) == 8
    assert translate_back(store, "orders", 0, 4) == 4


def test_homecomings_keep_only_this_flows_remote_topics() -> None:
    offsets = {("west.orders", 0): (7, ""), ("orders", 0): (2, ""), ("north.orders", 0): (1, "")}
    assert homecomings(spec().route, shifted_store(), offsets) == [Homecoming("west.orders", 0, "orders", 7, 4)]


class HomeAdmin(TargetAdmin):
    """Source (home) admin: also answers ListOffsets(earliest) with 0."""

    def list_offsets(self, requests: dict[Any, Any], **_: Any) -> dict[Any, Any]:
        from tests.kafka_fakes import done

        return {tp: done(type("Info", (), {"offset": 0})()) for tp in requests}


@pytest.fixture
def after_outage(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> dict[str, Any]:
    import kmirror_engine.clients.factory

    admins = {"west": HomeAdmin(), "east": TargetAdmin()}
    moves = [Homecoming("west.orders", 0, "orders", 7, 4), Homecoming("west.orders", 1, "orders", 2, None)]
    monkeypatch.setattr(kmirror_engine.clients.factory, "admin_client", lambda endpoint: admins[endpoint.alias])
    monkeypatch.setattr(failback, "plan_failback", lambda s, g: moves if g == "app-1" else [])
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(spec().to_dict()))
    return {"flow": str(flow), "home": admins["west"], "away": admins["east"]}


def test_failback_refuses_a_group_still_consuming_on_the_target(after_outage: dict[str, Any], capsys: Any) -> None:
    after_outage["away"].members = 1
    assert main(["failback", "--flow", after_outage["flow"], "--group", "app-1"]) == 1
    assert capsys.readouterr().err == (
        "kmirror failback: group 'app-1' is STABLE on east with active members (c0@/10.0.0.2); "
        "stop its consumers before failing back\n"
    )
    assert after_outage["home"].altered == []


def test_failback_refuses_untranslated_partitions_unless_allow_partial(
    after_outage: dict[str, Any], capsys: Any
) -> None:
    flow = after_outage["flow"]
    assert main(["failback", "--flow", flow, "--group", "app-1"]) == 1
    assert capsys.readouterr().err == (
        "kmirror failback: group 'app-1': 1 of 2 partition(s) have no offset on west (west.orders[1]@2: the group "
        "read no mirrored record of them on east); pass --allow-partial to start them at west's earliest offset "
        "(re-read, not skip)\n"
    )
    assert main(["failback", "--flow", flow, "--group", "app-1", "--allow-partial", "--dry-run"]) == 0
    assert capsys.readouterr().out == (
        "partial: west.orders[1]@2 has no translated offset; orders[1] starts at west's earliest offset 0 (re-read)\n"
        "dry run: would move group 'app-1' home to west:\n"
        "  west.orders[0]@7 -> orders[0] 4\n  west.orders[1]@2 -> orders[1] 0\n"
    )
    assert after_outage["home"].altered == []
    assert main(["failback", "--flow", flow, "--group", "app-1", "--allow-partial"]) == 0
    assert after_outage["home"].altered == [{("orders", 0): 4, ("orders", 1): 0}]
    assert capsys.readouterr().out.endswith(
        "moved group 'app-1' home to west: 2 partition(s) written, 0 kept\n"
        "  wrote orders[0] = 4\n  wrote orders[1] = 0\n"
    )


def test_failback_refuses_a_group_active_at_home(after_outage: dict[str, Any], capsys: Any) -> None:
    after_outage["home"].members = 2
    assert main(["failback", "--flow", after_outage["flow"], "--group", "app-1", "--allow-partial"]) == 1
    assert "group 'app-1' on west is STABLE with active members" in capsys.readouterr().err
    assert after_outage["home"].altered == []
    assert main(["failback", "--flow", after_outage["flow"], "--group", "nobody"]) == 1
    assert capsys.readouterr().err.startswith("kmirror failback: nothing to fail back: group 'nobody' has no")


# Reverse checkpoints (issue 24 item 3): the reverse flow east->west (`reverse_of: west`) checkpoints
# groups committed on east's `west.orders` as `orders` on west, through the forward syncs inverted.


def reverse_spec(**options: Any) -> Any:
    from kmirror.flow.spec import parse_flow_spec

    return parse_flow_spec(
        {
            "id": "east->west",
            "checkpoint_location": "/tmp/x",
            "topics": [".*"],
            "topics_exclude": ["west\\..*"],
            "source": {"alias": "east", "bootstrap_servers": "e:9092"},
            "target": {"alias": "west", "bootstrap_servers": "w:9092"},
            "replication_policy": {"type": "default"},
            "groups": ["app.*"],
            **options,
        }
    )


class GroupsOnB(TargetAdmin):
    """east's admin: groups app-1 and batch; app-1 committed on the forward flow's remote topic and
    on east's own `payments`."""

    def __init__(self, offsets: dict[tuple[str, int], int]) -> None:
        super().__init__()
        self.offsets = offsets

    def list_consumer_groups(self, **_: Any) -> Any:
        from types import SimpleNamespace

        from tests.kafka_fakes import done

        return done(SimpleNamespace(valid=[SimpleNamespace(group_id=g) for g in ("app-1", "batch")]))

    def list_consumer_group_offsets(self, requests: list[Any], **_: Any) -> dict[str, Any]:
        from types import SimpleNamespace

        from confluent_kafka import TopicPartition

        from tests.kafka_fakes import done

        tps = [TopicPartition(t, p, o, metadata="m") for (t, p), o in self.offsets.items()]
        return {r.group_id: done(SimpleNamespace(topic_partitions=tps)) for r in requests}


def test_a_reverse_flow_checkpoints_the_forward_remote_topics_home_through_the_inverse_syncs() -> None:
    from kmirror.mm2.formats import Checkpoint
    from tests.sync_log_fakes import emitter_of
    from tests.test_failover_unit import FakeProducer

    admin = GroupsOnB({("west.orders", 0): 7, ("payments", 0): 1})
    own_syncs = SyncStore()  # the reverse flow's own history: east's `payments` never mirrored yet
    emitter = emitter_of(reverse_spec(reverse_of="west"), own_syncs, admin, FakeProducer(), home_syncs=shifted_store())
    assert emitter.emit()[0] == [Checkpoint("app-1", "orders", 0, 7, 4, "m")]  # = translate_back(.., 7)
    assert emitter.emit()[0] == []  # not again until the group moves
    admin.offsets[("west.orders", 0)] = 13  # read everything mirrored: resume after it at home
    assert emitter.emit()[0] == [Checkpoint("app-1", "orders", 0, 13, 10, "m")]
    # the same flow without reverse_of (a plain east->west): no upstream-topic checkpoints
    plain = emitter_of(reverse_spec(), own_syncs, admin, FakeProducer(), home_syncs=shifted_store())
    assert plain.emit()[0] == []


def test_a_second_reverse_writer_checkpoints_only_up_to_the_newest_forward_sync_it_read() -> None:
    from kmirror.mm2.formats import Checkpoint
    from tests.sync_log_fakes import emitter_of
    from tests.test_failover_unit import FakeProducer

    admin = GroupsOnB({("west.orders", 0): 13})  # past the newest forward sync (9 -> 12)
    second = emitter_of(
        reverse_spec(reverse_of="west"),
        SyncStore(),
        admin,
        FakeProducer(),
        within_known_history=True,
        home_syncs=shifted_store(),
    )
    assert second.emit()[0] == []  # a reader with newer forward syncs may translate it higher
    admin.offsets[("west.orders", 0)] = 12
    assert second.emit()[0] == [Checkpoint("app-1", "orders", 0, 12, 9, "m")]


class ForwardSyncLog:
    """The forward flow's sync log on east, as a fake: `load` fills the store; may fail."""

    def __init__(self, error: Exception | None = None) -> None:
        self.error, self.loads, self.catch_ups = error, 0, 0

    def load(self, store: SyncStore, timeout_s: float = 60.0) -> int:
        if self.error is not None:
            raise self.error
        self.loads += 1
        store.add_segment("orders", 0, 0, 10, [(0, 3), (9, 12)])
        return 2

    def catch_up(self, store: SyncStore, timeout_s: float = 60.0) -> int:
        self.catch_ups += 1
        return 0


def reverse_round(spec: Any, home_log: Any, admin: Any) -> tuple[Any, Any]:
    from kmirror_engine.failover.checkpoint_round import CheckpointRound
    from kmirror_engine.failover.failover_listener import FailoverClients
    from kmirror_engine.failover.failover_metrics import FailoverMetrics
    from kmirror_engine.failover.offset_sync_writer import OffsetSyncWriter
    from tests.test_failover_side_work import FakeSyncLog
    from tests.test_failover_unit import FakeProducer

    producer, metrics = FakeProducer(), FailoverMetrics(spec.id, spec.copy, spec.source)
    clients = FailoverClients(FakeSyncLog(), producer, admin, TargetAdmin(), lambda: [], lambda t, c: None)
    syncs = OffsetSyncWriter(spec.id, spec.checkpoints, clients.sync_log, metrics).load()
    return CheckpointRound.for_flow(
        spec.route, spec.checkpoints, spec.consumer_group, syncs, clients, metrics, home_log=home_log
    ), producer


def test_the_reverse_flows_checkpoint_round_loads_the_forward_syncs_from_its_source_and_writes_home(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kmirror.mm2.formats import Checkpoint, decode_checkpoint
    from kmirror_engine.failover import checkpoint_round

    opened: list[tuple[str, str]] = []
    forward = ForwardSyncLog()

    def sync_log(endpoint: Any, source_alias: str) -> ForwardSyncLog:
        opened.append((endpoint.alias, source_alias))
        return forward

    monkeypatch.setattr(checkpoint_round, "SyncLog", sync_log)
    spec = reverse_spec(reverse_of="west", sync_group_offsets=False)
    round_, producer = reverse_round(spec, None, GroupsOnB({("west.orders", 0): 7}))
    assert opened == [("east", "west")]  # mm2-offset-syncs.west.internal on east: the forward flow's
    assert round_.run() == 1
    ((topic, key, value),) = producer.sent
    # on west, in the reverse flow's checkpoints topic, for `orders` (the upstream topic)
    assert topic == "east.checkpoints.internal"
    assert decode_checkpoint(key, value) == Checkpoint("app-1", "orders", 0, 7, 4, "m")
    round_.run()
    assert (forward.loads, forward.catch_ups) == (1, 1)  # loaded once, then caught up each round


def test_unreadable_forward_syncs_are_reported_and_the_round_goes_on(capsys: Any) -> None:
    from kmirror_engine.failover.offset_syncs import OffsetSyncError

    admin = GroupsOnB({("west.orders", 0): 7})
    spec = reverse_spec(reverse_of="west", sync_group_offsets=False)
    failing = ForwardSyncLog(OffsetSyncError("reading mm2-offset-syncs.west.internal on east timed out"))
    round_, producer = reverse_round(spec, failing, admin)
    assert round_.run() == 0 and producer.sent == []
    assert '"work": "reverse_checkpoints"' in capsys.readouterr().err
    failing.error = None  # readable again: the next round checkpoints the group home
    assert round_.run() == 1


def test_reverse_of_must_name_the_target_under_the_default_policy() -> None:
    from kmirror.errors import ValidationError

    with pytest.raises(ValidationError) as info:
        reverse_spec(reverse_of="north", replication_policy={"type": "identity"})
    assert [str(p) for p in info.value.problems] == [
        "reverse_of: must name this flow's target 'west' (the forward flow's source), got 'north'",
        "reverse_of: needs the default replication policy: with identity the forward flow's remote topics keep "
        "their names, so they cannot be translated back (unless provenance_headers is on: docs/active-active.md)",
    ]
    # identity with provenance headers (issue 46): the forward flow's records on the standby carry their
    # origin, so the reverse flow skips them and its checkpoints translate them home
    assert (
        reverse_spec(
            replication_policy={"type": "identity"}, provenance_headers=True, reverse_of="west"
        ).checkpoints.reverse_of
        == "west"
    )
