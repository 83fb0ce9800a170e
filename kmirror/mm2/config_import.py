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

from kmirror.mm2.security_import import is_security_key, java_security

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
    "heartbeats.replication.enabled": "heartbeats_replication_enabled",
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
_SECONDS_SETTINGS["refresh.topics.interval.seconds"] = "topic_refresh_interval_ms"
_INT_SETTINGS = {"offset.lag.max": "offset_lag_max"}
# Topics kafka-mirror writes like MM2 does: their replication factor becomes the target cluster's
# `internal_topics.replication_factor` (kafka-mirror keeps them all on the target); -1 is its default.
_INTERNAL_RF = (
    "checkpoints.topic.replication.factor",
    "heartbeats.topic.replication.factor",
    "offset-syncs.topic.replication.factor",
)
# Settings of Kafka Connect itself (MM2 runs on it; kafka-mirror does not): nothing to carry over,
# each still listed by name. Anything else without an equivalent is lossy (refused unless --allow-lossy).
_INTERNAL_RF_KEY = "_internal_topics_rf"  # moved from the flow settings to the target clusters
_NOT_APPLICABLE_PREFIXES = ("offset.storage.", "status.storage.", "config.storage.", "offset.flush.")
_NOT_APPLICABLE = {
    "tasks.max": "Spark parallelism follows the source partitions (spark.executors in the topology)",
    "group.id": "Kafka Connect's worker group; kafka-mirror keeps no Connect state",
}
_BYTE_CONVERTER = "org.apache.kafka.connect.converters.ByteArrayConverter"
_EXACTLY_ONCE = {
    # MM2 dedicated mode (KIP-618): the worker's exactly.once.source.support; a connector's exactly.once.support
    "exactly.once.source.support": {"enabled": True, "disabled": False},
    "exactly.once.support": {"required": True, "requested": True},
}
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
    lossy: bool = True  # False: a setting with no meaning here (Kafka Connect's own), listed only

    def line(self) -> str:
        kind = "lossy" if self.lossy else "not applicable"
        return f"{self.key}={self.value}: {kind}: {self.reason}"


def not_applicable(key: str) -> str | None:
    """Why a Kafka Connect setting needs no equivalent, or None."""
    if key in _NOT_APPLICABLE:
        return _NOT_APPLICABLE[key]
    if key.startswith(_NOT_APPLICABLE_PREFIXES):
        return "Kafka Connect's own internal topics; kafka-mirror keeps no Connect state"
    return None


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
    """(setting name, value), or the reason it cannot be carried over; name "" carries over as the default."""
    if key == "replication.factor" or key in _INTERNAL_RF:
        if value.strip() == "-1":
            return ("replication_factor", None) if key == "replication.factor" else ("", None)
        if key in _INTERNAL_RF:
            rf = value.strip()
            return (
                (_INTERNAL_RF_KEY, int(rf)) if rf.isdigit() and int(rf) > 0 else f"expected -1 or >= 1, got '{value}'"
            )
        return (
            ("replication_factor", int(value)) if value.strip().isdigit() else f"expected a whole number, got '{value}'"
        )
    if key in _EXACTLY_ONCE:
        known = _EXACTLY_ONCE[key]
        if value.strip().lower() not in known:
            return f"no equivalent for '{value}' (kafka-mirror's exactly_once is on or off: {', '.join(known)})"
        return "exactly_once", known[value.strip().lower()]
    if key.endswith(("key.converter", "value.converter", "header.converter")) and value.strip() == _BYTE_CONVERTER:
        return "", None  # MM2's default: bytes copied as they are, as kafka-mirror does
    if key in ("topic.filter.class", "group.filter.class", "config.property.filter.class"):
        return "custom filter class: kafka-mirror filters by the topics/groups regexes only"
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

    def drop(self, key: str, value: str, reason: str, lossy: bool = True) -> None:
        self.not_carried.append(NotCarried(key, _shown(key, value), reason, lossy))

    def security(self, cluster: dict[str, Any], alias: str, props: Mapping[str, str], where: str) -> None:
        """The cluster's security section from its client properties (`security_import.java_security`)."""
        section, notes = java_security(alias, props, cluster["bootstrap_servers"], where)
        self.not_carried += [NotCarried(*n) for n in notes]
        if section is not None:
            cluster["security"] = section

    def put(self, target: dict[str, Any], key: str, rest: str, value: str) -> None:
        """Carry `rest=value` into `target`, or name it: not applicable, or lossy."""
        why = not_applicable(rest)
        if why:
            self.drop(key, value, why, lossy=False)
            return
        got = _setting(rest, value)
        if isinstance(got, str):
            self.drop(key, value, got)
        elif got[0]:
            if got[0] in target and target[got[0]] != got[1]:
                self.drop(key, value, f"conflicts with another setting of {got[0]}={target[got[0]]!r}")
            else:
                target[got[0]] = got[1]


def import_mm2(props: Mapping[str, str]) -> tuple[dict[str, Any], list[NotCarried]]:
    b = _Builder()
    aliases = _csv(props.get("clusters", ""))
    clusters: dict[str, dict[str, Any]] = {}
    flows: dict[str, dict[str, Any]] = {}
    defaults: dict[str, Any] = {}
    policy: dict[str, Any] = {}
    flow_policy: dict[str, dict[str, Any]] = {}
    client: dict[str, dict[str, dict[str, Any]]] = {a: {"producer": {}, "consumer": {}} for a in aliases}
    security_props: dict[str, dict[str, str]] = {}
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
                b.put(settings, key, rest, value)
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
            elif is_security_key(rest):  # mapped onto clusters.<alias>.security after the loop
                security_props.setdefault(head, {})[rest] = value
            elif SECRET_RE.search(rest):
                b.drop(key, value, "security: set clusters.<alias>.security with secret references (docs/security.md)")
            elif not_applicable(rest):
                b.drop(key, value, not_applicable(rest) or "", lossy=False)
            elif rest in _EXACTLY_ONCE:
                # the target cluster's worker setting: every flow into it
                for fid in [f"{s}->{head}" for s in aliases if s != head]:
                    b.put(flows.setdefault(fid, {}), key, rest, value)
            else:
                b.drop(key, value, "cluster-level property with no kafka-mirror equivalent")
            continue
        if key in ("replication.policy.class", "replication.policy.separator"):
            policy[key] = value
            continue
        b.put(defaults, key, key, value)
    for alias in aliases:
        if alias not in clusters:
            b.drop(f"{alias}.bootstrap.servers", "", "missing: set clusters.<alias>.bootstrap_servers")
            clusters[alias] = {"bootstrap_servers": "REPLACE-ME:9092", "datacenter": alias}
    for alias, sec in security_props.items():
        b.security(clusters[alias], alias, sec, f"{alias}.")
    enabled = {fid: s for fid, s in flows.items() if s.pop("_enabled", False)}
    _size_internal_topics(clusters, defaults, enabled, b)
    for fid, settings in flows.items():
        if fid not in enabled and settings:
            b.drop(f"{fid}.*", "", "settings of a flow that is not enabled", lossy=False)
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


def _size_internal_topics(
    clusters: dict[str, dict[str, Any]], defaults: dict[str, Any], flows: dict[str, dict[str, Any]], b: _Builder
) -> None:
    """`*.topic.replication.factor` of the internal topics -> `clusters.<target>.internal_topics`."""
    default = defaults.pop(_INTERNAL_RF_KEY, None)
    for fid, settings in sorted(flows.items()):
        rf = settings.pop(_INTERNAL_RF_KEY, default)
        target = clusters.get(fid.split("->")[1])
        if rf is None or target is None:
            continue
        sizing = target.setdefault("internal_topics", {})
        if sizing.get("replication_factor", rf) != rf:
            b.drop(f"{fid}.*.topic.replication.factor", str(rf), f"conflicts with {sizing['replication_factor']}")
        else:
            sizing["replication_factor"] = rf


def _policy(raw: Mapping[str, str], fid: str, b: _Builder) -> dict[str, Any] | None:
    if not raw:
        return None
    cls = raw.get("replication.policy.class", "org.apache.kafka.connect.mirror.DefaultReplicationPolicy")
    kind = _POLICIES.get(cls)
    if kind is None:
        b.drop("replication.policy.class", cls, f"custom policy class for {fid}: kafka-mirror has default and identity")
        kind = "default"
    out: dict[str, Any] = {"type": kind}
    if kind == "default" or "replication.policy.separator" in raw:
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
    security_props: dict[str, dict[str, str]] = {"consumer": {}, "producer": {}}
    for kind, props in (("consumer", consumer), ("producer", producer)):
        for key, value in props.items():
            if key == "bootstrap.servers":
                bootstraps[kind] = value
            elif key == "group.id" and kind == "consumer":
                settings["consumer_group"] = value
            elif key in CLIENT_KEYS:
                clients[kind][key] = value
            elif key in ("auto.commit.enable", "enable.auto.commit", "auto.commit.interval.ms"):
                b.drop(f"{kind}.config:{key}", value, "kafka-mirror commits its own progress", lossy=False)
            elif is_security_key(key):
                security_props[kind][key] = value
            elif SECRET_RE.search(key):
                b.drop(f"{kind}.config:{key}", value, "security: set clusters.<alias>.security with secret references")
            else:
                b.drop(f"{kind}.config:{key}", value, "no librdkafka client property of that name")
    clusters = {
        "source": {"bootstrap_servers": bootstraps.get("consumer", "REPLACE-ME:9092"), "datacenter": "source"},
        "target": {"bootstrap_servers": bootstraps.get("producer", "REPLACE-ME:9092"), "datacenter": "target"},
    }
    for kind, side in (("consumer", "source"), ("producer", "target")):
        if security_props[kind]:
            b.security(clusters[side], side, security_props[kind], f"{kind}.config:")
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
