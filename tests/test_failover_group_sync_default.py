"""Active/passive topologies keep the groups' offsets synced on the standby by default (so
consumers started there without the CLI resume correctly); switchable at every level."""

from __future__ import annotations

from typing import Any

import pytest

from kmirror.estate.planner import flow_spec_for, parse_topology, plan_topology
from kmirror.flow.spec import parse_flow_spec

CLUSTERS = {
    "west": {"bootstrap_servers": "w:9092", "datacenter": "west"},
    "east": {"bootstrap_servers": "e:9092", "datacenter": "east"},
}


def synced(raw_topology: dict[str, Any], **extra: Any) -> dict[str, bool]:
    raw = {"clusters": CLUSTERS, "topologies": [raw_topology], **extra}
    topology = parse_topology(raw)
    specs = [parse_flow_spec(flow_spec_for(topology, f, "/ckpt")) for f in plan_topology(topology).flows]
    return {s.id: bool(s.option("sync_group_offsets")) for s in specs}


AP = {"name": "dr", "pattern": "active-passive", "primary": "west", "standby": "east"}


def test_active_passive_syncs_group_offsets_by_default() -> None:
    assert synced(AP) == {"west->east": True}


def test_other_patterns_keep_the_flow_default() -> None:
    assert synced({"name": "aa", "pattern": "active-active", "clusters": ["west", "east"]}) == {
        "east->west": False,
        "west->east": False,
    }


@pytest.mark.parametrize(
    ("topology", "extra"),
    [
        ({**AP, "sync_group_offsets": False}, {}),
        (AP, {"defaults": {"sync_group_offsets": False}}),
        (AP, {"flows": {"west->east": {"sync_group_offsets": False}}}),
    ],
    ids=["topology", "defaults", "flow-override"],
)
def test_the_default_is_switchable(topology: dict[str, Any], extra: dict[str, Any]) -> None:
    assert synced(topology, **extra) == {"west->east": False}


def test_a_flow_also_produced_by_a_custom_topology_keeps_the_default_without_a_conflict() -> None:
    custom = {"name": "extra", "pattern": "custom", "flows": ["west->east", "east->west"]}
    raw = {"clusters": CLUSTERS, "topologies": [AP, custom]}
    topology = parse_topology(raw)
    assert {f.id: f.settings.get("sync_group_offsets") for f in topology.flows.values()} == {
        "east->west": None,
        "west->east": True,
    }
