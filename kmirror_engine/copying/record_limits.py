"""Record size limits of the target: which records fit, and producer settings that keep every
batch within the target topic's `max.message.bytes`.

The broker checks `max.message.bytes` against a whole record batch, and librdkafka (unlike the
Java producer) does not split a batch the broker rejected as too large: every record of it fails
with MSG_SIZE_TOO_LARGE, fitting or not. So:
- `capped_producer_config` caps `batch.size` and `message.max.bytes` at the smallest limit of
  the task's target topics: batches stay within the limit, and librdkafka itself refuses a
  single record over it;
- `over_limit(size, limit)` is true only for a record that cannot fit even alone in a batch:
  the only records the copy may dead-letter.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import TimeoutError as FutureTimeout  # not the builtin before Python 3.11
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import ConfigResource, ResourceType

log = logging.getLogger("kmirror.record_limits")

LIMIT_CONFIG = "max.message.bytes"
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
    """`config` with `batch.size` and `message.max.bytes` at most the smallest known limit."""
    known = [limit for limit in limits if limit is not None]
    out = dict(config)
    if not known:
        return out
    cap = max(MIN_PRODUCER_MESSAGE_MAX_BYTES, min(known))
    for name, default in (("message.max.bytes", 1_000_000), ("batch.size", 1_000_000)):
        out[name] = min(int(out.get(name, default)), cap)
    # librdkafka refuses a producer whose batch.size exceeds its message.max.bytes (a lower
    # `producer` override of message.max.bytes included)
    out["batch.size"] = min(out["batch.size"], out["message.max.bytes"])
    return out


def topic_limits(admin: Any, topics: Iterable[str], timeout_s: float = 10.0) -> dict[str, int | None]:
    """Each topic's `max.message.bytes` on the target (None when the broker does not report it,
    e.g. a broker that lists only explicitly set configs, or when describing fails)."""
    names = sorted(set(topics))
    out: dict[str, int | None] = dict.fromkeys(names)
    if not names:
        return out
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name) for name in names])
    for resource, future in futures.items():
        try:
            entry = future.result(timeout=timeout_s).get(LIMIT_CONFIG)
        except (KafkaException, FutureTimeout) as exc:
            log.warning("cannot read %s of target topic %s (records are checked by the broker only): %s",
                        LIMIT_CONFIG, resource.name, exc or f"no answer within {timeout_s:g} s")  # fmt: skip
            continue
        if entry is not None and entry.value is not None:
            out[resource.name] = int(entry.value)
    return out
