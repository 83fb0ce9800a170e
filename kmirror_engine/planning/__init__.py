"""What a batch copies: discovery, offset queries, ranges, target/created/internal topics, config and ACL sync.

The public surface for the Spark glue and the CLI: `__all__`, loaded lazily (kmirror_engine/lazy_exports.py).
"""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from kmirror_engine.planning.discovery import TopicDiscovery
    from kmirror_engine.planning.flow_control import (
        ControlState,
        newest_record,
        write_state,
    )
    from kmirror_engine.planning.internal_names import control_topic, run_token
    from kmirror_engine.planning.internal_topics import (
        InternalTopicAccess,
        mirror_acls,
        principal_hint,
    )
    from kmirror_engine.planning.range_planner import RangePlanner
    from kmirror_engine.planning.ranges import (
        RANGE_SCHEMA,
        OffsetRange,
        Offsets,
        offsets_from_json,
        offsets_to_json,
        plan_tasks,
    )

__all__ = [
    "RANGE_SCHEMA",
    "ControlState",
    "InternalTopicAccess",
    "OffsetRange",
    "Offsets",
    "RangePlanner",
    "TopicDiscovery",
    "control_topic",
    "mirror_acls",
    "newest_record",
    "offsets_from_json",
    "offsets_to_json",
    "plan_tasks",
    "principal_hint",
    "run_token",
    "write_state",
]

__getattr__ = lazy_exports(
    __name__,
    {
        "discovery": ("TopicDiscovery",),
        "flow_control": (
            "ControlState",
            "newest_record",
            "write_state",
        ),
        "internal_names": (
            "control_topic",
            "run_token",
        ),
        "internal_topics": (
            "InternalTopicAccess",
            "mirror_acls",
            "principal_hint",
        ),
        "range_planner": ("RangePlanner",),
        "ranges": (
            "RANGE_SCHEMA",
            "OffsetRange",
            "Offsets",
            "offsets_from_json",
            "offsets_to_json",
            "plan_tasks",
        ),
    },
)
