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

    def __init__(self, spec: FlowSpec, consumer_factory: Any = None) -> None:
        """`consumer_factory()`: makes the long-lived consumer holder (`current()`, `invalidate()`,
        `close()`); default a `renewing_consumer` of the flow's consumer config, rebuilt when the
        source's credentials rotate (tests inject one of fakes)."""
        self.spec = spec
        self.consumer_factory = consumer_factory
        self._consumer: Any = None  # RenewingClient
        self.failures = 0

    def _client(self) -> Any:
        if self._consumer is None:
            if self.consumer_factory is not None:
                self._consumer = self.consumer_factory()
            else:
                from kmirror_engine.clients.factory import consumer_config, renewing_consumer

                self._consumer = renewing_consumer(lambda: consumer_config(self.spec), role="source-group-committer")
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
                self.spec.id,
                batch.batch_id,
                self.spec.consumer_group,
                exc.args[0],
            )

    def on_idle(self, now_ms: int) -> None:
        """Nothing periodic: commits follow batches."""

    def close(self, final: bool) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
