"""Bandwidth limits of a flow's copy (issue 18): `max_bytes_per_second`, `max_records_per_second`.

A new mirror of a large estate would otherwise copy its backlog as fast as the WAN link allows.
The limits hold for the whole batch, over every copy loop of every task, without state shared
between executors:

- **Shares** (driver): the planner knows every range of a batch, so it gives each range its
  share of the flow's limits (the reader's `rate_share` column; the shares of a batch sum to 1).
  A records limit is split by offsets (`range_shares`); a bytes limit by each range's estimated
  bytes, its offsets times its partition's sampled bytes per offset
  (`kmirror_engine.planning.rate_shares.split_rate_limits`, issue 26): split by offsets, a
  partition of 1 MB records next to one of small records got a record-count share, and 1 GB took
  27.8 h under a 10 MB/s limit instead of ~100 s.
- **Pacing** (executors): a copy loop paces itself at the flow's limits times the sum of its
  ranges' shares (`Pacer`: one token bucket per limit, charged with the records and the bytes
  the loop actually copied). However the ranges are spread over tasks, threads and executors,
  the loops of a batch together stay at or under the limits. Shares follow the work, so the
  loops finish at about the same time; an equal split per loop would hold the loop with the
  largest partition at 1/N of the limit while the others idle.
- **Order**: pacing only delays. After a loop consumed and produced a batch of records it pays
  for them, waiting while its bucket is in debt, before it consumes more: nothing is dropped or
  reordered, the backlog drains in offset order per partition as without a limit.
- **Transactions** (exactly-once): a wait never runs inside an open transaction past its time
  budget (`RangeCopier.max_seconds`, well inside `transaction.timeout.ms`): the copy is cut
  instead, the transaction commits, and the debt is paid (`Pacer.pay`) before the next begins.

Units: bytes are key + value bytes, what `kmirror_byte_count_total` counts (headers and
protocol overhead come on top on the wire); records are records produced. A paced loop also
asks the consumer for about `PACE_S` of its rate at a time, so it never swallows a large burst.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kmirror.flow.views import CopySettings

# A bucket holds at most this many seconds of its rate: the burst a loop may make after it idled.
BURST_S = 0.2
# A paced loop asks the consumer for about this many seconds' worth of records per call.
PACE_S = 0.1
# Before a byte-limited loop knows its records' size it asks for this many at a time.
PROBE_RECORDS = 10
# While it waits, a loop serves delivery reports at least this often.
SERVE_S = 0.05
# Rate-limited flows bound their consumers' prefetch (fetch size and queue) to this many seconds
# of the flow's byte limit, within [PREFETCH_MIN_BYTES, the unlimited tuning's 64 MiB]: the
# limit then also holds on the wire (a fetch never runs far ahead of the paced loop).
PREFETCH_S = 0.25
PREFETCH_MIN_BYTES = 1024 * 1024


class TokenBucket:
    """Tokens accrue at `rate` per second up to `capacity`; a take may go into debt, and
    returns how long to wait until the debt is paid. Starts empty, so a loop's first take is
    its only burst above the rate."""

    def __init__(self, rate: float, capacity: float | None = None, clock: Callable[[], float] = time.monotonic):
        if rate <= 0:
            raise ValueError(f"rate must be > 0, got {rate!r}")
        self.rate = float(rate)
        self.capacity = float(capacity) if capacity is not None else self.rate * BURST_S
        self.clock = clock
        self.tokens = 0.0
        self.stamp = clock()

    def take(self, amount: float) -> float:
        """Spend `amount` tokens now; the seconds to wait before spending more (0: none)."""
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate) - amount
        self.stamp = now
        return -self.tokens / self.rate if self.tokens < 0 else 0.0


class Pacer:
    """Paces one copy loop (thread-confined) at `bytes_per_s` and/or `records_per_s`.

    `charge(records, size)` after each consumed batch returns the seconds the loop must wait;
    `wait(seconds, serve)` waits them (counted in `throttled_s`: time actually waited), calling
    `serve` (the producer's poll) in between so delivery reports keep flowing; `pay(serve)` waits
    out whatever is still owed (a transaction cut short by its time budget pays its debt after
    committing); `batch_size(n)` caps how many records the loop asks for at once. `clock` and
    `sleep` are injected by tests.
    """

    def __init__(
        self,
        bytes_per_s: float | None = None,
        records_per_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Any] = time.sleep,
    ) -> None:
        self.bytes = TokenBucket(bytes_per_s, clock=clock) if bytes_per_s else None
        self.records = TokenBucket(records_per_s, clock=clock) if records_per_s else None
        self.clock, self.sleep = clock, sleep
        self.throttled_s = 0.0
        self._charged_records = self._charged_bytes = 0

    def batch_size(self, default: int) -> int:
        """Records to ask the consumer for: about `PACE_S` of this loop's rate, at least 1."""
        n = default
        if self.records is not None:
            n = min(n, int(self.records.rate * PACE_S))
        if self.bytes is not None and not self._charged_records:
            n = min(n, PROBE_RECORDS)
        elif self.bytes is not None:
            average = max(1.0, self._charged_bytes / self._charged_records)
            n = min(n, int(self.bytes.rate * PACE_S / average))
        return max(1, n)

    def charge(self, records: int, size: int) -> float:
        """Account for records consumed and produced; the seconds to wait before consuming more."""
        self._charged_records += records
        self._charged_bytes += size
        owed = 0.0
        if self.records is not None and records:
            owed = self.records.take(records)
        if self.bytes is not None and size:
            owed = max(owed, self.bytes.take(size))
        return owed

    def owed(self) -> float:
        """Seconds until every charge so far is paid for (0: none owed)."""
        return max((bucket.take(0) for bucket in (self.bytes, self.records) if bucket is not None), default=0.0)

    def pay(self, serve: Callable[[], Any] | None = None) -> float:
        """Wait until nothing is owed (see `wait`); the seconds waited."""
        owed = self.owed()
        if owed > 0:
            self.wait(owed, serve)
        return owed

    def wait(self, seconds: float, serve: Callable[[], Any] | None = None) -> None:
        """Wait `seconds`, in slices of at most `SERVE_S` with `serve()` after each; the time
        waited is added to `throttled_s`."""
        start = self.clock()
        deadline = start + seconds
        try:
            while (left := deadline - self.clock()) > 1e-6:  # (float slices may leave a rounding crumb)
                self.sleep(min(left, SERVE_S))
                if serve is not None:
                    serve()
        finally:
            self.throttled_s += self.clock() - start


def pacer_for(copy: CopySettings, share: float, **kwargs: Any) -> Pacer | None:
    """The pacer of a copy loop holding `share` of the flow's limits (`copy`; None: the flow has none)."""
    if not copy.rate_limited:
        return None
    share = min(1.0, max(share, 1e-9))
    bytes_per_s, records_per_s = copy.max_bytes_per_second, copy.max_records_per_second
    return Pacer(
        bytes_per_s * share if bytes_per_s else None, records_per_s * share if records_per_s else None, **kwargs
    )


def range_shares(sizes: Sequence[Sequence[float]]) -> list[list[float]]:
    """Each range's share of the flow's limits: its weight over the batch's (`sizes`: offsets, or
    estimated bytes, per range, per task). Shares sum to 1 over the batch (0 for an empty batch)."""
    total = sum(max(0, s) for task in sizes for s in task)
    return [[max(0, s) / total if total else 0.0 for s in task] for task in sizes]


def paced_consumer_config(copy: CopySettings, config: dict[str, Any]) -> dict[str, Any]:
    """`config` with the prefetch of a byte-limited flow (`copy`) bounded (module doc); unchanged for
    other flows. Properties the user set in the flow's `consumer` settings are kept."""
    limit = copy.max_bytes_per_second
    if not limit:
        return config
    user = copy.consumer
    size = int(min(64 * 1024 * 1024, max(PREFETCH_MIN_BYTES, limit * PREFETCH_S)))
    size = max(size, int(config.get("message.max.bytes", 0)))  # librdkafka: fetch.max.bytes >= message.max.bytes
    bounds = {"fetch.max.bytes": size, "max.partition.fetch.bytes": size, "queued.max.messages.kbytes": size // 1024}
    return {**config, **{k: v for k, v in bounds.items() if k not in user}}


class Throttled:
    """Seconds a task's copy loops waited for their limits, summed over the loops (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.seconds = 0.0

    def add(self, seconds: float) -> None:
        with self._lock:
            self.seconds += seconds
