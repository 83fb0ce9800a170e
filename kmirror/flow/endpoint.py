"""A cluster a flow talks to (`source` or `target` of a flow spec); `kmirror.flow.spec` parses
it and re-exports it. Its own module so the views of a spec (`kmirror.flow.views`) can name it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kmirror.flow.internal_sizing import InternalTopicSizing


@dataclass(frozen=True)
class ClusterEndpoint:
    alias: str
    bootstrap_servers: str
    config: dict[str, Any] = field(default_factory=dict)
    internal_topics: InternalTopicSizing = field(default_factory=InternalTopicSizing)  # sizes the mirror's own topics

    def client_config(self) -> dict[str, Any]:
        """librdkafka properties for a client of this cluster."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.config}
