"""Stack order of `pulumi up` for a topology change: the stack losing a moved flow goes first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kmirror.estate.diff import DatacenterDiff, Move, PlanDiff
from kmirror.stack.order import StackOrderError, stack_order

ROOT = Path(__file__).resolve().parents[1]
DCS = {"west": "west", "east": "east", "central": "central"}


def _diff(*moves: tuple[str, str, str], removed: dict[str, list[str]] | None = None) -> PlanDiff:
    datacenters: dict[str, DatacenterDiff] = {}
    for flow, old, new in moves:
        datacenters.setdefault(new, DatacenterDiff()).moved.append(Move(flow, old, new))
    for dc, flows in (removed or {}).items():
        datacenters.setdefault(dc, DatacenterDiff()).removed.extend(flows)
    return PlanDiff(datacenters, [], [])


def test_the_stack_that_loses_a_flow_is_updated_first() -> None:
    # the old fixed order (west, east, central) would start a->b in west while central still runs it
    assert stack_order(_diff(("a->b", "central", "west")), DCS, DCS) == ["central", "east", "west"]
    assert stack_order(_diff(("a->b", "west", "central")), DCS, DCS) == ["west", "central", "east"]
    chain = _diff(("a->b", "east", "west"), ("c->d", "west", "central"))
    assert stack_order(chain, DCS, DCS) == ["east", "west", "central"]


def test_removals_go_first_and_unchanged_stacks_keep_a_stable_order() -> None:
    assert stack_order(_diff(removed={"east": ["x->y"]}), DCS, DCS) == ["east", "central", "west"]
    assert stack_order(_diff(), DCS, DCS) == ["central", "east", "west"]
    assert stack_order(_diff(("a->b", "onprem", "west")), DCS, DCS) == ["central", "east", "west"]


def test_moves_in_both_directions_are_refused() -> None:
    with pytest.raises(StackOrderError, match="split the change into one pull request per direction"):
        stack_order(_diff(("a->b", "west", "east"), ("c->d", "east", "west")), DCS, DCS)


def test_cli_derives_the_order_from_kmirror_diff(tmp_path: Path) -> None:
    base = yaml.safe_load((ROOT / "stacks" / "topology.yaml").read_text())
    head = yaml.safe_load((ROOT / "stacks" / "topology.yaml").read_text())
    head["flows"]["west-1->east-1"]["run_in"] = "west"  # east loses it, west gains it
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    (tmp_path / "head.yaml").write_text(yaml.safe_dump(head))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kmirror_cli.cli",
            "diff",
            str(tmp_path / "base.yaml"),
            str(tmp_path / "head.yaml"),
            "--format",
            "stack-order",
            "--stacks-dir",
            str(ROOT / "stacks"),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    order = json.loads(done.stdout)
    assert order.index("east") < order.index("west") and sorted(order) == ["central", "east", "local", "west"]


def test_stack_info_gives_ci_each_stacks_region_and_platform() -> None:
    from kmirror_cli.commands.stack_info import stack_field

    stacks = str(ROOT / "stacks")
    assert [stack_field(s, "region", stacks) for s in ("west", "east", "central")] == [
        "us-west-2",
        "us-east-1",
        "eu-central-1",
    ]
    assert stack_field("central", "platform", stacks) == "emr" and stack_field("west", "platform", stacks) == "eks"
    with pytest.raises(Exception, match="aws:region: required"):
        stack_field("local", "region", stacks)
