"""Internal topics on a cluster: created once, with their config, before anything writes them.

The mirror's side work (offset syncs and their snapshots, checkpoints, heartbeats, the registry
of created topics) each keeps one single-partition topic; `ensure_topic` is how each comes to exist.
"""

from __future__ import annotations

from kmirror.errors import KmirrorError
from kmirror.flow.spec import ClusterEndpoint


class InternalTopicError(KmirrorError):
    """An internal topic could not be created (names the topic, the cluster and the cause)."""


def ensure_topic(endpoint: ClusterEndpoint, topic: str, config: dict[str, str]) -> None:
    """Create a one-partition internal topic on `endpoint` unless it exists."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import NewTopic

    from kmirror_engine.clients.factory import new_admin

    admin = new_admin(endpoint, role="internal-topics-admin")
    if topic in admin.list_topics(timeout=30).topics:
        return
    try:
        admin.create_topics([NewTopic(topic, 1, -1, config=config)])[topic].result(timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise InternalTopicError(f"cannot create {topic} on {endpoint.alias}: {exc}") from exc
