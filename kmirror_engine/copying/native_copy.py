"""The native copy loop (issue 16): `kmirror_engine.copying._kmirror_copy`, built from native/kmirror_copy.c
against the system's librdkafka by scripts/build-native.sh (`make setup`, the image), with the
Python loop (`kmirror_engine.copying.range_copy.RangeCopier`) as the fallback where it is not built.

The C loop consumes a batch, produces each record (source partition, key, value, headers,
CreateTime) and accounts every delivery report per source partition, with the GIL released;
it never makes a Python object per record. `NativeRangeCopier.copy(ranges)` keeps
`RangeCopier.copy`'s contract for at-least-once flows: the same rounds (one range per source
partition per round), offsets never assumed contiguous (positions and partition-EOF end a
range), the same `PartitionProgress` (records, bytes, exact offset syncs, latency), the same
failure messages naming the source record by its offset, the same stall timeout.

What only the Python loop does (the flow then runs it: `copy_loop` "auto"): transactions
(exactly_once), dead-letter topics, skip_offsets, byte budgets and rate limits (max_bytes_per_second,
max_records_per_second), client configs holding Python callables. `copy_loop: native` makes
any of these, or a missing extension, an error instead.
"""

from __future__ import annotations

import importlib
import logging
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, cast

from kmirror.errors import KmirrorError
from kmirror.flow.spec import COPY_LOOP_CANNOT_SERVE
from kmirror.flow.views import CopySettings
from kmirror.security.msk_iam import is_msk_iam
from kmirror_engine.copying.ranges import (
    CONSUME_BATCH,
    DEFAULT_STALL_TIMEOUT_S,
    CopyError,
    CopyRange,
    closed_syncs,
    copy_in_rounds,
)
from kmirror_engine.copying.record_limits import BATCH_OVERHEAD_BYTES, RECORD_OVERHEAD_BYTES
from kmirror_engine.observability.progress import PartitionProgress

log = logging.getLogger("kmirror.native_copy")
# scripts/build-native.sh leaves this in the venv it built for: the tests then require the module.
BUILT_STAMP = ".kmirror-native"
# pump() hands control back to Python at least this often (stall timeout, consumer warnings).
PUMP_BUDGET_MS = 200
# Flow options only the Python loop implements (read raw: some are newer than this module).
PYTHON_ONLY_OPTIONS = COPY_LOOP_CANNOT_SERVE["native"]  # the one table of which loop serves which flow
_FAILED_DELIVERIES = 1
_UNLOADED: Any = object()
_module: Any = _UNLOADED


def native_module() -> ModuleType | None:
    """The compiled module, or None when it is not built for this Python (or cannot load)."""
    global _module
    if _module is _UNLOADED:
        try:
            import confluent_kafka  # noqa: F401  (loads the librdkafka the module links, once per process)

            _module = importlib.import_module("kmirror_engine.copying._kmirror_copy")
        except ImportError as exc:
            log.info("native copy loop not available (%s); the Python loop copies", exc)
            _module = None
    return cast(ModuleType | None, _module)


def built_for_this_python() -> bool:
    """True when scripts/build-native.sh built the module for this venv (then it must load)."""
    return (Path(sys.prefix) / BUILT_STAMP).exists()


def python_only_reasons(copy: CopySettings, *configs: Mapping[str, Any]) -> list[str]:
    """Why a flow with these `copy` settings and client `configs` needs the Python loop (empty: the
    native loop can copy it)."""
    reasons = [f"{name} is set" for name in PYTHON_ONLY_OPTIONS if copy.loop_options.get(name)]
    reasons += [f"client property {k} is a Python callable" for c in configs for k, v in c.items() if callable(v)]
    if any(is_msk_iam(c) for c in configs):  # its token comes from a Python callback (oauth_cb)
        reasons.append("a cluster uses MSK IAM, whose tokens a Python callback signs")
    return reasons


def use_native_loop(flow_id: str, copy: CopySettings, *configs: Mapping[str, Any]) -> bool:
    """Whether the writer tasks of flow `flow_id` run the native loop (option `copy_loop` of `copy`).

    Raises KmirrorError for `copy_loop: native` when the module is missing or the flow needs
    the Python loop; "auto" falls back silently (logged once per worker)."""
    choice = copy.copy_loop
    if choice in ("python", "batch"):  # batch: the record loop it falls back to is the Python one
        return False
    reasons = python_only_reasons(copy, *configs)
    if native_module() is None:
        reasons.append("the native module is not built for this Python (scripts/build-native.sh)")
    if choice == "native" and reasons:
        raise KmirrorError(f"flow {flow_id}: copy_loop is native but {'; '.join(reasons)}; set copy_loop to auto")
    return not reasons


def native_config(config: Mapping[str, Any]) -> dict[str, str]:
    """librdkafka properties as the strings librdkafka's C API takes (booleans as true/false)."""
    out = {}
    for name, value in config.items():
        if callable(value):
            raise KmirrorError(f"client property {name} is a Python callable: the native copy loop cannot use it")
        out[name] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


def new_loop(consumer_config: Mapping[str, Any], producer_config: Mapping[str, Any]) -> Any:
    """A native loop owning a new source consumer and target producer (`close()` ends both)."""
    module = native_module()
    if module is None:
        raise KmirrorError("the native copy loop is not built for this Python (scripts/build-native.sh)")
    return module.Loop(native_config(consumer_config), native_config(producer_config), CONSUME_BATCH)


class NativeRangeCopier:
    """`RangeCopier` for at-least-once flows, on a native `Loop` (module doc).

    `limits`: each target topic's max.message.bytes (None: unknown); a record over it fails the
    copy naming its source offset (no dead-letter topic in this loop)."""

    def __init__(
        self,
        loop: Any,
        limits: Mapping[str, int | None] | None = None,
        stall_timeout_s: float = DEFAULT_STALL_TIMEOUT_S,
        poll_timeout_s: float = 0.1,
    ) -> None:
        self.loop = loop
        self.limits = dict(limits or {})
        self.stall_timeout_s = stall_timeout_s
        self.poll_timeout_ms = max(1, int(poll_timeout_s * 1000))

    def copy(self, ranges: Iterable[CopyRange]) -> list[PartitionProgress]:
        """Copy every range and return their progress in input order (`RangeCopier.copy`)."""
        return copy_in_rounds(ranges, self._copy_round)

    def _copy_round(self, ranges: Sequence[CopyRange]) -> list[PartitionProgress]:
        rows = []
        for r in ranges:
            limit = self.limits.get(r.target_topic)
            check_above = limit - BATCH_OVERHEAD_BYTES - RECORD_OVERHEAD_BYTES if limit is not None else 2**62
            rows.append(
                (
                    r.source_topic,
                    r.partition,
                    r.start_offset,
                    r.end_offset,
                    r.target_topic,
                    check_above,
                    -1 if limit is None else limit,
                )
            )
        self.loop.start(rows)
        try:
            self._pump()
        finally:
            self.loop.release()
        while True:  # every delivery report, like RangeCopier._drain
            remaining = self.loop.flush(100)
            self._raise_failure()
            if remaining == 0:
                break
        return [_progress(r, row) for r, row in zip(ranges, self.loop.results(), strict=True)]

    def _pump(self) -> None:
        last_move = time.monotonic()
        while True:
            active, moved, transients = self.loop.pump(PUMP_BUDGET_MS, self.poll_timeout_ms)
            for text in transients:
                log.warning(
                    "source consumer: %s (retrying; the copy fails after %.0f s without progress)",
                    text,
                    self.stall_timeout_s,
                )
            self._raise_failure()
            if not active:
                return
            if moved:
                last_move = time.monotonic()
            elif time.monotonic() - last_move > self.stall_timeout_s:
                stuck = ", ".join(f"{t}[{p}] end {end}" for t, p, end in self.loop.active())
                raise CopyError(f"no progress for {self.stall_timeout_s:.0f} s before the planned end: {stuck}")

    def _raise_failure(self) -> None:
        failure = self.loop.failure()
        if failure is None:
            return
        kind, count, message = failure
        raise CopyError(f"{count} record(s) failed; first: {message}" if kind == _FAILED_DELIVERIES else message)


def _progress(rng: CopyRange, row: tuple[Any, ...]) -> PartitionProgress:
    """`RangeState.progress()` from the native loop's accounting of one range."""
    records, size, last_ts, syncs, drift, last_upstream, lat_min, lat_max, lat_sum, lat_count = row
    syncs = closed_syncs([(s[0], s[1]) for s in syncs], drift, last_upstream)
    return PartitionProgress.for_range(
        rng,
        next_offset=rng.end_offset,
        records=records,
        size=size,
        last_timestamp_ms=last_ts,
        offset_syncs=syncs,
        latency=(lat_min, lat_max, lat_sum, lat_count),
    )
