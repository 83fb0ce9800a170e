"""Which broker the suite runs against, and a factory for the tests that start their own.

`KMIRROR_TEST_BROKER` chooses: `kafka-4.1` (the default: Apache Kafka 4.1 in KRaft mode, with
the StandardAuthorizer on and the harness's PLAINTEXT client as super user), `kafka-3.9`, or
`tansu` (the demo's look-alike broker, for a quick smoke run). `KMIRROR_TEST_SOURCE_BOOTSTRAP`
and `KMIRROR_TEST_TARGET_BOOTSTRAP` point the shared `clusters` fixture at brokers run elsewhere
(then tests that must stop or kill a broker start their own).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

BROKER = os.environ.get("KMIRROR_TEST_BROKER", "kafka-4.1")
BROKERS = ("kafka-4.1", "kafka-3.9", "tansu")
if BROKER not in BROKERS:
    raise SystemExit(f"KMIRROR_TEST_BROKER={BROKER!r}: choose one of {', '.join(BROKERS)}")

IS_TANSU = BROKER == "tansu"
KAFKA_LINE = BROKER.removeprefix("kafka-") if not IS_TANSU else "4.1"

# Tests of what only a real broker shows (CreatePartitions, config sources, ACLs, SCRAM, aborted
# transactions, recovery after kill -9) carry this marker; a tansu run leaves them out by name.
real_kafka = pytest.mark.real_kafka
# Tests of tansu's own gaps (what a broker without CreatePartitions does): left out on Apache Kafka.
tansu_only = pytest.mark.tansu_only


# A single-node KRaft cluster runs its controller in the broker's JVM: frozen (SIGSTOP) for longer
# than the broker session, it fences its own broker on resume, and Kafka 4.1 was seen to leave the
# partitions leaderless after that (ELR re-election logged, the broker never became leader again).
# A multi-node cluster moves leadership instead; tests that freeze a broker keep the session
# longer than the freeze, so they test the mirror riding out a silent broker, not that corner.
FREEZE_SESSION_TIMEOUT_MS = 60_000


def new_broker(name: str, freezes: bool = False, **options: Any) -> Any:
    """A stopped broker of the suite's kind (`.start()`/`.stop()`/`.pause()`/`.resume()`, context
    manager); Apache Kafka options (extra listeners, SCRAM users) are refused for tansu.
    `freezes`: the test pauses it (see FREEZE_SESSION_TIMEOUT_MS)."""
    if freezes and not IS_TANSU:
        settings = {"broker.session.timeout.ms": str(FREEZE_SESSION_TIMEOUT_MS), **options.pop("settings", {})}
        options["settings"] = settings
    if IS_TANSU:
        from kmirror_cli.local_brokers import LocalBroker

        unsupported = set(options) - {"port", "advertised_port"}
        if unsupported:
            pytest.skip(f"tansu has no {', '.join(sorted(unsupported))}: an Apache Kafka run covers this")
        return LocalBroker(name, **options)
    from kmirror_cli.local_kafka import KafkaBroker

    return KafkaBroker(name, line=KAFKA_LINE, **options)
