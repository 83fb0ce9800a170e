"""Kafka client configurations of the mirror, built from the flow spec: the one place clients
are configured.

- Source consumers are assign()-only (no group membership, no auto commit) and read
  `read_committed` unless the flow's `consumer` overrides say otherwise.
- Target producers cannot lose data: acks=all, idempotence, at most 5 requests in flight (the
  idempotent producer keeps order up to 5), unbounded retries. A `producer` override that
  would weaken one of these is a ValidationError naming the key, never silently replaced.
- Throughput tuning (fetch sizes, linger, batch size) lives with the copy loop
  (`spark_app.copy.CONSUMER_TUNING` / `PRODUCER_TUNING`), layered under these configs.
Secret references (`${file:..}`/`${env:..}`) are resolved here, right before a client is
created: never log the result.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from kmirror.errors import Problem, ValidationError
from kmirror.flowspec import ClusterEndpoint, FlowSpec
from kmirror.security import REDACTED, is_kmirror_property, is_sensitive, resolve_references

PRODUCER_SAFETY: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "max.in.flight.requests.per.connection": 5,
    "retries": 2_147_483_647,
}
# Checked together (a SASL protocol alone means GSSAPI to librdkafka) by
# spark_app.security_check.check_client_support, which says how to get a build that supports them.
SECURITY_PAIR = frozenset({"security.protocol", "sasl.mechanism", "sasl.mechanisms"})
_ACKS_ALL = {"all", "-1", -1}
_TRUE = {True, "true", "True", "1"}


def consumer_config(spec: FlowSpec) -> dict[str, Any]:
    """Source consumer: assign()-only, no auto commit, read_committed unless overridden."""
    config = {
        "isolation.level": "read_committed",
        **spec.source.client_config(),
        **spec.option("consumer"),
        "group.id": spec.consumer_group,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }
    return resolve_references(config)


def producer_safety_problems(overrides: dict[str, Any]) -> list[Problem]:
    """Overrides that would let the producer lose or reorder data; empty when safe."""
    problems = []
    if "acks" in overrides and overrides["acks"] not in _ACKS_ALL:
        problems.append(
            Problem(
                "producer.acks",
                f"must stay 'all' (records could be lost), got {overrides['acks']!r}; remove the override",
            )
        )
    if "enable.idempotence" in overrides and overrides["enable.idempotence"] not in _TRUE:
        problems.append(
            Problem(
                "producer.enable.idempotence",
                f"must stay true (retries could duplicate or reorder), got {overrides['enable.idempotence']!r}; "
                "remove the override",
            )
        )
    in_flight = overrides.get("max.in.flight.requests.per.connection")
    if in_flight is not None and not (str(in_flight).isdigit() and 1 <= int(in_flight) <= 5):
        problems.append(
            Problem(
                "producer.max.in.flight.requests.per.connection",
                f"must be 1..5 (ordering with idempotence), got {in_flight!r}",
            )
        )
    retries = overrides.get("retries", overrides.get("message.send.max.retries"))
    if retries is not None and str(retries) != str(PRODUCER_SAFETY["retries"]):
        problems.append(
            Problem(
                "producer.retries",
                f"must stay unbounded (a failed send fails the batch instead of retrying), got {retries!r}; "
                "remove the override",
            )
        )
    return problems


def producer_config(spec: FlowSpec, transactional_id: str | None = None) -> dict[str, Any]:
    """Target producer that cannot lose data; raises ValidationError for an unsafe override."""
    overrides = dict(spec.option("producer"))
    problems = producer_safety_problems(overrides)
    if problems:
        raise ValidationError(problems, source=f"flow {spec.id}")
    config = resolve_references({**spec.target.client_config(), **PRODUCER_SAFETY, **overrides})
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    return config


def admin_client(endpoint: ClusterEndpoint) -> AdminClient:
    """An admin client of one cluster (secret references resolved)."""
    return AdminClient(resolve_references(endpoint.client_config()))


def _property_problem(path: str, name: Any, value: Any) -> Problem | None:
    """librdkafka's verdict on one property, checked alone in a client that never connects
    (librdkafka names aliases by their canonical name, so each is checked on its own)."""
    import confluent_kafka

    if isinstance(value, str) and "${" in value:
        return None  # a secret reference: resolved (and checked) when the clients are created
    if is_kmirror_property(str(name)) or name in SECURITY_PAIR:
        return None  # kmirror.* is consumed by resolve_references; the pair is checked by security_check
    try:
        confluent_kafka.Producer({name: value, "log_level": 0})
    except (KafkaException, TypeError, ValueError) as exc:
        reason = exc.args[0].str() if isinstance(exc, KafkaException) else str(exc)
        if reason.startswith("Failed to create"):
            return None  # a rule across properties (keystore without its password...): checked at creation
        # A secret's value is never shown; nor is an unknown key's, which may be a mistyped secret key.
        hidden = is_sensitive(str(name)) or "No such configuration property" in reason
        shown = REDACTED if hidden else repr(value)
        return Problem(f"{path}.{name}", f"refused by librdkafka: {reason} (value {shown})")
    return None


def client_config_problems(spec: FlowSpec) -> list[Problem]:
    """Every librdkafka property of the flow that no client would accept, and every unsafe
    producer override, named by its path in the flow spec (`source.config.x`, `producer.acks`)."""
    problems = producer_safety_problems(dict(spec.option("producer")))
    maps = {
        "source.config": spec.source.config,
        "target.config": spec.target.config,
        "producer": spec.option("producer"),
        "consumer": spec.option("consumer"),
    }
    for path, properties in maps.items():
        for name, value in properties.items():
            problem = _property_problem(path, name, value)
            if problem is not None:
                problems.append(problem)
    return problems


def validate_client_configs(spec: FlowSpec) -> None:
    """Raise ValidationError (exit 2) listing `client_config_problems`; called before any
    connection, so a typo fails in milliseconds, not as a Spark task failure."""
    problems = client_config_problems(spec)
    if problems:
        raise ValidationError(problems, source=f"flow {spec.id}")
