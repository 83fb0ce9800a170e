"""Active/passive with the identity policy, there and back, on real brokers and a local Spark
(issue 46): `a->b` mirrors `orders` under its own name; the group fails over to b (`kmirror
translate` and `failover --topology FILE --flow a->b`: translated and committed on b);
producers then write b's `orders`; the planned reverse flow (`reverse_flow: true` on the
identity pair, with `provenance_headers`) carries only b's records home; the group fails back
(`kmirror failback`). Nothing is lost or duplicated on either cluster, and the group's position
at home is where it was on b.

On today's main the topology is refused (`reverse_flow` needs the default policy), and without
provenance filtering the reverse flow would copy a's records back into a."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmirror.estate.planner import flow_spec_for, parse_topology, plan_topology
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror_cli.cli import main
from kmirror_engine.clients.factory import admin_client
from kmirror_engine.failover.group_sync import committed_offsets
from spark_app.main import run_flow
from tests.brokers import real_kafka
from tests.e2e.test_failover_e2e import commit
from tests.kafka_helpers import consume_all, create_topic, dr_topology, produce

pytestmark = [pytest.mark.e2e, pytest.mark.spark40]
ON_A = 100  # records produced on a before the outage
GROUP_AT = 40  # the group's position on a when a goes down
READ_ON_B = 70  # the group's position on b after the outage: a's last 60 records and 10 of b's
ON_B = 30  # records producers write to b during the outage


def topology_of(clusters: Any, a: str, b: str, unique: str) -> dict[str, Any]:
    # sync_group_offsets off (the active-passive default is on), so the failover and failback commands do the moves
    policy = {"replication_policy": {"type": "identity"}, "provenance_headers": True, "sync_group_offsets": False}
    topics, groups = [f"orders-{unique}"], [f"app-{unique}"]
    return dr_topology(clusters, a, b, topics, groups, defaults={"emit_heartbeats": False}, reverse_flow=True, **policy)


def planned(raw: dict[str, Any], a: str, b: str, root: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    topology = parse_topology(raw)
    plan = plan_topology(topology)
    return (
        flow_spec_for(topology, plan.flow(f"{a}->{b}"), str(root)),
        flow_spec_for(topology, plan.flow(f"{b}->{a}"), str(root)),
    )


def values(bootstrap: str, topic: str) -> list[str]:
    return [m.value().decode() for m in consume_all(bootstrap, topic, 1)[0]]


@real_kafka
def test_identity_failover_then_failback_through_the_reverse_flow_loses_and_duplicates_nothing(
    clusters: Any, spark: Any, unique: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = f"a{unique}", f"b{unique}"
    orders, group = f"orders-{unique}", f"app-{unique}"
    raw = topology_of(clusters, a, b, unique)
    topology_file = tmp_path / "topology.yaml"  # the operator commands read only this (issue 46)
    topology_file.write_text(yaml.safe_dump(raw))
    flow = ["--topology", str(topology_file), "--flow", f"{a}->{b}"]
    raw_forward, raw_reverse = planned(raw, a, b, tmp_path)
    forward: FlowSpec = parse_flow_spec(raw_forward)
    reverse: FlowSpec = parse_flow_spec(raw_reverse)
    assert reverse.checkpoints.reverse_of == a

    create_topic(clusters.source, orders)
    produce(clusters.source, orders, [{"value": f"a-{i}".encode(), "partition": 0} for i in range(ON_A)])
    commit(clusters.source, group, orders, GROUP_AT)
    run_flow(forward, spark=spark, once=True)
    assert values(clusters.target, orders) == [f"a-{i}" for i in range(ON_A)]

    # a is gone: the group moves to b at the translated offset (commands from the topology alone)
    capsys.readouterr()
    assert main(["translate", *flow, "--group", group, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"topic": orders, "partition": 0, "upstream_offset": GROUP_AT, "downstream_offset": GROUP_AT}
    ]
    assert main(["failover", *flow, "--group", group]) == 0
    assert capsys.readouterr().out == (
        f"moved group {group!r} to {b}: 1 partition(s) written, 0 kept\n  wrote {orders}[0] = {GROUP_AT}\n"
    )
    assert committed_offsets(admin_client(forward.target), group, b) == {(orders, 0): (GROUP_AT, "")}
    # the outage: producers write b's orders, the group reads on to READ_ON_B
    produce(clusters.target, orders, [{"value": f"b-{i}".encode(), "partition": 0} for i in range(ON_B)])
    commit(clusters.target, group, orders, READ_ON_B)

    # a is back: the reverse flow carries b's records home (and only those)
    run_flow(reverse, spark=spark, once=True)
    run_flow(reverse, spark=spark, once=True)  # a second round copies nothing more
    home = values(clusters.source, orders)
    assert Counter(home) == Counter([f"a-{i}" for i in range(ON_A)] + [f"b-{i}" for i in range(ON_B)])
    assert home == [f"a-{i}" for i in range(ON_A)] + [f"b-{i}" for i in range(ON_B)]
    # and a's next forward round does not send b's records back to b
    run_flow(forward, spark=spark, once=True)
    assert values(clusters.target, orders) == [f"a-{i}" for i in range(ON_A)] + [f"b-{i}" for i in range(ON_B)]

    # fail back: the group resumes at home where it stood on b (a-70, the first record it had not read)
    capsys.readouterr()
    assert main(["failback", *flow, "--group", group, "--dry-run"]) == 0
    assert capsys.readouterr().out == (
        f"dry run: would move group {group!r} home to {a}:\n  {orders}[0]@{READ_ON_B} -> {orders}[0] {READ_ON_B}\n"
    )
    assert main(["failback", *flow, "--group", group]) == 0
    assert capsys.readouterr().out == (
        f"moved group {group!r} home to {a}: 1 partition(s) written, 0 kept\n  wrote {orders}[0] = {READ_ON_B}\n"
    )
    assert committed_offsets(admin_client(forward.source), group, a) == {(orders, 0): (READ_ON_B, "")}
