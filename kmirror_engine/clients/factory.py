"""Kafka clients of the mirror: the one place they are made (their configurations, built from the
flow spec, are `kmirror_engine.clients.configs`: re-exported here).

- Clients outlive neither their secrets nor their certificates: `admin_client` returns a
  `RefreshingAdmin` that re-resolves the references at every call and rebuilds the client when
  the resolved material (including the content of files named by `*.location` properties and
  the keytab) changed, or after an authentication/TLS error; the copy tasks' cached clients are
  keyed the same way (`kmirror_engine.clients.cache.config_key`), and so are the side work's
  long-lived clients (`renewing_producer`, `renewing_delivery_producer`, `renewing_consumer`:
  re-checked every `cache.RECHECK_S` seconds and after an authentication error; a producer
  being replaced is flushed first, its records delivered or reported failed, never dropped).
- Every Kafka client of the engine, the Spark glue and the CLI is made here, one constructor per
  role: `new_consumer`, `new_producer` (always safe: missing or unsafe safety settings replaced,
  unsafe overrides refused), `new_admin` (or the refreshing `admin_client`) and
  `new_delivery_producer` (`kmirror_engine.clients.delivery`); `probe_client` asks librdkafka
  about a config without connecting. Nothing else constructs `Consumer`/`Producer`/`AdminClient`
  (tests/test_client_factory.py checks it); tests replace the classes below (the seam).
- The clients made here are never destroyed on one of librdkafka's own threads (where an admin
  client's future callbacks, and any garbage collection they start, run): one dropped there is
  handed to a reaper thread (`kmirror_engine.clients.release`, confluent-kafka's issue #1761).
- Kerberos: each client's kinit writes its principal's own ticket cache (`configs.with_ticket_cache`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import confluent_kafka
from confluent_kafka import Consumer as _KafkaConsumer
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka import Producer as _KafkaProducer
from confluent_kafka.admin import AdminClient as _KafkaAdminClient

from kmirror.errors import Problem, ValidationError
from kmirror.flow.spec import ClusterEndpoint
from kmirror.flow.views import CopySettings, FlowRoute
from kmirror.security import client_properties as safety_rules
from kmirror.security.config import REDACTED, is_kmirror_property, is_sensitive, resolve_references
from kmirror_engine.clients.cache import (
    RenewingClient,
    RenewingProducer,
    config_key,
    retire_consumer,
    retire_producer,
)
from kmirror_engine.clients.configs import (  # re-exported: the configs' old import path
    KINIT_PROPERTY,  # noqa: F401
    PRODUCER_SAFETY,  # noqa: F401
    TRANSACTION_TIMEOUT_MS,  # noqa: F401
    consumer_config,  # noqa: F401
    producer_config,  # noqa: F401
    producer_safety_problems,
    safe_producer_config,
    ticket_cache,  # noqa: F401
    with_ticket_cache,
)
from kmirror_engine.clients.delivery import DeliveryConfirmingProducer
from kmirror_engine.clients.msk_iam import with_msk_iam
from kmirror_engine.clients.release import keep_if_on_librdkafka_thread, start_reaper

log = logging.getLogger("kmirror.clients")
LIBRDKAFKA_LOG = logging.getLogger("kmirror.librdkafka")


class _DestroyedOnPythonThreads:
    """confluent-kafka's clients as the factory makes them: never destroyed on a librdkafka
    thread (`kmirror_engine.clients.release`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        start_reaper()
        if args and isinstance(args[0], dict):
            args = (with_msk_iam(args[0]), *args[1:])  # kmirror.msk_iam.* -> the token callback
        if args and isinstance(args[0], dict) and "logger" not in args[0]:
            # librdkafka's own lines (`%3|...|FAIL|...` for a broker it cannot reach) through
            # logging, not straight to the terminal: served by the client's poll
            args = ({**args[0], "logger": LIBRDKAFKA_LOG}, *args[1:])
        super().__init__(*args, **kwargs)

    def __del__(self) -> None:
        keep_if_on_librdkafka_thread(self)


class Consumer(_DestroyedOnPythonThreads, _KafkaConsumer):
    pass


class Producer(_DestroyedOnPythonThreads, _KafkaProducer):
    pass


class AdminClient(_DestroyedOnPythonThreads, _KafkaAdminClient):
    pass


safety_rules.register_librdkafka(confluent_kafka)  # validation in this process asks librdkafka too
# Checked together (a SASL protocol alone means GSSAPI to librdkafka) by
# kmirror_engine.clients.security_check.check_client_support, which says how to get a build that supports them.
SECURITY_PAIR = frozenset({"security.protocol", "sasl.mechanism", "sasl.mechanisms"})


def admin_client(endpoint: ClusterEndpoint) -> RefreshingAdmin:
    """An admin client of one cluster (secret references resolved, rebuilt when they change)."""
    return RefreshingAdmin(endpoint)


# What a client is made from: a cluster endpoint (its config is resolved here, with the role's
# settings and the overrides) or a complete config (one made by `consumer_config`/`producer_config`,
# already resolved, plus tuning; or a local broker's plain config), used as given.
ClientSource = ClusterEndpoint | Mapping[str, Any]


def endpoint_config(endpoint: ClusterEndpoint, **overrides: Any) -> dict[str, Any]:
    """A client config of `endpoint` with `overrides`, secret references resolved, the principal's
    own ticket cache: what every client made from an endpoint gets. Never log the result."""
    return with_ticket_cache(resolve_references({**endpoint.client_config(), **overrides}))


def _config(source: ClientSource, overrides: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(source, ClusterEndpoint):
        return endpoint_config(source, **overrides)
    return {**source, **overrides}


def new_consumer(source: ClientSource, *, role: str, group_id: str | None = None, **overrides: Any) -> Any:
    """The `role` consumer (e.g. "offset-syncs-reader") of `source`; `group_id` sets `group.id`,
    `overrides` (librdkafka properties, dots spelled out in a mapping) go over the config."""
    extra = {"group.id": group_id, **overrides} if group_id is not None else overrides
    log.debug("new consumer: %s", role)
    return Consumer(_config(source, extra))


def new_producer(source: ClientSource, *, role: str, **overrides: Any) -> Any:
    """The `role` producer of `source`, which cannot lose data whatever `source` says:
    `safe_producer_config` (an unsafe override is a ValidationError naming the role)."""
    log.debug("new producer: %s", role)
    if isinstance(source, ClusterEndpoint):
        base = source.client_config()
        return Producer(with_ticket_cache(resolve_references(safe_producer_config(base, overrides, role))))
    return Producer(safe_producer_config(source, overrides, role))


def new_admin(source: ClientSource, *, role: str, **overrides: Any) -> Any:
    """A plain admin client (`role`, e.g. "internal-topics-admin") of `source`; for long-lived
    admin clients whose secrets may rotate use `admin_client`."""
    log.debug("new admin client: %s", role)
    return AdminClient(_config(source, overrides))


def new_delivery_producer(
    source: ClientSource,
    *,
    role: str,
    what: str,
    error: Callable[[str], Exception],
    counted: str | None = None,
    describe: Any = None,
    on_delivered: Callable[[Any], None] | None = None,
    **overrides: Any,
) -> DeliveryConfirmingProducer:
    """A `new_producer` whose records are confirmed or reported (`DeliveryConfirmingProducer`)."""
    producer = new_producer(source, role=role, **overrides)
    return DeliveryConfirmingProducer(
        producer, what=what, error=error, counted=counted, describe=describe, on_delivered=on_delivered
    )


def renewing_producer(source: ClusterEndpoint | Callable[[], Mapping[str, Any]], *, role: str) -> RenewingProducer:
    """A long-lived `new_producer` rebuilt when its credentials rotate (`RenewingProducer`):
    `source` is an endpoint, or a function returning the complete config (`producer_config`)."""
    if isinstance(source, ClusterEndpoint):
        endpoint = source

        def resolve() -> Mapping[str, Any]:
            return with_ticket_cache(resolve_references(safe_producer_config(endpoint.client_config(), {}, role)))
    else:
        resolve = source

    def make(config: Mapping[str, Any], renewal: Any) -> Any:
        return new_producer(config, role=role, error_cb=_renewal_on_auth_error(renewal))

    return RenewingProducer(resolve, make, retire_producer, role=role)


def renewing_delivery_producer(
    target: ClusterEndpoint,
    *,
    role: str,
    what: str,
    error: Callable[[str], Exception],
    counted: str | None = None,
    on_delivered: Callable[[Any], None] | None = None,
    describe: Any = None,
) -> DeliveryConfirmingProducer:
    """A `renewing_producer` whose records are confirmed or reported (`DeliveryConfirmingProducer`)."""
    producer = renewing_producer(target, role=role)
    return DeliveryConfirmingProducer(
        producer, what=what, error=error, counted=counted, describe=describe, on_delivered=on_delivered
    )


def renewing_consumer(resolve: Callable[[], Mapping[str, Any]], *, role: str) -> RenewingClient:
    """A long-lived `new_consumer` of the complete config `resolve()` returns (`consumer_config`),
    rebuilt when its credentials rotate; `current()` gives the consumer to use."""

    def make(config: Mapping[str, Any], renewal: Any) -> Any:
        return new_consumer(config, role=role, error_cb=_renewal_on_auth_error(renewal))

    return RenewingClient(resolve, make, retire_consumer, role=role)


def _renewal_on_auth_error(renewal: Any) -> Callable[[KafkaError], None]:
    """librdkafka's `error_cb`: an authentication/TLS error makes the client re-check its
    credentials at its next use. Holds the renewal flag only, never the client."""

    def on_error(error: KafkaError) -> None:
        if error.code() in AUTH_ERRORS:
            renewal.due = True

    return on_error


def probe_client(config: Mapping[str, Any]) -> Any:
    """A producer that never connects (nothing is produced): creating it is librdkafka's verdict
    on `config` (KafkaException when refused). Configs as given: no safety, nothing resolved."""
    return Producer(dict(config))


# Errors after which a client is rebuilt: the credentials or certificates it holds are refused.
AUTH_ERRORS = frozenset(
    {
        KafkaError._AUTHENTICATION,
        KafkaError._SSL,
        KafkaError.SASL_AUTHENTICATION_FAILED,
        KafkaError.ILLEGAL_SASL_STATE,
        KafkaError.UNSUPPORTED_SASL_MECHANISM,
    }
)


def is_auth_error(exc: BaseException) -> bool:
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    return isinstance(error, KafkaError) and error.code() in AUTH_ERRORS


class _ClientKey:
    """The key the current admin client was built from (None: rebuild at the next call). Futures'
    done-callbacks hold this, never the client: see `RefreshingAdmin`."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value: str | None = None


class RefreshingAdmin:
    """An AdminClient proxy: every call re-resolves the endpoint's secret references and uses a
    client built from exactly that material (`client_cache.config_key`, file contents
    included), rebuilt after an authentication/TLS error seen in a call or in one of its futures.

    The callbacks watching the futures hold only the key (`_ClientKey`), never this proxy or its
    client. librdkafka completes admin futures on the client's own background thread; a caller
    that stopped waiting (a timed-out `future.result(timeout=...)`) has dropped its references,
    so a callback holding the client would drop the last one there, and `rd_kafka_destroy()`
    from a librdkafka thread aborts the process ("Application bug: rd_kafka_destroy() called
    from librdkafka owned thread"): a Spark worker crash (tests/test_admin_lifetime.py)."""

    def __init__(self, endpoint: ClusterEndpoint, factory: Any = None) -> None:
        """`factory(config)`: makes the client (default: `AdminClient`, looked up at each build)."""
        self.endpoint, self.factory = endpoint, factory or (lambda config: AdminClient(config))
        self._client: Any = None
        self._key = _ClientKey()
        self.rebuilds = 0  # clients built after the first one

    def current(self) -> Any:
        config = with_ticket_cache(resolve_references(self.endpoint.client_config()))
        key = config_key(config)
        if self._client is None or key != self._key.value:
            self.rebuilds += self._client is not None
            self._client = None  # the old client goes here, in the caller's thread
            self._client, self._key.value = self.factory(config), key
        return self._client

    def invalidate(self) -> None:
        """Build a new client at the next call (its credentials were refused)."""
        self._key.value = None

    def list_consumer_group_offsets(self, requests: list[Any], request_timeout: float = 30.0, **_: Any) -> dict:
        """The admin call's answer, read by a consumer of each group: the admin call itself can
        kill the process (`kmirror_engine.clients.group_offsets`)."""
        from kmirror_engine.clients.group_offsets import group_offsets_futures

        def reader(group: str) -> Any:
            return new_consumer(
                self.endpoint, role="group-offsets-reader", group_id=group, **{"enable.auto.commit": False}
            )

        return group_offsets_futures(reader, requests, request_timeout)  # each reader resolves the secrets anew

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.current(), name)
        if not callable(attr):
            return attr
        key = self._key

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attr(*args, **kwargs)
            except KafkaException as exc:
                if is_auth_error(exc):
                    key.value = None
                raise
            for future in result.values() if isinstance(result, dict) else ():
                if hasattr(future, "add_done_callback"):
                    future.add_done_callback(_auth_watcher(key))
            return result

        return call


def _auth_watcher(key: _ClientKey) -> Callable[[Any], None]:
    """A future's done-callback: an authentication/TLS failure marks the client for a rebuild.
    Runs on librdkafka's background thread; holds the key only (`RefreshingAdmin`)."""

    def watch(future: Any) -> None:
        if not future.cancelled() and (exc := future.exception()) is not None and is_auth_error(exc):
            key.value = None

    return watch


def refresh_metadata(producer: Any, topic: str, timeout_s: float = 5.0) -> None:
    """Ask the brokers for `topic`'s metadata now (a topic grown on the target): librdkafka
    otherwise keeps its partition count until `topic.metadata.refresh.interval.ms`."""
    try:
        producer.list_topics(topic, timeout=timeout_s)
    except KafkaException:
        time.sleep(0.1)  # the retried produce reports what is wrong


def _property_problem(path: str, name: Any, value: Any) -> Problem | None:
    """librdkafka's verdict on one property, checked alone in a client that never connects
    (librdkafka names aliases by their canonical name, so each is checked on its own)."""
    if isinstance(value, str) and "${" in value:
        return None  # a secret reference: resolved (and checked) when the clients are created
    if is_kmirror_property(str(name)) or name in SECURITY_PAIR:
        return None  # kmirror.* is consumed by resolve_references; the pair is checked by security_check
    try:
        probe_client({name: value, "log_level": 0})
    except (KafkaException, TypeError, ValueError) as exc:
        reason = exc.args[0].str() if isinstance(exc, KafkaException) else str(exc)
        if reason.startswith("Failed to create"):
            return None  # a rule across properties (keystore without its password...): checked at creation
        # A secret's value is never shown; nor is an unknown key's, which may be a mistyped secret key.
        hidden = is_sensitive(str(name)) or "No such configuration property" in reason
        shown = REDACTED if hidden else repr(value)
        return Problem(f"{path}.{name}", f"refused by librdkafka: {reason} (value {shown})")
    return None


def client_config_problems(route: FlowRoute, copy: CopySettings) -> list[Problem]:
    """Every librdkafka property of the flow (its clusters' configs, the client overrides of its
    `copy` view) that no client would accept, and every unsafe producer override, named by its path
    in the flow spec (`source.config.x`, `producer.acks`)."""
    problems = producer_safety_problems(dict(copy.producer))
    problems.extend(safety_rules.infinite_timeout_problems(route.target.config, path="target.config"))
    maps = {
        "source.config": route.source.config,
        "target.config": route.target.config,
        "producer": dict(copy.producer),
        "consumer": dict(copy.consumer),
    }
    for path, properties in maps.items():
        for name, value in properties.items():
            problem = _property_problem(path, name, value)
            if problem is not None:
                problems.append(problem)
    return problems


def validate_client_configs(route: FlowRoute, copy: CopySettings) -> None:
    """Raise ValidationError (exit 2) listing `client_config_problems`; called before any
    connection, so a typo fails in milliseconds, not as a Spark task failure."""
    problems = client_config_problems(route, copy)
    if problems:
        raise ValidationError(problems, source=f"flow {route.flow_id}")
