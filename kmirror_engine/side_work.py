"""What runs beside one flow's copy: offset syncs, checkpoints, group offset sync, heartbeats,
topic config/ACL sync, progress lines and metrics. `FlowSideWork.for_flow(spec, once)` builds
it from the flow's views; the Spark glue only starts and stops it. It has two halves, by the
process they run in (the Spark glue decides which process calls which, `spark_app.listeners`):

- in the process that commits batches (the sink's commit worker; the driver for a transform
  flow), `batch_listeners()`: the listeners each committed batch calls, in call order: the
  source group's commit (`GroupCommitListener`), one progress line (`ProgressLogListener`),
  then offset syncs, checkpoints, group offset sync and metrics (`FailoverListener`, without
  heartbeats: those beat on the driver, so that idle flows beat too);
- on the driver, `start()`: the periodic work that must run when no batch commits: heartbeats
  (`emit_heartbeats`: `HeartbeatTicker`), in streaming mode the idle checkpoint rounds
  (`emit_checkpoints`: `IdleCheckpoints`), topic config and ACL sync (`SyncTicker`: a round
  now, then on intervals); `finish()` after a clean `--once` run: one last checkpoint round
  from the persisted syncs (`final_checkpoint`); `stop()` stops the tickers.

The constructor takes the views that choose what runs and one factory per part (tests pass
fakes); nothing is built or started before `start()`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from kmirror.flow.spec import FlowSpec
from kmirror.flow.views import CheckpointSettings, HeartbeatSettings, TopicSyncSettings
from kmirror_engine.failover.failover_listener import FailoverListener, IdleCheckpoints, final_checkpoint
from kmirror_engine.failover.group_commit import GroupCommitListener
from kmirror_engine.observability.heartbeats import HeartbeatTicker
from kmirror_engine.observability.progress import BatchListener
from kmirror_engine.observability.progress_log import ProgressLogListener
from kmirror_engine.topic_sync.ticker import SyncTicker


class Ticker(Protocol):
    def stop(self) -> None: ...


@dataclass(frozen=True)
class SideWorkParts:
    """How each part of a flow's side work is built (and started, for the driver's tickers)."""

    heartbeats: Callable[[], Ticker]
    idle_checkpoints: Callable[[], Ticker]
    topic_sync: Callable[[bool], Ticker]  # once
    final_checkpoint: Callable[[], object]
    batch_listeners: Callable[[], list[BatchListener]]


class FlowSideWork:
    """One flow's side work (module doc)."""

    def __init__(
        self,
        flow_id: str,
        once: bool,
        heartbeats: HeartbeatSettings,
        checkpoints: CheckpointSettings,
        topic_sync: TopicSyncSettings,
        parts: SideWorkParts,
    ) -> None:
        self.flow_id, self.once = flow_id, once
        self.heartbeats, self.checkpoints, self.topic_sync = heartbeats, checkpoints, topic_sync
        self.parts = parts
        self.tickers: list[Ticker] = []

    @classmethod
    def for_flow(cls, spec: FlowSpec, once: bool = False) -> FlowSideWork:
        """The side work of `spec` over its real clusters (`once`: a `--once` run)."""

        def batch_listeners() -> list[BatchListener]:
            return [
                GroupCommitListener.for_flow(spec),  # source next-offsets -> the flow's source group
                ProgressLogListener(spec.id, spec.source, spec.copy),  # one quiet progress line per batch
                # offset syncs, checkpoints, group sync, metrics; heartbeats beat on the driver (HeartbeatTicker)
                FailoverListener.for_flow(spec, heartbeats=False),
            ]

        parts = SideWorkParts(
            heartbeats=lambda: HeartbeatTicker.for_flow(spec).start(),
            idle_checkpoints=lambda: IdleCheckpoints.for_flow(spec).start(),
            topic_sync=lambda once: SyncTicker.for_flow(spec.route, spec.topic_sync, once).start(),
            final_checkpoint=lambda: final_checkpoint(
                FailoverListener.for_flow(spec, serve_metrics=False, heartbeats=False)
            ),
            batch_listeners=batch_listeners,
        )
        return cls(spec.id, once, spec.heartbeats, spec.checkpoints, spec.topic_sync, parts)

    def batch_listeners(self) -> list[BatchListener]:
        """The listeners of each committed batch, in call order (module doc); built anew each call."""
        return self.parts.batch_listeners()

    def start(self) -> FlowSideWork:
        """Start the driver's tickers the views ask for (module doc); returns this object. When one
        fails to start, the ones started before it are stopped and the error raised: a failed
        flow start leaves no heartbeat or sync thread behind."""
        tickers: list[Ticker] = []
        try:
            if self.heartbeats.emit:
                tickers.append(self.parts.heartbeats())
            if self.checkpoints.emit and not self.once:
                tickers.append(self.parts.idle_checkpoints())
            if self.topic_sync.any:  # a round now, then on intervals
                tickers.append(self.parts.topic_sync(self.once))
        except BaseException:
            for ticker in reversed(tickers):
                ticker.stop()
            raise
        self.tickers = tickers
        return self

    def finish(self) -> None:
        """After a clean `--once` run: one last checkpoint round (when `emit_checkpoints`), from
        the syncs the commit process persisted; raises when the round failed."""
        if self.checkpoints.emit:
            self.parts.final_checkpoint()

    def stop(self) -> None:
        """Stop the driver's tickers (each its threads and clients); idempotent."""
        tickers, self.tickers = self.tickers, []
        for ticker in tickers:
            ticker.stop()
