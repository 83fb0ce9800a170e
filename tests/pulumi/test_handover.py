"""kafka_mirror.handover's pure parts: the `kafka-mirror:peer_stacks` setting and the refusal of a
flow another stack still runs (the real-engine proof: tests/deploy/test_flow_handover.py)."""

from __future__ import annotations

import pytest

from kafka_mirror.handover import parse_peer_stacks, still_running
from kmirror.errors import ValidationError


def test_each_flow_a_peer_still_runs_is_refused_naming_the_stack_and_the_fix() -> None:
    problems = still_running(["a->b", "c->d"], {"acme/kafka-mirror/west": ["a->b", "x->y"], "east": None})
    assert [p.path for p in problems] == ["flow a->b"]
    assert "stack acme/kafka-mirror/west still runs this flow" in problems[0].message
    assert "deploy acme/kafka-mirror/west first" in problems[0].message
    assert still_running(["c->d"], {"west": ["a->b"], "east": []}) == []


@pytest.mark.parametrize(
    ("raw", "found"),
    [
        ("west", "must be a list of stack names"),
        (["west", 3], "must be a list"),
        (["acme/kafka-mirror/east"], "itself"),
    ],
)
def test_a_bad_peer_stacks_setting_is_refused(raw: object, found: str) -> None:
    with pytest.raises(ValidationError, match=found) as e:
        parse_peer_stacks(raw, "east")
    assert "kafka-mirror:peer_stacks" in str(e.value)


def test_peer_stacks_are_optional_and_deduplicated() -> None:
    assert parse_peer_stacks(None, "east") == ()
    assert parse_peer_stacks(["west", "central", "west"], "east") == ("west", "central")
