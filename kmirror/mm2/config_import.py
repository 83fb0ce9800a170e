"""MirrorMaker 2 / MirrorMaker 1 configuration mapped onto a topology file (issue 23).

`import_mm2(props)` and `import_mm1(consumer, producer, whitelist)` return the topology (a plain
mapping, ready for `yaml.safe_dump`) and every property that could not be carried over, with the
reason. Nothing is dropped silently; secret values never appear in either. Pure: no Kafka client.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SECRET_RE = re.compile(r"password|secret|jaas|sasl\.jaas|token|credential|keystore\.key", re.IGNORECASE)
_FLOW_KEY_RE = re.compile(r"^([A-Za-z0-9._-]+)->([A-Za-z0-9._-]+)\.(.+)$")
# Client properties librdkafka understands with the same name and meaning as the Java client.
CLIENT_KEYS = frozenset(
    {
        "acks",
        "batch.size",
        "linger.ms",
        "compression.type",
        "client.id",
        "enable.idempotence",
        "max.in.flight.requests.per.connection",
        "request.timeout.ms",
        "message.max.bytes",
        "fetch.min.bytes",
        "fetch.max.bytes",
        "max.partition.fetch.bytes",
        "fetch.wait.max.ms",
        "isolation.level",
        "receive.buffer.bytes",
        "send.buffer.bytes",
        "retry.backoff.ms",
        "session.timeout.ms",
        "heartbeat.interval.ms",
        "max.poll.interval.ms",
        "client.rack",
    }
)
_BOOL_SETTINGS = {
    "emit.checkpoints.enabled": "emit_checkpoints",
    "emit.heartbeats.enabled": "emit_heartbeats",
    "sync.group.offsets.enabled": "sync_group_offsets",
    "sync.topic.configs.enabled": "sync_topic_configs",
    "sync.topic.acls.enabled": "sync_topic_acls",
}
_SECONDS_SETTINGS = {
    "emit.checkpoints.interval.seconds": "checkpoint_interval_ms",
    "emit.heartbeats.interval.seconds": "heartbeat_interval_ms",
    "sync.topic.configs.interval.seconds": "sync_topic_configs_interval_ms",
    "sync.topic.acls.interval.seconds": "sync_topic_acls_interval_ms",
}
_INT_SETTINGS = {"replication.factor": "replication_factor", "offset.lag.max": "offset_lag_max"}
_LIST_SETTINGS = {
    "topics": "topics",
    "topics.exclude": "topics_exclude",
    "topics.blacklist": "topics_exclude",
    "groups": "groups",
    "groups.exclude": "groups_exclude",
    "groups.blacklist": "groups_exclude",
}
_POLICIES = {
    "org.apache.kafka.connect.mirror.DefaultReplicationPolicy": "default",
    "org.apache.kafka.connect.mirror.IdentityReplicationPolicy": "identity",
}


@dataclass(frozen=True)
class NotCarried:
    key: str
    value: str  # "<redacted>" for secrets
    reason: str

    def line(self) -> str:
        return f"{self.key}={self.value}: {self.reason}"


def parse_properties(text: str) -> dict[str, str]:
    """Java `.properties`: `k=v`, `k: v` or `k v`, `#`/`!` comments, `\\` line continuation."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.lstrip() if pending else raw.strip()
        if not pending and (not line or line[0] in "#!"):
            continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        pending = ""
        match = re.match(r"^((?:\\.|[^=:\s\\])+)\s*[=:\s]\s*(.*)$", line)
        if match:
            out[match.group(1).replace("\\", "")] = match.group(2).strip()
        elif line:
            out[line] = ""
    return out


def _flow_key(key: str, aliases: list[str]) -> tuple[str, str, str] | None:
    """`A->B.rest` split at the longest known target alias (aliases may hold dots)."""
    match = _FLOW_KEY_RE.match(key)
    if not match:
        return None
    src, tail = key.split("->", 1)
    for dst in sorted(aliases, key=len, reverse=True):
        if tail.startswith(dst + "."):
            return src, dst, tail[len(dst) + 1 :]
    return src, match.group(2), match.group(3)


def _shown(key: str, value: str) -> str:
    return "<redacted>" if SECRET_RE.search(key) else value


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _setting(key: str, value: str) -> tuple[str, Any] | str:
    """(setting name, value), or the reason it cannot be carried over."""
    if key in _LIST_SETTINGS:
        name = _LIST_SETTINGS[key]
        # MM2's topics.exclude / groups.exclude replace its default excludes; ours add to them
        return name, {"replace": _csv(value)} if name.endswith("_exclude") else _csv(value)
    if key in _BOOL_SETTINGS:
        if value.lower() not in ("true", "false"):
            return f"expected true or false, got '{value}'"
        return _BOOL_SETTINGS[key], value.lower() == "true"
    if key in _SECONDS_SETTINGS:
        try:
            return _SECONDS_SETTINGS[key], int(value) * 1000
        except ValueError:
            return f"expected whole seconds, got '{value}'"
    if key in _INT_SETTINGS:
        try:
            return _INT_SETTINGS[key], int(value)
        except ValueError:
            return f"expected a whole number, got '{value}'"
    return "no kafka-mirror equivalent"


class _Builder:
    def __init__(self) -> None:
        self.not_carried: list[NotCarried] = []

    def drop(self, key: str, value: str, reason: str) -> None:
        self.not_carried.append(NotCarried(key, _shown(key, value), reason))


def import_mm2(props: Mapping[str, str]) -> tuple[dict[str, Any], list[NotCarried]]:
    b = _Builder()
    aliases = _csv(props.get("clusters", ""))
    clusters: dict[str, dict[str, Any]] = {}
    flows: dict[str, dict[str, Any]] = {}
    defaults: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    flow_policy: dict[str, dict[str, Any]] = {}
    client: dict[str, dict[str, dict[str, Any]]] = {a: {"producer": {}, "consumer": {}} for a in aliases}
    for key, value in props.items():
        if key == "clusters":
            continue
        flow = _flow_key(key, aliases)
        if flow:
            src, dst, rest = flow
            fid = f"{src}->{dst}"
            if src not in aliases or dst not in aliases:
                b.drop(key, value, f"flow {fid} names a cluster not in 'clusters'")
                continue
            settings = flows.setdefault(fid, {})
            if rest == "enabled":
                settings["_enabled"] = value.lower() == "true"
            elif rest in ("replication.policy.class", "replication.policy.separator"):
                flow_policy.setdefault(fid, {})[rest] = value
            else:
                got = _setting(rest, value)
                if isinstance(got, str):
                    b.drop(key, value, got)
                else:
                    settings[got[0]] = got[1]
            continue
        head, _, rest = key.partition(".")
        if head in aliases:
            if rest == "bootstrap.servers":
                clusters[head] = {"bootstrap_servers": ",".join(_csv(value)), "datacenter": head}
            elif rest.startswith(("producer.", "consumer.")):
                kind, _, name = rest.partition(".")
                if name in CLIENT_KEYS:
                    client[head][kind][name] = value
                else:
                    b.drop(key, value, "no librdkafka client property of that name")
            elif SECRET_RE.search(rest) or rest.startswith(("security.", "ssl.", "sasl.")):
                b.drop(key, value, "security: set clusters.<alias>.security with secret references (docs/security.md)")
            else:
                b.drop(key, value, "cluster-level property with no kafka-mirror equivalent")
            continue
        if key in ("replication.policy.class", "replication.policy.separator"):
            policy[key] = value
            continue
        got = _setting(key, value)
        if isinstance(got, str):
            b.drop(key, value, got)
        else:
            defaults[got[0]] = got[1]
    for alias in aliases:
        if alias not in clusters:
            b.drop(f"{alias}.bootstrap.servers", "", "missing: set clusters.<alias>.bootstrap_servers")
            clusters[alias] = {"bootstrap_servers": "REPLACE-ME:9092", "datacenter": alias}
    enabled = {fid: s for fid, s in flows.items() if s.pop("_enabled", False)}
    for fid, settings in flows.items():
        if fid not in enabled and settings:
            b.drop(f"{fid}.*", "", "settings of a flow that is not enabled")
    out_flows: dict[str, dict[str, Any]] = {}
    for fid, settings in enabled.items():
        src, dst = fid.split("->")
        merged = dict(settings)
        pol = _policy({**policy, **flow_policy.get(fid, {})}, fid, b)
        if pol is not None:
            merged["replication_policy"] = pol
        if client[dst]["producer"]:
            merged["producer"] = dict(client[dst]["producer"])
        if client[src]["consumer"]:
            merged["consumer"] = dict(client[src]["consumer"])
        if merged:
            out_flows[fid] = merged
    topology: dict[str, Any] = {"clusters": clusters}
    if defaults:
        topology["defaults"] = defaults
    topology["topologies"] = [{"name": "mm2", "pattern": "custom", "flows": sorted(enabled)}]
    if out_flows:
        topology["flows"] = out_flows
    return topology, b.not_carried


def _policy(raw: Mapping[str, str], fid: str, b: _Builder) -> dict[str, Any] | None:
    if not raw:
        return None
    cls = raw.get("replication.policy.class", "org.apache.kafka.connect.mirror.DefaultReplicationPolicy")
    kind = _POLICIES.get(cls)
    if kind is None:
        b.drop("replication.policy.class", cls, f"custom policy class for {fid}: kept the default policy")
        kind = "default"
    out: dict[str, Any] = {"type": kind}
    if kind == "default":
        out["separator"] = raw.get("replication.policy.separator", ".")
    return out


def import_mm1(
    consumer: Mapping[str, str], producer: Mapping[str, str], whitelist: str | None, blacklist: str | None = None
) -> tuple[dict[str, Any], list[NotCarried]]:
    """MM1's `--consumer.config`/`--producer.config`/`--whitelist`: one flow `source->target`."""
    b = _Builder()
    settings: dict[str, Any] = {}
    clients: dict[str, dict[str, str]] = {"consumer": {}, "producer": {}}
    bootstraps: dict[str, str] = {}
    for kind, props in (("consumer", consumer), ("producer", producer)):
        for key, value in props.items():
            if key == "bootstrap.servers":
                bootstraps[kind] = value
            elif key == "group.id" and kind == "consumer":
                settings["consumer_group"] = value
            elif key in CLIENT_KEYS:
                clients[kind][key] = value
            elif SECRET_RE.search(key) or key.startswith(("security.", "ssl.", "sasl.")):
                b.drop(f"{kind}.config:{key}", value, "security: set clusters.<alias>.security with secret references")
            else:
                b.drop(f"{kind}.config:{key}", value, "no librdkafka client property of that name")
    clusters = {
        "source": {"bootstrap_servers": bootstraps.get("consumer", "REPLACE-ME:9092"), "datacenter": "source"},
        "target": {"bootstrap_servers": bootstraps.get("producer", "REPLACE-ME:9092"), "datacenter": "target"},
    }
    for kind in ("consumer", "producer"):
        if kind not in bootstraps:
            b.drop(f"{kind}.config:bootstrap.servers", "", "missing: set the cluster's bootstrap_servers")
    if whitelist:
        # MM1's whitelist is one Java regex, '|' or ',' separated
        settings["topics"] = [p for p in re.split(r"[,|]", whitelist) if p.strip()]
    if blacklist:
        settings["topics_exclude"] = {"replace": [p for p in re.split(r"[,|]", blacklist) if p.strip()]}
    # MM1 kept topic names: the identity policy reproduces that.
    settings["replication_policy"] = {"type": "identity"}
    settings.update({k: v for k, v in clients.items() if v})
    topology = {
        "clusters": clusters,
        "topologies": [{"name": "mm1", "pattern": "custom", "flows": ["source->target"]}],
        "flows": {"source->target": settings},
    }
    return topology, b.not_carried
