"""The Apache Kafka test harness's own pure parts (kmirror_cli/local_kafka.py)."""

from __future__ import annotations

import base64
import socket
import uuid
from typing import Any

import pytest

from kmirror.errors import KmirrorError
from kmirror_cli import local_kafka


def test_a_cluster_id_never_starts_with_a_dash_which_the_storage_tool_would_take_for_an_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen in CI: 1 id in 64 starts with "-" and `kafka-storage format -t -x...` fails."""
    dashed = uuid.UUID(bytes=base64.urlsafe_b64decode("-" + "A" * 21 + "=="))
    plain = uuid.UUID(int=1)
    drawn = iter([dashed, plain])
    monkeypatch.setattr(local_kafka.uuid, "uuid4", lambda: next(drawn))
    cluster_id = local_kafka.random_cluster_id()
    assert cluster_id == base64.urlsafe_b64encode(plain.bytes).rstrip(b"=").decode()
    monkeypatch.undo()
    assert all(not local_kafka.random_cluster_id().startswith("-") for _ in range(500))


def test_lines_resolve_to_their_pinned_versions_and_an_unknown_line_names_the_choices() -> None:
    assert (local_kafka.resolve_line("4.1"), local_kafka.resolve_line("3.9.1")) == ("4.1.2", "3.9.1")
    with pytest.raises(KmirrorError, match=r"unknown Apache Kafka line '5.0': choose one of 4.1 \(4.1.2\), 3.9"):
        local_kafka.resolve_line("5.0")


def test_server_properties_are_production_like_with_listeners_and_the_authorizer(tmp_path: Any) -> None:
    listener = local_kafka.Listener("SCRAM", "SASL_SSL", port=9999, settings={"sasl.enabled.mechanisms": "X"})
    broker = local_kafka.KafkaBroker(
        "b", port=1111, controller_port=2222, extra_listeners=(listener,), work_dir=tmp_path
    )
    props = broker.server_properties()
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:1111,CONTROLLER://127.0.0.1:2222,SCRAM://127.0.0.1:9999"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:1111,SCRAM://127.0.0.1:9999"
    assert props["listener.name.scram.sasl.enabled.mechanisms"] == "X"
    assert props["auto.create.topics.enable"] == "false"
    assert props["super.users"] == "User:ANONYMOUS"


def test_a_first_start_whose_picked_port_was_taken_in_between_starts_on_new_ports() -> None:
    """Two test chains at once: a port `free_port` picked can be taken before the broker binds it
    (CI lost a leg to `Address already in use`). A given port is never changed."""
    assert local_kafka.KafkaBroker("given", port=1111, controller_port=2222).picked_ports == frozenset()
    broker = local_kafka.KafkaBroker(f"bind-{uuid.uuid4().hex[:8]}")
    assert broker.picked_ports == {"port", "controller_port"}
    taken = broker.port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        try:
            broker.start()
            assert broker.port != taken and broker.process is not None and broker.process.poll() is None
            assert f"127.0.0.1:{broker.port}" in broker.server_properties()["listeners"]
        finally:
            broker.remove()
