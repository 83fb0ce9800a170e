"""librdkafka client properties checked the way librdkafka will check them, before anything deploys.

A `producer`/`consumer` override map (or a flow spec's cluster `config`) that validate, plan, diff
and the Pulumi program accept must not be refused by librdkafka when the app starts. So:

- Names: unknown to librdkafka -> refused, with a did-you-mean from librdkafka's own table, and
  the librdkafka name of a common Java-client (MirrorMaker 2) property that librdkafka lacks.
- Aliases (`acks` = `request.required.acks`, `linger.ms` = `queue.buffering.max.ms`): both set in
  one map -> refused (one of them would silently win).
- Roles: a consumer-only property in `producer` (or the reverse) is ignored by librdkafka with a
  log line nobody reads -> refused, naming the map it belongs in.
- Values: types, enumerations and ranges from the table (`librdkafka_properties.py`, generated from
  the CONFIGURATION.md of the librdkafka confluent-kafka ships); where confluent-kafka is
  importable, librdkafka itself is asked too (a client built with the property and no brokers:
  it validates at construction and never connects). References (`${env:X}`, `${file:...}`) are
  resolved at start: not type-checked.
- Producer safety (acks, idempotence, requests in flight, retries, delivery timeout) is checked on
  the canonical names, so `request.required.acks: 1` is refused like `acks: 1`.

Messages name the path, the property and the fix; never a secret's value, nor the value of an
unknown name (it may be a mistyped secret property).
"""

from __future__ import annotations

import difflib
import logging
import math
import re
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from kmirror.errors import Problem
from kmirror.security.librdkafka_properties import LIBRDKAFKA_VERSION, PROPERTIES

ROLES = {"P": "producer", "C": "consumer"}
REDACTED = "<redacted>"
# Java-client (MirrorMaker 2, Kafka Connect) names librdkafka lacks, and what librdkafka calls them
# (None: no equivalent; the text says why).
JAVA_EQUIVALENTS: dict[str, str | None] = {
    "max.request.size": "message.max.bytes",
    "buffer.memory": "queue.buffering.max.kbytes",
    "fetch.max.wait.ms": "fetch.wait.max.ms",
    "receive.buffer.bytes": "socket.receive.buffer.bytes",
    "send.buffer.bytes": "socket.send.buffer.bytes",
    "partitioner.class": "partitioner",
    "compression.gzip.level": "compression.level",
    "compression.lz4.level": "compression.level",
    "compression.zstd.level": "compression.level",
    "ssl.truststore.location": "ssl.ca.location",
    "ssl.truststore.password": None,
    "ssl.truststore.type": None,
    "max.block.ms": None,
    "default.api.timeout.ms": None,
    "key.serializer": None,
    "value.serializer": None,
    "key.deserializer": None,
    "value.deserializer": None,
    "interceptor.classes": None,
    "sasl.jaas.config": None,
}
_NO_EQUIVALENT = {
    "max.block.ms": "librdkafka never blocks a send: see queue.buffering.max.messages/kbytes",
    "default.api.timeout.ms": "kmirror sets its own call timeouts",
    "sasl.jaas.config": "librdkafka takes sasl.username/sasl.password; give the cluster a `security` section",
    "ssl.truststore.password": "librdkafka reads CA certificates in PEM (ssl.ca.location), which need no password",
    "ssl.truststore.type": "librdkafka reads CA certificates in PEM (ssl.ca.location)",
}
# librdkafka integers that also take a word.
_NAMED_INTEGERS = {"request.required.acks": {"all": -1}}
_BOOLEAN_WORDS = {"true": True, "t": True, "1": True, "false": False, "f": False, "0": False}
_INTEGER_RE = re.compile(r"[-+]?\d+")
# Checked together at client creation (a SASL protocol alone means GSSAPI to librdkafka, whose
# kinit would run on the validating host): never asked about alone.
_NOT_PROBED = frozenset({"security.protocol", "sasl.mechanism", "sasl.mechanisms"})


def known(name: str) -> bool:
    return name in PROPERTIES


def canonical(name: str) -> str:
    """The name librdkafka sets for `name` (`acks` -> `request.required.acks`); unknown names as given."""
    entry = PROPERTIES.get(name)
    return str(entry["alias_of"]) if entry and "alias_of" in entry else name


def same_property(a: str, b: str) -> bool:
    return canonical(a) == canonical(b)


def given(overrides: Mapping[str, Any], name: str) -> tuple[str, Any] | None:
    """The key of `overrides` that sets `name` (under any of its aliases) and its value, or None."""
    for key, value in overrides.items():
        if same_property(str(key), name):
            return str(key), value
    return None


def unknown_reason(name: str, role: str | None) -> str:
    """Why `name` is refused: the Java-client equivalent or the closest librdkafka name."""
    kind = f"librdkafka {role} property" if role else "librdkafka property"
    message = f"unknown {kind} '{name}'"
    if name in JAVA_EQUIVALENTS:
        equivalent = JAVA_EQUIVALENTS[name]
        if equivalent is not None:
            return f"{message}; it is a Java-client (MirrorMaker 2) name: librdkafka's is '{equivalent}'"
        why = _NO_EQUIVALENT.get(name, "librdkafka has no such setting (the mirror copies bytes)")
        return f"{message}; it is a Java-client (MirrorMaker 2) property with no librdkafka equivalent ({why})"
    candidates = [n for n, e in PROPERTIES.items() if e["type"] != "api" and _fits(e, role)]
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    fix = f"did you mean '{close[0]}'?" if close else f"see librdkafka {LIBRDKAFKA_VERSION}'s CONFIGURATION.md"
    return f"{message}; {fix}"


def _fits(entry: Mapping[str, Any], role: str | None) -> bool:
    return role is None or entry["role"] == "*" or ROLES[entry["role"]] == role


def role_reason(name: str, role: str) -> str | None:
    """Why `name` does not belong in the `role` map (a consumer property in `producer`), or None."""
    entry = PROPERTIES[name]
    if _fits(entry, role):
        return None
    other = ROLES[entry["role"]]
    return f"'{name}' is a librdkafka {other} property: a {role} ignores it; move it to `{other}`"


def _as_text(value: Any) -> str:
    """The string confluent-kafka hands librdkafka (booleans as true/false)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _range(entry: Mapping[str, Any]) -> str:
    def shown(bound: float) -> str:
        return str(int(bound)) if float(bound).is_integer() else str(bound)

    return f"{shown(entry['min'])}..{shown(entry['max'])}" if "min" in entry else "any"


def _number_reason(entry: Mapping[str, Any], name: str, value: Any) -> str | None:
    """A number out of the table's range, or a value that is not the number the type wants."""
    integer = entry["type"] == "integer"
    expected = f"{'an integer' if integer else 'a number'} in {_range(entry)}"
    words = _NAMED_INTEGERS.get(canonical(name), {})
    number: float | None = None
    if isinstance(value, bool):
        number = None
    elif isinstance(value, int | float):
        number = value
    elif isinstance(value, str) and value.strip().lower() in words:
        return None
    elif isinstance(value, str) and (_INTEGER_RE.fullmatch(value.strip()) or not integer):
        try:
            number = float(value) if not integer else int(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or (integer and number != int(number)):
        word_hint = f" or {', '.join(repr(w) for w in words)}" if words else ""
        return f"must be {expected}{word_hint}"
    if "min" in entry and not entry["min"] <= number <= entry["max"]:
        return f"must be {expected}"
    return None


def _choice_reason(entry: Mapping[str, Any], value: Any) -> str | None:
    allowed = [str(v).lower() for v in entry.get("values", [])]
    if not allowed:
        return None
    words = [w.strip().lower() for w in _as_text(value).split(",")] if entry["type"] == "flags" else None
    if words is not None and all(w in allowed for w in words):
        return None
    if words is None and _as_text(value).strip().lower() in allowed:
        return None
    many = " (comma-separated)" if entry["type"] == "flags" else ""
    return f"must be one of {', '.join(entry['values'])}{many}"


def value_reason(name: str, value: Any) -> str | None:
    """Why librdkafka would refuse `name: value` (type, enumeration, range) by the table, or None.
    Stricter than librdkafka on one point: a number with trailing text (`linger.ms: 5s`) is
    refused, where librdkafka would silently read 5."""
    entry = PROPERTIES[name]
    kind = entry["type"]
    if kind in ("integer", "float"):
        return _number_reason(entry, name, value)
    if kind == "boolean":
        if isinstance(value, bool) or _as_text(value).strip().lower() in _BOOLEAN_WORDS:
            return None
        return "must be true or false"
    if kind in ("enum", "flags"):
        return _choice_reason(entry, value)
    return None


_LIBRDKAFKA: list[Any] = []  # confluent_kafka, handed in by the layers that have it


def register_librdkafka(confluent_kafka: Any) -> None:
    """Let validation ask librdkafka itself (the CLI and the engine call this with the module they
    import); without it (a Pulumi program without confluent-kafka) the table alone decides. The
    pure core never imports a Kafka client itself."""
    _LIBRDKAFKA[:] = [confluent_kafka]
    _librdkafka_verdict.cache_clear()


def _confluent_kafka() -> Any | None:
    return _LIBRDKAFKA[0] if _LIBRDKAFKA else None


_SILENT = logging.getLogger("kmirror.client_properties.probe")
_SILENT.addHandler(logging.NullHandler())
_SILENT.propagate = False


@lru_cache(maxsize=4096)
def _librdkafka_verdict(name: str, value: Any, _type_name: str) -> str | None:
    kafka = _confluent_kafka()
    if kafka is None:
        return None
    try:
        # No bootstrap.servers: librdkafka validates at construction and never connects. Logs go to
        # a silent logger (a `debug` override would otherwise print to stderr).
        kafka.Producer({name: value, "log_level": 0, "logger": _SILENT})
    except kafka.KafkaException as exc:
        reason = str(exc.args[0].str())
        # "Failed to create": a rule across properties (a keystore without its password),
        # checked by the app when it builds the whole config.
        return None if reason.startswith("Failed to create") else reason
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def librdkafka_verdict(name: str, value: Any) -> str | None:
    """librdkafka's own refusal of `name: value` alone, or None (accepted, a reference, checked
    only together with others, or confluent-kafka not importable)."""
    if name in _NOT_PROBED or name.startswith("kmirror.") or (isinstance(value, str) and "${" in value):
        return None
    if _confluent_kafka() is None:
        return None
    return _librdkafka_verdict(name, value, type(value).__name__)  # True and 1 are one key otherwise


def librdkafka_available() -> bool:
    return _confluent_kafka() is not None


def _unknown_to_librdkafka(name: str, value: Any) -> bool:
    """True when neither the table nor (where it is another version) librdkafka knows `name`."""
    if known(name):
        return False
    kafka = _confluent_kafka()
    if kafka is None or kafka.libversion()[0] == LIBRDKAFKA_VERSION:
        return True  # the table is this librdkafka's: no need to build a client to hear the same
    verdict = librdkafka_verdict(name, value)
    return verdict is not None and "No such configuration property" in verdict


def _value_problem(name: str, value: Any, where: str, hidden: Callable[[str], bool]) -> Problem | None:
    if not isinstance(value, str | int | float | bool) or (isinstance(value, str) and "${" in value):
        return None  # not a scalar (reported by the map's own check) or a reference (resolved at start)
    shown = REDACTED if hidden(name) else repr(value)
    reason = value_reason(name, value) if known(name) else None
    if reason is not None:
        return Problem(where, f"invalid value {shown} for librdkafka's '{name}': {reason}")
    verdict = librdkafka_verdict(name, value)
    if verdict is not None:
        return Problem(where, f"refused by librdkafka {LIBRDKAFKA_VERSION}: {verdict.strip()} (value {shown})")
    return None


def client_property_problems(
    overrides: Mapping[str, Any], path: str, role: str | None, hidden: Callable[[str], bool]
) -> list[Problem]:
    """Problems librdkafka would raise at start for the map at `path`: unknown names, an alias
    and its canonical name both set, properties of the other client `role` ('producer',
    'consumer'; None for a cluster config, read by every client), invalid values. `hidden(name)`
    is True for properties whose value must never be printed. `kmirror.*` keys are kmirror's own."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}  # canonical name -> the key that set it
    for key, value in overrides.items():
        name, where = str(key), f"{path}.{key}"
        if name.startswith("kmirror."):
            continue
        if _unknown_to_librdkafka(name, value):
            problems.append(Problem(where, unknown_reason(name, role)))
            continue
        first = seen.setdefault(canonical(name), name)
        if first != name:
            problems.append(
                Problem(
                    where,
                    f"'{first}' and '{name}' both set librdkafka's '{canonical(name)}' "
                    f"(one would silently win); keep only one",
                )
            )
            continue
        reason = role_reason(name, role) if role and known(name) else None
        if known(name) and PROPERTIES[name]["type"] == "api":
            reason = "is set through librdkafka's C API (a callback or pointer), not a configuration value; remove it"
        problem = Problem(where, reason) if reason else _value_problem(name, value, where, hidden)
        if problem is not None:
            problems.append(problem)
    return problems


# ---- producer safety: the target producer must not lose, duplicate or reorder records ----

UNBOUNDED_RETRIES = 2_147_483_647


def _acks_reason(value: Any) -> str | None:
    if not isinstance(value, bool) and _as_text(value).strip().lower() in {"all", "-1"}:
        return None
    return f"must stay 'all' (records could be lost), got {value!r}; remove the override"


def _idempotence_reason(value: Any) -> str | None:
    if value is True or (not isinstance(value, bool) and _BOOLEAN_WORDS.get(_as_text(value).strip().lower()) is True):
        return None
    return f"must stay true (retries could duplicate or reorder), got {value!r}; remove the override"


def _in_flight_reason(value: Any) -> str | None:
    text = _as_text(value).strip()
    if not isinstance(value, bool) and text.isdigit() and 1 <= int(text) <= 5:
        return None
    return f"must be 1..5 (ordering with idempotence), got {value!r}"


def _retries_reason(value: Any) -> str | None:
    if _as_text(value).strip() == str(UNBOUNDED_RETRIES):
        return None
    return (
        f"must stay unbounded (a failed send fails the batch instead of retrying), got {value!r}; remove the override"
    )


def _timeout_reason(value: Any) -> str | None:
    """librdkafka reads a delivery timeout of 0 as "no limit": a send to an unreachable target
    would then wait forever instead of failing the batch (the task hangs, nothing is reported)."""
    if _as_text(value).strip() not in {"0", "0.0"}:
        return None
    return (
        f"must be a finite time in ms (0 means wait forever: a target outage would hang the copy tasks), "
        f"got {value!r}; remove the override or set e.g. 300000"
    )


# By canonical name, so every alias is held to the same rule.
_SAFETY_RULES: dict[str, Callable[[Any], str | None]] = {
    canonical("acks"): _acks_reason,
    canonical("enable.idempotence"): _idempotence_reason,
    canonical("max.in.flight.requests.per.connection"): _in_flight_reason,
    canonical("retries"): _retries_reason,
    canonical("message.timeout.ms"): _timeout_reason,
}


def producer_safety_problems(overrides: Mapping[str, Any], path: str = "producer") -> list[Problem]:
    """Overrides that would let the target producer lose, duplicate, reorder or hang on records,
    each under any of its librdkafka names (`request.required.acks: 1` like `acks: 1`), at
    `path.<key as given>`; empty when safe."""
    return _rule_problems(overrides, path, _SAFETY_RULES)


def infinite_timeout_problems(overrides: Mapping[str, Any], path: str) -> list[Problem]:
    """A delivery timeout of 0 (`message.timeout.ms` or its alias) in a cluster config at `path`."""
    return _rule_problems(overrides, path, {canonical("message.timeout.ms"): _timeout_reason})


def _rule_problems(
    overrides: Mapping[str, Any], path: str, rules: Mapping[str, Callable[[Any], str | None]]
) -> list[Problem]:
    problems = []
    for key, value in overrides.items():
        rule = rules.get(canonical(str(key)))
        reason = rule(value) if rule else None
        if reason is not None:
            problems.append(Problem(f"{path}.{key}", reason))
    return problems
