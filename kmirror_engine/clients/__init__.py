"""Kafka clients: the one factory per role, the per-process client cache, the security check."""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the public surface for the Spark glue and the CLI (`as`: re-exported), loaded lazily below
    from kmirror_engine.clients.factory import admin_client as admin_client
    from kmirror_engine.clients.factory import consumer_config as consumer_config
    from kmirror_engine.clients.factory import new_admin as new_admin
    from kmirror_engine.clients.factory import new_consumer as new_consumer
    from kmirror_engine.clients.factory import new_producer as new_producer
    from kmirror_engine.clients.factory import producer_config as producer_config
    from kmirror_engine.clients.factory import validate_client_configs as validate_client_configs
    from kmirror_engine.clients.security_check import check_client_support as check_client_support
    from kmirror_engine.clients.security_check import check_flow_security as check_flow_security
    from kmirror_engine.clients.topic_admin import ensure_topic as ensure_topic

__getattr__, __all__ = lazy_exports(
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
        "security_check": ("check_client_support", "check_flow_security"),
        "topic_admin": ("ensure_topic",),
    },
)
