"""`--flow ID --topology FILE | --stack NAME` on the operator commands (issue 46): the flow spec is
planned from the topology, not hand-written. Fast: no broker (the e2e use is in
tests/e2e/test_identity_round_trip_e2e.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from kmirror.errors import ValidationError
from kmirror.estate.planner import flow_spec_for, plan_topology
from kmirror.estate.topology import load_topology
from kmirror_cli.cli import main
from kmirror_cli.flow_args import add_flow_arguments, load_flow

TOPOLOGY = "stacks/topology.yaml"


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flow_arguments(parser)
    return parser.parse_args(list(argv))


def test_a_flow_id_with_the_topology_gives_the_planners_spec() -> None:
    spec = load_flow(parsed("--flow", "west-1->east-1", "--topology", TOPOLOGY))
    topology = load_topology(TOPOLOGY)
    planned = flow_spec_for(topology, plan_topology(topology).flow("west-1->east-1"), "/x")
    assert (spec.id, spec.source.alias, spec.target.alias) == ("west-1->east-1", "west-1", "east-1")
    assert spec.topics == tuple(planned["topics"]) and spec.topics_exclude == tuple(planned["topics_exclude"])
    assert spec.source.config == planned["source"].get("config", {})  # secret references, never values


def test_the_stack_gives_its_topology_and_refuses_a_flow_it_does_not_run() -> None:
    assert load_flow(parsed("--flow", "west-1->east-1", "--stack", "east")).id == "west-1->east-1"
    with pytest.raises(ValidationError) as info:
        load_flow(parsed("--flow", "east-1->central", "--stack", "east"))
    assert [str(p) for p in info.value.problems] == [
        "--flow: flow 'east-1->central' runs in datacenter 'central', not in stack 'east''s 'east'; use that "
        "datacenter's stack or --topology alone"
    ]


def test_an_unknown_flow_id_is_refused_naming_the_closest_and_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["translate", "--topology", TOPOLOGY, "--flow", "west-1->east1", "--group", "g"]) == 2
    err = capsys.readouterr().err
    assert "--flow: no flow 'west-1->east1' in stacks/topology.yaml (did you mean 'west-1->east-1'?); flows: " in err


def test_without_topology_or_stack_flow_is_still_the_json_file(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="--flow: file not found"):
        load_flow(parsed("--flow", str(tmp_path / "missing.json")))
