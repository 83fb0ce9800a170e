"""Pause and resume a running flow without a redeploy (issue 46): control records.

`kmirror pause|resume` write one record to the target cluster's compacted control topic
(`internal_names.control_topic()`): key = the flow id, value = JSON
`{"state": "paused"|"running", "by": user, "at": ISO-8601 UTC time, "reason": text or null}`.
The newest record of a flow is its state; no record means running.

The driver's planner (`RangePlanner.next_end`) asks a `ControlReader` once per trigger: it keeps one
consumer on the topic and reads only what is new (a short poll, never blocking a batch for long);
a paused flow plans no copy work (the batch end is its start: nothing copied, the source offsets do
not move) while heartbeats and idle checkpoint rounds go on in their own threads. Each change of
state is one audit line on stderr, `kmirror control {"flow", "state", "by", "at", "reason"}` (the
style of the `kmirror progress` lines). Resuming continues from the same offsets.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from kmirror.flow.endpoint import ClusterEndpoint
from kmirror_engine.planning.internal_names import control_topic, layout, reader_group

PREFIX = "kmirror control "
STATES = ("paused", "running")
CONTROL_TOPIC_CONFIG = layout("flow_control")
FIRST_READ_TIMEOUT_S = 2.0  # the first read (to the topic's end) at most; later reads poll once
POLL_TIMEOUT_S = 0.05  # the first read's polls
STEADY_POLL_TIMEOUT_S = 0.0  # later reads take what librdkafka fetched in the background: no wait per trigger
RETRY_MISSING_S = 10.0  # no control topic yet (never paused): looked for again this often


@dataclass(frozen=True)
class ControlState:
    state: str
    by: str | None = None
    at: str | None = None
    reason: str | None = None

    @property
    def paused(self) -> bool:
        return self.state == "paused"


RUNNING = ControlState("running")


def encode(state: ControlState) -> bytes:
    if state.state not in STATES:
        raise ValueError(f"control state must be one of {', '.join(STATES)}, got {state.state!r}")
    return json.dumps(asdict(state), sort_keys=True).encode()


def decode(value: bytes | None) -> ControlState | None:
    """The record's state, or None for a tombstone or a value that is not a control record."""
    try:
        data = json.loads(value or b"")
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("state") not in STATES:
        return None
    fields = {k: (None if data.get(k) is None else str(data[k])) for k in ("by", "at", "reason")}
    return ControlState(data["state"], **fields)


def newest_record(records: Iterable[tuple[bytes | None, bytes | None]], flow_id: str) -> ControlState | None:
    """The last valid control record of `flow_id` among `records` (key, value) in log order; None: none."""
    key, newest = flow_id.encode(), None
    for record_key, value in records:
        if record_key == key:
            newest = decode(value) or newest
    return newest


def newest_state(
    records: Iterable[tuple[bytes | None, bytes | None]], flow_id: str, current: ControlState = RUNNING
) -> ControlState:
    """The state after `records`: their newest record of `flow_id`, else `current`."""
    return newest_record(records, flow_id) or current


def audit_record(flow_id: str, state: ControlState) -> dict[str, Any]:
    return {"flow": flow_id, **asdict(state)}


class ControlReader:
    """The newest control state of one flow, read incrementally (see module doc). `make_consumer`
    returns an assign()-able consumer of the target (tests pass fakes); `out` gets the audit lines."""

    def __init__(
        self,
        flow_id: str,
        target: ClusterEndpoint,
        make_consumer: Callable[[], Any] | None = None,
        out: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """The reader of flow `flow_id`'s record on `target` (no I/O here: the consumer is made at
        the first read, by `make_consumer`, default a consumer of `target`)."""
        self.flow_id = flow_id
        self.topic = control_topic()
        self._make = make_consumer or (lambda: _target_consumer(target))
        self._out, self._clock = out, clock
        self._consumer: Any = None
        self._idle: Any = None  # the client that looks for the topic until it exists
        self._retry_at = 0.0
        self._first_end: int | None = None  # the topic's end at the first read, until read up to it
        self.state = RUNNING

    def holds(self) -> bool:
        """True when the planner must plan no copy work now: paused, or the first read has not yet
        reached the topic's end (a pause record may be in what is left: wait a trigger, never guess)."""
        return self.current().paused or self._first_end is not None

    def current(self) -> ControlState:
        """Read what is new (never raises: a failure keeps the last known state) and return the state."""
        try:
            records = self._read()
        except Exception as exc:  # a control topic we cannot read never stops the mirror
            print(
                f"{PREFIX.strip()}: reading {self.topic} failed, keeping state {self.state.state!r}: {exc}",
                file=self._out or sys.stderr,
                flush=True,
            )
            self.close()
            self._first_end = None
            self._retry_at = self._clock() + RETRY_MISSING_S
            records = []
        state = newest_state(records, self.flow_id, self.state)
        if state != self.state:
            print(PREFIX + json.dumps(audit_record(self.flow_id, state)), file=self._out or sys.stderr, flush=True)
            self.state = state
        return self.state

    def _read(self) -> list[tuple[bytes | None, bytes | None]]:
        if self._consumer is not None:
            wait = POLL_TIMEOUT_S if self._first_end is not None else STEADY_POLL_TIMEOUT_S
            fresh = _values(self._consumer.consume(1000, timeout=wait))
            if self._first_end is not None and self._position() >= self._first_end:
                self._first_end = None
            return fresh
        if self._clock() < self._retry_at:
            return []
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        if self._idle is None:  # one client kept while the topic is missing: no new connection every look
            self._idle = self._make()
        consumer = self._idle
        self._retry_at = self._clock() + RETRY_MISSING_S
        partition = TopicPartition(self.topic, 0)
        found = consumer.list_topics(self.topic, timeout=FIRST_READ_TIMEOUT_S).topics.get(self.topic)
        if found is None or found.error is not None:  # not created yet: the flow was never paused
            return []
        self._idle = None
        _low, high = consumer.get_watermark_offsets(partition, timeout=FIRST_READ_TIMEOUT_S)
        consumer.assign([TopicPartition(self.topic, 0, OFFSET_BEGINNING)])
        self._consumer = consumer
        records: list[tuple[bytes | None, bytes | None]] = []
        deadline = self._clock() + FIRST_READ_TIMEOUT_S
        while self._position() < high and self._clock() < deadline:
            records += _values(consumer.consume(1000, timeout=POLL_TIMEOUT_S))
        self._first_end = high if self._position() < high else None
        return records

    def _position(self) -> int:
        (tp,) = self._consumer.position([_partition(self.topic)])
        return int(tp.offset)

    def close(self) -> None:
        for name in ("_consumer", "_idle"):
            consumer = getattr(self, name)
            if consumer is not None:
                setattr(self, name, None)
                consumer.close()


def _partition(topic: str) -> Any:
    from confluent_kafka import TopicPartition

    return TopicPartition(topic, 0)


def _values(messages: Iterable[Any]) -> list[tuple[bytes | None, bytes | None]]:
    return [(m.key(), m.value()) for m in messages if m.error() is None]


def _target_consumer(target: ClusterEndpoint) -> Any:
    from kmirror_engine.clients.factory import new_consumer

    # the group id the ACL list grants (`internal_names.reader_group`); never committed to
    return new_consumer(
        target,
        role="control-reader",
        group_id=reader_group(control_topic()),
        **{"enable.auto.commit": False},
    )


def write_state(flow_id: str, target: ClusterEndpoint, state: ControlState) -> None:
    """`kmirror pause|resume`: flow `flow_id`'s control record, on its `target` (topic created
    compacted if missing). Raises ConnectionFailure naming the cluster and the fix when it cannot be written."""
    from kmirror.errors import ConnectionFailure
    from kmirror_engine.clients.factory import new_producer
    from kmirror_engine.clients.topic_admin import ensure_topic

    fix = (
        f"check that {target.alias} ({target.bootstrap_servers}) is reachable and that this principal may "
        f"create and write topic {control_topic()} (see `kmirror acls`), then run the command again"
    )
    try:
        ensure_topic(target, control_topic(), CONTROL_TOPIC_CONFIG)
        producer = new_producer(target, role="control-writer")
        errors: list[Any] = []
        producer.produce(
            control_topic(),
            key=flow_id.encode(),
            value=encode(state),
            on_delivery=lambda err, _msg: errors.append(err) if err is not None else None,
        )
        left = producer.flush(30)
    except Exception as exc:
        cause = f"cannot write the control record of {flow_id} on {target.alias}: {exc}; {fix}"
        raise ConnectionFailure(cause) from exc
    if left or errors:
        cause = errors[0] if errors else "not delivered within 30 s"
        raise ConnectionFailure(f"cannot write the control record of {flow_id} on {target.alias}: {cause}; {fix}")
