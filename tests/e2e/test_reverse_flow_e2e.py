"""Failback's reverse flow on real brokers and a local Spark (issue 24 item 3): an active-passive
topology with `reverse_flow: true` plans A->B and B->A; A->B mirrors `orders` onto a remote topic
on B that already held foreign records (so offsets shift); after a failover a group consumes
`A.orders` on B and producers write B's own `orders`. One `--once` run of the planned reverse flow
then carries B's records home as `B.orders`, never mirrors `A.orders` back, and its checkpoint
round writes to A a checkpoint for `orders` at exactly `translate_back`'s offset (what
`kmirror failback` computes), which the group offset sync applies to the idle group on A."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kmirror.estate.planner import flow_spec_for, parse_topology, plan_topology
from kmirror.flow.replication_policy import checkpoints_topic
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.mm2.formats import Checkpoint
from kmirror_engine.clients.factory import admin_client
from kmirror_engine.failover.checkpoints import read_checkpoints
from kmirror_engine.failover.failback import Homecoming, plan_failback
from kmirror_engine.failover.group_sync import committed_offsets
from spark_app.main import run_flow
from tests.brokers import real_kafka
from tests.e2e.test_failover_e2e import FOREIGN, GROUP_AT, commit
from tests.e2e.test_failover_source_gone_e2e import first_record_of_group
from tests.kafka_helpers import add_fences, consume_all, create_topic, dr_topology, produce

pytestmark = [pytest.mark.e2e, pytest.mark.spark40]
READ_ON_B = 6  # the group read v0..v5 of the remote topic on B during the outage
WRITTEN_ON_B = 5  # records producers wrote to B's own topic during the outage


def planned(clusters: Any, a: str, b: str, unique: str, root: Path) -> tuple[FlowSpec, FlowSpec]:
    """The forward and reverse flow specs the planner makes of an active-passive topology with
    `reverse_flow: true` (topics matching the remote name too, so only the loop rules keep it out)."""
    topics, groups = [f".*orders-{unique}"], [f"app-{unique}"]
    raw = dr_topology(clusters, a, b, topics, groups, defaults={"emit_heartbeats": False}, reverse_flow=True)
    topology = parse_topology(raw)
    plan = plan_topology(topology)
    forward, reverse = plan.flow(f"{a}->{b}"), plan.flow(f"{b}->{a}")
    assert (forward.run_in, reverse.run_in) == ("dc-b", "dc-a")
    return (
        parse_flow_spec(flow_spec_for(topology, forward, str(root))),
        parse_flow_spec(flow_spec_for(topology, reverse, str(root))),
    )


def topics_of(bootstrap: str) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics)


@real_kafka  # tansu fences the topics it mirrors: offsets here are for Apache Kafka
def test_the_reverse_flow_checkpoints_groups_home_and_never_mirrors_the_remote_topics_back(
    clusters: Any, spark: Any, unique: str, tmp_path: Path
) -> None:
    a, b = f"a{unique}", f"b{unique}"
    orders, group = f"orders-{unique}", f"app-{unique}"
    remote = f"{a}.{orders}"
    forward, reverse = planned(clusters, a, b, unique, tmp_path)
    assert reverse.checkpoints.reverse_of == a and forward.checkpoints.reverse_of is None

    create_topic(clusters.source, orders)
    produce(clusters.source, orders, [{"value": f"v{i}".encode(), "partition": 0} for i in range(10)])
    add_fences(clusters.source, orders, 1)
    create_topic(clusters.target, remote)  # foreign records first: the mirrored ones land shifted
    produce(clusters.target, remote, [{"value": f"unrelated-{i}".encode(), "partition": 0} for i in range(FOREIGN)])
    commit(clusters.source, group, orders, GROUP_AT)  # the group at home before the outage
    run_flow(forward, spark=spark, once=True)  # A->B: records and offset syncs (on B)

    # the outage: the group consumes A.orders on B (v0..v5 read), producers write B's own topic
    commit(clusters.target, group, remote, FOREIGN + READ_ON_B)
    create_topic(clusters.target, orders)
    produce(clusters.target, orders, [{"value": f"b{i}".encode(), "partition": 0} for i in range(WRITTEN_ON_B)])
    add_fences(clusters.target, orders, 1)

    # A is back: the planned reverse flow runs once (in A's datacenter)
    run_flow(reverse, spark=spark, once=True)

    home = plan_failback(forward.route, group)  # what `kmirror failback` would write: translate_back
    assert home == [Homecoming(remote, 0, orders, FOREIGN + READ_ON_B, READ_ON_B)]
    mine = [c for c in read_checkpoints(reverse.target, checkpoints_topic(b)) if c.group == group]
    assert mine[-1] == Checkpoint(group, orders, 0, FOREIGN + READ_ON_B, READ_ON_B, "")
    assert {c.topic for c in mine} == {orders}  # only the homecoming: B's own topic had no commit

    on_a = topics_of(clusters.source)
    assert f"{b}.{remote}" not in on_a  # the remote topic never went back
    assert [m.value() for m in consume_all(clusters.source, f"{b}.{orders}", 1)[0]] == [
        f"b{i}".encode() for i in range(WRITTEN_ON_B)
    ]
    # the reverse flow's group offset sync (active-passive default) moved the idle group home
    assert committed_offsets(admin_client(reverse.target), group, a) == {(orders, 0): (READ_ON_B, "")}
    assert first_record_of_group(clusters.source, group, orders) == f"v{READ_ON_B}".encode()
