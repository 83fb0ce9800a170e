"""The flow's Kafka client configurations, built from a cluster endpoint and the flow's `copy`
view (the clients themselves are made by `kmirror_engine.clients.factory`, which re-exports these
names).

- Source consumers are assign()-only (no group membership, no auto commit) and read
  `read_committed` unless the flow's `consumer` overrides say otherwise.
- Target producers cannot lose data: acks=all, idempotence, at most 5 requests in flight (the
  idempotent producer keeps order up to 5), unbounded retries. A `producer` override that
  would weaken one of these is a ValidationError naming the key, never silently replaced.
- Throughput tuning (fetch sizes, linger, batch size) lives with the copy loop
  (`kmirror_engine.copying.ranges.CONSUMER_TUNING` / `PRODUCER_TUNING`), layered under these configs.
- Secret references (`${file:..}`/`${env:..}`) are resolved here, right before a client is
  created: never log the result.
- Kerberos: every principal gets its own ticket cache in a directory private to the process
  (`ticket_cache`), so two principals in one process, or two flows on one node, never
  overwrite each other's tickets (librdkafka's kinit otherwise writes the user's one default
  cache).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Mapping
from typing import Any

from kmirror.errors import Problem, ValidationError
from kmirror.flow.endpoint import ClusterEndpoint
from kmirror.flow.views import CopySettings
from kmirror.security import client_properties as safety_rules
from kmirror.security.client_properties import same_property
from kmirror.security.config import resolve_references
from kmirror.security.kerberos import process_dir

PRODUCER_SAFETY: dict[str, Any] = {
    "acks": "all",
    "enable.idempotence": True,
    "max.in.flight.requests.per.connection": 5,
    "retries": 2_147_483_647,
}


def consumer_config(source: ClusterEndpoint, copy: CopySettings, group_id: str) -> dict[str, Any]:
    """Consumer of `source` (a flow's: `spec.source, spec.copy, spec.consumer_group`): assign()-only,
    no auto commit, read_committed unless the `consumer` overrides of `copy` say otherwise."""
    config = {
        "isolation.level": "read_committed",
        **source.client_config(),
        **copy.consumer,
        "group.id": group_id,
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
    }
    return with_ticket_cache(resolve_references(config))


def producer_safety_problems(overrides: Mapping[str, Any]) -> list[Problem]:
    """Overrides that would let the producer lose or reorder data, under any of their librdkafka
    names (`request.required.acks: 1` like `acks: 1`); empty when safe. The rules live in the pure
    core (`kmirror.security.client_properties`), so `kmirror validate` refuses what this refuses."""
    return safety_rules.producer_safety_problems(overrides, "producer")


def safe_producer_config(base: Mapping[str, Any], overrides: Mapping[str, Any], source: str) -> dict[str, Any]:
    """`base` (a cluster's client config, or a producer config made here) with every
    `PRODUCER_SAFETY` setting it lacks or sets unsafely put to the safe value, then `overrides`,
    which must be safe themselves: ValidationError from `source` naming each unsafe key."""
    problems = producer_safety_problems(dict(overrides))
    if problems:
        raise ValidationError(problems, source=source)
    kept = dict(base)
    safety = {}
    for key, safe in PRODUCER_SAFETY.items():
        # `base` may set it under an alias (`request.required.acks`): an unsafe alias is dropped, or
        # librdkafka would apply whichever of the two names comes last.
        aliases = [k for k in base if same_property(str(k), key)]
        if not aliases or producer_safety_problems({k: base[k] for k in aliases}):
            safety[key] = safe
            for alias in aliases:
                del kept[alias]
    return {**kept, **safety, **overrides}


# Transactional producers' `transaction.timeout.ms`, set explicitly (not librdkafka's default by
# accident): kmirror_engine/copying/exactly_once.py sizes transactions by it.
TRANSACTION_TIMEOUT_MS = 60_000


def producer_config(
    target: ClusterEndpoint, copy: CopySettings, flow_id: str, transactional_id: str | None = None
) -> dict[str, Any]:
    """Producer of `target` (a flow's: `spec.target, spec.copy, spec.id`) that cannot lose data, with
    the `producer` overrides of `copy`; raises ValidationError (from flow `flow_id`) for an unsafe one."""
    config = resolve_references(safe_producer_config(target.client_config(), copy.producer, source=f"flow {flow_id}"))
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        # explicit, not librdkafka's default by accident: exactly_once.py sizes transactions by it
        config.setdefault("transaction.timeout.ms", TRANSACTION_TIMEOUT_MS)
    return with_ticket_cache(config)


KINIT_PROPERTY = "sasl.kerberos.kinit.cmd"
_ticket_dir: str | None = None
_ticket_lock = threading.Lock()


def ticket_cache(principal: str) -> str:
    """The ticket cache of `principal` in this process: `DIR::<private dir>/tkt-<digest>`, a
    member of the process's collection `DIR:<private dir>` (exported as KRB5CCNAME, where the
    GSSAPI library picks the member whose realm matches the broker's)."""
    global _ticket_dir
    with _ticket_lock:
        if _ticket_dir is None:
            _ticket_dir = str(process_dir("krb5cc"))  # 0700, unpredictable, swept after os._exit
            os.environ["KRB5CCNAME"] = f"DIR:{_ticket_dir}"
    return f"DIR::{_ticket_dir}/tkt-{hashlib.sha256(principal.encode()).hexdigest()[:16]}"


def with_ticket_cache(config: dict[str, Any]) -> dict[str, Any]:
    """`config` whose kinit command writes the principal's own ticket cache (`ticket_cache`);
    configs without Kerberos are returned unchanged."""
    command, principal = config.get(KINIT_PROPERTY), config.get("sasl.kerberos.principal")
    if not command or not principal:
        return config
    cache = ticket_cache(str(principal))
    return {**config, KINIT_PROPERTY: f"KRB5CCNAME='{cache}'; export KRB5CCNAME; {command}"}
