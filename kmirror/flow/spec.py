"""The flow spec: everything the Spark app needs to mirror one `source->target` flow.

The planner's JSON flow entries become exactly this once cluster connection details are
added (`kmirror.estate.planner.flow_spec_for`). Every optional key is declared once in `OPTIONS`,
with its doc and default; `docs/spark-app.md` is the user-facing reference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from kmirror.errors import Problem, Problems, ValidationError
from kmirror.flow.filters import NameSelection, pattern_problems
from kmirror.flow.internal_sizing import InternalTopicSizing, sizing_problems
from kmirror.flow.replication_policy import ReplicationPolicy, policy_from_config, policy_problems
from kmirror.flow.views import (
    MM2_OFFSET_SYNCS_CLUSTER,
    MM2_SOURCE_CONNECTOR,
    CheckpointSettings,
    CopySettings,
    HeartbeatSettings,
    OffsetSkip,
    PlanningSettings,
    TopicSyncSettings,
    parse_offset_skip,
)
from kmirror.option_table import (
    Check,
    Option,
    OptionTable,
    boolean,
    non_negative_int,
    one_of,
    optional,
    optional_str,
    positive_int,
    unknown_keys,
)
from kmirror.security.config import KINIT_CMD
from kmirror.security.override_rules import client_override_problems, cluster_config_problems


def _str_map(value: Any) -> str | None:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        return f"must be a mapping of librdkafka property names to values, got {type(value).__name__}"
    return None


def _starting_offsets(value: Any) -> str | None:
    if value in ("earliest", "latest"):
        return None
    if isinstance(value, dict) and set(value) == {"timestamp_ms"} and non_negative_int(value["timestamp_ms"]) is None:
        return None
    if isinstance(value, dict) and set(value) == {"from_mm2"} and isinstance(value["from_mm2"], dict):
        return None  # its keys: _from_mm2_problems
    return (
        f"must be 'earliest', 'latest', {{timestamp_ms: <epoch ms>}} or {{from_mm2: {{...}}}} (a takeover from "
        f"a stopped MirrorMaker 2, docs/migrate-from-mm2.md), got {value!r}"
    )


def _non_empty_str(value: Any) -> str | None:
    return None if isinstance(value, str) and value else f"must be a non-empty topic or connector name, got {value!r}"


# `starting_offsets: {from_mm2: {...}}`: resume where a stopped MirrorMaker 2 stopped (kmirror.mm2.takeover).
FROM_MM2 = OptionTable(
    Option(
        "offsets_topic",
        None,
        "MM2's Connect offsets topic on the target (default mm2-offsets.<source>.internal).",
        optional(_non_empty_str),
    ),
    Option(
        "offset_syncs_topic",
        None,
        "MM2's offset syncs topic (default mm2-offset-syncs.<other cluster>.internal).",
        optional(_non_empty_str),
    ),
    Option(
        "offset_syncs_cluster",
        MM2_OFFSET_SYNCS_CLUSTER,
        "Where MM2 kept its offset syncs (its offset-syncs.topic.location).",
        one_of("source", "target"),
    ),
    Option(
        "connector",
        MM2_SOURCE_CONNECTOR,
        "MM2's source connector name (its class name in dedicated mode).",
        _non_empty_str,
    ),
)


def _from_mm2_problems(value: Any, path: str) -> list[Problem]:
    """Unknown keys and bad values inside `starting_offsets.from_mm2`, each at its own path."""
    if not isinstance(value, dict) or "from_mm2" not in value:
        return []
    return FROM_MM2.problems(
        value["from_mm2"], f"{path}.from_mm2", list_allowed=True, hint="see docs/migrate-from-mm2.md"
    )


def _rate(unit: str) -> Check:
    def check(value: Any) -> str | None:
        if value is None or positive_int(value) is None:
            return None
        return f"must be a whole number of {unit} per second >= 1 (leave it out for no limit), got {value!r}"

    return check


def _transform(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"sql"}:
        return f'must be {{"sql": "<query over the view records>"}}, got {value!r}'
    if not isinstance(value["sql"], str) or not value["sql"].strip():
        return f"sql must be a non-empty Spark SQL query over the view records, got {value['sql']!r}"
    return None


def _transform_sql(value: Any, path: str) -> list[Problem]:
    """A well-formed transform's query, parsed: nothing that reorders records or runs code
    (kmirror.flow.transform_sql), at `transform.sql` like the app's own check at start."""
    if value is None:
        return []
    from kmirror.flow.transform_sql import transform_sql_problems  # sqlglot: only for flows with a transform

    return [Problem(f"{path}.sql", message) for message in transform_sql_problems(value["sql"])]


def _skip_list(value: Any) -> str | None:
    if isinstance(value, list):
        return None
    return f'must be a list of "topic:partition:offset" or "topic:partition:first-last" strings, got {value!r}'


def _skip_entries(value: list[Any], path: str) -> list[Problem]:
    """One problem per malformed `skip_offsets` entry, at `skip_offsets[i]`: a typo must never
    skip another record, nor silently skip nothing."""
    problems = []
    for index, entry in enumerate(value):
        parsed = parse_offset_skip(entry)
        if not isinstance(parsed, OffsetSkip):
            problems.append(Problem(f"{path}[{index}]", parsed))
    return problems


OPTIONS = OptionTable(
    Option(
        "producer",
        {},
        "librdkafka producer overrides (cannot weaken acks/idempotence).",
        _str_map,
        client_override_problems,
    ),
    Option("consumer", {}, "librdkafka consumer overrides for the source.", _str_map, client_override_problems),
    Option(
        "starting_offsets",
        "earliest",
        "Where a new flow starts: earliest, latest, {timestamp_ms} or {from_mm2: {...}}: each partition where "
        "a stopped MirrorMaker 2 stopped (its committed offsets, else its offset syncs; docs/migrate-from-mm2.md).",
        _starting_offsets,
        _from_mm2_problems,
    ),
    # 5M: records never enter Spark, so the batch size costs no memory; it bounds the re-copy after
    # a crash (~30 s of copying here, like MM2's 60 s offset flush). Smaller batches pay Spark's
    # per-batch cost more often (docs/performance.md).
    Option(
        "max_records_per_trigger",
        5_000_000,
        "Admission control: records planned per micro-batch (500,000 with exactly_once, so a task's "
        "transaction stays well inside transaction.timeout.ms).",
        positive_int,
    ),
    Option(
        "max_records_per_task",
        2_500_000,  # a default batch fills one task per core of a 2-core executor (docs/performance.md)
        "Tasks per batch: enough that each copies at most this many records (one partition never splits).",
        positive_int,
    ),
    Option(
        "copy_loop",
        "auto",
        "Copy loop of the writer tasks. auto: the first of batch, native, python that serves the "
        "flow (COPY_LOOP_CANNOT_SERVE: exactly_once, dead_letter_topic, skip_offsets, provenance_headers "
        "and rate limits need a record loop; so do client settings the batch path cannot connect with). "
        "batch: record batches copied as they are, never decoded (batches that need per-record work go "
        "to a record loop, counted). native: the C record loop (built by `make setup` where "
        "librdkafka-dev is installed). python: the Python record loop. docs/spark-app.md.",
        one_of("auto", "native", "python", "batch"),
    ),
    Option(
        "trigger_interval_ms",
        200,
        "Micro-batch interval in streaming mode. A batch takes ~0.3 s of Spark's own work, so under "
        "load batches run back to back (p99 latency ~0.7 s); idle, each interval only asks the source "
        "for its end offsets (docs/performance.md).",
        non_negative_int,
    ),
    Option(
        "topic_refresh_interval_ms", 30_000, "How often new source topics/partitions are discovered.", non_negative_int
    ),
    Option(
        "fail_on_data_loss",
        True,
        "Fail when retention deleted offsets not yet mirrored; false skips and counts them.",
        boolean,
    ),
    Option("sync_topic_configs", True, "Create/align target topics with the source's configs.", boolean),
    Option(
        "replication_factor",
        None,
        "Replication factor of created target topics (broker default when null).",
        optional(positive_int),
    ),
    Option("exactly_once", False, "Transactional writes with offsets stored on the target.", boolean),
    Option(
        "provenance_headers",
        False,
        "Stamp each copied record with a kmirror.provenance header naming its origin cluster, and never "
        "copy a record whose origin is the target: identical topic names in both directions without loops "
        "(identity active/active; docs/active-active.md). Copied by the Python record loop.",
        boolean,
    ),
    Option("emit_checkpoints", True, "Emit MM2-format checkpoints for consumer groups.", boolean),
    Option("sync_group_offsets", False, "Write translated offsets into idle target groups.", boolean),
    Option("emit_heartbeats", True, "Emit MM2-format heartbeats to the target's heartbeats topic.", boolean),
    Option(
        "heartbeats_replication_enabled",
        True,
        "Mirror the source's heartbeats topics even when `topics` does not select them (MM2's "
        "heartbeats.replication.enabled); false mirrors them only when the patterns do.",
        boolean,
    ),
    Option("checkpoint_interval_ms", 60_000, "Interval between checkpoint emissions.", non_negative_int),
    Option(
        "reverse_of",
        None,
        "Set by the planner on a reverse flow (an active-passive topology's `reverse_flow: true`): the alias of "
        "the forward flow's source, which is this flow's target. Its checkpoint rounds also translate groups "
        "committed on that cluster's remote topics back home (docs/failover.md#failback-the-reverse-flow).",
        optional_str,
    ),
    Option("heartbeat_interval_ms", 1_000, "Interval between heartbeats.", non_negative_int),
    Option(
        "offset_lag_max",
        100,  # MM2's offset.lag.max default
        "Offset syncs: a drift change is persisted only when skipping it could make a failed-over "
        "group re-read this many records or more (1: translation exact everywhere); range ends always are.",
        positive_int,
    ),
    Option(
        "metrics_port",
        None,
        "HTTP port of the Prometheus endpoint on the driver (off when null).",
        optional(non_negative_int),
    ),
    Option("consumer_group", None, "Source consumer group the mirror commits to (default kmirror-<id>).", optional_str),
    Option(
        "dead_letter_topic",
        None,
        "Target topic for records the target refuses (too large, timestamp outside the topic's window, no key for "
        "a compacted topic): the record with provenance headers (off when null: the batch fails naming it; "
        "docs/reliability.md#poison-records).",
        optional_str,
    ),
    Option(
        "skip_offsets",
        [],
        "Source records never copied, the way out of a poison record: 'topic:partition:offset' or "
        "'topic:partition:first-last'; each skip is logged (`kmirror skipped`) and counted "
        '(kmirror_skipped_records_total{reason="skip_offsets"}; docs/reliability.md#poison-records).',
        _skip_list,
        _skip_entries,
    ),
    # Issue 18: MirrorMaker parity (config and ACL sync) and SQL transforms.
    Option(
        "sync_topic_configs_interval_ms",
        600_000,  # MM2's sync.topic.configs.interval.seconds
        "Streaming: how often the configs of remote topics the mirror created are re-synced from the source "
        "(every --once run syncs once).",
        positive_int,
    ),
    Option(
        "sync_configs_of_existing_topics",
        False,
        "Config sync also alters remote topics the mirror did not create (by hand, by MirrorMaker before a move).",
        boolean,
    ),
    Option(
        "sync_topic_acls",
        False,
        "Copy READ ACLs of mirrored source topics to their remote topics and revoke those it copied "
        "(opt-in: needs Alter on the target cluster).",
        boolean,
    ),
    Option("sync_topic_acls_interval_ms", 600_000, "How often ACLs are synced (MM2's 600 s).", positive_int),
    Option(
        "transform",
        None,
        'Spark SQL over the view `records`: {"sql": "SELECT ... FROM records ..."}; its rows are what is '
        "written (docs/spark-app.md). Off when null: records never enter Spark.",
        _transform,
        _transform_sql,
    ),
    Option(
        "max_bytes_per_second",
        None,
        "Bandwidth limit of the copy: key+value bytes per second over all copy tasks of a batch (off when "
        "null); copy loops wait, never drop or reorder (docs/spark-app.md).",
        _rate("bytes"),
    ),
    Option(
        "max_records_per_second",
        None,
        "Limit of the copy in records per second over all copy tasks of a batch (off when null).",
        _rate("records"),
    ),
)
RATE_LIMITS = ("max_bytes_per_second", "max_records_per_second")
EXACTLY_ONCE_MAX_RECORDS_PER_TRIGGER = 500_000
OPTION_BY_NAME = OPTIONS  # the same table, by name
REQUIRED = ("id", "source", "target", "topics", "topics_exclude", "replication_policy", "checkpoint_location")
PASSTHROUGH = ("groups", "groups_exclude", "topology", "run_in", "spark")  # planner context, ignored by the app
ALLOWED = set(REQUIRED) | set(PASSTHROUGH) | set(OPTION_BY_NAME)
CLUSTER_KEYS = {"alias", "bootstrap_servers", "config", "internal_topics"}
# Code-running properties the planner itself writes into a cluster's config (and nothing else may).
PLANNER_CODE_PROPERTIES = {"sasl.kerberos.kinit.cmd": KINIT_CMD}
_FLOW_ID_RE = re.compile(r"^[A-Za-z0-9._-]+->[A-Za-z0-9._-]+$")


@dataclass(frozen=True)
class ClusterEndpoint:
    alias: str
    bootstrap_servers: str
    config: dict[str, Any] = field(default_factory=dict)
    internal_topics: InternalTopicSizing = field(default_factory=InternalTopicSizing)  # sizes the mirror's own topics

    def client_config(self) -> dict[str, Any]:
        """librdkafka properties for a client of this cluster."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.config}


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
        return CopySettings.read(self.option)

    @cached_property
    def checkpoints(self) -> CheckpointSettings:
        return CheckpointSettings.read(self.option)

    @cached_property
    def heartbeats(self) -> HeartbeatSettings:
        return HeartbeatSettings.read(self.option)

    @cached_property
    def topic_sync(self) -> TopicSyncSettings:
        return TopicSyncSettings.read(self.option)

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


def _endpoint_problems(value: Any, path: str) -> list[Problem]:
    if not isinstance(value, dict):
        return [Problem(path, f"must be a mapping with alias, bootstrap_servers, config; got {value!r}")]
    problems = unknown_keys(value, CLUSTER_KEYS, path)
    for key in ("alias", "bootstrap_servers"):
        if not isinstance(value.get(key), str) or not value.get(key):
            problems.append(Problem(f"{path}.{key}", f"required non-empty string, got {value.get(key)!r}"))
    if "config" in value and _str_map(value["config"]):
        problems.append(Problem(f"{path}.config", str(_str_map(value["config"]))))
    elif "config" in value:
        problems += cluster_config_problems(value["config"], f"{path}.config", PLANNER_CODE_PROPERTIES)
    if "internal_topics" in value:
        problems += sizing_problems(value["internal_topics"], f"{path}.internal_topics")
    return problems


def flow_spec_problems(raw: Any) -> list[Problem]:
    """Every problem in a raw flow spec mapping; empty when it is valid."""
    if not isinstance(raw, dict):
        return [Problem("", f"a flow spec must be a JSON object, got {type(raw).__name__}")]
    problems = unknown_keys(raw, ALLOWED, "", hint="see docs/spark-app.md")
    problems += [Problem(key, "required key is missing") for key in REQUIRED if key not in raw]
    if "id" in raw and (not isinstance(raw["id"], str) or not _FLOW_ID_RE.fullmatch(raw["id"])):
        problems.append(Problem("id", f"must look like 'source->target', got {raw['id']!r}"))
    for side in ("source", "target"):
        if side in raw:
            problems += _endpoint_problems(raw[side], side)
    for key in ("topics", "topics_exclude", "groups", "groups_exclude"):
        if key in raw:
            problems += pattern_problems(raw[key], key)
    if "replication_policy" in raw:
        problems += policy_problems(raw["replication_policy"], "replication_policy")
    if "checkpoint_location" in raw and (
        not isinstance(raw["checkpoint_location"], str) or not raw["checkpoint_location"]
    ):
        problems.append(Problem("checkpoint_location", f"required non-empty path, got {raw['checkpoint_location']!r}"))
    problems += option_conflict_problems(raw) + _reverse_of_problems(raw)
    return problems + OPTIONS.value_problems(raw, "")


def _reverse_of_problems(raw: dict[str, Any]) -> list[Problem]:
    """`reverse_of` names the forward flow's source: this flow's target, under the default policy
    (with identity, remote topics keep their names and cannot be told from the source's own, unless
    `provenance_headers` marks every record with its origin)."""
    forward, target = raw.get("reverse_of"), raw.get("target")
    alias = target.get("alias") if isinstance(target, dict) else None
    if not isinstance(forward, str) or not isinstance(alias, str):
        return []
    problems = []
    if forward != alias:
        problems.append(
            Problem(
                "reverse_of", f"must name this flow's target {alias!r} (the forward flow's source), got {forward!r}"
            )
        )
    identity = isinstance(raw.get("replication_policy"), dict) and raw["replication_policy"].get("type") == "identity"
    if identity and raw.get("provenance_headers") is not True:  # with them: records of the target's origin are skipped
        problems.append(
            Problem(
                "reverse_of",
                "needs the default replication policy: with identity the "
                "forward flow's remote topics keep their names, so they cannot be translated "
                "back (unless provenance_headers is on: docs/active-active.md)",
            )
        )
    return problems


def option_conflict_problems(raw: dict[str, Any]) -> list[Problem]:
    """Options the app refuses in combination at start (exactly_once or a rate limit with a
    transform, a rate limit with the native copy loop). Also run on every resolved flow of a
    topology, so `kmirror validate`/`plan`/`diff` and a preview refuse what the app would."""
    problems = []
    if raw.get("transform") is not None and raw.get("exactly_once") is True:
        problems.append(
            Problem(
                "transform",
                "cannot be combined with exactly_once (the transform path is "
                "at-least-once, like the copy path without it)",
            )
        )
    return (
        problems
        + _rate_limit_problems(raw)
        + _copy_loop_problems(raw)
        + _exactly_once_problems(raw)
        + _provenance_problems(raw)
    )


# Which copy loop serves which flow: the options each loop cannot serve (a flow setting one is
# copied by the Python loop). `copy_loop: auto` picks the first loop of AUTO_ORDER that serves the
# flow (`kmirror_engine.copying.task_copy`: the batch path also needs client settings it can
# connect with, the native loop its built module); `validate` refuses a named loop with an option
# it cannot serve (`_copy_loop_problems`). Each needs per-record work or transactions:
# exactly_once (transactions, offsets committed with them), dead_letter_topic and skip_offsets
# (records judged one by one), rate limits (records paced one by one), provenance_headers (a header
# stamped and checked on every record: only the Python loop does it, issue 46).
COPY_LOOP_CANNOT_SERVE: dict[str, tuple[str, ...]] = {
    "python": (),
    "native": ("exactly_once", "dead_letter_topic", "skip_offsets", "provenance_headers", *RATE_LIMITS),
    "batch": ("exactly_once", "dead_letter_topic", "skip_offsets", "provenance_headers", *RATE_LIMITS),
}
RECORD_LOOP_OPTIONS = COPY_LOOP_CANNOT_SERVE["batch"]  # the options `copy_loop: batch` refuses
AUTO_ORDER = ("batch", "native", "python")  # `copy_loop: auto`'s preference, fastest first (docs/performance.md)


def _provenance_problems(raw: dict[str, Any]) -> list[Problem]:
    """`provenance_headers` is stamped by the copy path's Python loop only (issue 46): the transform path
    writes rows it built itself. (The copy loops that cannot stamp it are in `COPY_LOOP_CANNOT_SERVE`.)"""
    if raw.get("provenance_headers") is not True or raw.get("transform") is None:
        return []
    return [
        Problem(
            "transform",
            "cannot be combined with provenance_headers yet (only the copy "
            "path stamps and filters provenance); remove the transform or provenance_headers",
        )
    ]


def unserved_options(loop: str, options: Mapping[str, Any]) -> list[str]:
    """The options set in `options` (a raw flow, or a spec's options) that `loop` cannot serve."""
    return [name for name in COPY_LOOP_CANNOT_SERVE.get(loop, ()) if options.get(name) not in (None, False, [], "")]


def _copy_loop_problems(raw: dict[str, Any]) -> list[Problem]:
    """`copy_loop: native` or `batch` with an option that loop cannot serve (`COPY_LOOP_CANNOT_SERVE`)."""
    loop = raw.get("copy_loop")
    if loop not in ("native", "batch"):
        return []
    serves, picks = (
        ("the Python loop serves", "the Python loop")
        if loop == "native"
        else ("the record loops serve", "a record loop")
    )
    named = [
        name for name in unserved_options(str(loop), raw) if not (loop == "native" and name in RATE_LIMITS)
    ]  # `_rate_limit_problems` names those
    return [
        Problem(
            "copy_loop",
            f"is '{loop}', but {name} is set and only {serves} it; set copy_loop to auto (it "
            f"picks {picks} for such a flow) or remove {name}",
        )
        for name in named
    ]


def _exactly_once_problems(raw: dict[str, Any]) -> list[Problem]:
    """exactly_once reads committed records only: a read_uncommitted consumer would copy aborted ones."""
    consumer = raw.get("consumer")
    if raw.get("exactly_once") is not True or not isinstance(consumer, dict):
        return []
    level = consumer.get("isolation.level")
    if level in (None, "read_committed"):
        return []
    return [
        Problem(
            "consumer",
            f"isolation.level is {level!r}, but exactly_once copies committed records only "
            "(a read_uncommitted consumer copies aborted transactions' records); remove the override "
            "or set it to read_committed",
        )
    ]


def _rate_limit_problems(raw: dict[str, Any]) -> list[Problem]:
    """Options a rate-limited flow cannot combine (the limits themselves are checked by OPTIONS)."""
    limits = [name for name in RATE_LIMITS if raw.get(name) is not None]
    if not limits:
        return []
    problems = []
    if raw.get("copy_loop") == "native":
        problems.append(
            Problem(
                "copy_loop",
                f"is 'native', but {' and '.join(limits)} is set and only the Python "
                "loop paces its copy; set copy_loop to auto (it picks the Python loop for a "
                "rate-limited flow) or python, or remove the limit",
            )
        )
    if raw.get("transform") is not None:
        problems.append(
            Problem(
                "transform",
                f"cannot be combined with {' and '.join(limits)} yet (only the copy "
                "path is paced); remove the transform or the limit",
            )
        )
    return problems


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
