"""The flow spec: everything the Spark app needs to mirror one `source->target` flow.

The planner's JSON flow entries become exactly this once cluster connection details are
added (`kmirror.estate.planner.flow_spec_for`). Every optional key is declared once in `OPTIONS`
(`kmirror.flow.spec_options`), with its doc and default; the checks of a raw spec are in
`kmirror.flow.spec_checks`; this module re-exports both, so `kmirror.flow.spec` stays the one
import path. `docs/spark-app.md` is the user-facing reference.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kmirror.errors import Problem, Problems, ValidationError
from kmirror.flow.endpoint import ClusterEndpoint
from kmirror.flow.filters import NameSelection
from kmirror.flow.internal_sizing import InternalTopicSizing
from kmirror.flow.replication_policy import ReplicationPolicy, policy_from_config
from kmirror.flow.spec_checks import (
    AUTO_ORDER,
    COPY_LOOP_CANNOT_SERVE,
    RECORD_LOOP_OPTIONS,
    flow_spec_problems,
    option_conflict_problems,
    unserved_options,
)
from kmirror.flow.spec_options import (
    ALLOWED,
    CLUSTER_KEYS,
    EXACTLY_ONCE_MAX_RECORDS_PER_TRIGGER,
    FROM_MM2,
    OPTION_BY_NAME,
    OPTIONS,
    PASSTHROUGH,
    PLANNER_CODE_PROPERTIES,
    RATE_LIMITS,
    REQUIRED,
)
from kmirror.flow.views import (
    CheckpointSettings,
    CopySettings,
    FlowRoute,
    HeartbeatSettings,
    PlanningSettings,
    TopicSyncSettings,
)

__all__ = [
    "ALLOWED",
    "AUTO_ORDER",
    "CLUSTER_KEYS",
    "COPY_LOOP_CANNOT_SERVE",
    "EXACTLY_ONCE_MAX_RECORDS_PER_TRIGGER",
    "FROM_MM2",
    "OPTIONS",
    "OPTION_BY_NAME",
    "PASSTHROUGH",
    "PLANNER_CODE_PROPERTIES",
    "RATE_LIMITS",
    "RECORD_LOOP_OPTIONS",
    "REQUIRED",
    "ClusterEndpoint",
    "FlowSpec",
    "flow_spec_problems",
    "load_flow_spec",
    "option_conflict_problems",
    "parse_flow_spec",
    "unserved_options",
]


@dataclass(frozen=True)
class FlowSpec:
    id: str
    source: ClusterEndpoint
    target: ClusterEndpoint
    topics: tuple[str, ...]
    topics_exclude: tuple[str, ...]
    replication_policy: dict[str, Any]
    checkpoint_location: str
    groups: tuple[str, ...] = (".*",)
    groups_exclude: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)

    def option(self, name: str) -> Any:
        """An optional setting, or its declared default. Parts of the engine read their settings
        through the typed views below (`kmirror.flow.views`), not by name."""
        if name == "max_records_per_trigger" and name not in self.options and self.exactly_once:
            # One transaction per task covers the whole batch: keep it far from the 60 s timeout.
            return EXACTLY_ONCE_MAX_RECORDS_PER_TRIGGER
        return self.options.get(name, OPTION_BY_NAME[name].default)

    @cached_property
    def planning(self) -> PlanningSettings:
        return PlanningSettings.read(self.option)

    @cached_property
    def copy(self) -> CopySettings:
        return CopySettings.read(
            self.option, dict.fromkeys(n for names in COPY_LOOP_CANNOT_SERVE.values() for n in names)
        )

    @cached_property
    def checkpoints(self) -> CheckpointSettings:
        return CheckpointSettings.read(self.option)

    @cached_property
    def heartbeats(self) -> HeartbeatSettings:
        return HeartbeatSettings.read(self.option)

    @cached_property
    def topic_sync(self) -> TopicSyncSettings:
        return TopicSyncSettings.read(self.option)

    @cached_property
    def route(self) -> FlowRoute:
        return FlowRoute(self.id, self.source, self.target, self.topic_selection, self.group_selection, self.policy)

    @property
    def exactly_once(self) -> bool:
        """Transactional writes with offsets stored on the target (docs/exactly-once.md)."""
        return bool(self.options.get("exactly_once", False))

    @property
    def policy(self) -> ReplicationPolicy:
        return policy_from_config(self.replication_policy, source_alias=self.source.alias)

    @property
    def topic_selection(self) -> NameSelection:
        heartbeats = bool(self.option("heartbeats_replication_enabled"))
        return NameSelection(self.topics, self.topics_exclude, heartbeats=heartbeats)

    @property
    def group_selection(self) -> NameSelection:
        return NameSelection(self.groups, self.groups_exclude)

    @property
    def consumer_group(self) -> str:
        return self.option("consumer_group") or f"kmirror-{self.id.replace('->', '-to-')}"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "source": _endpoint_dict(self.source),
            "target": _endpoint_dict(self.target),
            "topics": list(self.topics),
            "topics_exclude": list(self.topics_exclude),
            "groups": list(self.groups),
            "groups_exclude": list(self.groups_exclude),
            "replication_policy": dict(self.replication_policy),
            "checkpoint_location": self.checkpoint_location,
        }
        out.update(self.options)
        return out


def _endpoint_dict(endpoint: ClusterEndpoint) -> dict[str, Any]:
    out = {"alias": endpoint.alias, "bootstrap_servers": endpoint.bootstrap_servers, "config": dict(endpoint.config)}
    sizing = endpoint.internal_topics.to_dict()
    return {**out, "internal_topics": sizing} if sizing else out


def _endpoint(raw: dict[str, Any]) -> ClusterEndpoint:
    sizing = InternalTopicSizing.read(raw.get("internal_topics"))
    return ClusterEndpoint(raw["alias"], raw["bootstrap_servers"], dict(raw.get("config", {})), sizing)


def parse_flow_spec(raw: Any, source: str = "flow spec") -> FlowSpec:
    """Validate and build a FlowSpec; raises ValidationError listing every problem."""
    problems = Problems(source)
    problems.extend(flow_spec_problems(raw))
    problems.raise_if_any()
    return FlowSpec(
        id=raw["id"],
        source=_endpoint(raw["source"]),
        target=_endpoint(raw["target"]),
        topics=tuple(raw["topics"]),
        topics_exclude=tuple(raw["topics_exclude"]),
        replication_policy=dict(raw["replication_policy"]),
        checkpoint_location=raw["checkpoint_location"],
        groups=tuple(raw.get("groups", (".*",))),
        groups_exclude=tuple(raw.get("groups_exclude", ())),
        options={k: raw[k] for k in OPTION_BY_NAME if k in raw},
    )


def load_flow_spec(path: str | Path) -> FlowSpec:
    """Read a flow spec JSON file; a missing file or bad JSON is a ValidationError too."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValidationError([Problem("--flow", f"file not found: {str(path)!r}")]) from None
    except IsADirectoryError:
        raise ValidationError([Problem("--flow", f"{str(path)!r} is a directory, not a flow spec JSON file")]) from None
    except OSError as exc:
        raise ValidationError([Problem("--flow", f"cannot read {str(path)!r}: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise ValidationError([Problem("--flow", f"{str(path)!r} is not valid UTF-8 JSON: {exc}")]) from None
    except (json.JSONDecodeError, RecursionError) as exc:
        raise ValidationError([Problem("--flow", f"{str(path)!r} is not valid JSON: {exc}")]) from None
    return parse_flow_spec(raw, source=str(path))
