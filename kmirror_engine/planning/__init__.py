"""What a batch copies: discovery, offset queries, ranges, target/created/internal topics, config and ACL sync."""

from typing import TYPE_CHECKING

from kmirror_engine.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the public surface for the Spark glue and the CLI (`as`: re-exported), loaded lazily below
    from kmirror_engine.planning.discovery import TopicDiscovery as TopicDiscovery
    from kmirror_engine.planning.flow_control import ControlState as ControlState
    from kmirror_engine.planning.flow_control import newest_record as newest_record
    from kmirror_engine.planning.flow_control import write_state as write_state
    from kmirror_engine.planning.internal_names import control_topic as control_topic
    from kmirror_engine.planning.internal_names import run_token as run_token
    from kmirror_engine.planning.internal_topics import InternalTopicAccess as InternalTopicAccess
    from kmirror_engine.planning.internal_topics import mirror_acls as mirror_acls
    from kmirror_engine.planning.internal_topics import principal_hint as principal_hint
    from kmirror_engine.planning.range_planner import RangePlanner as RangePlanner
    from kmirror_engine.planning.ranges import RANGE_SCHEMA as RANGE_SCHEMA
    from kmirror_engine.planning.ranges import OffsetRange as OffsetRange
    from kmirror_engine.planning.ranges import Offsets as Offsets
    from kmirror_engine.planning.ranges import offsets_from_json as offsets_from_json
    from kmirror_engine.planning.ranges import offsets_to_json as offsets_to_json
    from kmirror_engine.planning.ranges import plan_tasks as plan_tasks

__getattr__, __all__ = lazy_exports(
    __name__,
    {
        "discovery": ("TopicDiscovery",),
        "flow_control": ("ControlState", "newest_record", "write_state"),
        "internal_names": ("control_topic", "run_token"),
        "internal_topics": ("InternalTopicAccess", "mirror_acls", "principal_hint"),
        "range_planner": ("RangePlanner",),
        "ranges": ("RANGE_SCHEMA", "OffsetRange", "Offsets", "offsets_from_json", "offsets_to_json", "plan_tasks"),
    },
)
