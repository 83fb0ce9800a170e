"""Kafka clients: the one factory per role, the per-process client cache, the security check.

The public surface for the Spark glue and the CLI: `__all__`, loaded lazily (kmirror_engine/lazy_exports.py).
"""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from kmirror_engine.clients.factory import (
        admin_client,
        consumer_config,
        new_admin,
        new_consumer,
        new_producer,
        producer_config,
        validate_client_configs,
    )
    from kmirror_engine.clients.security_check import (
        check_client_support,
        check_flow_security,
    )
    from kmirror_engine.clients.topic_admin import ensure_topic

__all__ = [
    "admin_client",
    "check_client_support",
    "check_flow_security",
    "consumer_config",
    "ensure_topic",
    "new_admin",
    "new_consumer",
    "new_producer",
    "producer_config",
    "validate_client_configs",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "factory": (
            "admin_client",
            "consumer_config",
            "new_admin",
            "new_consumer",
            "new_producer",
            "producer_config",
            "validate_client_configs",
        ),
        "security_check": (
            "check_client_support",
            "check_flow_security",
        ),
        "topic_admin": ("ensure_topic",),
    },
)
