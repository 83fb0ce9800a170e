"""Producer overrides that would make a target outage hang the copy tasks forever are refused (issue 26)."""

from __future__ import annotations

import pytest

from kmirror.errors import ValidationError
from kmirror_engine.clients.factory import producer_safety_problems, safe_producer_config


@pytest.mark.parametrize("key", ["message.timeout.ms", "delivery.timeout.ms"])
@pytest.mark.parametrize("value", [0, "0"])
def test_an_infinite_delivery_timeout_is_refused_naming_key_value_and_fix(key: str, value: object) -> None:
    [problem] = producer_safety_problems({key: value})
    assert problem.path == f"producer.{key}"
    assert problem.message == (
        "must be a finite time in ms (0 means wait forever: a target outage would hang the copy tasks), "
        f"got {value!r}; remove the override or set e.g. 300000"
    )
    with pytest.raises(ValidationError, match=rf"producer\.{key}"):
        safe_producer_config({}, {key: value}, source="flow west->east")


def test_a_finite_delivery_timeout_is_kept() -> None:
    assert producer_safety_problems({"message.timeout.ms": 120_000, "delivery.timeout.ms": "300000"}) == []
    assert safe_producer_config({}, {"message.timeout.ms": 120_000}, source="x")["message.timeout.ms"] == 120_000


def test_an_infinite_timeout_in_the_target_cluster_config_is_refused_too() -> None:
    from kmirror.flow.spec import parse_flow_spec
    from kmirror_engine.clients.factory import client_config_problems

    spec = parse_flow_spec(
        {
            "id": "west->east",
            "source": {"alias": "west", "bootstrap_servers": "127.0.0.1:1", "config": {}},
            "target": {"alias": "east", "bootstrap_servers": "127.0.0.1:2", "config": {"message.timeout.ms": "0"}},
            "topics": ["orders"],
            "topics_exclude": [],
            "replication_policy": {"type": "default", "separator": "."},
            "checkpoint_location": "/tmp/unused",
        }
    )
    assert [p.path for p in client_config_problems(spec.route, spec.copy)] == ["target.config.message.timeout.ms"]
