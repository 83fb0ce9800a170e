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

A side that authenticates with AWS MSK IAM (`security.msk_iam`) has no Kafka ACLs: its grants are
rendered as one IAM policy document (`kmirror.security.msk_iam.iam_policy`: Connect and
DescribeCluster on the cluster, then one statement per grant) to attach to the app's role. Text:
`# <side> cluster: IAM policy ...` then the JSON document; JSON: the grant's item has
`"iam_statement"` instead of `"command"`, plus one `{"side", "iam_policy"}` item per IAM side.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kmirror_cli.flow_args import add_flow_arguments, load_flow


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("acls", help="Print the kafka-acls.sh commands one flow's mirror principal needs.")
    add_flow_arguments(parser)
    parser.add_argument(
        "--topic",
        action="append",
        default=[],
        help="a mirrored source topic (repeat; default: the topics the flow selects now)",
    )
    parser.add_argument("--principal", help="the mirror's principal, e.g. User:mirrormaker")
    parser.add_argument("--source-command-config", help="kafka-acls --command-config file for the source")
    parser.add_argument("--target-command-config", help="kafka-acls --command-config file for the target")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def _selected_topics(spec: Any) -> list[str]:
    """The source topics the flow selects now (asks the source cluster)."""
    from kmirror_engine.clients import admin_client
    from kmirror_engine.planning import TopicDiscovery

    discovery = TopicDiscovery(
        admin_client(spec.source), spec.source, spec.topic_selection, spec.policy, spec.target.alias, 0
    )
    return sorted(t.source_topic for t in discovery.topics().values())


def run(args: argparse.Namespace) -> int:
    from kmirror.security.acls import AclSide, acl_command
    from kmirror.security.msk_iam import grant_statement, is_msk_iam, mirror_iam_policies
    from kmirror_engine.planning import mirror_acls, principal_hint

    spec = load_flow(args)
    topics = sorted(set(args.topic)) or _selected_topics(spec)
    grants = mirror_acls(spec, topics)
    configs = {"source": spec.source.config, "target": spec.target.config}
    policies = mirror_iam_policies(configs, grants)
    # the principal of the clusters that take Kafka ACLs (an MSK IAM side has none: its role is the identity)
    principal = args.principal or principal_hint(next((configs[s] for s in configs if s not in policies), {}))
    sides = {
        "source": AclSide(spec.source.bootstrap_servers, args.source_command_config),
        "target": AclSide(spec.target.bootstrap_servers, args.target_command_config),
    }
    if args.format == "json":
        items: list[dict[str, Any]] = []
        for g in grants:
            item: dict[str, Any] = {"side": g.side, "resource_type": g.resource_type, "name": g.name}
            item.update(pattern=g.pattern, operations=list(g.operations), purpose=g.purpose)
            if is_msk_iam(configs[g.side]):
                item["iam_statement"] = grant_statement(configs[g.side], g)
            else:
                item["command"] = acl_command(sides[g.side], principal, g)
            items.append(item)
        items += [{"side": side, "iam_policy": policy} for side, policy in policies.items()]
        print(json.dumps(items))
        return 0
    for g in grants:
        if g.side not in policies:
            print(acl_command(sides[g.side], principal, g))
    for side, policy in policies.items():
        print(f"# {side} cluster: IAM policy for the app's role (MSK IAM; no Kafka ACLs)")
        print(json.dumps(policy, indent=2))
    return 0
