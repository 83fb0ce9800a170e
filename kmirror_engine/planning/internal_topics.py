"""Start-up check of the mirror's access to its internal topics on the target.

The offset-syncs topic (and its snapshots) must be readable and writable, or batches fail; the
checkpoints and heartbeats topics are side work that never fails a batch, so a missing ACL
there would only show as a failure counter. Either way the operator should learn it at start,
with the topic and the ACL to grant, not from a failed batch or a growing metric.

Kafka tells a client what it may do with a topic (`describe_topics(...,
include_authorized_operations=True)`, KIP-430); a broker that does not say (tansu answers
with nothing) is not checked. A topic that does not exist yet is asked whether it may be
created and, when the mirror reads it, whether it may be read (`_read_refused`). At start
(`spark_app.main.run_flow`) a problem refuses the flow before anything is copied
(`InternalTopicAccess.require`): since side work never fails a delivered batch, a missing
ACL would otherwise only fail quietly after every batch. The failover listener's own check
later only warns; a check that itself fails only warns.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from kmirror.errors import KmirrorError
from kmirror.flow.replication_policy import offset_syncs_topic
from kmirror.flow.spec import ClusterEndpoint, FlowSpec
from kmirror.security.acls import AclGrant, AclSide, acl_command
from kmirror_engine.planning.internal_names import (
    flow_internal_topics,
    offsets_group,
    reader_group,
    snapshot_topic,
    transactional_id,
)

log = logging.getLogger("kmirror.internal_topics")
PREFIX = "kmirror warning "
ADMIN_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class AccessProblem:
    topic: str
    purpose: str
    missing: tuple[str, ...]  # ACL operation names (Kafka's spelling: Read, Write, Create, ...)
    grant: str  # the kafka-acls.sh command that fixes it

    def message(self, flow_id: str, cluster: str) -> str:
        """The problem of flow `flow_id` on its target `cluster` (alias), with the fix."""
        return (
            f"flow {flow_id}: the mirror lacks {'/'.join(self.missing)} on internal topic {self.topic!r} "
            f"on {cluster} ({self.purpose}); grant it: {self.grant}"
        )


def needed_access(spec: FlowSpec) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Internal topic (and the flow's dead-letter topic) -> (what it is for, ACL operations the
    mirror needs on it), from the room (`internal_names.flow_internal_topics`): `mirror_acls`
    grants them, the start-up check asks for them."""
    return {t.name: (t.purpose, t.operations) for t in flow_internal_topics(spec).values() if t.checked_at_start}


def mirror_acls(spec: FlowSpec, source_topics: list[str]) -> list[AclGrant]:
    """Every ACL the mirror principal of `spec` needs, from the names the engine itself uses
    (its group, the remote-topic prefix of its replication policy, its internal topics, its
    transactional ids): on the source, read and describe `source_topics` (literal: a topic
    selection is a regular expression, which ACLs cannot express) and commit its group; on the
    target, create and write the remote topics (Alter: growing them; AlterConfigs: config sync)
    and create/read/write each internal topic. Creating topics needs no cluster-wide Create
    (CreateTopics accepts Create on the topic). Not listed: the application groups whose
    offsets checkpoints read (Describe on those groups on the source) and that group sync
    writes (Read on them on the target): they follow the flow's `groups` and are documented in
    docs/security.md. With `sync_topic_acls`, ACL sync's own needs are listed too: Describe on
    the source cluster (DescribeAcls), Alter on the target cluster (CreateAcls, DeleteAcls) and
    its record topic. `kmirror.security.acls.mirror_acl_commands` renders exactly this list."""
    remote_prefix = spec.policy.format_remote_topic(spec.source.alias, "")
    grants = [
        AclGrant("source", "TOPIC", topic, "LITERAL", ("Read", "Describe", "DescribeConfigs"), "the mirrored topic")
        for topic in sorted(source_topics)
    ]
    grants.append(
        AclGrant(
            "source",
            "GROUP",
            spec.consumer_group,
            "LITERAL",
            ("Read", "Describe"),
            "the mirror's committed source positions",
        )
    )
    grants.append(
        AclGrant(
            "target",
            "TOPIC",
            remote_prefix,
            "PREFIXED",
            ("Create", "Write", "Describe", "DescribeConfigs", "Alter", "AlterConfigs"),
            "the remote topics",
        )
    )
    internal = flow_internal_topics(spec)
    # the topics the mirror creates (by name), then those it only uses (the control topic)
    for internal_topic in sorted(internal.values(), key=lambda t: (not t.checked_at_start, t.name)):
        created = ("Create", "Describe") if internal_topic.checked_at_start else ()
        wanted = tuple(dict.fromkeys((*created, *internal_topic.operations, "Describe")))
        grants.append(AclGrant("target", "TOPIC", internal_topic.name, "LITERAL", wanted, internal_topic.purpose))
        if internal_topic.reader_group is None:
            continue
        # its readers (offset syncs, snapshots, the registry) consume with this group id, and a
        # consumer with a group id asks its coordinator: Describe on the group, or the read fails
        grants.append(
            AclGrant(
                "target",
                "GROUP",
                internal_topic.reader_group,
                "LITERAL",
                ("Read", "Describe"),
                f"reading {internal_topic.name}",
            )
        )
    if spec.exactly_once:
        prefix = transactional_id(spec.id, 0).rsplit("-", 1)[0]
        grants.append(
            AclGrant(
                "target", "TRANSACTIONAL_ID", prefix, "PREFIXED", ("Write", "Describe"), "exactly-once transactions"
            )
        )
        grants.append(
            AclGrant(
                "target",
                "GROUP",
                offsets_group(spec.id),
                "LITERAL",
                ("Read", "Describe"),
                "exactly-once source positions",
            )
        )
    forward = spec.checkpoints.reverse_of
    if forward is not None and spec.checkpoints.emit:
        # a reverse flow reads the forward flow's offset syncs and their snapshots on its source
        # (the forward flow's target) and the groups committed there on the forward remote topics
        for topic in (offset_syncs_topic(forward), snapshot_topic(forward)):
            grants.append(
                AclGrant(
                    "source",
                    "TOPIC",
                    topic,
                    "LITERAL",
                    ("Read", "Describe"),
                    "the forward flow's offset syncs (reverse checkpoints)",
                )
            )
            grants.append(
                AclGrant("source", "GROUP", reader_group(topic), "LITERAL", ("Read", "Describe"), f"reading {topic}")
            )
    if spec.topic_sync.acls:
        grants.append(
            AclGrant(
                "source", "CLUSTER", "kafka-cluster", "LITERAL", ("Describe",), "ACL sync lists the source's topic ACLs"
            )
        )
        grants.append(
            AclGrant(
                "target",
                "CLUSTER",
                "kafka-cluster",
                "LITERAL",
                ("Alter",),
                "ACL sync creates and revokes ACLs of remote topics",
            )
        )
    return grants


def principal_hint(config: Mapping[str, Any]) -> str:
    """The principal the brokers most likely see (default principal mapping), for the hint."""
    if config.get("sasl.username"):
        return f"User:{config['sasl.username']}"
    if config.get("sasl.oauthbearer.client.id"):
        return f"User:{config['sasl.oauthbearer.client.id']}"
    if config.get("sasl.kerberos.principal"):
        return "User:" + str(config["sasl.kerberos.principal"]).split("@", 1)[0].split("/", 1)[0]
    return "User:<the mirror's principal>"


def _grant(target: ClusterEndpoint, topic: str, operations: tuple[str, ...]) -> str:
    """The literal grant on `target`, rendered as `kafka acls` renders mirror_acls."""
    grant = AclGrant("target", "TOPIC", topic, "LITERAL", operations, "")
    return acl_command(AclSide(target.bootstrap_servers), principal_hint(target.config), grant)


def _names(operations: Any) -> set[str] | None:
    if operations is None:
        return None  # the broker did not say
    names = {getattr(op, "name", str(op)).upper() for op in operations}
    return {"READ", "WRITE", "CREATE", "DESCRIBE"} if "ALL" in names else names


@dataclass(frozen=True)
class InternalTopicAccess:
    """The start-up check of one flow's access to its internal topics: the flow's id, its target
    and what the mirror needs there (`needed_access`: topic -> (what it is for, ACL operations)).
    No I/O here: each call is given the target's admin client; `for_flow(spec)` builds the flow's."""

    flow_id: str
    target: ClusterEndpoint
    needs: Mapping[str, tuple[str, tuple[str, ...]]]

    @classmethod
    def for_flow(cls, spec: FlowSpec) -> InternalTopicAccess:
        return cls(spec.id, spec.target, needed_access(spec))

    def message(self, problem: AccessProblem) -> str:
        return problem.message(self.flow_id, self.target.alias)

    def check(self, admin: Any) -> list[AccessProblem]:
        """Problems found with the target's answers; [] when the broker does not report operations."""
        from confluent_kafka import KafkaError, TopicCollection

        needs, target = self.needs, self.target
        futures = admin.describe_topics(
            TopicCollection(sorted(needs)), include_authorized_operations=True, request_timeout=ADMIN_TIMEOUT_S
        )
        problems: list[AccessProblem] = []
        missing_topics: list[str] = []
        for topic, (purpose, operations) in sorted(needs.items()):
            try:
                allowed = _names(futures[topic].result(timeout=ADMIN_TIMEOUT_S).authorized_operations)
            except Exception as exc:  # the answer's error tells which ACL is missing, if any
                code = _error_code(exc)
                if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    # without Describe Kafka does not say whether the topic exists: grant what
                    # creating and using it needs (mirror_acls lists the same)
                    wanted = ("Create", "Describe", *operations)
                    problems.append(AccessProblem(topic, purpose, wanted, _grant(target, topic, wanted)))
                elif code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    missing_topics.append(topic)
                continue
            if allowed is None:
                continue
            lacking = tuple(op for op in operations if op.upper() not in allowed)
            if lacking:
                problems.append(AccessProblem(topic, purpose, lacking, _grant(target, topic, lacking)))
        if missing_topics:
            problems.extend(_creation_problems(target, admin, missing_topics, needs))
        return problems

    def report(self, admin: Any, out: TextIO | None = None) -> list[AccessProblem]:
        """Check and print one `kmirror warning {json}` line per problem (stderr: the sink's commit
        runs in a worker whose logging is not configured). A failed check is itself one warning."""
        try:
            problems = self.check(admin)
        except Exception as exc:
            _write(out, {"event": "internal_topic_access_unchecked", "flow": self.flow_id, "error": str(exc)})
            return []
        for problem in problems:
            log.warning("%s", self.message(problem))
            _write(
                out,
                {
                    "event": "internal_topic_access",
                    "flow": self.flow_id,
                    "cluster": self.target.alias,
                    "topic": problem.topic,
                    "missing": list(problem.missing),
                    "grant": problem.grant,
                    "message": self.message(problem),
                },
            )
        return problems

    def require(self, admin: Any, out: TextIO | None = None) -> None:
        """Refuse to start copying without the internal-topic ACLs the mirror needs (issue 26).

        A missing ACL there makes side work fail after every delivered batch, forever; found at
        start, it is one clear error instead. Raises KmirrorError naming each topic, the missing
        operations and the `kafka-acls.sh` command that grants them; a broker that does not report
        authorized operations, or a check that itself fails, is not refused (warned about).
        """
        problems = self.report(admin, out)
        if problems:
            lines = "\n".join(f"  - {self.message(p)}" for p in problems)
            raise KmirrorError(f"flow {self.flow_id}: refusing to start without the ACLs the mirror needs:\n{lines}")


def _creation_problems(
    target: ClusterEndpoint, admin: Any, topics: list[str], needs: Mapping[str, tuple[str, tuple[str, ...]]]
) -> list[AccessProblem]:
    """Topics that do not exist yet: the mirror creates them, which needs Create on the topic or
    the cluster. Asked exactly with a validate-only CreateTopics (authorized, never applied). A
    topic it may create but needs to read is then asked for Read too (`_read_refused`): a grant
    that covers creating it (a remote-topic prefix such as `west.` covers
    `west.checkpoints.internal`) need not cover reading it."""
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import NewTopic

    try:
        futures = admin.create_topics(
            [NewTopic(topic, 1) for topic in topics], validate_only=True, request_timeout=ADMIN_TIMEOUT_S
        )
    except Exception:  # not knowing is not a problem to report; creating the topic will say
        return []
    refused, creatable = [], []
    for topic in topics:
        try:
            futures[topic].result(timeout=ADMIN_TIMEOUT_S)
            creatable.append(topic)
        except Exception as exc:
            code = _error_code(exc)
            if code in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                refused.append(topic)
    problems = [
        AccessProblem(
            topic,
            needs[topic][0] + "; it does not exist yet and the mirror may not create it",
            ("Create",),
            _grant(target, topic, ("Create",)),
        )
        for topic in refused
    ]
    for topic in creatable:
        if "Read" in needs[topic][1] and _read_refused(admin, topic):
            problems.append(
                AccessProblem(
                    topic,
                    needs[topic][0] + "; the mirror may create it but not read it",
                    ("Read",),
                    _grant(target, topic, ("Read",)),
                )
            )
    return problems


def _error_code(exc: BaseException) -> Any:
    return exc.args[0].code() if exc.args and hasattr(exc.args[0], "code") else None


def _read_refused(admin: Any, topic: str) -> bool:
    """Whether the broker refuses Read on `topic`, which does not exist yet.

    Kafka keeps no authorized operations for a topic that does not exist, and the mirror may not
    list ACLs. An OffsetCommit answers instead, without changing anything: the broker checks Read
    on the group, then Read on the topic (TOPIC_AUTHORIZATION_FAILED), and only then whether the
    topic exists (UNKNOWN_TOPIC_OR_PART: nothing is committed). The group is the topic's reader
    group, which the readers never commit to. Any other answer is not knowing: False."""
    from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, TopicPartition

    request = ConsumerGroupTopicPartitions(reader_group(topic), [TopicPartition(topic, 0, 0)])
    try:
        [future] = admin.alter_consumer_group_offsets([request], request_timeout=ADMIN_TIMEOUT_S).values()
        answer = future.result(timeout=ADMIN_TIMEOUT_S)
    except Exception as exc:
        return bool(_error_code(exc) == KafkaError.TOPIC_AUTHORIZATION_FAILED)
    errors = [p.error.code() for p in answer.topic_partitions if p.error is not None]
    return KafkaError.TOPIC_AUTHORIZATION_FAILED in errors


def _write(out: TextIO | None, record: dict[str, Any]) -> None:
    print(PREFIX + json.dumps(record, sort_keys=True), file=out or sys.stderr, flush=True)
