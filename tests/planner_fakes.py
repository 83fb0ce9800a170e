"""A source planner over fake clusters, shared by the unit tests of planning, faults, rate
limits, flow control and the sink: `FakeAdmin` (a cluster: topic -> per-partition log start and
end), `spec(**options)` (a valid west->east flow spec), `raw_spec(source, target, topics=..., **options)`
(a valid flow spec as the dict `parse_flow_spec` reads) and `planner(source, **options)`."""

from __future__ import annotations

from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any

from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror_engine.planning.range_planner import RangePlanner


class FakeAdmin:
    """A cluster: topic -> per-partition (log start, log end)."""

    def __init__(self, logs: dict[str, list[tuple[int, int]]]) -> None:
        self.logs = logs

    def list_topics(self, timeout: float) -> Any:
        return SimpleNamespace(
            topics={
                n: SimpleNamespace(
                    partitions={i: SimpleNamespace(leader=0, error=None) for i in range(len(p))}, error=None
                )
                for n, p in self.logs.items()
            }
        )

    def list_offsets(self, request: dict[Any, Any], **kwargs: Any) -> dict[Any, Future[Any]]:
        out = {}
        for tp, spec in request.items():
            start, end = self.logs[tp.topic][tp.partition]
            future: Future[Any] = Future()
            future.set_result(SimpleNamespace(offset=start if "EARLIEST" in repr(spec).upper() else end))
            out[tp] = future
        return out

    def describe_topics(self, topics: Any, **kwargs: Any) -> dict[str, Future[Any]]:
        """Like Kafka: a topic that does not exist is UNKNOWN_TOPIC_OR_PART; `denied` ones are
        TOPIC_AUTHORIZATION_FAILED."""
        from confluent_kafka import KafkaError, KafkaException

        out: dict[str, Future[Any]] = {}
        for name in topics.topic_names:
            out[name] = Future()
            if name in getattr(self, "denied", ()):
                out[name].set_exception(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
            elif name not in self.logs:
                out[name].set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            else:
                out[name].set_result(SimpleNamespace(name=name, topic_id=f"id-{name}"))
        return out

    def create_topics(self, new: list[Any]) -> dict[str, Future[Any]]:
        futures: dict[str, Future[Any]] = {}
        for t in new:
            self.logs[t.topic] = [(0, 0)] * t.num_partitions
            futures[t.topic] = Future()
            futures[t.topic].set_result(None)
        return futures

    def describe_configs(self, resources: list[Any]) -> dict[Any, Future[Any]]:
        out: dict[Any, Future[Any]] = {}
        for r in resources:
            out[r] = Future()
            out[r].set_result({})
        return out


def raw_spec(
    source: str = "west",
    target: str = "east",
    *,
    topics: Any = ("orders",),
    config: dict[str, Any] | None = None,
    **options: Any,
) -> dict[str, Any]:
    """A valid `source`->`target` flow spec as a dict (default replication policy; `config`: both
    clusters' client config, none if not given); `options` add or replace top-level keys."""
    clients = {} if config is None else {"config": config}
    return {
        "id": f"{source}->{target}",
        "source": {"alias": source, "bootstrap_servers": f"{source.lower()}:9092", **clients},
        "target": {"alias": target, "bootstrap_servers": f"{target.lower()}:9092", **clients},
        "topics": list(topics),
        "topics_exclude": [],
        "replication_policy": {"type": "default"},
        "checkpoint_location": "/tmp/ck",
        **options,
    }


def spec(**options: Any) -> FlowSpec:
    return parse_flow_spec(
        {
            "id": "west->east",
            "topics": ["orders", "new"],
            "topics_exclude": [],
            "source": {"alias": "west", "bootstrap_servers": "s:1", "config": {}},
            "target": {"alias": "east", "bootstrap_servers": "t:1", "config": {}},
            "replication_policy": {"type": "default"},
            "checkpoint_location": "/tmp/x",
            "topic_refresh_interval_ms": 0,
            **options,
        }
    )


def planner(source: FakeAdmin, **options: Any) -> RangePlanner:
    """A planner of the flow `spec(**options)` over fake clusters, built from its views."""
    target = FakeAdmin({})
    flow = spec(**options)
    return RangePlanner(
        flow.route,
        flow.planning,
        flow.topic_sync,
        flow.copy,
        flow.consumer_group,
        once=True,
        task_count=2,
        source_admin=source,
        target_admin=target,
    )
