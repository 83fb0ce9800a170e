"""The typed views of a flow spec (kmirror/flow/views.py): each part reads its own settings."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path
from typing import Any

import pytest

from kmirror.flow.spec import EXACTLY_ONCE_MAX_RECORDS_PER_TRIGGER, OPTIONS, parse_flow_spec
from kmirror.flow.views import CopySettings, PlanningSettings
from tests.planner_fakes import raw_spec

ROOT = Path(__file__).resolve().parents[1]


def spec(**options: Any) -> Any:
    return parse_flow_spec(raw_spec(**options))


def test_views_carry_the_declared_defaults() -> None:
    flow = spec()
    assert flow.planning.max_records_per_trigger == OPTIONS["max_records_per_trigger"].default
    assert flow.planning.starting_offsets == "earliest"
    assert flow.planning.read_committed is True
    assert flow.copy.copy_loop == "auto" and flow.copy.transform_sql is None and not flow.copy.rate_limited
    assert (flow.checkpoints.emit, flow.checkpoints.interval_ms, flow.checkpoints.offset_lag_max) == (True, 60_000, 100)
    assert (flow.heartbeats.emit, flow.heartbeats.interval_ms) == (True, 1_000)
    assert flow.topic_sync.configs and not flow.topic_sync.acls and flow.topic_sync.any  # ACL sync: opt-in


def test_views_read_the_flows_options() -> None:
    flow = spec(
        consumer={"isolation.level": "read_uncommitted"},
        transform={"sql": "SELECT * FROM records"},
        emit_checkpoints=False,
        checkpoint_interval_ms=5_000,
        metrics_port=9400,
        emit_heartbeats=False,
        sync_topic_configs=False,
        sync_topic_acls=False,
        replication_factor=3,
    )
    assert flow.planning.read_committed is False and flow.copy.read_committed is False
    limited = spec(max_bytes_per_second=1_000_000).copy  # (a rate limit and a transform are refused together)
    assert limited.rate_limited and limited.max_bytes_per_second == 1_000_000 and not flow.copy.rate_limited
    assert flow.copy.transform_sql == "SELECT * FROM records"
    assert (flow.checkpoints.emit, flow.checkpoints.interval_ms, flow.checkpoints.metrics_port) == (False, 5_000, 9400)
    assert not flow.heartbeats.emit
    assert not flow.topic_sync.any and flow.topic_sync.replication_factor == 3


def test_exactly_once_plans_smaller_batches_unless_the_user_sets_them() -> None:
    assert spec(exactly_once=True).planning.max_records_per_trigger == EXACTLY_ONCE_MAX_RECORDS_PER_TRIGGER
    assert spec(exactly_once=True, max_records_per_trigger=7).planning.max_records_per_trigger == 7


def test_views_are_frozen_and_travel_to_executors() -> None:
    flow = spec(producer={"linger.ms": "5"})
    copy = pickle.loads(pickle.dumps(flow)).copy
    assert isinstance(copy, CopySettings) and copy.producer == {"linger.ms": "5"}
    with pytest.raises(AttributeError):
        flow.planning.max_records_per_task = 1  # type: ignore[misc]
    assert isinstance(PlanningSettings.read(flow.option), PlanningSettings)


def test_the_route_names_the_flows_clusters_topics_and_remote_names() -> None:
    flow = pickle.loads(pickle.dumps(spec(topics=["orders.*"], topics_exclude=["orders.tmp"])))
    route = flow.route
    assert (route.flow_id, route.source.alias, route.target.alias) == (flow.id, "west", "east")
    assert route.topics.matches("orders.eu") and not route.topics.matches("orders.tmp")
    assert route.groups.matches("app") and route.groups == flow.group_selection
    assert route.policy.format_remote_topic("west", "orders.eu") == "west.orders.eu"
    with pytest.raises(AttributeError):
        route.flow_id = "other"  # type: ignore[misc]


def _option_reads(path: Path) -> list[str]:
    """`<anything>.option("name")` calls with a literal name (Spark reader options excepted: those
    are `.option(...)` on a DataStreamReader/Writer, whose names are not flow-spec options)."""
    tree = ast.parse(path.read_text())
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "option"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and node.args[0].value in OPTIONS
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.args[0].value}")
    return found


def test_the_engine_and_the_app_read_settings_through_views_only() -> None:
    """Issue 29: no part of the engine or the Spark glue reads a flow option by name; a new
    setting goes into its part's view (kmirror/flow/views.py)."""
    reads = [
        r
        for pkg in ("kmirror_engine", "spark_app")
        for p in sorted((ROOT / pkg).rglob("*.py"))
        for r in _option_reads(p)
    ]
    assert reads == []
