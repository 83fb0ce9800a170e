"""Start-up check of the mirror's access to its internal topics on the target.

The offset-syncs topic (and its snapshots) must be readable and writable, or batches fail; the
checkpoints and heartbeats topics are side work that never fails a batch, so a missing ACL
there would only show as a failure counter. Either way the operator should learn it at start,
with the topic and the ACL to grant, not from a failed batch or a growing metric.

Kafka tells a client what it may do with a topic (`describe_topics(...,
include_authorized_operations=True)`, KIP-430); a broker that does not say (tansu answers
with nothing) is not checked. A problem is a warning, never an error: ACLs can be granted
while the mirror runs, and the operations themselves report their failures.
"""

from __future__ import annotations

import json
import logging
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from kmirror.flowspec import FlowSpec
from kmirror.replication_policy import HEARTBEATS_TOPIC, checkpoints_topic, offset_syncs_topic

log = logging.getLogger("kmirror.internal_topics")
PREFIX = "kmirror warning "
ADMIN_TIMEOUT_S = 15.0


@dataclass(frozen=True)
class AccessProblem:
    topic: str
    purpose: str
    missing: tuple[str, ...]  # ACL operation names (Kafka's spelling: Read, Write, Create, ...)
    grant: str  # the kafka-acls.sh command that fixes it

    def message(self, spec: FlowSpec) -> str:
        return (
            f"flow {spec.id}: the mirror lacks {'/'.join(self.missing)} on internal topic {self.topic!r} "
            f"on {spec.target.alias} ({self.purpose}); grant it: {self.grant}"
        )


def needed_access(spec: FlowSpec) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Internal topic -> (what it is for, ACL operations the mirror needs on it)."""
    from kmirror_engine.failover.sync_snapshots import snapshot_topic

    source = spec.source.alias
    out: dict[str, tuple[str, tuple[str, ...]]] = {
        offset_syncs_topic(source): ("offset syncs; without them batches fail", ("Read", "Write")),
        snapshot_topic(source): ("offset-sync snapshots; without them restarts read the whole history",
                                 ("Read", "Write")),
    }  # fmt: skip
    if spec.option("emit_checkpoints"):
        out[checkpoints_topic(source)] = ("MM2 checkpoints", ("Read", "Write"))
    if spec.option("emit_heartbeats"):
        out[HEARTBEATS_TOPIC] = ("MM2 heartbeats", ("Write",))
    return out


def principal_hint(config: Mapping[str, Any]) -> str:
    """The principal the brokers most likely see (default principal mapping), for the hint."""
    if config.get("sasl.username"):
        return f"User:{config['sasl.username']}"
    if config.get("sasl.kerberos.principal"):
        return "User:" + str(config["sasl.kerberos.principal"]).split("@", 1)[0].split("/", 1)[0]
    return "User:<the mirror's principal>"


def _grant(spec: FlowSpec, topic: str, operations: tuple[str, ...]) -> str:
    words = ["kafka-acls.sh", "--bootstrap-server", spec.target.bootstrap_servers, "--add",
             "--allow-principal", principal_hint(spec.target.config)]  # fmt: skip
    for operation in operations:
        words += ["--operation", operation]
    return shlex.join([*words, "--topic", topic])


def _names(operations: Any) -> set[str] | None:
    if operations is None:
        return None  # the broker did not say
    names = {getattr(op, "name", str(op)).upper() for op in operations}
    return {"READ", "WRITE", "CREATE", "DESCRIBE"} if "ALL" in names else names


def check_internal_topic_access(spec: FlowSpec, admin: Any) -> list[AccessProblem]:
    """Problems found with the target's answers; [] when the broker does not report operations."""
    from confluent_kafka import KafkaError, TopicCollection

    needs = needed_access(spec)
    futures = admin.describe_topics(
        TopicCollection(sorted(needs)), include_authorized_operations=True, request_timeout=ADMIN_TIMEOUT_S
    )
    problems: list[AccessProblem] = []
    missing_topics: list[str] = []
    for topic, (purpose, operations) in sorted(needs.items()):
        try:
            allowed = _names(futures[topic].result(timeout=ADMIN_TIMEOUT_S).authorized_operations)
        except Exception as exc:  # the answer's error tells which ACL is missing, if any
            code = exc.args[0].code() if exc.args and hasattr(exc.args[0], "code") else None
            if code == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                wanted = ("Describe", *operations)
                problems.append(AccessProblem(topic, purpose, wanted, _grant(spec, topic, wanted)))
            elif code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                missing_topics.append(topic)
            continue
        if allowed is None:
            continue
        lacking = tuple(op for op in operations if op.upper() not in allowed)
        if lacking:
            problems.append(AccessProblem(topic, purpose, lacking, _grant(spec, topic, lacking)))
    if missing_topics:
        problems.extend(_creation_problems(spec, admin, missing_topics, needs))
    return problems


def _creation_problems(
    spec: FlowSpec, admin: Any, topics: list[str], needs: Mapping[str, tuple[str, tuple[str, ...]]]
) -> list[AccessProblem]:
    """Topics that do not exist yet: the mirror creates them, which needs Create on the cluster."""
    try:
        allowed = _names(
            admin.describe_cluster(include_authorized_operations=True, request_timeout=ADMIN_TIMEOUT_S)
            .result(timeout=ADMIN_TIMEOUT_S)
            .authorized_operations
        )
    except Exception:  # not knowing is not a problem to report; creating the topic will say
        return []
    if allowed is None or "CREATE" in allowed:
        return []
    return [
        AccessProblem(topic, needs[topic][0] + "; it does not exist yet and Create on the cluster is not granted",
                      ("Create",), _grant(spec, topic, ("Create",)))
        for topic in topics
    ]  # fmt: skip


def report_internal_topic_access(spec: FlowSpec, admin: Any, out: TextIO | None = None) -> list[AccessProblem]:
    """Check and print one `kmirror warning {json}` line per problem (stderr: the sink's commit
    runs in a worker whose logging is not configured). A failed check is itself one warning."""
    try:
        problems = check_internal_topic_access(spec, admin)
    except Exception as exc:
        _write(out, {"event": "internal_topic_access_unchecked", "flow": spec.id, "error": str(exc)})
        return []
    for problem in problems:
        log.warning("%s", problem.message(spec))
        _write(out, {"event": "internal_topic_access", "flow": spec.id, "cluster": spec.target.alias,
                     "topic": problem.topic, "missing": list(problem.missing), "grant": problem.grant,
                     "message": problem.message(spec)})  # fmt: skip
    return problems


def _write(out: TextIO | None, record: dict[str, Any]) -> None:
    print(PREFIX + json.dumps(record, sort_keys=True), file=out or sys.stderr, flush=True)
