"""Checks of a raw flow spec: every problem, each at its own path (`flow_spec_problems`), and the
options the app refuses in combination (`option_conflict_problems`), with the copy-loop table.

Part of the flow spec (`kmirror.flow.spec` re-exports every public name here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kmirror.errors import Problem
from kmirror.flow.filters import pattern_problems
from kmirror.flow.internal_sizing import sizing_problems
from kmirror.flow.replication_policy import policy_problems
from kmirror.flow.spec_options import (
    ALLOWED,
    CLUSTER_KEYS,
    FLOW_ID_RE,
    OPTIONS,
    PLANNER_CODE_PROPERTIES,
    RATE_LIMITS,
    REQUIRED,
    str_map_problem,
)
from kmirror.option_table import unknown_keys
from kmirror.security.override_rules import cluster_config_problems


def _endpoint_problems(value: Any, path: str) -> list[Problem]:
    if not isinstance(value, dict):
        return [Problem(path, f"must be a mapping with alias, bootstrap_servers, config; got {value!r}")]
    problems = unknown_keys(value, CLUSTER_KEYS, path)
    for key in ("alias", "bootstrap_servers"):
        if not isinstance(value.get(key), str) or not value.get(key):
            problems.append(Problem(f"{path}.{key}", f"required non-empty string, got {value.get(key)!r}"))
    if "config" in value and str_map_problem(value["config"]):
        problems.append(Problem(f"{path}.config", str(str_map_problem(value["config"]))))
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
    if "id" in raw and (not isinstance(raw["id"], str) or not FLOW_ID_RE.fullmatch(raw["id"])):
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
