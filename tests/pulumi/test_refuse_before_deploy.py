"""Issue 25: every problem the app would hit at start is refused before deploy, by the same
validation in `kmirror validate` (exit 2, naming the key and the reason) and in the Pulumi
program (a preview under the SDK's mocks fails naming the same path), and the valid topology
still passes both."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kmirror_cli.cli import main
from tests.pulumi.harness import ROOT, run_program, stack_config

Edit = Callable[[dict[str, Any]], None]


def _flow(topology: dict[str, Any], **settings: Any) -> None:
    topology["flows"]["west-1->east-1"].update(settings)


def _producer(**props: Any) -> Edit:
    return lambda t: t["flows"]["west-1->east-1"].setdefault("producer", {}).update(props)


def _consumer(**props: Any) -> Edit:
    return lambda t: t["flows"]["west-1->east-1"].setdefault("consumer", {}).update(props)


TRANSFORM = {"sql": "SELECT key, value, headers, timestamp FROM records WHERE value IS NOT NULL"}
# (case, edit of stacks/topology.yaml, the path the refusal names, words of its reason)
CASES: list[tuple[str, Edit, str, str]] = [
    (
        "exactly-once with a transform",
        lambda t: _flow(t, exactly_once=True, transform=TRANSFORM),
        "topologies[0].transform",
        "exactly_once",
    ),
    (
        "a rate limit with a transform",
        lambda t: _flow(t, max_bytes_per_second=1_000_000, transform=TRANSFORM),
        "topologies[0].transform",
        "max_bytes_per_second",
    ),
    ("a producer property typo", _producer(**{"linger.mss": 5}), "producer.linger.mss", "linger.ms"),
    ("an unknown compression codec", _producer(**{"compression.type": "zstdx"}), "producer.compression.type", "zstdx"),
    (
        "a consumer size that is not a number",
        _consumer(**{"fetch.max.bytes": "lots"}),
        "consumer.fetch.max.bytes",
        "lots",
    ),
    (
        "weak acks through librdkafka's alias",
        _producer(**{"request.required.acks": 1}),
        "producer.request.required.acks",
        "acks",
    ),
    (
        "an infinite delivery timeout",
        _producer(**{"message.timeout.ms": 0}),
        "producer.message.timeout.ms",
        "message.timeout.ms",
    ),
    (
        "a transform that reorders",
        lambda t: _flow(t, transform={"sql": "SELECT * FROM records ORDER BY key"}),
        "transform",
        "order",
    ),
    (
        "a transform that runs code",
        lambda t: _flow(
            t, transform={"sql": "SELECT reflect('java.lang.Runtime', 'getRuntime') AS key, value FROM records"}
        ),
        "transform",
        "reflect",
    ),
    (
        "an exclude that is neither a list nor {replace: ...}",
        lambda t: _flow(t, topics_exclude={"instead": ["x"]}),
        "topics_exclude",
        "replace",
    ),
    (
        "a malformed skip_offsets entry",
        lambda t: _flow(t, skip_offsets=["orders:x:5"]),
        "skip_offsets[0]",
        "topic:partition:offset",
    ),
]


def _write(tmp_path: Path, edit: Edit | None) -> Path:
    topology = copy.deepcopy(yaml.safe_load((ROOT / "stacks" / "topology.yaml").read_text()))
    if edit is not None:
        edit(topology)
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(topology))
    return path


@pytest.mark.parametrize(("case", "edit", "where", "why"), CASES, ids=[c[0] for c in CASES])
def test_kmirror_validate_refuses_it_with_exit_2_naming_key_and_reason(
    case: str, edit: Edit, where: str, why: str, tmp_path: Path, capsys: Any
) -> None:
    code = main(["validate", "--topology", str(_write(tmp_path, edit))])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, f"{case}: validate exited {code}: {text}"
    lines = [line for line in text.splitlines() if where in line]
    assert lines, f"{case}: no problem names {where!r}:\n{text}"
    assert any(why.lower() in line.lower() for line in lines), f"{case}: {where} without {why!r}:\n{text}"


@pytest.mark.parametrize(("case", "edit", "where", "why"), CASES, ids=[c[0] for c in CASES])
def test_a_pulumi_preview_refuses_it_too(case: str, edit: Edit, where: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(Exception) as info:  # the SDK wraps the program's error
        run_program("east", stack_config("east", topology=str(_write(tmp_path, edit))))
    assert where in str(info.value) and why.lower() in str(info.value).lower(), f"{case}: {info.value}"


def test_the_valid_topology_passes_both(tmp_path: Path, capsys: Any) -> None:
    path = _write(tmp_path, None)
    assert main(["validate", "--topology", str(path)]) == 0, capsys.readouterr()
    run = run_program("east", stack_config("east", topology=str(path)))
    assert run.resources
