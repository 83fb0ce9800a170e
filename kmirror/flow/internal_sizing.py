"""How big a cluster's internal topics are: `clusters.<alias>.internal_topics` in the topology,
carried by the flow spec as `source/target.internal_topics` (issue 45).

    internal_topics: {replication_factor: 3, min_insync_replicas: 2, partitions: 3}

`replication_factor` -1 (the default) leaves it to the broker's `default.replication.factor`,
as Kafka's own `-1` does; `min_insync_replicas` unset leaves the broker's default;
`partitions` applies to the topics whose readers take every partition (dead-letter topics):
the mirror's own logs (offset syncs, checkpoints, registries, the control topic) are read as one
ordered partition, as MM2 keeps its offset syncs, and stay at one
(`kmirror_engine.planning.internal_names`). Pure: no Kafka client imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kmirror.errors import Problem
from kmirror.option_table import unknown_keys

SIZING_KEYS = ("replication_factor", "min_insync_replicas", "partitions")


@dataclass(frozen=True)
class InternalTopicSizing:
    replication_factor: int = -1  # -1: the broker's default.replication.factor
    min_insync_replicas: int | None = None  # None: the broker's default
    partitions: int | None = None  # None: 1

    @classmethod
    def read(cls, raw: Mapping[str, Any] | None) -> InternalTopicSizing:
        """From a mapping `sizing_problems` accepted (or None: every default)."""
        raw = raw or {}
        return cls(int(raw.get("replication_factor", -1)), raw.get("min_insync_replicas"), raw.get("partitions"))

    def topic_config(self) -> dict[str, str]:
        """Topic-level configs the sizing sets (beside each topic's own layout)."""
        if self.min_insync_replicas is None:
            return {}
        return {"min.insync.replicas": str(self.min_insync_replicas)}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.replication_factor != -1:
            out["replication_factor"] = self.replication_factor
        if self.min_insync_replicas is not None:
            out["min_insync_replicas"] = self.min_insync_replicas
        if self.partitions is not None:
            out["partitions"] = self.partitions
        return out


_ONE_REPLICA = (
    "is 1 on {why}: losing one broker loses the offset syncs and checkpoints failover needs; set it "
    "to 3 (and min_insync_replicas: 2), or -1 for the broker's default.replication.factor"
)


def production_problems(sizings: Mapping[str, InternalTopicSizing], why: str) -> list[Problem]:
    """`kmirror validate --stack`: the clusters (alias -> sizing) a production stack writes
    internal topics to, each with replication factor 1 refused (`why` says what is production)."""
    return [
        Problem(f"clusters.{alias}.internal_topics.replication_factor", _ONE_REPLICA.format(why=why))
        for alias, sizing in sorted(sizings.items())
        if sizing.replication_factor == 1
    ]


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def sizing_problems(raw: Any, path: str, *, production: bool = False) -> list[Problem]:
    """Every problem in a raw `internal_topics` mapping at `path`. On a cluster marked
    production, replication factor 1 is refused: one broker lost loses the offset syncs and
    checkpoints failover needs."""
    if not isinstance(raw, dict):
        return [Problem(path, f"must be a mapping with {', '.join(SIZING_KEYS)}, got {raw!r}")]
    problems = unknown_keys(raw, SIZING_KEYS, path, list_allowed=True)
    rf = raw.get("replication_factor", -1)
    if not _whole(rf) or (rf < 1 and rf != -1):
        problems.append(
            Problem(
                f"{path}.replication_factor",
                f"must be a whole number >= 1, or -1 for the broker's default.replication.factor, got {rf!r}",
            )
        )
    elif rf == 1 and production:
        problems.append(Problem(f"{path}.replication_factor", _ONE_REPLICA.format(why="a cluster marked production")))
    for key in ("min_insync_replicas", "partitions"):
        value = raw.get(key)
        if value is not None and (not _whole(value) or value < 1):
            problems.append(Problem(f"{path}.{key}", f"must be a whole number >= 1, got {value!r}"))
    isr = raw.get("min_insync_replicas")
    if _whole(rf) and rf >= 1 and _whole(isr) and isr > rf:
        problems.append(
            Problem(
                f"{path}.min_insync_replicas",
                f"is {isr}, above replication_factor {rf}: every write would fail (NOT_ENOUGH_REPLICAS); "
                f"set it to at most {rf}",
            )
        )
    return problems
