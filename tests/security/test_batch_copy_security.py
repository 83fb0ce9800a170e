"""The batch copy path (`copy_loop: batch`) through real brokers' secured listeners: mutual TLS,
SASL_SSL with SCRAM-SHA-512 and SASL_PLAINTEXT with SCRAM-SHA-512, with exactly the ACLs
`mirror_acls` lists (kafka-python's connection layer does the TLS handshake and the SCRAM exchange). The clusters are
tests/security/test_real_broker_security.py's (its `secure` fixture)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.clients.factory import admin_client
from kmirror_engine.copying.ranges import CopyRange
from kmirror_engine.copying.task_copy import copy_task_ranges
from kmirror_engine.planning.discovery import MirroredTopic
from kmirror_engine.planning.target_topics import TargetTopics
from tests.kafka_helpers import consume_all, create_topic, produce
from tests.security.test_real_broker_security import (  # noqa: F401  (`secure`: the module's clusters)
    SecureCluster,
    flow,
    grant,
    principal,
    revoke_all,
    secure,
)

pytestmark = [pytest.mark.security, pytest.mark.real_kafka, pytest.mark.e2e]


@pytest.mark.parametrize("mechanism", ["mtls", "scram", "scram-plaintext"])
def test_the_batch_path_copies_through_tls_and_scram_with_the_listed_acls(
    secure: tuple[SecureCluster, SecureCluster, Path],  # noqa: F811  (the imported fixture)
    mechanism: str,
    unique: str,
) -> None:
    west, east, directory = secure
    topic = f"secb-{mechanism}-{unique}"
    create_topic(west.broker.bootstrap_servers, topic, 2)
    data = [
        {
            "key": f"k{i}".encode(),
            "value": f"v{i}".encode() * 20,
            "partition": i % 2,
            "headers": [("i", str(i).encode())],
        }
        for i in range(400)
    ]
    produce(west.broker.bootstrap_servers, topic, data)
    spec = parse_flow_spec({**flow(west, east, directory, mechanism, topic).to_dict(), "copy_loop": "batch"})
    who = principal(mechanism)
    try:
        grant(spec, west, east, who, [topic])
        TargetTopics(admin_client(spec.source), admin_client(spec.target), spec.target).ensure(
            {topic: MirroredTopic(topic, 2, f"west.{topic}")}
        )
        progress = copy_task_ranges(spec, [CopyRange(topic, p, 0, 200, f"west.{topic}") for p in (0, 1)], 0)
    finally:
        revoke_all(west, who)
        revoke_all(east, who)
    # the batch path itself copied (nothing handed to the record loop), every record as it was
    assert [(p.records, p.fallback_records) for p in progress] == [(200, 0), (200, 0)]
    got = consume_all(east.broker.bootstrap_servers, f"west.{topic}", 2)
    want = consume_all(west.broker.bootstrap_servers, topic, 2)
    assert {p: [(m.key(), m.value(), m.headers(), m.timestamp()) for m in msgs] for p, msgs in got.items()} == {
        p: [(m.key(), m.value(), m.headers(), m.timestamp()) for m in msgs] for p, msgs in want.items()
    }
