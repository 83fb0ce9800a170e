"""Client configs: safety defaults that a producer override cannot weaken, assign-only consumers."""

from __future__ import annotations

from typing import Any

import pytest

from kmirror.errors import ValidationError
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror_engine.clients.factory import consumer_config, producer_config


def spec(**options: Any) -> FlowSpec:
    return parse_flow_spec(
        {
            "id": "west->east",
            "topics": ["a"],
            "topics_exclude": [],
            "source": {"alias": "west", "bootstrap_servers": "s:1", "config": {"client.id": "x"}},
            "target": {"alias": "east", "bootstrap_servers": "t:1", "config": {}},
            "replication_policy": {"type": "default"},
            "checkpoint_location": "/tmp/x",
            **options,
        }
    )


def test_producer_is_safe_by_default_and_accepts_tuning() -> None:
    flow = spec(producer={"linger.ms": 5, "acks": "all"})
    config = producer_config(flow.target, flow.copy, flow.id, transactional_id="t-1")
    assert config["bootstrap.servers"] == "t:1" and config["linger.ms"] == 5 and config["transactional.id"] == "t-1"
    assert (config["acks"], config["enable.idempotence"], config["max.in.flight.requests.per.connection"]) == (
        "all",
        True,
        5,
    )


@pytest.mark.parametrize(
    ("key", "value"),
    [("acks", "1"), ("enable.idempotence", False), ("max.in.flight.requests.per.connection", 10), ("retries", 3)],
)
def test_weakening_overrides_are_rejected_naming_the_key(key: str, value: Any) -> None:
    with pytest.raises(ValidationError, match=rf"producer\.{key}: must"):
        flow = spec(producer={key: value})
        producer_config(flow.target, flow.copy, flow.id)


def test_consumer_is_assign_only_read_committed_and_keeps_overrides() -> None:
    flow = spec(consumer={"fetch.min.bytes": 1, "enable.auto.commit": True})
    config = consumer_config(flow.source, flow.copy, flow.consumer_group)
    assert (
        config["isolation.level"] == "read_committed" and config["client.id"] == "x" and config["fetch.min.bytes"] == 1
    )
    assert config["enable.auto.commit"] is False and config["group.id"] == "kmirror-west-to-east"
