"""Topic config sync, as MM2's `sync.topic.configs` (every `sync_topic_configs_interval_ms`, 600 s by
default, and once per `--once` run): remote topics follow their source topic's configs after
creation too, so a `retention.ms` or `cleanup.policy` change reaches the standby before a failover.

Rules (`config_changes`, pure):
- a config set on the source topic itself (`set_on_topic`: its source is DYNAMIC_TOPIC_CONFIG,
  never a static or dynamic broker default; not read-only or sensitive, not in MM2's
  `config.properties.exclude` list, `kmirror_engine.planning.target_topics.EXCLUDED_CONFIGS`) is SET on the
  remote topic when the remote's value differs;
- a config the source topic does not set but the remote topic sets on itself is DELETEd
  there (it falls back to the target broker's default), as MM2 does; excluded configs are never
  touched on either side;
- applied with `incremental_alter_configs` (only the changed keys; nothing else on the topic moves).
Only remote topics the mirror created (`kmirror_engine.planning.created_topics`) are altered, unless the flow
sets `sync_configs_of_existing_topics`. Each change is one `kmirror config_sync {json}` line on
stderr (and the `kmirror.config_sync` log); `changes` counts them for the process.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from kmirror.errors import KmirrorError
from kmirror.flow.views import FlowRoute, TopicSyncSettings
from kmirror_engine.planning.target_topics import EXCLUDED_CONFIGS, set_on_topic

log = logging.getLogger("kmirror.config_sync")
PREFIX = "kmirror config_sync "
TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ConfigChange:
    topic: str  # the remote topic
    name: str
    operation: str  # "SET" or "DELETE"
    value: str | None  # new value (None for DELETE)
    previous: str | None  # the remote's value before (None: not reported)


def _copyable(name: str, entry: Any) -> bool:
    return name not in EXCLUDED_CONFIGS and not entry.is_read_only and not entry.is_sensitive


def config_changes(topic: str, source: Mapping[str, Any], target: Mapping[str, Any]) -> list[ConfigChange]:
    """The changes that make remote `topic`'s configs follow the source's (module doc). Entries
    are confluent-kafka ConfigEntry objects by name (value, is_default, is_read_only, is_sensitive)."""
    changes = []
    for name, entry in sorted(source.items()):
        if not _copyable(name, entry):
            continue
        current = target.get(name)
        if set_on_topic(entry) and entry.value is not None:
            if current is None or current.value != str(entry.value):
                changes.append(ConfigChange(topic, name, "SET", str(entry.value), current and current.value))
        elif current is not None and set_on_topic(current) and _copyable(name, current):
            changes.append(ConfigChange(topic, name, "DELETE", None, current.value))
    for name, current in sorted(target.items()):
        if name not in source and set_on_topic(current) and _copyable(name, current):
            changes.append(ConfigChange(topic, name, "DELETE", None, current.value))
    return changes


class ConfigSync:
    """One flow's config sync; `run()` does one round and returns the changes it applied."""

    def __init__(
        self,
        route: FlowRoute,
        settings: TopicSyncSettings,
        source_admin: Any,
        target_admin: Any,
        out: TextIO | None = None,
    ) -> None:
        """Config sync of `route`'s remote topics over the clusters' admin clients (no I/O here;
        `for_flow` builds the real clients). Lines go to `out` (default stderr)."""
        self.route, self.settings, self.out = route, settings, out
        self.source_admin, self.target_admin = source_admin, target_admin
        self.changes = 0

    @classmethod
    def for_flow(
        cls, route: FlowRoute, settings: TopicSyncSettings, admin_factory: Any = None, out: TextIO | None = None
    ) -> ConfigSync:
        """`route`'s config sync over `admin_factory(endpoint)` (default `admin_client`)."""
        if admin_factory is None:
            from kmirror_engine.clients.factory import admin_client as admin_factory
        return cls(route, settings, admin_factory(route.source), admin_factory(route.target), out)

    def owned(self) -> set[str] | None:
        """Remote topics config sync may alter (None: any remote topic of the flow)."""
        if self.settings.configs_of_existing_topics:
            return None
        from kmirror_engine.planning.created_topics import CreatedTopics

        return CreatedTopics(self.route.target, self.route.source.alias, self.route.flow_id).load()

    def run(self) -> list[ConfigChange]:
        from kmirror_engine.planning.discovery import TopicDiscovery, list_topic_partitions

        route = self.route
        discovery = TopicDiscovery(self.source_admin, route.source, route.topics, route.policy, route.target.alias, 0)
        existing = list_topic_partitions(self.target_admin, route.target, TIMEOUT_S)
        owned = self.owned()
        pairs = {
            t.source_topic: t.target_topic
            for t in discovery.topics().values()
            if t.target_topic in existing and (owned is None or t.target_topic in owned)
        }
        if not pairs:
            return []
        source = _describe(self.source_admin, list(pairs), route.source.alias)
        target = _describe(self.target_admin, list(pairs.values()), route.target.alias)
        applied = []
        for source_topic, remote in sorted(pairs.items()):
            changes = config_changes(remote, source[source_topic], target[remote])
            if changes:
                self._alter(remote, changes)
                applied += changes
        return applied

    def _alter(self, remote: str, changes: list[ConfigChange]) -> None:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

        ops = [ConfigEntry(c.name, c.value, incremental_operation=AlterConfigOpType[c.operation]) for c in changes]
        resource = ConfigResource(ResourceType.TOPIC, remote, incremental_configs=ops)
        try:
            for future in self.target_admin.incremental_alter_configs([resource]).values():
                future.result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            raise KmirrorError(
                f"{self.route.flow_id}: altering configs of {remote} on {self.route.target.alias!r} "
                f"failed: {exc.args[0].str()} (grant AlterConfigs on it)"
            ) from None
        for change in changes:
            self.changes += 1
            record = {
                "flow": self.route.flow_id,
                "topic": change.topic,
                "config": change.name,
                "operation": change.operation,
                "from": change.previous,
                "to": change.value,
            }
            log.info(
                "%s: %s %s.%s (%s -> %s)",
                self.route.flow_id,
                change.operation,
                remote,
                change.name,
                change.previous,
                change.value,
            )
            print(PREFIX + json.dumps(record), file=self.out or sys.stderr, flush=True)


def _describe(admin: Any, topics: list[str], alias: str) -> dict[str, dict[str, Any]]:
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    out = {}
    for resource, future in admin.describe_configs([ConfigResource(ResourceType.TOPIC, t) for t in topics]).items():
        try:
            out[resource.name] = dict(future.result(timeout=TIMEOUT_S))
        except (KafkaException, FutureTimeout) as exc:
            raise KmirrorError(f"describing configs of {resource.name} on {alias!r} failed: {exc}") from None
    return out
