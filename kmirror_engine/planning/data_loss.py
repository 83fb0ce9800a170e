"""Data loss a flow tolerates or refuses: the structured stderr line of each loss tolerated
(fail_on_data_loss=false), and which planned topics a describe says were deleted.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from confluent_kafka import KafkaException

from kmirror.errors import ConnectionFailure

DATA_LOSS_PREFIX = "kmirror data_loss "


def report_data_loss(flow_id: str, tp: tuple[str, int], first: int, skipped: int | None, cause: str) -> None:
    """One structured stderr line per tolerated loss (fail_on_data_loss=false). The planner runs
    in a Python worker whose logging is not configured; stderr reaches the driver's log, like
    the progress lines. `skipped` is None when the count is unknown (a rewound partition)."""
    record = {
        "flow": flow_id,
        "topic": tp[0],
        "partition": tp[1],
        "first_lost_offset": first,
        "skipped": skipped,
        "cause": cause,
    }
    print(DATA_LOSS_PREFIX + json.dumps(record), file=sys.stderr, flush=True)


def unknown_topics(admin: Any, topics: Sequence[str], where: str) -> set[str]:
    """The `topics` a describe on `admin` answers with UNKNOWN_TOPIC_OR_PART (deleted);
    ConnectionFailure for any other error, TOPIC_AUTHORIZATION_FAILED included. `where` names the
    cluster in those errors. (The planner's check of planned topics missing from a listing, and
    a copy task's check of a source topic that failed under it: `copying.deleted_sources`.)"""
    from concurrent.futures import TimeoutError as FutureTimeout

    from confluent_kafka import KafkaError, TopicCollection

    gone: set[str] = set()
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=10.0)
    for topic, future in futures.items():
        try:
            future.result(timeout=10.0)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                gone.add(topic)
                continue
            denied = error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
            hint = " (grant Describe and Read on it, or deselect it)" if denied else ""
            raise ConnectionFailure(
                f"{where}: cannot tell whether planned topic {topic} was deleted: {error.str()}{hint}; "
                "its planned offsets are kept"
            ) from None
        except FutureTimeout:
            raise ConnectionFailure(f"{where}: describing planned topic {topic} got no answer") from None
    return gone
