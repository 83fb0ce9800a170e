"""Replication policies: how a topic is named on the cluster it is mirrored to.

Same meaning as MirrorMaker 2's `ReplicationPolicy`: `default` names a remote topic
`<source><separator><topic>` and can tell a remote topic's source cluster and upstream name
back (which is what stops loops in active/active pairs); `identity` keeps names unchanged
and therefore cannot detect cycles by name (the planner rejects identity cycles instead).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

from kmirror.errors import Problem, ValidationError
from kmirror.option_table import unknown_keys

HEARTBEATS_TOPIC = "heartbeats"
CHECKPOINTS_SUFFIX = ".checkpoints.internal"
OFFSET_SYNCS_PREFIX = "mm2-offset-syncs."
POLICY_TYPES = ("default", "identity")
_SEPARATOR_RE = re.compile(r"^[A-Za-z0-9._-]{1,8}$")


class ReplicationPolicy(Protocol):
    """Strategy interface; every method is pure."""

    def format_remote_topic(self, source_alias: str, topic: str) -> str: ...

    def topic_source(self, topic: str) -> str | None: ...

    def upstream_topic(self, topic: str) -> str | None: ...

    def to_dict(self) -> dict[str, Any]: ...


def original_topic(policy: ReplicationPolicy, topic: str) -> str:
    """The name the topic had on the cluster where it was first produced."""
    upstream = policy.upstream_topic(topic)
    if upstream is None or upstream == topic:
        return topic
    return original_topic(policy, upstream)


def heartbeats_topic() -> str:
    return HEARTBEATS_TOPIC


def checkpoints_topic(source_alias: str) -> str:
    """MM2's checkpoints topic on the target for groups of `source_alias`."""
    return f"{source_alias}{CHECKPOINTS_SUFFIX}"


def offset_syncs_topic(cluster_alias: str) -> str:
    return f"{OFFSET_SYNCS_PREFIX}{cluster_alias}.internal"


def is_checkpoints_topic(topic: str) -> bool:
    return topic.endswith(CHECKPOINTS_SUFFIX)


def is_offset_syncs_topic(topic: str) -> bool:
    return topic.startswith(OFFSET_SYNCS_PREFIX) and topic.endswith(".internal")


def is_heartbeats_topic(policy: ReplicationPolicy, topic: str) -> bool:
    return original_topic(policy, topic) == HEARTBEATS_TOPIC


def is_internal_topic(topic: str) -> bool:
    """Kafka's, Connect's and MirrorMaker's own topics: never mirrored as data."""
    return (
        topic.startswith("__")
        or topic.startswith(".")
        or topic.endswith("-internal")
        or topic.endswith(".internal")
        or is_checkpoints_topic(topic)
        or is_offset_syncs_topic(topic)
    )


def is_cycle(policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """True when `topic` already came from `target_alias` (mirroring it would loop back).

    Follows the topic's upstream chain as MM2's `MirrorSourceConnector.isCycle` does.
    """
    source = policy.topic_source(topic)
    if source is None:
        return False
    if source == target_alias:
        return True
    upstream = policy.upstream_topic(topic)
    if upstream is None or upstream == topic:
        return False
    return is_cycle(policy, upstream, target_alias)


@dataclass(frozen=True)
class DefaultReplicationPolicy:
    """`<source><separator><topic>`, MirrorMaker 2's default."""

    separator: str = "."

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        head, sep, _ = topic.partition(self.separator)
        return head if sep and head else None

    def upstream_topic(self, topic: str) -> str | None:
        source = self.topic_source(topic)
        if source is None:
            return None
        return topic[len(source) + len(self.separator) :]

    def to_dict(self) -> dict[str, Any]:
        return {"type": "default", "separator": self.separator}


@dataclass(frozen=True)
class IdentityReplicationPolicy:
    """Keeps topic names (MM2's `IdentityReplicationPolicy`); heartbeats are still prefixed
    so every cluster can see its upstream hops."""

    source_alias: str | None = None
    separator: str = "."

    def _looks_like_heartbeats(self, topic: str) -> bool:
        return topic.endswith(HEARTBEATS_TOPIC)

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        if self._looks_like_heartbeats(topic):
            return f"{source_alias}{self.separator}{topic}"
        return topic

    def topic_source(self, topic: str) -> str | None:
        if self._looks_like_heartbeats(topic):
            return DefaultReplicationPolicy(self.separator).topic_source(topic)
        return self.source_alias

    def upstream_topic(self, topic: str) -> str | None:
        if self._looks_like_heartbeats(topic):
            return DefaultReplicationPolicy(self.separator).upstream_topic(topic)
        return topic

    def to_dict(self) -> dict[str, Any]:
        return {"type": "identity"}


def policy_problems(config: Any, path: str) -> list[Problem]:
    """Every problem with a `replication_policy` mapping, each naming its field."""
    if not isinstance(config, dict):
        return [Problem(path, f"must be a mapping like {{type: default, separator: '.'}}, got {config!r}")]
    problems = unknown_keys(config, ("type", "separator"), path, list_allowed=True)
    kind = config.get("type", "default")
    if kind not in POLICY_TYPES:
        problems.append(Problem(f"{path}.type", f"unknown policy {kind!r}; use one of: {', '.join(POLICY_TYPES)}"))
    separator = config.get("separator", ".")
    if not isinstance(separator, str) or not _SEPARATOR_RE.fullmatch(separator):
        problems.append(
            Problem(f"{path}.separator", f"bad separator {separator!r}; use 1-8 characters of [A-Za-z0-9._-], e.g. '.'")
        )
    return problems


def policy_from_config(config: dict[str, Any] | None, source_alias: str | None = None) -> ReplicationPolicy:
    """Build a policy from `{type, separator}`; raises ValidationError naming the bad field."""
    config = {} if config is None else config
    problems = policy_problems(config, "replication_policy")
    if problems:
        raise ValidationError(problems)
    separator = config.get("separator", ".")
    if config.get("type", "default") == "identity":
        return IdentityReplicationPolicy(source_alias=source_alias, separator=separator)
    return DefaultReplicationPolicy(separator=separator)
