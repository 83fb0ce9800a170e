"""Heartbeats, as MM2's MirrorHeartbeatTask: every `heartbeat_interval_ms` a Heartbeat record
(sourceClusterAlias, targetClusterAlias, timestamp) goes to the `heartbeats` topic of the
TARGET cluster. The data path replicates each cluster's own `heartbeats` downstream as
`<source>.heartbeats` (`should_replicate_topic` always wants heartbeats topics), so every
cluster sees its upstream hops and their liveness.

Why they never loop: this emitter writes only the target's plain `heartbeats` topic, which
the policy never produces as a remote name (checked at construction); a replicated
`<alias>.heartbeats` that came from the target is a cycle and `should_replicate_topic`
refuses it, so A->B->A stops after one hop.
"""

from __future__ import annotations

from typing import Any

from kmirror.errors import KmirrorError
from kmirror.flowspec import FlowSpec
from kmirror.mm2_formats import Heartbeat, encode_heartbeat
from kmirror.policy import HEARTBEATS_TOPIC

HEARTBEATS_TOPIC_CONFIG = {"cleanup.policy": "compact"}  # as MM2 creates it: one partition, compacted


class HeartbeatError(KmirrorError):
    """A heartbeat could not be delivered."""


class HeartbeatEmitter:
    """Writes one heartbeat per interval; `maybe_emit(now_ms)` is cheap to call often."""

    def __init__(self, spec: FlowSpec, producer: Any) -> None:
        remote = spec.policy.format_remote_topic(spec.source.alias, HEARTBEATS_TOPIC)
        if remote == HEARTBEATS_TOPIC:
            raise HeartbeatError(
                f"replication policy {spec.replication_policy!r} maps {HEARTBEATS_TOPIC!r} to itself; "
                "heartbeats would loop. Use a policy that prefixes heartbeats topics (default or identity)."
            )
        self.source_alias = spec.source.alias
        self.target_alias = spec.target.alias
        self.interval_ms = int(spec.option("heartbeat_interval_ms"))
        self.producer = producer
        self.last_ms: int | None = None
        self.sent = 0
        self._errors: list[str] = []

    def maybe_emit(self, now_ms: int) -> bool:
        """Queue a heartbeat when the interval elapsed; raises HeartbeatError for an earlier failed one."""
        self._raise_errors()
        if self.last_ms is not None and now_ms - self.last_ms < self.interval_ms:
            return False
        key, value = encode_heartbeat(Heartbeat(self.source_alias, self.target_alias, now_ms))
        self.producer.produce(HEARTBEATS_TOPIC, value, key, partition=0, timestamp=now_ms, on_delivery=self._delivered)
        self.producer.poll(0)
        self.last_ms = now_ms
        self.sent += 1
        return True

    def flush(self, timeout_s: float = 30.0) -> None:
        remaining = self.producer.flush(timeout_s)
        self._raise_errors()
        if remaining:
            raise HeartbeatError(f"{remaining} heartbeat(s) to {HEARTBEATS_TOPIC} unconfirmed after {timeout_s} s")

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is not None:
            self._errors.append(f"heartbeat to {msg.topic()} failed: {err.str()}")

    def _raise_errors(self) -> None:
        errors, self._errors = self._errors, []
        if errors:
            raise HeartbeatError(f"{len(errors)} heartbeat(s) failed; first: {errors[0]}")
