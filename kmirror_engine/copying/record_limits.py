"""Record limits of the target: which records it accepts, and producer settings that keep every
batch within the target topic's `max.message.bytes`.

The broker checks `max.message.bytes` against a whole record batch, and librdkafka (unlike the
Java producer) does not split a batch the broker rejected as too large: every record of it fails
with MSG_SIZE_TOO_LARGE, fitting or not. So:
- `capped_producer_config` caps `batch.size` and `message.max.bytes` at the smallest limit of
  the task's target topics: batches stay within the limit, and librdkafka itself refuses a
  single record over it;
  its `message.max.bytes` is the largest known limit, so a record a topic accepts is never
  refused by the producer's own 1 MB default;
- `over_limit(size, limit)` is true only for a record that cannot fit even alone in a batch.

The broker refuses a whole batch for one bad record (every record of it fails with the same
error, offending or not), so a record the target would refuse must be found *before* it is
produced: `TargetRules.refusal` names what the topic's configs refuse (too large, a CreateTime
outside `message.timestamp.before.max.ms`/`after.max.ms`, no key for a compacted topic). Only
those records may be dead-lettered; a limit that could not be read refuses nothing here (the
broker's verdict then fails the copy, docs/reliability.md "Poison records").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin before Python 3.11
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource, ResourceType

log = logging.getLogger("kmirror.record_limits")

LIMIT_CONFIG = "max.message.bytes"
# Topic configs that make the broker refuse single records (Kafka 4.x names; LogValidator).
TIMESTAMP_TYPE_CONFIG = "message.timestamp.type"
BEFORE_CONFIG = "message.timestamp.before.max.ms"
AFTER_CONFIG = "message.timestamp.after.max.ms"
# Kafka before 3.6 has only this one (both directions); 3.6-3.9 still apply it where the two above
# are left at their default (KIP-937), and 4.0 removed it.
DIFFERENCE_CONFIG = "message.timestamp.difference.max.ms"
LONG_MAX = 2**63 - 1  # the broker's default of the three: no bound
CLEANUP_CONFIG = "cleanup.policy"
RULE_CONFIGS = (LIMIT_CONFIG, TIMESTAMP_TYPE_CONFIG, BEFORE_CONFIG, AFTER_CONFIG, DIFFERENCE_CONFIG, CLEANUP_CONFIG)
# librdkafka's own bounds of message.max.bytes (it refuses a producer outside them).
MAX_PRODUCER_MESSAGE_MAX_BYTES = 1_000_000_000
LIBRDKAFKA_MESSAGE_MAX_BYTES = 1_000_000  # its default: lower than many topics' limits
# Framing around one record alone in a batch: the v2 batch header (61 bytes) and a record's
# varints (attributes, deltas, lengths: at most 21 bytes) plus 10 bytes per header's two lengths.
BATCH_OVERHEAD_BYTES = 61
RECORD_OVERHEAD_BYTES = 21
HEADER_OVERHEAD_BYTES = 10
# librdkafka refuses message.max.bytes below 1000.
MIN_PRODUCER_MESSAGE_MAX_BYTES = 1000


def record_bytes(key: bytes | None, value: bytes | None, headers: Any) -> int:
    """Key, value and header bytes of a record plus its framing alone in a batch."""
    size = BATCH_OVERHEAD_BYTES + RECORD_OVERHEAD_BYTES + len(key or b"") + len(value or b"")
    for name, data in headers or ():
        size += HEADER_OVERHEAD_BYTES + len(name.encode() if isinstance(name, str) else name) + len(data or b"")
    return size


def over_limit(size: int, limit: int | None) -> bool:
    """True when a record of `size` (`record_bytes`) cannot fit the target alone; unknown limit: False."""
    return limit is not None and size > limit


def capped_producer_config(config: Mapping[str, Any], limits: Iterable[int | None]) -> dict[str, Any]:
    """`config` with `batch.size` at most the smallest known limit (a batch fits every topic) and,
    unless the user set it, `message.max.bytes` at the largest (librdkafka sends a record larger
    than batch.size alone in its batch; a record over its own topic's limit never reaches the
    producer: `TargetRules.refusal`). Without a known limit the config is left as it is."""
    limits = list(limits)
    known = [limit for limit in limits if limit is not None]
    out = dict(config)
    if not known:
        return out
    smallest = max(MIN_PRODUCER_MESSAGE_MAX_BYTES, min(known))
    if "message.max.bytes" not in out:
        # never below librdkafka's default: the dead-letter topic's limit and unknown ones are not read
        largest = max(LIBRDKAFKA_MESSAGE_MAX_BYTES, *known)
        out["message.max.bytes"] = min(max(largest, MIN_PRODUCER_MESSAGE_MAX_BYTES), MAX_PRODUCER_MESSAGE_MAX_BYTES)
    out["batch.size"] = min(int(out.get("batch.size", LIBRDKAFKA_MESSAGE_MAX_BYTES)), smallest)
    # librdkafka refuses a producer whose batch.size exceeds its message.max.bytes (a lower
    # `producer` override of message.max.bytes included)
    out["batch.size"] = min(out["batch.size"], int(out["message.max.bytes"]))
    return out


@dataclass(frozen=True)
class TargetRules:
    """What a target topic's configs make the broker refuse record by record (None: not known).

    `refusal` is the one place the copy loop asks; an unknown rule refuses nothing, so a record
    is never dead-lettered on a guess."""

    max_message_bytes: int | None = None
    create_time: bool | None = None  # message.timestamp.type CreateTime: timestamps are validated
    before_max_ms: int | None = None
    after_max_ms: int | None = None
    compacted: bool | None = None

    def refusal(
        self, key: bytes | None, value: bytes | None, headers: Any, timestamp_ms: int, now_ms: int
    ) -> str | None:
        """Why the target would refuse this record (config, value and bound), or None when it
        accepts it or the rule is unknown. `timestamp_ms` <= 0: the producer stamps it, never refused."""
        full = record_bytes(key, value, headers)
        if over_limit(full, self.max_message_bytes):
            return f"record of {full} bytes over the topic's {LIMIT_CONFIG} ({self.max_message_bytes})"
        if self.create_time and timestamp_ms > 0:
            if self.before_max_ms is not None and now_ms - timestamp_ms > self.before_max_ms:
                return (
                    f"timestamp {timestamp_ms} is {now_ms - timestamp_ms} ms in the past, over the topic's "
                    f"{BEFORE_CONFIG} ({self.before_max_ms})"
                )
            if self.after_max_ms is not None and timestamp_ms - now_ms > self.after_max_ms:
                return (
                    f"timestamp {timestamp_ms} is {timestamp_ms - now_ms} ms in the future, over the topic's "
                    f"{AFTER_CONFIG} ({self.after_max_ms})"
                )
        if self.compacted and key is None:
            return f"a record without a key, refused by a compacted topic ({CLEANUP_CONFIG}=compact)"
        return None


def rules_from_configs(configs: Mapping[str, Any]) -> TargetRules:
    """`TargetRules` from a DescribeConfigs answer (name -> ConfigEntry); absent entries stay None."""

    def value(name: str) -> str | None:
        entry = configs.get(name)
        return None if entry is None or entry.value is None else str(entry.value)

    def number(name: str) -> int | None:
        text = value(name)
        return None if text is None else int(text)

    def window(name: str) -> int | None:
        """A bound of the timestamp window: the 4.x config, else 3.x's difference (KIP-937)."""
        bound, difference = number(name), number(DIFFERENCE_CONFIG)
        if difference is not None and difference != LONG_MAX and bound in (None, LONG_MAX):
            return difference
        return bound

    kind, cleanup = value(TIMESTAMP_TYPE_CONFIG), value(CLEANUP_CONFIG)
    return TargetRules(
        max_message_bytes=number(LIMIT_CONFIG),
        create_time=None if kind is None else kind == "CreateTime",
        before_max_ms=window(BEFORE_CONFIG),
        after_max_ms=window(AFTER_CONFIG),
        compacted=None if cleanup is None else "compact" in cleanup.split(","),
    )


def topic_rules(admin: Any, topics: Iterable[str], timeout_s: float = 10.0) -> dict[str, TargetRules]:
    """Each target topic's `TargetRules` (all None when describing it fails: logged; the broker
    then judges its records, and a refusal fails the copy instead of dead-lettering)."""
    names = sorted(set(topics))
    out = {name: TargetRules() for name in names}
    if not names:
        return out
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name) for name in names])
    for resource, future in futures.items():
        try:
            out[resource.name] = rules_from_configs(future.result(timeout=timeout_s))
        except (KafkaException, FutureTimeout) as exc:
            log.warning(
                "cannot read the configs of target topic %s (records are checked by the broker only): %s",
                resource.name,
                exc or f"no answer within {timeout_s:g} s",
            )
    return out


def topic_limits(admin: Any, topics: Iterable[str], timeout_s: float = 10.0) -> dict[str, int | None]:
    """Each topic's `max.message.bytes` on the target (None when the broker does not report it,
    e.g. a broker that lists only explicitly set configs, or when describing fails)."""
    return {name: rules.max_message_bytes for name, rules in topic_rules(admin, topics, timeout_s).items()}
