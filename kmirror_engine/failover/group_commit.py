"""After each batch, commit the source next-offsets to the flow's source consumer group, so
standard lag tools (and `kmirror lag`) see the mirror like MirrorMaker's consumer group.

The Spark checkpoint stays the source of truth for progress; this group is for observers.
The commit uses an assign()-style consumer (`Consumer.commit(offsets=..., asynchronous=False)`,
never subscribe(): no group join, no rebalance). A failed commit is logged as a warning and
superseded by the next batch's commit; it never fails the (already delivered) batch.
"""

from __future__ import annotations

import logging
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from kmirror.flow.spec import FlowSpec
from kmirror_engine.clients.factory import is_auth_error
from kmirror_engine.observability.progress import BatchProgress, next_offsets

log = logging.getLogger("kmirror.group_commit")


class GroupCommitListener:
    """Commits each batch's next-offsets to the flow's source group (see the module docstring)."""

    def __init__(self, flow_id: str, consumer_group: str, consumer_factory: Any) -> None:
        """Commits of flow `flow_id` to source group `consumer_group` (no I/O here; `for_flow` builds
        the real one). `consumer_factory()`: makes the long-lived consumer holder (`current()`,
        `invalidate()`, `close()`) at the first commit (tests inject one of fakes)."""
        self.flow_id, self.consumer_group = flow_id, consumer_group
        self.consumer_factory = consumer_factory
        self._consumer: Any = None  # RenewingClient
        self.failures = 0

    @classmethod
    def for_flow(cls, spec: FlowSpec) -> GroupCommitListener:
        """Commits to `spec`'s consumer group through a `renewing_consumer` of the flow's consumer
        config, rebuilt when the source's credentials rotate."""

        def consumer_factory() -> Any:
            from kmirror_engine.clients.factory import consumer_config, renewing_consumer

            return renewing_consumer(
                lambda: consumer_config(spec.source, spec.copy, spec.consumer_group), role="source-group-committer"
            )

        return cls(spec.id, spec.consumer_group, consumer_factory)

    def _client(self) -> Any:
        if self._consumer is None:
            self._consumer = self.consumer_factory()
        return self._consumer.current()

    def on_batch(self, batch: BatchProgress) -> None:
        offsets = next_offsets(batch)
        if not offsets:
            return
        partitions = [TopicPartition(t, p, off) for (t, p), off in sorted(offsets.items())]
        try:
            self._client().commit(offsets=partitions, asynchronous=False)
        except KafkaException as exc:
            self.failures += 1
            if is_auth_error(exc):
                self._consumer.invalidate()  # re-read the credentials before the next commit
            log.warning(
                "%s: committing batch %d offsets to source group %r failed (retried with the next batch): %s",
                self.flow_id,
                batch.batch_id,
                self.consumer_group,
                exc.args[0],
            )

    def on_idle(self, now_ms: int) -> None:
        """Nothing periodic: commits follow batches."""

    def close(self, final: bool) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
