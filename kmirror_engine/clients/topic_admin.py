"""Internal topics on a cluster: created once, with their layout and the cluster's sizing, before
anything writes them.

The mirror's side work (offset syncs and their snapshots, checkpoints, heartbeats, the registry
of created topics, ...) each keeps one topic, whose layout the room names
(`kmirror_engine.planning.internal_names.layout`); `ensure_topic` is how each comes to exist,
with the replication factor and min.insync.replicas of the cluster's `internal_topics` sizing
(`kmirror.flow.internal_sizing`). A topic that exists with another layout is reported (one
`kmirror warning` line naming the topic, what was found and what is wanted), never altered:
changing a live topic's replicas or partitions is the operator's decision.

A topic created here (and a mirror's target topic, `kmirror_engine.planning.target_topics`) is
waited for until every partition has a leader (`await_leaders`, up to the admin timeout):
CreateTopics answers once the controller committed the topic, and a busy broker can serve it much
later; a producer that asks meanwhile is told UNKNOWN_TOPIC_OR_PART and, after
`topic.metadata.propagation.max.ms` (30 s), fails every record queued for it. Seen in CI: a KRaft
broker on a loaded 2-core machine. Still leaderless at the deadline: logged, and the caller goes on
(the producer's own wait and failure stay the backstop).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

from kmirror.errors import KmirrorError
from kmirror.flow.spec import ClusterEndpoint

log = logging.getLogger("kmirror.internal_topics")
TIMEOUT_S = 30.0


class InternalTopicError(KmirrorError):
    """An internal topic could not be created (names the topic, the cluster and the cause)."""


def wanted_layout(endpoint: ClusterEndpoint, config: dict[str, str], partitions: int = 1) -> dict[str, Any]:
    """What an internal topic on `endpoint` is created with: partitions, replication_factor (-1:
    the broker's default) and configs (the topic's layout plus the cluster's min.insync.replicas)."""
    sizing = endpoint.internal_topics
    return {
        "partitions": partitions,
        "replication_factor": sizing.replication_factor,
        "config": {**config, **sizing.topic_config()},
    }


def ensure_topic(
    endpoint: ClusterEndpoint, topic: str, config: dict[str, str], partitions: int = 1, out: TextIO | None = None
) -> None:
    """Create internal `topic` on `endpoint` unless it exists (`wanted_layout`); an existing one
    whose layout differs is reported on `out` (stderr), not changed. Raises InternalTopicError
    when it cannot be created."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    from kmirror_engine.clients.factory import new_admin

    wanted = wanted_layout(endpoint, config, partitions)
    admin = new_admin(endpoint, role="internal-topics-admin")
    existing = admin.list_topics(timeout=TIMEOUT_S).topics
    if topic in existing:
        report_layout(endpoint, topic, layout_mismatch(admin, existing[topic], wanted), out)
        return
    new = NewTopic(topic, wanted["partitions"], wanted["replication_factor"], config=wanted["config"])
    try:
        admin.create_topics([new])[topic].result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise InternalTopicError(f"cannot create {topic} on {endpoint.alias}: {exc}") from exc
        return
    await_leaders(admin, endpoint, {topic: wanted["partitions"]}, TIMEOUT_S)


LEADER_POLL_S = 0.2


def leaderless(metadata: Any, wanted: Mapping[str, int]) -> list[str]:
    """`topic[partition]` (or `topic`) of `wanted` (topic -> partitions) that `metadata` (a
    ClusterMetadata) does not show yet with a leader and no error."""
    out = []
    for name, count in sorted(wanted.items()):
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None or len(topic.partitions) < count:
            out.append(name)
            continue
        out += [
            f"{name}[{p}]"
            for p in range(count)
            if (part := topic.partitions.get(p)) is None or part.error is not None or part.leader < 0
        ]
    return out


def await_leaders(admin: Any, endpoint: ClusterEndpoint, wanted: Mapping[str, int], timeout_s: float) -> None:
    """Wait until every partition of `wanted` (topic -> partitions) has a leader in `endpoint`'s
    metadata, or `timeout_s` passed (logged, not raised: see the module doc)."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            waiting = leaderless(admin.list_topics(timeout=timeout_s), wanted)
        except KafkaException as exc:
            waiting = [f"metadata unreadable: {exc.args[0]}"]
        if not waiting:
            return
        if time.monotonic() >= deadline:
            log.warning(
                "topic partitions still without a leader on %s %.0f s after creation: %s; going on "
                "(a producer waits for them in its turn)",
                endpoint.alias,
                timeout_s,
                ", ".join(waiting[:10]),
            )
            return
        time.sleep(LEADER_POLL_S)


def layout_mismatch(admin: Any, metadata: Any, wanted: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Field -> (found, wanted) for each way the existing topic differs from `wanted`: partitions,
    replication_factor (unless the broker's default is wanted) and each wanted config. Configs
    are read only where the principal may (DescribeConfigs, not among the grants the mirror
    needs): without it, partitions and replicas are still compared (metadata needs Describe)."""
    found: dict[str, tuple[Any, Any]] = {}
    partitions = metadata.partitions
    if len(partitions) != wanted["partitions"]:
        found["partitions"] = (len(partitions), wanted["partitions"])
    replicas = {len(p.replicas) for p in partitions.values()}
    rf = wanted["replication_factor"]
    if rf != -1 and replicas and replicas != {rf}:
        found["replication_factor"] = (max(replicas), rf)
    if wanted["config"]:
        configs = _topic_configs(admin, metadata.topic)
        for key, value in sorted(wanted["config"].items()):
            if configs is not None and configs.get(key) != value:
                found[key] = (configs.get(key), value)
    return found


def _topic_configs(admin: Any, topic: str) -> dict[str, str] | None:
    """The topic's configs, or None when they cannot be read (not authorized, broker down)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic)
    try:
        entries = admin.describe_configs([resource], request_timeout=TIMEOUT_S)[resource].result(timeout=TIMEOUT_S)
    except Exception as exc:  # the check is advice: creating and using the topic go on
        log.info("cannot read the configs of %s to compare its layout: %s", topic, exc)
        return None
    return {name: entry.value for name, entry in entries.items()}


def report_layout(endpoint: ClusterEndpoint, topic: str, mismatch: dict[str, tuple[Any, Any]], out: Any) -> None:
    """One `kmirror warning {json}` line naming the topic, what was found and what is wanted."""
    if not mismatch:
        return
    found = ", ".join(f"{key}={was}" for key, (was, _) in mismatch.items())
    wanted = ", ".join(f"{key}={want}" for key, (_, want) in mismatch.items())
    message = (
        f"internal topic {topic!r} on {endpoint.alias} exists with {found}; wanted {wanted}; "
        "left as it is (alter or recreate it to apply the cluster's internal_topics settings)"
    )
    log.warning("%s", message)
    record = {
        "event": "internal_topic_layout",
        "cluster": endpoint.alias,
        "topic": topic,
        "found": {key: was for key, (was, _) in mismatch.items()},
        "wanted": {key: want for key, (_, want) in mismatch.items()},
        "message": message,
    }
    print("kmirror warning " + json.dumps(record, sort_keys=True), file=out or sys.stderr, flush=True)
