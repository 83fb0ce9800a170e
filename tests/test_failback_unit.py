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
    assert homecomings(spec(), shifted_store(), offsets) == [Homecoming("west.orders", 0, "orders", 7, 4)]


class HomeAdmin(TargetAdmin):
    """Source (home) admin: also answers ListOffsets(earliest) with 0."""

    def list_offsets(self, requests: dict[Any, Any], **_: Any) -> dict[Any, Any]:
        from tests.test_failover_target_only import done

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
