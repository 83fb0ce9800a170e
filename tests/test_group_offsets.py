"""A group's committed offsets are read by a consumer of that group, never by librdkafka's admin
`ListConsumerGroupOffsets`: that call dies of SIGSEGV when the broker answers NOT_COORDINATOR
(librdkafka #5040; CI's crash in tests/mm2/test_mm2_heartbeats.py, with the C stack
`rd_kafka_cgrp_op <- rd_kafka_handle_OffsetFetch <- rd_kafka_ListConsumerGroupOffsetsResponse_parse`).
"""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

from kmirror.flow.spec import ClusterEndpoint
from kmirror_engine.clients.factory import RefreshingAdmin, admin_client
from kmirror_engine.clients.group_offsets import read_group_offsets
from kmirror_engine.failover.group_sync import committed_offsets, list_groups
from kmirror_engine.planning import replays
from tests.e2e.test_failover_e2e import commit
from tests.kafka_helpers import create_topic

pytestmark = pytest.mark.spark40  # also in leg 2 (pyspark 4.0.2 / Python 3.10)


class NoOffsetsAdmin:
    """An admin client whose offset listing is the call that crashes."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def list_consumer_group_offsets(self, *_: Any, **__: Any) -> Any:
        raise AssertionError("the admin API's ListConsumerGroupOffsets was called")


def test_the_refreshing_admin_never_lists_group_offsets_through_the_admin_api(monkeypatch: Any) -> None:
    made: list[dict[str, Any]] = []

    class FakeConsumer:
        def __init__(self, config: dict[str, Any]) -> None:
            made.append(config)
            self.closed = False

        def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
            return [TopicPartition(tp.topic, tp.partition, 7) for tp in partitions]

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr("kmirror_engine.clients.factory.Consumer", FakeConsumer)
    admin = RefreshingAdmin(ClusterEndpoint("east", "127.0.0.1:9"), factory=NoOffsetsAdmin)
    request = ConsumerGroupTopicPartitions("g1", [TopicPartition("orders", 3)])
    result = admin.list_consumer_group_offsets([request], request_timeout=1.0)["g1"].result(0)
    assert [(tp.topic, tp.partition, tp.offset) for tp in result.topic_partitions] == [("orders", 3, 7)]
    assert made and made[0]["group.id"] == "g1" and made[0]["enable.auto.commit"] is False


def test_a_reader_that_fails_still_closes_its_consumer() -> None:
    class Failing:
        closed = False

        def committed(self, *_: Any, **__: Any) -> Any:
            from confluent_kafka import KafkaError, KafkaException

            raise KafkaException(KafkaError(KafkaError._TIMED_OUT))

        def close(self) -> None:
            Failing.closed = True

    with pytest.raises(Exception, match=r"TIMED_OUT|Timed out"):
        read_group_offsets(lambda _g: Failing(), ConsumerGroupTopicPartitions("g", [TopicPartition("t", 0)]), 1.0)
    assert Failing.closed


def test_committed_offsets_read_by_a_consumer_match_what_the_group_committed(clusters: Any, unique: str) -> None:
    topic, other, group = f"go-{unique}", f"go-other-{unique}", f"go-group-{unique}"
    create_topic(clusters.source, topic, partitions=1)
    create_topic(clusters.source, other, partitions=1)
    commit(clusters.source, group, topic, 5)
    commit(clusters.source, group, other, 2)
    endpoint = ClusterEndpoint("east", clusters.source)
    # all the group committed (no partitions named): every topic of the cluster is asked
    assert committed_offsets(admin_client(endpoint), group, "east") == {(topic, 0): (5, ""), (other, 0): (2, "")}
    # a group that never committed has no offsets, and reading it creates no group
    assert committed_offsets(admin_client(endpoint), f"never-{unique}", "east") == {}
    assert f"never-{unique}" not in list_groups(admin_client(endpoint), "east")
    # the named partitions only (what the replay check asks)
    got = replays.committed_offsets(admin_client(endpoint), group, [(topic, 0)], 30.0)
    assert got == {(topic, 0): 5}
