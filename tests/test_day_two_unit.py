"""Day-two faults the local brokers cannot produce, with fakes (issue 15, items 1, 2, 3, 6, 7, 8):
a broker that rejects a whole batch as too large (tansu does not enforce max.message.bytes),
offset metadata (tansu drops it), ACL denials (tansu has none), per-partition offset-fetch
errors, partition growth (no CreatePartitions), rotated secrets and Kerberos ticket caches
(no SASL/GSSAPI broker here). The real-broker halves: tests/e2e/test_day_two_e2e.py."""

from __future__ import annotations

import os
import stat
import subprocess
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from kmirror.errors import ConnectionFailure, DataLossError, KmirrorError
from kmirror.flow.spec import ClusterEndpoint, FlowSpec
from kmirror_engine.copying.exactly_once import Committed, committed_offsets, stale_offsets
from kmirror_engine.copying.range_copy import RangeCopier
from kmirror_engine.copying.ranges import CopyError, CopyRange
from tests.kafka_fakes import FakeConsumer, FakeMessage, LimitedBroker
from tests.planner_fakes import FakeAdmin, planner, spec


class BatchRejectingBroker(LimitedBroker):
    """Like Kafka with librdkafka: the broker checks max.message.bytes per *batch* and the
    producer does not split a rejected batch, so every record of it fails."""

    def flush(self, timeout: float = 0) -> int:
        pending, self.pending = self.pending, []
        data = [p for p in pending if p[0] != "dlq"]
        too_large = sum(len(p[1] or b"") + len(p[2] or b"") + 30 for p in data) + 61 > self.limit
        for topic, value, key, partition, on_delivery, headers in pending:
            msg = FakeMessage(topic, partition, self.next_offset, value, key)
            if too_large and topic != "dlq":
                on_delivery(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "Broker: Message size too large"), msg)
                continue
            self.log.append((topic, value, headers))
            self.next_offset += 1
            if on_delivery:
                on_delivery(None, msg)
        return 0


def _fitting_source() -> FakeConsumer:
    return FakeConsumer([FakeMessage("t", 0, i, b"x" * 600) for i in range(4)])  # 4 x ~700 bytes, limit 1000


def test_records_that_fit_are_never_dead_lettered_when_the_broker_rejects_their_batch() -> None:
    """Before: all 4 fitting records became dead-letter pointers (the batch was rejected)."""
    broker = BatchRejectingBroker(1000)
    copier = RangeCopier(_fitting_source(), broker, dead_letter_topic="dlq", stall_timeout_s=5, limits={"w.t": 1000})
    with pytest.raises(
        CopyError,
        match=r"t\[0\]@0 \(\d+ bytes\) fits w.t's limit of 1000 bytes but its batch was "
        r"rejected as too large .* it is not dead-lettered",
    ):
        copier.copy([CopyRange("t", 0, 0, 4, "w.t")])
    assert [entry for entry in broker.log if entry[0] == "dlq"] == []


def test_a_record_over_the_topic_limit_is_dead_lettered_before_it_is_produced() -> None:
    source = FakeConsumer([FakeMessage("t", 0, i, b"x" * (5000 if i == 1 else 10)) for i in range(3)])
    broker = LimitedBroker(10_000)  # would accept it: the limit comes from the target topic
    [progress] = RangeCopier(source, broker, dead_letter_topic="dlq", stall_timeout_s=5, limits={"w.t": 2000}).copy(
        [CopyRange("t", 0, 0, 3, "w.t")]
    )
    assert (progress.records, progress.dead_lettered, progress.next_offset) == (2, 1, 3)
    [(_, value, headers)] = [entry for entry in broker.log if entry[0] == "dlq"]
    assert value == b"x" * 5000 and ("kmirror.origin.offset", b"1") in headers  # the record itself (issue 25)
    error = b"refused by w.t: record of 5095 bytes over the topic's max.message.bytes (2000)"
    assert dict(headers)["kmirror.error"] == error
    with pytest.raises(
        CopyError,
        match=r"t\[0\]@1 to w.t\[0\]: the target refuses it: record of 5095 bytes over the "
        r"topic's max.message.bytes \(2000\)\. Ways out",
    ):
        RangeCopier(FakeConsumer(source.messages), LimitedBroker(10_000), stall_timeout_s=5, limits={"w.t": 2000}).copy(
            [CopyRange("t", 0, 0, 3, "w.t")]
        )


def test_exactly_once_a_batch_rejected_as_too_large_fails_saying_the_transaction_is_aborted() -> None:
    copier = RangeCopier(
        _fitting_source(), BatchRejectingBroker(1000), dead_letter_topic="dlq", stall_timeout_s=5, transactional=True
    )
    with pytest.raises(CopyError, match="in exactly-once mode that makes the transaction abortable: it is aborted"):
        copier.copy([CopyRange("t", 0, 0, 4, "w.t")])


def test_producer_batches_are_capped_at_the_smallest_target_topic_limit() -> None:
    from kmirror_engine.copying.ranges import PRODUCER_TUNING
    from kmirror_engine.copying.record_limits import capped_producer_config

    capped = capped_producer_config(PRODUCER_TUNING, [2000, None, 5000])
    # message.max.bytes: the largest limit (librdkafka's 1 MB for the unknown one), issue 25 item 5
    assert (capped["batch.size"], capped["message.max.bytes"]) == (2000, 1_000_000)
    assert capped_producer_config(PRODUCER_TUNING, [None]) == PRODUCER_TUNING


# ---- item 2: exactly-once offsets tied to the source topic's identity ----


def test_committed_offsets_of_another_topic_incarnation_are_refused_never_trusted() -> None:
    ranges = [CopyRange("t", 0, 0, 50, "w.t"), CopyRange("t", 1, 0, 50, "w.t"), CopyRange("t", 2, 40, 50, "w.t")]
    committed = {
        ("w.t", 0): Committed(900, "old-id"),
        ("w.t", 1): Committed(50, "new-id"),
        ("w.t", 2): Committed(40, "old-id"),
    }
    problems = stale_offsets(ranges, committed, {"t": "new-id"}, lambda t, p: 10_000)
    assert problems == ["w.t[0] holds 900, committed for topic id old-id; t is now new-id"]
    # no id kept (tansu drops offset metadata): an offset past the partition's end is stale
    no_ids = {("w.t", 0): Committed(900, None), ("w.t", 1): Committed(50, None)}
    assert stale_offsets(ranges, no_ids, {"t": None}, lambda t, p: 60) == [
        "w.t[0] holds 900, past the end of t[0] (60)"
    ]


class ErrorConsumer:
    def committed(self, partitions: list[Any], timeout: float) -> list[Any]:
        return [
            SimpleNamespace(
                topic=tp.topic,
                partition=tp.partition,
                offset=-1001,
                metadata=None,
                error=KafkaError(KafkaError.NOT_COORDINATOR) if tp.partition == 1 else None,
            )
            for tp in partitions
        ]


def test_a_per_partition_error_reading_committed_offsets_raises_never_means_nothing_committed() -> None:
    ranges = [CopyRange("t", 0, 0, 5, "w.t"), CopyRange("t", 1, 0, 5, "w.t")]
    with pytest.raises(KmirrorError, match=r"reading the exactly-once offsets of w.t\[1\] failed \(.*NOT_COORDINATOR"):
        committed_offsets(ErrorConsumer(), ranges, 1.0)


# ---- item 3: deletion confirmed by a describe ----


def test_a_topic_hidden_by_an_acl_change_is_kept_not_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: missing from the listing = dropped (reported as deleted) for an ACL change."""
    import kmirror_engine.planning.offset_queries

    source = FakeAdmin({"orders": [(0, 100)], "new": [(0, 50)]})
    p = planner(source, fail_on_data_loss=False)
    start = p.initial_offsets()
    end = p.next_end(start, None)
    hidden = source.logs.pop("new")
    source.denied = {"new"}  # type: ignore[attr-defined]
    monkeypatch.setattr(kmirror_engine.planning.offset_queries, "ONCE_DEADLINE_S", 0.0)  # --once gives up at once here
    with pytest.raises(
        ConnectionFailure,
        match=r"cannot tell whether planned topic new was deleted: Broker: Topic "
        r"authorization failed \(grant Describe and Read on it",
    ):
        p.plan(start, end)
    source.logs["new"] = hidden  # the ACL is fixed: its planned range is still there
    assert sorted(r.source_topic for t in p.plan(start, end) for r in t) == ["new", "orders"]


def test_a_deleted_topic_with_planned_offsets_is_data_loss_when_fail_on_data_loss_is_on() -> None:
    source = FakeAdmin({"orders": [(0, 100)], "new": [(0, 50)]})
    p = planner(source)
    start = p.initial_offsets()
    end = p.next_end(start, None)
    del source.logs["new"]
    with pytest.raises(
        DataLossError,
        match=r"data loss on new\[0\]: topic new was deleted from 'west' "
        r"\(describe: unknown topic\) with offsets 0..49 planned",
    ):
        p.plan(start, end)


# ---- item 7 ----


def test_speculation_is_forced_off_locally_and_on_clusters_and_the_transaction_timeout_is_explicit() -> None:
    from kmirror_engine.clients.factory import producer_config
    from spark_app.session import session_confs

    assert session_confs("local[2]")["spark.speculation"] == "false"
    assert session_confs(None, {"spark.speculation": "true"}) == {"spark.speculation": "false"}
    flow = spec()
    assert producer_config(flow.target, flow.copy, flow.id, "kmirror-x-0")["transaction.timeout.ms"] == 60_000
    assert "transaction.timeout.ms" not in producer_config(flow.target, flow.copy, flow.id)


# ---- item 8: clients that outlive their secrets and metadata ----


class FakeAdminClient:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config
        self.fail_auth = False

    def list_offsets(self, request: Any, **kwargs: Any) -> dict[str, Future[Any]]:
        future: Future[Any] = Future()
        if self.fail_auth:
            future.set_exception(KafkaException(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED)))
        else:
            future.set_result(self.config["sasl.password"])
        return {"t": future}


def test_admin_clients_are_rebuilt_when_the_secret_changes_and_after_an_authentication_error(tmp_path: Path) -> None:
    from kmirror_engine.clients.factory import admin_client

    secret = tmp_path / "password"
    secret.write_text("one")
    endpoint = ClusterEndpoint(
        "west",
        "127.0.0.1:1",
        {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "u",
            "sasl.password": f"${{file:{secret}}}",
        },
    )
    admin = admin_client(endpoint)
    admin.factory = FakeAdminClient  # type: ignore[attr-defined]  # the real one needs a SCRAM broker
    assert admin.list_offsets({})["t"].result() == "one"
    secret.write_text("two")  # rotated
    assert admin.list_offsets({})["t"].result() == "two"
    admin.current().fail_auth = True  # type: ignore[attr-defined]
    with pytest.raises(KafkaException):
        admin.list_offsets({})["t"].result()
    assert not admin.current().fail_auth  # type: ignore[attr-defined]  # a fresh client after the refusal
    assert admin.rebuilds == 2  # type: ignore[attr-defined]


def test_cached_copy_clients_are_replaced_when_a_certificate_file_is_rotated(tmp_path: Path) -> None:
    from kmirror_engine.clients.cache import config_key

    cert = tmp_path / "client.pem"
    cert.write_text("cert one")
    before = config_key({"ssl.certificate.location": str(cert)})
    os.utime(cert, ns=(1, 1))
    cert.write_text("cert two, longer")  # same path, new short-lived certificate
    assert config_key({"ssl.certificate.location": str(cert)}) != before


class GrowingTargetProducer(LimitedBroker):
    """Knows 1 partition of the target until its metadata is refreshed (the topic grew to 2)."""

    def __init__(self) -> None:
        super().__init__(10_000)
        self.partitions = 1

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = 0, **kwargs: Any) -> None:
        if partition >= self.partitions:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION, "Local: Unknown partition"))
        super().produce(topic, value, key, partition, **kwargs)

    def list_topics(self, topic: str, timeout: float) -> None:
        self.partitions = 2


def test_a_partition_the_producer_does_not_know_yet_refreshes_metadata_and_is_produced() -> None:
    """Before: CopyError 'Unknown partition' (and a failed batch) after the target topic grew."""
    source = FakeConsumer([FakeMessage("t", 1, i, b"v") for i in range(3)])
    producer = GrowingTargetProducer()
    [progress] = RangeCopier(source, producer, stall_timeout_s=5).copy([CopyRange("t", 1, 0, 3, "w.t")])
    assert progress.records == 3 and producer.partitions == 2 and len(producer.log) == 3


def test_each_kerberos_principal_gets_its_own_private_ticket_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """librdkafka runs `sasl.kerberos.kinit.cmd` through sh after substituting %{...}; a fake
    kinit records the cache it writes to (no GSSAPI-capable broker or client here). Before: both
    principals' kinit wrote the one default cache of the user (KRB5CCNAME unset)."""
    import kmirror_engine.clients.configs
    from kmirror.security.config import KINIT_CMD
    from kmirror_engine.clients.factory import consumer_config, producer_config

    monkeypatch.setattr(kmirror_engine.clients.configs, "_ticket_dir", None)
    monkeypatch.delenv("KRB5CCNAME", raising=False)
    kinit = tmp_path / "bin" / "kinit"
    kinit.parent.mkdir()
    kinit.write_text('#!/bin/sh\necho "${KRB5CCNAME:-default} $*" >> "$KINIT_LOG"\n')
    kinit.chmod(0o755)
    log = tmp_path / "kinit.log"
    caches = []
    makers: tuple[tuple[str, Callable[[FlowSpec], dict[str, Any]]], ...] = (
        ("west@EX.TEST", lambda f: consumer_config(f.source, f.copy, f.consumer_group)),
        ("east@EX.TEST", lambda f: producer_config(f.target, f.copy, f.id)),
    )
    for principal, make in makers:
        kerberos = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "GSSAPI",
            "sasl.kerberos.principal": principal,
            "sasl.kerberos.keytab": "/etc/k.keytab",
            "sasl.kerberos.kinit.cmd": KINIT_CMD,
        }
        flow = spec(
            source={"alias": "west", "bootstrap_servers": "s:1", "config": kerberos},
            target={"alias": "east", "bootstrap_servers": "t:1", "config": kerberos},
        )
        config = make(flow)
        command = config["sasl.kerberos.kinit.cmd"]
        for name in ("sasl.kerberos.principal", "sasl.kerberos.keytab"):
            command = command.replace(f"%{{{name}}}", str(config[name]))
        env = {**os.environ, "PATH": f"{kinit.parent}:{os.environ['PATH']}", "KINIT_LOG": str(log)}
        subprocess.run(["sh", "-c", command], env=env, check=True, timeout=10)
        caches.append(log.read_text().splitlines()[-1].split()[0])
    assert caches[0] != caches[1] and all(c.startswith("DIR::") for c in caches), caches
    directory = Path(caches[0][len("DIR::") :]).parent
    assert os.environ["KRB5CCNAME"] == f"DIR:{directory}" and Path(caches[1][len("DIR::") :]).parent == directory
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_the_batch_cap_never_exceeds_a_lower_message_max_bytes_override() -> None:
    """librdkafka refuses a producer with batch.size > message.max.bytes; a 20 kB override of
    the latter once made every copy fail before its first record (test_faults' oversized case)."""
    import confluent_kafka

    from kmirror_engine.copying.record_limits import capped_producer_config

    capped = capped_producer_config({"message.max.bytes": 20_000}, [1_048_588])
    assert (capped["message.max.bytes"], capped["batch.size"]) == (20_000, 20_000)
    confluent_kafka.Producer({"bootstrap.servers": "127.0.0.1:9", **capped}).flush(0)  # accepted
