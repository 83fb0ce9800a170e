"""A Strimzi `KafkaMirrorMaker2` custom resource mapped onto MM2 properties (issue 45).

`strimzi_properties(resource)` returns the `mm2.properties` Strimzi itself would hand to
MirrorMaker 2 for the mirroring settings (clusters, flows, patterns, connector configs), plus every
field that has no such property, named by its path in the resource. `import_mm2` then maps the
properties as for a dedicated MM2. Both API shapes: v1beta2 (`spec.clusters`, `mirrors[].sourceCluster`)
and v1 (`spec.target`, `mirrors[].source`). Pure: no Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kmirror.errors import Problem, ValidationError
from kmirror.mm2.config_import import NotCarried, import_mm2
from kmirror.mm2.security_import import strimzi_security

# Fields of the resource that only shape the Kafka Connect deployment Strimzi runs.
_DEPLOYMENT_FIELDS = {
    "version": "the Kafka version of Strimzi's Connect image",
    "replicas": "Connect worker pods; kafka-mirror's parallelism is Spark's (spark.executors)",
    "connectCluster": "the cluster Connect stores its state in; kafka-mirror keeps no Connect state",
    "image": "the Connect image",
    "resources": "pod resources; set spark.executor_memory/executor_cores in the topology",
    "jvmOptions": "Connect's JVM options",
    "logging": "Connect's logging",
    "metricsConfig": "Connect's JMX exporter; kafka-mirror exposes metrics_port",
    "template": "Kubernetes templates of the Connect pods",
    "livenessProbe": "Connect pod probe",
    "readinessProbe": "Connect pod probe",
    "externalConfiguration": "Connect pod volumes/env; mount secrets for the security section instead",
}
_TARGET_CONNECT_FIELDS = ("groupId", "configStorageTopic", "offsetStorageTopic", "statusStorageTopic")
_PATTERNS = {
    "topicsPattern": "topics",
    "groupsPattern": "groups",
    "topicsExcludePattern": "topics.exclude",
    "topicsBlacklistPattern": "topics.exclude",
    "groupsExcludePattern": "groups.exclude",
    "groupsBlacklistPattern": "groups.exclude",
}
_CONNECTORS = ("sourceConnector", "checkpointConnector", "heartbeatConnector")


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


class _Out:
    def __init__(self) -> None:
        self.props: dict[str, str] = {}
        self.not_carried: list[NotCarried] = []
        self.security: dict[str, dict[str, Any]] = {}  # alias -> clusters.<alias>.security

    def drop(self, path: str, value: Any, reason: str, lossy: bool = True) -> None:
        shown = "<redacted>" if isinstance(value, Mapping) and "passwordSecret" in value else _text(value)
        self.not_carried.append(NotCarried(path, shown if len(shown) < 120 else shown[:117] + "...", reason, lossy))

    def set(self, key: str, value: Any, path: str) -> None:
        text = _text(value)
        if key in self.props and self.props[key] != text:
            self.drop(path, value, f"conflicts with {key}={self.props[key]} set elsewhere in the resource")
        else:
            self.props[key] = text


def _cluster(out: _Out, spec: Mapping[str, Any], path: str, *, target: bool = False) -> str:
    alias = spec.get("alias")
    if not isinstance(alias, str) or not alias:
        raise ValidationError([Problem(f"{path}.alias", "required: the cluster's alias (a string)")])
    for field, value in spec.items():
        where = f"{path}.{field}"
        if field == "alias":
            continue
        if field == "bootstrapServers":
            out.set(f"{alias}.bootstrap.servers", value, where)
        elif field == "config" and isinstance(value, Mapping):
            for key, item in value.items():
                out.set(f"{alias}.{key}", item, f"{where}.{key}")
        elif field in ("tls", "authentication"):
            continue  # strimzi_security maps them onto clusters.<alias>.security
        elif target and field in _TARGET_CONNECT_FIELDS:
            out.drop(where, value, "Kafka Connect's own group/topics; kafka-mirror keeps no Connect state", lossy=False)
        else:
            out.drop(where, value, "no kafka-mirror equivalent")
    section, notes = strimzi_security(alias, spec.get("tls"), spec.get("authentication"), path)
    out.not_carried += [NotCarried(*n) for n in notes]
    if section is not None:
        out.security[alias] = section
    return alias


def strimzi_properties(resource: Any, out: _Out | None = None) -> tuple[dict[str, str], list[NotCarried]]:
    if not isinstance(resource, Mapping) or resource.get("kind") != "KafkaMirrorMaker2":
        kind = resource.get("kind") if isinstance(resource, Mapping) else type(resource).__name__
        raise ValidationError([Problem("kind", f"expected a KafkaMirrorMaker2 resource, got {kind!r}")])
    spec = resource.get("spec")
    if not isinstance(spec, Mapping):
        raise ValidationError([Problem("spec", "required: the KafkaMirrorMaker2 spec (a mapping)")])
    out = out or _Out()
    aliases: list[str] = []
    target_alias = None
    for field, value in spec.items():
        if field in _DEPLOYMENT_FIELDS:
            out.drop(f"spec.{field}", value, _DEPLOYMENT_FIELDS[field], lossy=False)
        elif field == "clusters":
            aliases += [_cluster(out, c, f"spec.clusters[{i}]") for i, c in enumerate(value or [])]
        elif field == "target":
            target_alias = _cluster(out, value, "spec.target", target=True)
            aliases.append(target_alias)
        elif field != "mirrors":
            out.drop(f"spec.{field}", value, "no kafka-mirror equivalent")
    for i, mirror in enumerate(spec.get("mirrors") or []):
        path = f"spec.mirrors[{i}]"
        if isinstance(mirror.get("source"), Mapping):
            src = _cluster(out, mirror["source"], f"{path}.source")
            aliases.append(src)
        else:
            src = mirror.get("sourceCluster")
        dst = mirror.get("targetCluster", target_alias)
        if src not in aliases or dst not in aliases:
            raise ValidationError([Problem(path, f"source {src!r} or target {dst!r} is not a declared cluster")])
        fid = f"{src}->{dst}"
        out.set(f"{fid}.enabled", "true", path)
        for field, value in mirror.items():
            where = f"{path}.{field}"
            if field in ("source", "sourceCluster", "targetCluster"):
                continue
            if field in _PATTERNS:
                out.set(f"{fid}.{_PATTERNS[field]}", value, where)
            elif field in _CONNECTORS and isinstance(value, Mapping):
                for key, item in value.items():
                    if key == "config" and isinstance(item, Mapping):
                        for name, setting in item.items():
                            out.set(f"{fid}.{name}", setting, f"{where}.config.{name}")
                    elif key in ("tasksMax", "autoRestart", "state"):
                        out.drop(f"{where}.{key}", item, "Kafka Connect task management", lossy=False)
                    else:
                        out.drop(f"{where}.{key}", item, "no kafka-mirror equivalent")
            else:
                out.drop(where, value, "no kafka-mirror equivalent")
        # Strimzi runs only the connectors the mirror declares: no checkpointConnector, no checkpoints
        for connector, prop in (
            ("checkpointConnector", "emit.checkpoints.enabled"),
            ("heartbeatConnector", "emit.heartbeats.enabled"),
        ):
            if connector not in mirror:
                out.set(f"{fid}.{prop}", "false", f"{path}.{connector}")
        if "sourceConnector" not in mirror:
            out.drop(
                f"{path}.sourceConnector",
                "",
                "absent: Strimzi copies no records for this mirror; kafka-mirror would copy them",
            )
    out.props["clusters"] = ", ".join(dict.fromkeys(aliases))
    return out.props, out.not_carried


def strimzi_import(resource: Any) -> tuple[dict[str, Any], list[NotCarried]]:
    """The topology of a KafkaMirrorMaker2 resource: `strimzi_properties` through `import_mm2`, with
    each cluster's `tls`/`authentication` as its security section (`strimzi_security`)."""
    out = _Out()
    props, from_resource = strimzi_properties(resource, out)
    topology, dropped = import_mm2(props)
    for alias, section in out.security.items():
        topology["clusters"][alias]["security"] = section
    return topology, from_resource + dropped
