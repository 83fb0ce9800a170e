"""ACLs the mirror principal needs, rendered as `kafka-acls.sh` commands (docs/security.md).

As the Hortonworks MirrorMaker guide prescribes: on the source, Read + Describe (+ DescribeConfigs,
for topic-config sync) on the mirrored topics and Read on the mirror's consumer group; on the
target, Create/Write/Describe (+ DescribeConfigs/AlterConfigs) on the remote topics, Create on
the cluster (topic creation), and Write on the heartbeats/checkpoints/offset-syncs topics.
Pure: returns strings; nothing is executed.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kmirror.errors import KmirrorError


@dataclass(frozen=True)
class AclSide:
    """One cluster: where kafka-acls connects and the resources the mirror touches there."""

    bootstrap_servers: str
    topic_prefixes: Sequence[str]
    command_config: str | None = None  # client.properties with the admin's credentials


def kafka_principal(security: Mapping[str, Any] | None, tls_subject: str | None = None) -> str:
    """The principal brokers see for this `security` mapping (default principal mapping rules).

    Kerberos `mirrormaker/host@REALM` -> `User:mirrormaker`; SCRAM -> `User:<username>`; mutual
    TLS -> `User:<certificate subject>` (pass `tls_subject`, e.g. `CN=mirrormaker`).
    """
    security = security or {}
    if "kerberos" in security:
        return "User:" + security["kerberos"]["principal"].split("@", 1)[0].split("/", 1)[0]
    if "scram" in security:
        return "User:" + security["scram"]["username"]
    if tls_subject:
        return "User:" + tls_subject
    raise KmirrorError("the mirror has no authenticated identity on this cluster (PLAINTEXT or server-only TLS); "
                       "ACLs need kerberos, scram or a client certificate (pass its subject)")  # fmt: skip


def _acl(side: AclSide, principal: str, operations: Sequence[str], resource: Sequence[str]) -> str:
    words = ["kafka-acls.sh", "--bootstrap-server", side.bootstrap_servers]
    if side.command_config:
        words += ["--command-config", side.command_config]
    words += ["--add", "--allow-principal", principal]
    for operation in operations:
        words += ["--operation", operation]
    return shlex.join([*words, *resource])


def _prefixed_topic(prefix: str) -> list[str]:
    return ["--topic", prefix, "--resource-pattern-type", "prefixed"]


def mirror_acl_commands(
    principal: str,
    source: AclSide,
    target: AclSide,
    consumer_group: str,
    internal_topics: Sequence[str] = ("heartbeats", "mm2-offset-syncs", "checkpoints.internal"),
) -> list[str]:
    """kafka-acls commands granting `principal` exactly what one source->target flow needs."""
    commands = [_acl(source, principal, ["Read", "Describe", "DescribeConfigs"], _prefixed_topic(p))
                for p in source.topic_prefixes]  # fmt: skip
    commands.append(_acl(source, principal, ["Read", "Describe"], ["--group", consumer_group]))
    commands += [_acl(target, principal, ["Create", "Write", "Describe", "DescribeConfigs", "AlterConfigs"],
                      _prefixed_topic(p)) for p in target.topic_prefixes]  # fmt: skip
    commands += [_acl(target, principal, ["Create", "Write", "Read", "Describe"], _prefixed_topic(name))
                 for name in internal_topics]  # fmt: skip
    commands.append(_acl(target, principal, ["Create", "DescribeConfigs"], ["--cluster"]))
    commands.append(_acl(target, principal, ["Read", "Describe"], ["--group", consumer_group]))
    return commands


# --- ACL sync (MM2's sync.topic.acls): which source ACLs the remote topics get -----------------


@dataclass(frozen=True)
class TopicAcl:
    """One literal ACL on a topic, in Kafka's terms (operation/permission by name: READ, ALLOW...)."""

    topic: str
    principal: str
    host: str
    operation: str
    permission: str


def remote_read_acls(source_acls: Sequence[TopicAcl], remote_topics: Mapping[str, str]) -> list[TopicAcl]:
    """The ACLs the remote topics get for `source_acls` (`remote_topics`: mirrored source topic ->
    remote topic). Like MM2's MirrorSourceConnector.targetAclBinding, narrowed to reading: an
    ALLOW or DENY of READ or ALL on a mirrored topic becomes the same permission of READ on its
    remote topic (ALL is downgraded to READ); every other operation (WRITE above all: only the
    mirror writes remote topics) and ACLs on unmirrored topics or the `*` wildcard are not copied.
    Sorted, without duplicates."""
    out = {
        TopicAcl(remote_topics[acl.topic], acl.principal, acl.host, "READ", acl.permission)
        for acl in source_acls
        if acl.topic in remote_topics
        and acl.topic != "*"
        and acl.operation in ("READ", "ALL")
        and acl.permission in ("ALLOW", "DENY")
    }
    return sorted(out, key=lambda a: (a.topic, a.principal, a.host, a.permission))
