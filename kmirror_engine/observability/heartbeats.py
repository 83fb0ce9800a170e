"""Heartbeats, as MM2's MirrorHeartbeatTask: every `heartbeat_interval_ms` a Heartbeat record
(sourceClusterAlias, targetClusterAlias, timestamp) goes to the `heartbeats` topic of the
TARGET cluster. The data path replicates each cluster's own `heartbeats` downstream as
`<source>.heartbeats` (`should_replicate_topic` always wants heartbeats topics), so every
cluster sees its upstream hops and their liveness.

Why they never loop: this emitter writes only the target's plain `heartbeats` topic, which
the policy never produces as a remote name (checked by `HeartbeatEmitter.for_flow`); a replicated
`<alias>.heartbeats` that came from the target is a cycle and `should_replicate_topic`
refuses it, so A->B->A stops after one hop.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import KmirrorError
from kmirror.flow.replication_policy import HEARTBEATS_TOPIC
from kmirror.flow.spec import ClusterEndpoint, FlowSpec
from kmirror.flow.views import FlowRoute, HeartbeatSettings
from kmirror.mm2.formats import Heartbeat, encode_heartbeat
from kmirror_engine.clients.delivery import DeliveryConfirmingProducer, DeliveryFailure
from kmirror_engine.planning.internal_names import layout
from kmirror_engine.scheduler import PeriodicTask

log = logging.getLogger("kmirror.heartbeats")
HEARTBEATS_TOPIC_CONFIG = layout("heartbeats")


class HeartbeatError(KmirrorError):
    """A heartbeat could not be delivered."""


class HeartbeatEmitter:
    """Writes one heartbeat per interval; `maybe_emit(now_ms)` is cheap to call often."""

    def __init__(self, source_alias: str, target: ClusterEndpoint, settings: HeartbeatSettings, producer: Any) -> None:
        """Heartbeats of `source_alias` to `target`'s `heartbeats` topic through `producer` (no I/O
        here; `for_flow` checks the flow's policy first)."""
        self.source_alias = source_alias
        self.target = target
        self.target_alias = target.alias
        self.interval_ms = settings.interval_ms
        self.producer = producer
        self.delivery = DeliveryConfirmingProducer(producer, what="heartbeat", error=HeartbeatError, describe=_message)
        self.last_ms: int | None = None
        self.sent = 0

    @classmethod
    def for_flow(cls, route: FlowRoute, settings: HeartbeatSettings, producer: Any) -> HeartbeatEmitter:
        """The heartbeats of `route`; raises HeartbeatError when its replication policy would make
        them loop (the policy maps `heartbeats` to itself)."""
        remote = route.policy.format_remote_topic(route.source.alias, HEARTBEATS_TOPIC)
        if remote == HEARTBEATS_TOPIC:
            raise HeartbeatError(
                f"replication policy {route.policy.to_dict()!r} maps {HEARTBEATS_TOPIC!r} to itself; "
                "heartbeats would loop. Use a policy that prefixes heartbeats topics (default or identity)."
            )
        return cls(route.source.alias, route.target, settings, producer)

    def maybe_emit(self, now_ms: int) -> bool:
        """Queue a heartbeat when the interval elapsed; raises HeartbeatError for an earlier failed one."""
        self.delivery.check()
        if self.last_ms is not None and now_ms - self.last_ms < self.interval_ms:
            return False
        key, value = encode_heartbeat(Heartbeat(self.source_alias, self.target_alias, now_ms))
        self.delivery.produce(HEARTBEATS_TOPIC, value, key, partition=0, timestamp=now_ms)
        self.delivery.poll(0)
        self.last_ms = now_ms
        self.sent += 1
        return True

    def flush(self, timeout_s: float = 30.0) -> None:
        self.delivery.confirm(timeout_s)


def _message(failures: list[DeliveryFailure], remaining: int, timeout_s: float) -> str:
    if failures:
        return f"{len(failures)} heartbeat(s) failed; first: {failures[0]}"
    return f"{remaining} heartbeat(s) to {HEARTBEATS_TOPIC} unconfirmed after {timeout_s} s"


class HeartbeatTicker:
    """Heartbeats on the driver's own clock, so an idle flow (no batches, hence no sink commits)
    still shows it is alive, as MM2's heartbeat task does independently of traffic.

    `start()` emits one heartbeat at once and then one per interval (a `PeriodicTask`);
    `stop()` emits a last one and waits (at most 5 s) for its delivery. A failed heartbeat, or
    a `heartbeats` topic that cannot be created yet, never stops the mirror: it is logged with
    the running failure count (`failures`) and retried at the next tick.
    """

    def __init__(self, flow_id: str, emitter: HeartbeatEmitter, clock_ms: Any = None, ensure_topic: Any = None) -> None:
        """A ticker of flow `flow_id` over `emitter` (no I/O here; `for_flow` builds the real one).
        `ensure_topic(emitter)` creates the heartbeats topic before the first beat."""
        self.emitter = emitter
        self.flow_id = flow_id
        self.clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.ensure_topic = ensure_topic or ensure_heartbeats_topic
        self._topic_ready = False
        self.task = PeriodicTask(
            f"kmirror-heartbeats {self.flow_id}",
            max(self.emitter.interval_ms, 100) / 1000,
            self._beat,
            errors=(KmirrorError, KafkaException, BufferError),
            on_failure=self._report,
        )

    @classmethod
    def for_flow(cls, spec: FlowSpec) -> HeartbeatTicker:
        """The heartbeats of `spec` to its target, through a producer rebuilt when its credentials
        rotate, like the other side-work clients."""
        from kmirror_engine.clients.factory import producer_config, renewing_producer

        producer = renewing_producer(
            lambda: producer_config(spec.target, spec.copy, spec.id), role="heartbeats-producer"
        )
        return cls(spec.id, HeartbeatEmitter.for_flow(spec.route, spec.heartbeats, producer))

    @property
    def failures(self) -> int:
        return self.task.failures

    def tick(self) -> None:
        """Emit when the interval elapsed; a failure is logged and counted, never raised."""
        self.task.run_once()

    def _beat(self) -> None:
        if not self._topic_ready:
            self.ensure_topic(self.emitter)
            self._topic_ready = True
        self.emitter.maybe_emit(self.clock_ms())

    def _report(self, task: PeriodicTask, exc: BaseException) -> None:
        log.warning(
            "%s: heartbeat failed (%d failures so far, retried next tick): %s", self.flow_id, task.failures, exc
        )

    def start(self) -> HeartbeatTicker:
        self.task.start(run_now=True)
        return self

    def stop(self) -> None:
        self.task.stop()
        self.emitter.last_ms = None  # a last beat at shutdown, whatever the interval
        self.tick()
        try:
            self.emitter.flush(timeout_s=5.0)
        except HeartbeatError as exc:
            self.task.failures += 1
            log.warning("%s: last heartbeats unconfirmed at shutdown: %s", self.flow_id, exc)


def ensure_heartbeats_topic(emitter: HeartbeatEmitter) -> None:
    """Create the target's `heartbeats` topic (one partition, compacted) unless it exists."""
    from kmirror_engine.clients.topic_admin import ensure_topic

    ensure_topic(emitter.target, HEARTBEATS_TOPIC, HEARTBEATS_TOPIC_CONFIG)
