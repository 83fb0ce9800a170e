"""ACLs of the mirror principal, rendered as `kafka-acls.sh` commands (docs/security.md), and the
pure rules of ACL sync (which source ACLs the remote topics get, what a sync round adds and removes).

The list of grants is not made here: `kmirror_engine.planning.internal_topics.mirror_acls(spec,
topics)` derives it from the names the engine itself uses (its groups, the remote-topic prefix,
every internal topic, its transactional ids) and `mirror_acl_commands` renders exactly those grants,
one command per grant, so the documented ACLs and the engine's start-up check never disagree.
Pure: returns strings and plain data; nothing is executed.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kmirror.errors import KmirrorError

SIDES = ("source", "target")
# kafka-acls.sh's option for each resource type (Kafka's ResourceType names)
RESOURCE_OPTIONS = {"TOPIC": "--topic", "GROUP": "--group", "TRANSACTIONAL_ID": "--transactional-id"}
CLUSTER = "CLUSTER"


@dataclass(frozen=True)
class AclSide:
    """One cluster: where kafka-acls connects, with which admin credentials."""

    bootstrap_servers: str
    command_config: str | None = None  # client.properties with the admin's credentials


@dataclass(frozen=True)
class AclGrant:
    """One ACL the mirror principal needs: on the flow's `side` ("source" or "target"), the
    `operations` (Kafka's names: Read, Write, ...) on a resource (`resource_type` TOPIC, GROUP,
    TRANSACTIONAL_ID or CLUSTER; `pattern` LITERAL or PREFIXED), for `purpose`."""

    side: str
    resource_type: str
    name: str
    pattern: str
    operations: tuple[str, ...]
    purpose: str


def kafka_principal(security: Mapping[str, Any] | None, tls_subject: str | None = None) -> str:
    """The principal brokers see for this `security` mapping (default principal mapping rules).

    Kerberos `mirrormaker/host@REALM` -> `User:mirrormaker`; SCRAM, PLAIN -> `User:<username>`;
    OAUTHBEARER -> `User:<principal>` (the token's subject; default: the client id); mutual
    TLS -> `User:<certificate subject>` (pass `tls_subject`, e.g. `CN=mirrormaker`).
    """
    security = security or {}
    if "kerberos" in security:
        return "User:" + security["kerberos"]["principal"].split("@", 1)[0].split("/", 1)[0]
    for section in ("scram", "plain"):
        if section in security:
            return "User:" + security[section]["username"]
    if "oauthbearer" in security:  # Kafka's JWT validator takes the token's `sub` claim
        oauth = security["oauthbearer"]
        return "User:" + oauth.get("principal", oauth["client_id"])
    if tls_subject:
        return "User:" + tls_subject
    raise KmirrorError(
        "the mirror has no authenticated identity on this cluster (PLAINTEXT or server-only TLS); "
        "ACLs need kerberos, scram or a client certificate (pass its subject)"
    )


def _resource_words(grant: AclGrant) -> list[str]:
    if grant.resource_type == CLUSTER:
        return ["--cluster"]
    option = RESOURCE_OPTIONS.get(grant.resource_type)
    if option is None:
        raise KmirrorError(
            f"ACL grant {grant.name!r}: resource_type {grant.resource_type!r} cannot be rendered; "
            f"use one of {', '.join([*RESOURCE_OPTIONS, CLUSTER])}"
        )
    words = [option, grant.name]
    if grant.pattern == "PREFIXED":
        words += ["--resource-pattern-type", "prefixed"]
    elif grant.pattern != "LITERAL":
        raise KmirrorError(
            f"ACL grant {grant.name!r}: pattern {grant.pattern!r} cannot be granted; use LITERAL or PREFIXED"
        )
    return words


def acl_command(side: AclSide, principal: str, grant: AclGrant) -> str:
    """The one `kafka-acls.sh --add` command that creates `grant` for `principal` on `side`."""
    words = ["kafka-acls.sh", "--bootstrap-server", side.bootstrap_servers]
    if side.command_config:
        words += ["--command-config", side.command_config]
    words += ["--add", "--allow-principal", principal]
    for operation in grant.operations:
        words += ["--operation", operation]
    return shlex.join([*words, *_resource_words(grant)])


def mirror_acl_commands(principal: str, source: AclSide, target: AclSide, grants: Sequence[AclGrant]) -> list[str]:
    """One kafka-acls command per grant, in the grants' order, each run against its grant's side.

    `grants` is `mirror_acls(spec, topics)` (kmirror_engine): the same list the start-up check
    and the tests on a real authorizer use. Raises KmirrorError naming a grant whose side is
    neither "source" nor "target"."""
    sides = {"source": source, "target": target}
    commands = []
    for grant in grants:
        if grant.side not in sides:
            raise KmirrorError(f"ACL grant {grant.name!r}: side {grant.side!r} is neither 'source' nor 'target'")
        commands.append(acl_command(sides[grant.side], principal, grant))
    return commands


# --- ACL sync (MM2's sync.topic.acls): which source ACLs the remote topics get -----------------


@dataclass(frozen=True)
class TopicAcl:
    """One ACL on a topic, in Kafka's terms (operation/permission by name: READ, ALLOW...);
    `pattern` LITERAL (a topic, or `*` for every topic) or PREFIXED (`topic` is the prefix)."""

    topic: str
    principal: str
    host: str
    operation: str
    permission: str
    pattern: str = "LITERAL"


def synced_acls_topic(source_alias: str) -> str:
    """The target's record of the ACLs ACL sync created for remote topics of `source_alias`
    (ends in `.internal`: never mirrored itself)."""
    return f"kmirror-synced-acls.{source_alias}.internal"


def _covered(acl: TopicAcl, remote_topics: Mapping[str, str]) -> list[str]:
    """The mirrored source topics the ACL applies to."""
    if acl.pattern == "PREFIXED":
        return [topic for topic in remote_topics if topic.startswith(acl.topic)]
    if acl.pattern != "LITERAL":
        return []
    if acl.topic == "*":
        return list(remote_topics)
    return [acl.topic] if acl.topic in remote_topics else []


def remote_read_acls(source_acls: Sequence[TopicAcl], remote_topics: Mapping[str, str]) -> list[TopicAcl]:
    """The literal ACLs the remote topics get for `source_acls` (`remote_topics`: mirrored source
    topic -> remote topic). Like MM2's MirrorSourceConnector.targetAclBinding, narrowed to reading:

    - a literal ALLOW of READ or ALL on a mirrored topic becomes ALLOW READ on its remote topic
      (ALL downgraded to READ); ALLOWs on prefixes or on the `*` wildcard are not copied, so a
      remote topic is never readable by more principals than its own source ACLs name;
    - a DENY of READ or ALL becomes DENY READ on the remote topic of every mirrored topic it covers,
      literal, prefixed or `*`: a principal denied at the source stays denied on the target even
      when a copied ALLOW (of `User:*`, say) would let it read;
    - every other operation (WRITE above all: only the mirror writes remote topics) is not copied.

    Sorted, without duplicates."""
    out: set[TopicAcl] = set()
    for acl in source_acls:
        if acl.operation not in ("READ", "ALL") or acl.permission not in ("ALLOW", "DENY"):
            continue
        if acl.permission == "ALLOW" and (acl.pattern != "LITERAL" or acl.topic == "*"):
            continue
        for topic in _covered(acl, remote_topics):
            out.add(TopicAcl(remote_topics[topic], acl.principal, acl.host, "READ", acl.permission))
    return sorted(out, key=lambda a: (a.topic, a.principal, a.host, a.permission))


@dataclass(frozen=True)
class AclSyncPlan:
    """One round of ACL sync: the ACLs to create and to delete on the target, and the synced ACLs
    already gone from it (removed by hand) that only leave the record."""

    add: tuple[TopicAcl, ...]
    delete: tuple[TopicAcl, ...]
    forget: tuple[TopicAcl, ...] = ()


def plan_acl_sync(
    wanted: Iterable[TopicAcl], present: Iterable[TopicAcl], synced: Iterable[TopicAcl], remote_topics: Iterable[str]
) -> AclSyncPlan:
    """What one round changes. `wanted`: `remote_read_acls` of the source's listing now;
    `present`: the target's topic ACLs; `synced`: the ACLs this flow's sync created earlier and
    has not deleted since (its record on the target); `remote_topics`: this flow's remote topics.

    Adds every wanted ACL the target lacks. Deletes (the revocation rule, docs/security.md) only
    an ACL the sync itself created (in `synced`) that is no longer wanted, still present, and on a
    remote topic this flow mirrors now: an ACL an operator added by hand is never in `synced`
    (unless identical to one the sync created, which is then the same binding), and the ACLs of a
    topic the flow stopped mirroring are left alone rather than guessed at."""
    wanted_set, present_set, managed = set(wanted), set(present), set(remote_topics)
    add = sorted((acl for acl in wanted_set if acl not in present_set), key=_order)
    revoked = [acl for acl in set(synced) - wanted_set if acl.topic in managed and acl.pattern == "LITERAL"]
    delete = sorted((acl for acl in revoked if acl in present_set), key=_order)
    forget = sorted((acl for acl in revoked if acl not in present_set), key=_order)
    return AclSyncPlan(tuple(add), tuple(delete), tuple(forget))


def _order(acl: TopicAcl) -> tuple[str, ...]:
    return (acl.topic, acl.principal, acl.host, acl.operation, acl.permission, acl.pattern)
