"""A kafka-mirror flow run without Spark, for the MM2 interop tests (issue 23): each `run()` is one
micro-batch as the app's driver and tasks do it (the engine's `RangePlanner` discovers topics with
MM2's rules and creates target topics, `RangeCopier` copies, the real `FailoverListener` persists
offset syncs, writes checkpoints and heartbeats)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from kmirror.flow.spec import FlowSpec, parse_flow_spec


def flow_spec(
    flow_id: str, source: tuple[str, str], target: tuple[str, str], workdir: Path, **options: Any
) -> FlowSpec:
    """A flow `flow_id` from (alias, bootstrap) `source` to `target`, with a small refresh interval."""
    raw = {
        "id": flow_id,
        "checkpoint_location": str(workdir / flow_id.replace(">", "")),
        "source": {"alias": source[0], "bootstrap_servers": source[1]},
        "target": {"alias": target[0], "bootstrap_servers": target[1]},
        "topics": [".*"],
        "topics_exclude": [],
        "replication_policy": {"type": "default", "separator": "."},
        "sync_group_offsets": False,
        "topic_refresh_interval_ms": 0,
        "checkpoint_interval_ms": 0,
        **options,
    }
    return parse_flow_spec(json.loads(json.dumps(raw)))


class FlowRun:
    """One flow's planner, offsets and listener across passes (`close()` when done)."""

    def __init__(self, spec: FlowSpec, heartbeats: bool = True) -> None:
        from kmirror_engine.failover.failover_listener import FailoverListener
        from kmirror_engine.planning.range_planner import RangePlanner

        self.spec = spec
        self.planner = RangePlanner.for_flow(spec, once=False, task_count=1)
        self.offsets = self.planner.initial_offsets()
        self.listener = FailoverListener.for_flow(spec, serve_metrics=False, heartbeats=heartbeats)
        self.batch_id = 0

    def run(self) -> int:
        """One batch: copy what the source has now, persist syncs, then heartbeats and checkpoints.
        Returns the records copied."""
        from kmirror_engine.clients.factory import consumer_config, new_consumer, new_producer, producer_config
        from kmirror_engine.copying.range_copy import RangeCopier
        from kmirror_engine.copying.ranges import CopyRange
        from kmirror_engine.observability.progress import BatchProgress

        started = time.monotonic()
        end = self.planner.next_end(self.offsets, None)
        ranges = [
            CopyRange(r.source_topic, r.partition, r.start_offset, r.end_offset, r.target_topic)
            for task in self.planner.plan(self.offsets, end)
            for r in task
        ]
        progress = []
        if ranges:
            consumer = new_consumer(
                {
                    **consumer_config(self.spec.source, self.spec.copy, self.spec.consumer_group),
                    "enable.partition.eof": True,
                },
                role="test-mirror",
            )
            producer = new_producer(producer_config(self.spec.target, self.spec.copy, self.spec.id), role="test-mirror")
            try:
                progress = RangeCopier(consumer, producer, stall_timeout_s=30).copy(ranges)
            finally:
                consumer.close()
        self.offsets = {**self.offsets, **end}
        duration_ms = int((time.monotonic() - started) * 1000)
        self.listener.on_batch(BatchProgress(self.batch_id, tuple(progress), duration_ms, dict(end)))
        self.batch_id += 1
        self.listener.on_idle(int(time.time() * 1000))
        return sum(p.records for p in progress)

    def checkpoint_now(self) -> int:
        return self.listener.checkpoint_now()

    def close(self) -> None:
        self.listener.close(final=False)
