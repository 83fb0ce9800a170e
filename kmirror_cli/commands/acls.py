"""`kmirror acls --flow FLOW.json [--topic T ...] [--principal P] [--source-command-config F]
[--target-command-config F] [--format text|json]`: the `kafka-acls.sh` commands that grant the
mirror principal what one flow needs, one per grant of
`kmirror_engine.planning.internal_topics.mirror_acls` (the list the start-up check and the tests on
a real authorizer use), each against its side's bootstrap servers.

Source topics: each `--topic`, or, without any, the topics the flow selects on the source now
(a topic selection is a regular expression, which ACLs cannot express: grant again when new
topics match). Principal: `--principal`, else the one the source brokers most likely see
(`sasl.username`, or the primary of the Kerberos principal). Nothing is executed.

Text (stdout): one command a line. JSON: `[{"side", "resource_type", "name", "pattern",
"operations", "purpose", "command"}]`, in the same order.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kmirror_cli.flow_args import add_flow_arguments, load_flow


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("acls", help="Print the kafka-acls.sh commands one flow's mirror principal needs.")
    add_flow_arguments(parser)
    parser.add_argument("--topic", action="append", default=[],
                        help="a mirrored source topic (repeat; default: the topics the flow selects now)")  # fmt: skip
    parser.add_argument("--principal", help="the mirror's principal, e.g. User:mirrormaker")
    parser.add_argument("--source-command-config", help="kafka-acls --command-config file for the source")
    parser.add_argument("--target-command-config", help="kafka-acls --command-config file for the target")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def _selected_topics(spec: Any) -> list[str]:
    """The source topics the flow selects now (asks the source cluster)."""
    from kmirror_engine.clients.factory import admin_client
    from kmirror_engine.planning.discovery import TopicDiscovery

    discovery = TopicDiscovery(admin_client(spec.source), spec.source, spec.topic_selection, spec.policy,
                               spec.target.alias, 0)  # fmt: skip
    return sorted(t.source_topic for t in discovery.topics().values())


def run(args: argparse.Namespace) -> int:
    from kmirror.security.acls import AclSide, acl_command, mirror_acl_commands
    from kmirror_engine.planning.internal_topics import mirror_acls, principal_hint

    spec = load_flow(args)
    topics = sorted(set(args.topic)) or _selected_topics(spec)
    grants = mirror_acls(spec, topics)
    principal = args.principal or principal_hint(spec.source.config)
    source = AclSide(spec.source.bootstrap_servers, args.source_command_config)
    target = AclSide(spec.target.bootstrap_servers, args.target_command_config)
    if args.format == "json":
        sides = {"source": source, "target": target}
        print(json.dumps([{"side": g.side, "resource_type": g.resource_type, "name": g.name, "pattern": g.pattern,
                           "operations": list(g.operations), "purpose": g.purpose,
                           "command": acl_command(sides[g.side], principal, g)} for g in grants]))  # fmt: skip
        return 0
    for command in mirror_acl_commands(principal, source, target, grants):
        print(command)
    return 0
