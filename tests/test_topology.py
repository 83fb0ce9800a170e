"""The topology model: patterns, settings resolution, placement and every validation rule."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import ValidationError
from kmirror.estate.planner import flow_spec_for, load_topology, parse_topology, plan_topology
from kmirror.flow.replication_policy import policy_from_config
from kmirror.flow.spec import parse_flow_spec

CLUSTERS = {
    "west-1": {"bootstrap_servers": "b1-west:9092,b2-west:9092", "datacenter": "west"},
    "east-1": {"bootstrap_servers": "b1-east:9092", "datacenter": "east"},
    "central": {"bootstrap_servers": "central:9092", "datacenter": "central"},
    "dc-old": {"bootstrap_servers": "old:9092", "datacenter": "onprem"},
    "aws-1": {"bootstrap_servers": "aws1:9092", "datacenter": "aws"},
    "aws-2": {"bootstrap_servers": "aws2:9092", "datacenter": "aws"},
}


# west-1 -> east-1, active-passive: the topology most tests declare (their settings added)
DR = {"name": "dr", "pattern": "active-passive", "primary": "west-1", "standby": "east-1"}


def topo(*topologies: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"clusters": copy.deepcopy(CLUSTERS), "topologies": list(topologies), **extra}


def problems_of(raw: Any) -> list[str]:
    with pytest.raises(ValidationError) as info:
        parse_topology(raw, "t.yaml")
    return [str(p) for p in info.value.problems]


def flow_ids(raw: dict[str, Any]) -> list[str]:
    return [f.id for f in plan_topology(parse_topology(raw)).flows]


@pytest.mark.parametrize(
    ("decl", "expected"),
    [
        ({"pattern": "active-passive", "primary": "west-1", "standby": "east-1"}, ["west-1->east-1"]),
        (
            {"pattern": "active-active", "clusters": ["west-1", "east-1", "central"]},
            [
                "central->east-1",
                "central->west-1",
                "east-1->central",
                "east-1->west-1",
                "west-1->central",
                "west-1->east-1",
            ],
        ),
        (
            {"pattern": "hub-and-spoke", "hub": "central", "spokes": ["west-1", "east-1"]},
            ["east-1->central", "west-1->central"],
        ),
        (
            {"pattern": "hub-and-spoke", "hub": "central", "spokes": ["west-1"], "bidirectional": True},
            ["central->west-1", "west-1->central"],
        ),
        (
            {"pattern": "fan-out", "source": "central", "targets": ["west-1", "east-1"]},
            ["central->east-1", "central->west-1"],
        ),
        ({"pattern": "chain", "clusters": ["dc-old", "aws-1", "aws-2"]}, ["aws-1->aws-2", "dc-old->aws-1"]),
        (
            {"pattern": "custom", "flows": ["west-1->east-1", "east-1 -> central"]},
            ["east-1->central", "west-1->east-1"],
        ),
    ],
)
def test_patterns_expand_to_directed_flows(decl: dict[str, Any], expected: list[str]) -> None:
    assert flow_ids(topo({"name": "t", **decl})) == expected


def test_settings_resolve_defaults_then_topology_then_flow_override() -> None:
    raw = topo(
        {
            **DR,
            "topics": ["orders.*"],
            "producer": {"linger.ms": 5},
        },
        defaults={"topics_exclude": ["tmp.*"], "producer": {"compression.type": "lz4"}, "spark": {"executors": 2}},
        flows={"west-1->east-1": {"producer": {"compression.type": "zstd"}, "run_in": "west", "exactly_once": True}},
    )
    (flow,) = plan_topology(parse_topology(raw)).flows
    assert flow.topics == ("orders.*",)
    assert flow.topics_exclude == (".*[-.]internal", ".*\\.replica", "__.*", "tmp.*")  # added to MM2's excludes
    assert flow.groups_exclude == ("console-consumer-.*", "connect-.*", "__.*")  # MM2's default
    assert flow.producer == {"compression.type": "zstd", "linger.ms": 5}
    assert flow.spark == {"executors": 2}
    assert flow.run_in == "west"
    assert flow.options == {"exactly_once": True, "sync_group_offsets": True}  # active-passive's default


def test_placement_is_the_target_datacenter_and_every_datacenter_is_listed() -> None:
    plan = plan_topology(
        parse_topology(topo({"name": "p", "pattern": "fan-out", "source": "central", "targets": ["west-1", "east-1"]}))
    )
    assert plan.to_dict()["datacenters"] == {
        "aws": [],
        "central": [],
        "east": ["central->east-1"],
        "onprem": [],
        "west": ["central->west-1"],
    }
    assert [f.id for f in plan.flows_in("west")] == ["central->west-1"]


def test_a_flow_exclude_adds_to_the_defaults_unless_it_says_replace() -> None:
    raw = topo(
        {
            **DR,
            "topics_exclude": ["audit.*"],
        },
        defaults={"topics_exclude": ["tmp.*"], "groups_exclude": ["probe-.*"]},
        flows={"west-1->east-1": {"topics_exclude": ["scratch.*"]}},
    )
    (flow,) = plan_topology(parse_topology(raw)).flows
    assert flow.topics_exclude == (".*[-.]internal", ".*\\.replica", "__.*", "tmp.*", "audit.*", "scratch.*")
    assert flow.groups_exclude == ("console-consumer-.*", "connect-.*", "__.*", "probe-.*")
    raw["flows"]["west-1->east-1"] = {"topics_exclude": {"replace": "scratch.*"}}
    (flow,) = plan_topology(parse_topology(raw)).flows
    assert flow.topics_exclude == ("scratch.*",)
    raw["flows"]["west-1->east-1"] = {"topics_exclude": {"instead": ["scratch.*"]}}
    assert problems_of(raw) == [
        "flows.west-1->east-1.topics_exclude: must be a list of regular expressions (added to the default excludes) "
        "or {replace: [...]} (instead of them), got {'instead': ['scratch.*']}"
    ]


def test_mirrormaker_1_aliases_and_comma_lists() -> None:
    raw = topo(
        {
            **DR,
            "whitelist": "orders,payments.*",
            "blacklist": ["payments.tmp"],
        }
    )
    (flow,) = plan_topology(parse_topology(raw)).flows
    assert flow.topics == ("orders,payments.*",) and flow.topics_exclude[-1] == "payments.tmp"
    spec = parse_flow_spec(flow_spec_for(parse_topology(raw), flow, "/ckpt"))
    selection = spec.topic_selection
    assert [t for t in ("orders", "payments.eu", "payments.tmp", "ordersx") if selection.matches(t)] == [
        "orders",
        "payments.eu",
    ]


def test_the_same_flow_from_two_topologies_is_merged_when_identical_and_rejected_when_not() -> None:
    same = topo(
        {"name": "a", "pattern": "active-passive", "primary": "west-1", "standby": "east-1"},
        {"name": "b", "pattern": "custom", "flows": ["west-1->east-1"]},
    )
    assert flow_ids(same) == ["west-1->east-1"]
    conflicting = copy.deepcopy(same)
    conflicting["topologies"][1]["topics"] = ["x"]
    assert problems_of(conflicting) == [
        "topologies[1]: flow 'west-1->east-1' is also produced by topologies[0] (topology 'a') with different topics; "
        "make them agree or set them once under flows.west-1->east-1"
    ]


def test_every_problem_is_reported_at_once_with_its_path() -> None:
    raw = {
        "clusters": {
            "west-1": {"bootstrap_servers": "w:9092", "datacenter": "west"},
            "east-1": {"datacenter": "east", "secruity": {}},
            "central": {"bootstrap_servers": "c:9092"},
        },
        "defaults": {"replication_policy": {"type": "default", "separator": "/"}},
        "topologies": [
            {"name": "dr", "pattern": "active-passive", "primary": "west-1", "standby": "eas-1", "topcs": ["x"]},
            {"name": "dr", "pattern": "fan-out", "source": "west-1", "targets": ["west-1"], "topics": ["(bad"]},
            {"name": "x", "pattern": "star"},
        ],
        "flows": {"west-1->nowhere": {"run_in": "west"}},
        "extra": 1,
    }
    assert problems_of(raw) == [
        "clusters.central.datacenter: required datacenter name (letters, digits, '.', '_', '-'), got None",
        "clusters.east-1.bootstrap_servers: required 'host:port[,host:port...]', got None",
        "clusters.east-1.secruity: unknown key (did you mean 'security'?); "
        "allowed: bootstrap_servers, datacenter, internal_topics, production, security",
        "defaults.replication_policy.separator: bad separator '/'; use 1-8 characters of [A-Za-z0-9._-], e.g. '.'",
        "extra: unknown key; allowed: clusters, defaults, flows, topologies",
        "topologies[0].standby: unknown cluster 'eas-1' (did you mean 'east-1'?); declare it under clusters",
        "topologies[0].topcs: unknown key (did you mean 'topics'?)",
        "topologies[1].name: duplicate topology name 'dr' (also topologies[0])",
        "topologies[1].topics[0]: invalid regular expression '(bad': missing ), unterminated subpattern at position 0",
        "topologies[2].pattern: unknown pattern 'star'; use one of: active-passive, active-active, hub-and-spoke, "
        "fan-out, chain, custom",
    ]


def test_self_flow_unknown_override_and_unknown_run_in() -> None:
    assert problems_of(topo({"name": "c", "pattern": "custom", "flows": ["west-1->west-1"]})) == [
        "topologies[0]: flow 'west-1->west-1' goes from a cluster to itself; a mirror needs two clusters"
    ]
    raw = topo(
        {**DR},
        flows={"west-1->east-1": {"run_in": "easst"}, "east-1->west-1": {}},
    )
    assert problems_of(raw) == [
        "flows.east-1->west-1: no topology produces flow 'east-1->west-1' (did you mean 'west-1->east-1'?); "
        "add it to a topology (e.g. a custom one) or remove the override",
        "flows.west-1->east-1.run_in: unknown datacenter 'easst' (did you mean 'east'?); "
        "known: aws, central, east, onprem, west",
    ]


def test_identity_cycles_name_the_clusters_that_loop() -> None:
    raw = topo(
        {"name": "ring", "pattern": "chain", "clusters": ["west-1", "east-1", "central"]},
        {"name": "back", "pattern": "custom", "flows": ["central->west-1"], "replication_policy": {"type": "identity"}},
    )
    (problem,) = problems_of(raw)
    assert problem.startswith("topologies: identity replication cycle central -> west-1 -> east-1 -> central:")
    # the same ring with the default policy everywhere is stopped by name (MM2's isCycle): valid
    del raw["topologies"][1]["replication_policy"]
    assert len(flow_ids(raw)) == 3


def test_identity_fan_in_collisions_are_rejected_unless_topics_are_disjoint() -> None:
    hub = {
        "name": "hub",
        "pattern": "hub-and-spoke",
        "hub": "central",
        "spokes": ["west-1", "east-1"],
        "replication_policy": {"type": "identity"},
    }
    (problem,) = problems_of(topo(hub))
    assert problem == (
        "flows.west-1->central: flows 'east-1->central' and 'west-1->central' both write the same topic names into "
        "'central' (identity policy); use the default policy on one, or give them disjoint topics"
    )
    disjoint = topo(
        hub,
        flows={
            "west-1->central": {"topics": ["west-orders"]},
            "east-1->central": {"topics": ["east-orders", "east\\.audit"]},
        },
    )
    assert flow_ids(disjoint) == ["east-1->central", "west-1->central"]


def test_active_active_loop_with_two_separators_is_refused_naming_the_journey() -> None:
    """Before: valid. b->a cannot read a->b's `a_` prefix, so MM2's loop check never fires."""
    raw = topo(
        {"name": "aa", "pattern": "active-active", "clusters": ["west-1", "east-1"]},
        flows={"west-1->east-1": {"replication_policy": {"separator": "_"}}},
    )
    assert problems_of(raw) == [
        "flows.west-1->east-1.replication_policy.separator: flows 'east-1->west-1' (separator '.') and "
        "'west-1->east-1' (separator '_') are on the replication loop east-1 -> west-1 -> east-1; a flow cannot "
        "read another separator's prefix, so its loop check never stops a topic: orders -> east-1.orders -> "
        "west-1_east-1.orders -> east-1.west-1_east-1.orders ... circles forever; use one separator on every "
        "flow of the loop"
    ]
    raw["flows"]["east-1->west-1"] = {"replication_policy": {"separator": "_"}}
    assert flow_ids(raw) == ["east-1->west-1", "west-1->east-1"]


def test_three_cluster_loop_mixing_separators_is_refused_but_separate_loops_may_differ() -> None:
    ring = topo(
        {
            "name": "ring",
            "pattern": "custom",
            "flows": ["west-1->east-1", "east-1->central"],
            "replication_policy": {"separator": "_"},
        },
        {"name": "back", "pattern": "custom", "flows": ["central->west-1"]},
    )
    (problem,) = problems_of(ring)
    assert problem.startswith(
        "flows.west-1->east-1.replication_policy.separator: flows 'central->west-1' (separator '.') and "
        "'west-1->east-1' (separator '_') are on the replication loop central -> west-1 -> east-1 -> central;"
    )
    assert "orders -> central.orders -> west-1_central.orders -> east-1_west-1_central.orders -> " in problem
    # two active-active pairs sharing east-1, each with its own separator: every topic stops after one hop
    pairs = topo(
        {"name": "p1", "pattern": "active-active", "clusters": ["west-1", "east-1"]},
        {
            "name": "p2",
            "pattern": "active-active",
            "clusters": ["east-1", "central"],
            "replication_policy": {"separator": "_"},
        },
    )
    assert len(flow_ids(pairs)) == 4


def test_identity_and_prefix_flows_writing_one_name_on_a_target_are_refused() -> None:
    """Before: valid. west-1->central copies east-1.orders (mirrored to west-1 earlier) unchanged,
    while east-1->central writes its own orders as east-1.orders: two writers, one topic."""
    raw = topo(
        {"name": "idn", "pattern": "custom", "flows": ["west-1->central"], "replication_policy": {"type": "identity"}},
        {"name": "pfx", "pattern": "custom", "flows": ["east-1->central"]},
    )
    assert problems_of(raw) == [
        "flows.west-1->central: flows 'west-1->central' (identity policy) and 'east-1->central' (prefix "
        "'east-1.') may both write topics named east-1.<topic> into 'central': the identity flow copies such a "
        "topic from its source under the same name; use the default policy on 'west-1->central', or exclude "
        "those topics from it (topics_exclude: ['east\\-1\\..*'])"
    ]
    raw["flows"] = {"west-1->central": {"topics_exclude": ["east\\-1\\..*"]}}
    assert flow_ids(raw) == ["east-1->central", "west-1->central"]
    literal = topo({**raw["topologies"][0], "topics": ["east-1\\.orders"]}, raw["topologies"][1])
    assert len(problems_of(literal)) == 1
    other = topo({**raw["topologies"][0], "topics": ["payments"]}, raw["topologies"][1])
    assert flow_ids(other) == ["east-1->central", "west-1->central"]


def test_alias_containing_the_separator_is_rejected() -> None:
    raw = topo(
        {
            "name": "dr",
            "pattern": "custom",
            "flows": ["west-1->east-1"],
            "replication_policy": {"type": "default", "separator": "-"},
        }
    )
    assert problems_of(raw) == [
        "topologies[0].replication_policy.separator: cluster alias 'east-1' contains the separator '-'; remote topic "
        "names could not be traced back to their source: choose another separator or alias",
        "topologies[0].replication_policy.separator: cluster alias 'west-1' contains the separator '-'; remote topic "
        "names could not be traced back to their source: choose another separator or alias",
    ]


def test_not_a_mapping_and_bad_settings_types() -> None:
    assert problems_of([1]) == [
        "a topology file must be a mapping with clusters, defaults, topologies, flows; got list"
    ]
    raw = topo(
        {
            **DR,
            "spark": {"executors": 0, "executor_memory": "lots"},
            "max_records_per_trigger": -1,
            "whitelist": ["a"],
            "topics": ["b"],
        }
    )
    assert problems_of(raw) == [
        "topologies[0].max_records_per_trigger: must be an integer >= 1, got -1",
        "topologies[0].spark.executor_memory: must be a size such as '2g' or '512m', got 'lots'",
        "topologies[0].spark.executors: must be an integer >= 1, got 0",
        "topologies[0].whitelist: 'whitelist' is MirrorMaker 1's name for 'topics', which is also given; "
        "keep only 'topics' (merge the two lists into it)",
    ]


def test_example_topology_covers_every_pattern_and_plans_cleanly() -> None:
    topology = load_topology("stacks/topology.yaml")
    plan = plan_topology(topology)
    import yaml

    raw = yaml.safe_load(Path("stacks/topology.yaml").read_text(encoding="utf-8"))
    patterns = {t["pattern"] for t in raw["topologies"]}
    assert patterns == {"active-passive", "active-active", "hub-and-spoke", "fan-out", "chain", "custom"}
    assert "local-a->local-b" in plan.datacenters["local"]
    for flow in plan.flows:  # every planned flow becomes a valid flow spec for the app
        spec = parse_flow_spec(flow_spec_for(topology, flow, "s3a://bucket/checkpoints"))
        assert spec.id == flow.id and spec.checkpoint_location.startswith("s3a://bucket/checkpoints/")
        policy = policy_from_config(spec.replication_policy, spec.source.alias)
        assert policy.format_remote_topic(spec.source.alias, "t") in ("t", f"{spec.source.alias}.t")


def test_flow_spec_carries_secret_references_never_values() -> None:
    topology = load_topology("stacks/topology.yaml")
    flow = plan_topology(topology).flow("west-1->east-1")
    spec = flow_spec_for(topology, flow, "/ckpt")
    assert spec["target"]["config"]["sasl.password"].startswith("${file:")
    assert spec["target"]["config"]["security.protocol"] == "SASL_SSL"
    assert "source_security" not in spec and "target_security" not in spec
    assert spec["checkpoint_location"] == "/ckpt/west-1-to-east-1"


def test_mm1_alias_beside_its_mm2_name_names_the_alias_in_either_order() -> None:
    from kmirror.flow.settings import normalise

    for raw in ({"whitelist": ["a"], "topics": ["b"]}, {"topics": ["b"], "whitelist": ["a"]}):
        _, problems = normalise(raw, "flows[0]")
        assert [(p.path, p.message) for p in problems] == [
            (
                "flows[0].whitelist",
                "'whitelist' is MirrorMaker 1's name for 'topics', which is also given; "
                "keep only 'topics' (merge the two lists into it)",
            )
        ]
    _, problems = normalise({"topics_exclude": ["x"], "blacklist": ["y"]}, "t")
    assert [p.path for p in problems] == ["t.blacklist"]
    assert "'blacklist' is MirrorMaker 1's name" in problems[0].message


def test_option_combinations_the_app_refuses_at_start_are_refused_by_validation() -> None:
    sql = {"sql": "SELECT * FROM records"}
    dr = {**DR, "topics": ["o.*"]}
    assert problems_of(topo({**dr, "exactly_once": True, "transform": sql})) == [
        "topologies[0].transform: (flow west-1->east-1) cannot be combined with exactly_once "
        "(the transform path is at-least-once, like the copy path without it)"
    ]
    assert problems_of(topo({**dr, "max_records_per_second": 10, "transform": sql})) == [
        "topologies[0].transform: (flow west-1->east-1) cannot be combined with max_records_per_second yet "
        "(only the copy path is paced); remove the transform or the limit"
    ]
    # From the defaults too: the check runs on each flow's resolved settings.
    found = problems_of(topo({**dr, "transform": sql}, defaults={"exactly_once": True}))
    assert len(found) == 1 and "cannot be combined with exactly_once" in found[0]
    # Each alone is still valid.
    assert flow_ids(topo({**dr, "transform": sql})) == ["west-1->east-1"]
    assert flow_ids(topo({**dr, "exactly_once": True})) == ["west-1->east-1"]


def test_an_unknown_key_does_not_hide_an_identity_cycle() -> None:
    raw = topo(
        {"name": "ring", "pattern": "chain", "clusters": ["west-1", "east-1", "central"]},
        {"name": "back", "pattern": "custom", "flows": ["central->west-1"], "replication_policy": {"type": "identity"}},
        flowz={},
    )
    found = problems_of(raw)
    assert len(found) == 2, found
    assert found[0].startswith("flowz: unknown key") or found[1].startswith("flowz: unknown key")
    assert any(
        p.startswith("topologies: identity replication cycle central -> west-1 -> east-1 -> central:") for p in found
    )


DR_WITH_REVERSE = {
    **DR,
    "reverse_flow": True,
    "topics": ["orders.*"],
}


def test_reverse_flow_adds_standby_to_primary_run_at_home_never_mirroring_the_remote_topics_back() -> None:
    raw = topo({**DR_WITH_REVERSE, "run_in": "central", "topics": [".*"]})
    topology = parse_topology(raw)
    forward, reverse = (plan_topology(topology).flow(i) for i in ("west-1->east-1", "east-1->west-1"))
    assert (forward.run_in, reverse.run_in) == ("central", "west")  # the declaration's run_in is the forward's
    assert reverse.topics_exclude == (".*[-.]internal", ".*\\.replica", "__.*", "west-1\\..*")
    assert forward.topics_exclude == (".*[-.]internal", ".*\\.replica", "__.*")
    assert reverse.options == {"reverse_of": "west-1", "sync_group_offsets": True}
    assert forward.options == {"sync_group_offsets": True}
    spec = parse_flow_spec(flow_spec_for(topology, reverse, "/ckpt"))
    assert spec.checkpoints.reverse_of == "west-1"
    assert [t for t in ("orders.eu", "west-1.orders.eu", "central.orders") if spec.topic_selection.matches(t)] == [
        "orders.eu",
        "central.orders",
    ]
    assert parse_flow_spec(flow_spec_for(topology, forward, "/ckpt")).checkpoints.reverse_of is None
    # the loop exclude follows the separator and survives an override replacing the excludes
    raw["defaults"] = {"replication_policy": {"type": "default", "separator": "_"}}
    raw["flows"] = {"east-1->west-1": {"topics_exclude": {"replace": ["tmp.*"]}, "run_in": "east"}}
    reverse = plan_topology(parse_topology(raw)).flow("east-1->west-1")
    assert (reverse.topics_exclude, reverse.run_in) == (("tmp.*", "west-1_.*"), "east")  # an override's run_in wins


def test_reverse_flow_is_shown_by_plan_and_needs_the_default_policy() -> None:
    from kmirror.estate.plan_render import render_mermaid, render_text

    plan = plan_topology(parse_topology(topo(DR_WITH_REVERSE)))
    assert "│ east-1->west-1 (reverse of west-1->east-1) │ dr " in render_text(plan)
    assert 'c_east_1 -->|"dr: orders.* (reverse)"| c_west_1' in render_mermaid(plan, {})
    assert problems_of(topo({**DR_WITH_REVERSE, "replication_policy": {"type": "identity"}}))[1] == (
        "topologies[0].reverse_flow: (flow east-1->west-1) the reverse flow needs the default replication policy: "
        "with identity, west-1's topics keep their names on east-1, so it would mirror them back into west-1 (a loop) "
        "and could not tell them from east-1's own; use the default policy (remote topics named west-1.<topic>), set "
        "provenance_headers: true (records carry their origin cluster; docs/active-active.md) or remove reverse_flow"
    )
    # identity with provenance headers on both flows: accepted (issue 46), the reverse flow keeps its names
    plan = plan_topology(
        parse_topology(
            topo({**DR_WITH_REVERSE, "replication_policy": {"type": "identity"}, "provenance_headers": True})
        )
    )
    reverse = plan.flow("east-1->west-1")
    assert reverse.options["reverse_of"] == "west-1" and reverse.options["provenance_headers"] is True
    assert problems_of(topo({**DR_WITH_REVERSE, "reverse_flow": "yes"})) == [
        "topologies[0].reverse_flow: must be true or false, got 'yes'"
    ]


def test_reverse_of_set_by_hand_must_name_the_target_and_agree_with_the_reverse_flow() -> None:
    assert problems_of(
        topo({"name": "c", "pattern": "custom", "flows": ["east-1->west-1"], "reverse_of": "central"})
    ) == [
        "topologies[0].reverse_of: (flow east-1->west-1) reverse_of must name the flow's target 'west-1' (the "
        "forward flow's source), got 'central'"
    ]
    assert problems_of(
        topo(DR_WITH_REVERSE, {"name": "c", "pattern": "custom", "flows": ["east-1->west-1"], "topics": ["orders.*"]})
    ) == [
        "topologies[1]: flow 'east-1->west-1' is also produced by topologies[0].reverse_flow (topology 'dr') with "
        "different reverse_of; make them agree or set them once under flows.east-1->west-1"
    ]
    by_hand = topo(
        {"name": "c", "pattern": "custom", "flows": ["west-1->east-1", "east-1->west-1"]},
        flows={"east-1->west-1": {"reverse_of": "west-1"}},
    )
    assert plan_topology(parse_topology(by_hand)).flow("east-1->west-1").topics_exclude[-1] == "west-1\\..*"


def test_an_unknown_key_in_the_same_declaration_does_not_hide_its_identity_cycle() -> None:
    """Issue 25 item 2: every problem at once, also inside one declaration: a typo and an MM1
    alias beside its MM2 name are reported together with the loop they used to hide."""
    raw = {
        "clusters": {
            "a": {"bootstrap_servers": "a:9092", "datacenter": "x"},
            "b": {"bootstrap_servers": "b:9092", "datacenter": "y"},
        },
        "topologies": [
            {
                "name": "m",
                "pattern": "active-active",
                "clusters": ["a", "b"],
                "replication_policy": {"type": "identity"},
                "topicz": ["y.*"],
                "whitelist": ["x.*"],
                "topics": ["y.*"],
            }
        ],
    }
    found = problems_of(raw)
    assert any(p.startswith("topologies: identity replication cycle a -> b -> a") for p in found), found
    assert any(p.startswith("topologies[0].topicz: unknown key") for p in found), found
    assert any(p.startswith("topologies[0].whitelist: 'whitelist' is MirrorMaker 1's name") for p in found), found
    raw["topologies"][0]["replication_policy"] = {"type": "nonsense"}  # a key the graph reads: no graph
    assert not any("cycle" in p for p in problems_of(raw))
