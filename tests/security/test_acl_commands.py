"""`kmirror acls` / `mirror_acl_commands` render exactly the grants the engine derives
(`mirror_acls`): one command per grant, every internal topic literally (issue 26: the old
hard-coded prefixes `heartbeats`, `mm2-offset-syncs`, `checkpoints.internal` did not cover
`<source>.checkpoints.internal` for reading and missed the snapshot topic, the created-topics
registry, the reader groups and the transactional ids). The same commands run against a real
authorizer are in tests/security/test_real_broker_security.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.security.acls import AclGrant, AclSide, mirror_acl_commands
from kmirror_cli.cli import main
from kmirror_engine.planning.internal_topics import mirror_acls

RAW = {
    "id": "west->east",
    "checkpoint_location": "/tmp/cp",
    "topics": ["orders"],
    "topics_exclude": [],
    "source": {"alias": "west", "bootstrap_servers": "src:9092", "config": {"sasl.username": "mirror"}},
    "target": {"alias": "east", "bootstrap_servers": "dst:9092", "config": {"sasl.username": "mirror"}},
    "replication_policy": {"type": "default"},
    "exactly_once": True,
    "sync_topic_acls": True,
}


def parsed(command: str) -> dict[str, Any]:
    """A rendered command read back: its bootstrap server, operations and resource words."""
    words = shlex.split(command)
    assert words[:1] == ["kafka-acls.sh"] and "--add" in words, command
    operations = tuple(words[i + 1] for i, w in enumerate(words) if w == "--operation")
    resource = words[words.index("--operation") + 2 * len(operations) :]
    return {
        "bootstrap": words[words.index("--bootstrap-server") + 1],
        "operations": operations,
        "principal": words[words.index("--allow-principal") + 1],
        "resource": resource,
    }


def expected_resource(grant: AclGrant) -> list[str]:
    if grant.resource_type == "CLUSTER":
        return ["--cluster"]
    option = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}[grant.resource_type]
    return [option, grant.name] + (["--resource-pattern-type", "prefixed"] if grant.pattern == "PREFIXED" else [])


def assert_one_command_per_grant(commands: list[str], grants: list[AclGrant], spec: FlowSpec) -> None:
    assert len(commands) == len(grants)
    for command, grant in zip(commands, grants, strict=True):
        words = parsed(command)
        side = spec.source if grant.side == "source" else spec.target
        assert (words["bootstrap"], words["operations"], words["resource"], words["principal"]) == (
            side.bootstrap_servers,
            grant.operations,
            expected_resource(grant),
            "User:mirror",
        ), (command, grant)


def test_the_rendered_commands_are_the_engines_grants_one_each() -> None:
    spec = parse_flow_spec(RAW)
    grants = mirror_acls(spec, ["orders"])
    commands = mirror_acl_commands("User:mirror", AclSide("src:9092"), AclSide("dst:9092"), grants)
    assert_one_command_per_grant(commands, grants, spec)
    target_topics = {
        (parsed(c)["resource"][1], len(parsed(c)["resource"]))
        for c in commands
        if parsed(c)["bootstrap"] == "dst:9092" and parsed(c)["resource"][0] == "--topic"
    }
    # every internal topic literally (2 words: no prefixed pattern), the remote topics by prefix
    assert target_topics == {
        ("west.", 4),
        ("heartbeats", 2),
        ("west.checkpoints.internal", 2),
        ("mm2-offset-syncs.west.internal", 2),
        ("kmirror-offset-syncs-snapshot.west.internal", 2),
        ("kmirror-created-topics.west.internal", 2),
        ("kmirror-synced-acls.west.internal", 2),
        ("kmirror-flow-control.internal", 2),  # read only: `kmirror pause|resume` write it (issue 46)
    }
    assert any(
        parsed(c)["resource"] == ["--topic", "west.checkpoints.internal"] and "Read" in parsed(c)["operations"]
        for c in commands
    )
    groups = [parsed(c)["resource"][1] for c in commands if parsed(c)["resource"][0] == "--group"]
    readers = [
        "kmirror-created-topics.west.internal",
        "kmirror-offset-syncs-snapshot.west.internal",
        "kmirror-synced-acls.west.internal",
        "mm2-offset-syncs.west.internal",
        "west.checkpoints.internal",
    ]
    assert groups == [
        "kmirror-west-to-east",
        *(f"kmirror-reader-{t}" for t in readers),
        "kmirror-reader-kmirror-flow-control.internal",
        "kmirror-eos-west-to-east",
    ]
    assert ["--transactional-id", "kmirror-west-to-east", "--resource-pattern-type", "prefixed"] in [
        parsed(c)["resource"] for c in commands
    ]
    # ACL sync (opted in here): DescribeAcls on the source cluster, Create/DeleteAcls on the target's
    cluster = [(parsed(c)["bootstrap"], parsed(c)["operations"]) for c in commands if "--cluster" in c]
    assert cluster == [("src:9092", ("Describe",)), ("dst:9092", ("Alter",))]


def test_kmirror_acls_prints_those_commands(tmp_path: Path, capsys: Any) -> None:
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(RAW))
    assert main(["acls", "--flow", str(flow), "--topic", "orders", "--topic", "pay"]) == 0
    spec = parse_flow_spec(RAW)
    grants = mirror_acls(spec, ["orders", "pay"])
    printed = capsys.readouterr().out.splitlines()
    assert printed == mirror_acl_commands("User:mirror", AclSide("src:9092"), AclSide("dst:9092"), grants)
    assert_one_command_per_grant(printed, grants, spec)
    assert (
        main(
            [
                "acls",
                "--flow",
                str(flow),
                "--topic",
                "orders",
                "--format",
                "json",
                "--principal",
                "User:mm",
                "--target-command-config",
                "/etc/admin.properties",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)
    assert [(r["side"], r["resource_type"], r["name"], tuple(r["operations"])) for r in rows] == [
        (g.side, g.resource_type, g.name, g.operations) for g in mirror_acls(spec, ["orders"])
    ]
    assert all(
        ("--command-config /etc/admin.properties" in r["command"]) == (r["side"] == "target")
        and "--allow-principal User:mm " in r["command"]
        for r in rows
    )


def test_a_reverse_flow_is_granted_the_forward_flows_syncs_on_its_source() -> None:
    """A reverse flow (east->west, reverse_of west) reads the forward flow's offset syncs and
    snapshots on its source (east), with their reader groups: without these grants its reverse
    checkpoints fail on an authorizing broker."""
    raw = {
        **RAW,
        "id": "east->west",
        "exactly_once": False,
        "sync_topic_acls": False,
        "reverse_of": "west",
        "source": RAW["target"],
        "target": RAW["source"],
    }
    grants = mirror_acls(parse_flow_spec(raw), ["orders"])
    on_source = {(g.resource_type, g.name): g.operations for g in grants if g.side == "source"}
    for topic in ("mm2-offset-syncs.west.internal", "kmirror-offset-syncs-snapshot.west.internal"):
        assert on_source[("TOPIC", topic)] == ("Read", "Describe")
        assert on_source[("GROUP", f"kmirror-reader-{topic}")] == ("Read", "Describe")
    forward = mirror_acls(parse_flow_spec(RAW), ["orders"])
    assert not any("offset-syncs" in g.name for g in forward if g.side == "source")


def test_the_dead_letter_topic_is_granted_and_checked_at_start_like_an_internal_topic() -> None:
    """Issue 41: a flow's dead_letter_topic was in no generated ACL and no start-up check, so the
    first record the target refused failed its batch on an authorizing broker."""
    from kmirror_engine.planning.internal_topics import needed_access

    spec = parse_flow_spec({**RAW, "exactly_once": False, "dead_letter_topic": "orders-dlq"})
    grants = {(g.side, g.resource_type, g.name, g.pattern): g.operations for g in mirror_acls(spec, ["orders"])}
    assert grants[("target", "TOPIC", "orders-dlq", "LITERAL")] == ("Create", "Describe", "Write")
    assert needed_access(spec)["orders-dlq"][1] == ("Write",)  # the start-up check's list
    assert "orders-dlq" not in needed_access(parse_flow_spec(RAW))
