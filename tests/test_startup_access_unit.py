"""Missing internal-topic ACLs are refused before copying, not only warned about (issue 26)."""

from __future__ import annotations

import io

import pytest
from confluent_kafka.admin import AclOperation

import spark_app.main
from kmirror.errors import KmirrorError
from kmirror.flow.spec import parse_flow_spec
from kmirror_engine.planning.internal_topics import InternalTopicAccess
from tests.test_failover_side_work import AclAdmin, flow


def test_missing_acls_refuse_the_start_naming_topic_operation_and_grant_command() -> None:
    spec = parse_flow_spec(flow())
    with pytest.raises(KmirrorError) as caught:
        InternalTopicAccess.for_flow(spec).require(AclAdmin([AclOperation.DESCRIBE]), io.StringIO())
    message = str(caught.value)
    assert message.startswith("flow west->east: refusing to start without the ACLs the mirror needs:\n  - ")
    assert (
        "the mirror lacks Write on internal topic 'west.checkpoints.internal' on east (MM2 checkpoints); "
        "grant it: kafka-acls.sh --bootstrap-server e:9092 --add --allow-principal User:mirror "
        "--operation Write --topic west.checkpoints.internal"
    ) in message
    assert "kmirror-offset-syncs-snapshot.west.internal" in message


def test_a_broker_that_reports_no_operations_is_not_refused() -> None:
    class Silent(AclAdmin):
        def describe_topics(self, topics, **_):  # type: ignore[no-untyped-def]
            from tests.kafka_fakes import done

            return {t: done(type("T", (), {"authorized_operations": None})()) for t in topics.topic_names}

    InternalTopicAccess.for_flow(parse_flow_spec(flow())).require(Silent([AclOperation.CREATE]), io.StringIO())


def test_run_flow_checks_access_before_any_spark_session(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(spark_app.main, "check_clusters", lambda spec, once, stop: calls.append("clusters"))

    def refuse(spec: object) -> None:
        calls.append("access")
        raise KmirrorError("refused")

    monkeypatch.setattr(spark_app.main, "_require_internal_topic_access", refuse)
    with pytest.raises(KmirrorError, match="refused"):
        spark_app.main.run_flow(parse_flow_spec(flow()), once=True, checkpoint="/tmp/unused-checkpoint")
    assert calls == ["clusters", "access"]
