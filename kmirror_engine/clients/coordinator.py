"""A group or transaction coordinator's "not yet" answers: a broker just started and still loading
its log (COORDINATOR_LOAD_IN_PROGRESS), none elected yet (COORDINATOR_NOT_AVAILABLE), or the
coordinator moved (NOT_COORDINATOR). Every reader of group offsets, describer of groups and
initialiser of producer ids asks again for a while on these, and only these.

librdkafka's codes for broker errors are Kafka's wire codes (14, 15, 16), so the one set serves
`KafkaError.code()` and the batch path's raw protocol answers alike."""

from __future__ import annotations

from confluent_kafka import KafkaError

COORDINATOR_NOT_YET = frozenset(
    {KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR}
)

# their names, as they appear in a failed admin future's text
COORDINATOR_NOT_YET_NAMES = tuple(sorted(KafkaError(code).name() for code in COORDINATOR_NOT_YET))


def says_coordinator_not_yet(text: str) -> bool:
    """Whether an error's text names one of the "not yet" answers."""
    return any(name in text for name in COORDINATOR_NOT_YET_NAMES)
