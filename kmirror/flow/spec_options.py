"""The flow spec's options: every optional key, declared once in `OPTIONS` with its doc, default
and checks (`docs/spark-app.md` is the user-facing reference), and the keys a flow spec allows.

Part of the flow spec (`kmirror.flow.spec` re-exports every name here).
"""

from __future__ import annotations

import re
from typing import Any

from kmirror.errors import Problem
from kmirror.flow.views import (
    MM2_OFFSET_SYNCS_CLUSTER,
    MM2_SOURCE_CONNECTOR,
    OffsetSkip,
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
)
from kmirror.security.config import KINIT_CMD
from kmirror.security.override_rules import client_override_problems


def str_map_problem(value: Any) -> str | None:
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
        str_map_problem,
        client_override_problems,
    ),
    Option("consumer", {}, "librdkafka consumer overrides for the source.", str_map_problem, client_override_problems),
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
FLOW_ID_RE = re.compile(r"^[A-Za-z0-9._-]+->[A-Za-z0-9._-]+$")
