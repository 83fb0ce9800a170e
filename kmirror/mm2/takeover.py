"""Taking over from a stopped MirrorMaker 2: where each source partition resumes (pure, no client).

MM2 in dedicated mode keeps MirrorSourceConnector's committed source offsets in Kafka Connect's
offsets topic on the target cluster (`mm2-offsets.<source alias>.internal`), one JSON record per
source partition (Connect's JsonConverter, schemas off):

    key   ["MirrorSourceConnector",{"cluster":"A","partition":0,"topic":"orders"}]
    value {"offset":299}     the last source offset MM2 copied (MirrorSourceTask seeks to 300)
          null               a tombstone: the partition's offset was deleted

`decode_source_offset` reads one record; `plan_takeover` decides, per mirrored partition:
- MM2 committed offset N: resume at N + 1 (records MM2 copied after its last commit are copied
  again: at most what it had not committed);
- else MM2's newest offset sync (upstream U was written on the target): resume at U + 1;
- else, when the partition's remote topic holds no record (MM2 never copied it): its log start;
- else a problem: resuming from the start would copy the remote partition's records again.
Each resumed partition also gets a `TakeoverPoint`: the source offset it resumes at and the
target offset its first copy lands at (the remote partition's end), kafka-mirror's first offset
sync, so groups failed over after the takeover translate exactly across it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kmirror.errors import Problem
from kmirror.mm2.formats import FormatError

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True)
class Mm2SourceOffset:
    """One Connect offsets record of MM2's source connector; `offset` None is a tombstone."""

    connector: str
    cluster: str  # MM2's alias of the SOURCE cluster
    topic: str  # the source topic
    partition: int
    offset: int | None  # the last source offset MM2 copied


@dataclass(frozen=True)
class TakeoverPoint:
    """Source offset `resume_offset` of `topic[partition]` is copied to `target_offset` of its
    remote partition: the first offset sync kafka-mirror writes at the takeover."""

    topic: str
    partition: int
    resume_offset: int
    target_offset: int
    found_in: str  # "committed offsets" or "offset syncs": which MM2 record placed it


@dataclass(frozen=True)
class TakeoverPlan:
    resume: dict[TopicPartitionKey, int]  # where every mirrored partition starts
    points: tuple[TakeoverPoint, ...]  # the partitions MM2 had copied, where kafka-mirror continues
    problems: tuple[Problem, ...]  # partitions that cannot be resumed safely (nothing is copied then)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def decode_source_offset(key: bytes | None, value: bytes | None) -> Mm2SourceOffset | None:
    """One record of a Connect offsets topic; None when it belongs to another kind of connector
    (MM2's checkpoint and heartbeat connectors share the topic, with other partition keys).
    Raises FormatError naming the bytes when a source-connector record is malformed: an offset
    misread would resume at the wrong place."""
    try:
        parsed_key = json.loads(key or b"null")
    except ValueError:
        return None  # not a Connect JSON key: some other writer's record
    if not (isinstance(parsed_key, list) and len(parsed_key) == 2 and isinstance(parsed_key[1], dict)):
        return None
    connector, partition = parsed_key
    if not isinstance(connector, str) or set(partition) != {"cluster", "partition", "topic"}:
        return None
    cluster, topic, number = partition["cluster"], partition["topic"], partition["partition"]
    if not (isinstance(cluster, str) and isinstance(topic, str) and _is_int(number)):
        raise FormatError(
            f"Connect offsets key {key!r}: cluster and topic must be strings and partition an "
            "integer, as MM2's MirrorSourceTask writes them"
        )
    if value is None:
        return Mm2SourceOffset(connector, cluster, topic, number, None)
    try:
        parsed_value = json.loads(value)
    except ValueError:
        raise FormatError(f"Connect offsets value {value!r} of {topic}[{number}] is not JSON") from None
    if not isinstance(parsed_value, dict) or not _is_int(parsed_value.get("offset")):
        raise FormatError(f'Connect offsets value {value!r} of {topic}[{number}]: expected {{"offset": <integer>}}')
    return Mm2SourceOffset(connector, cluster, topic, number, parsed_value["offset"])


def committed_offsets(
    records: Iterable[Mm2SourceOffset], connector: str, source_alias: str
) -> dict[TopicPartitionKey, int]:
    """The last source offset MM2 copied per partition, from offsets records in log order (a
    later record replaces an earlier one; a tombstone deletes it)."""
    out: dict[TopicPartitionKey, int] = {}
    for record in records:
        if record.connector != connector or record.cluster != source_alias:
            continue
        key = (record.topic, record.partition)
        if record.offset is None:
            out.pop(key, None)
        else:
            out[key] = record.offset
    return out


def alias_problems(records: Iterable[Mm2SourceOffset], connector: str, source_alias: str, path: str) -> list[Problem]:
    """MM2 named the source cluster differently: its remote topics carry that alias, so the flow
    would write other topics. One problem naming the aliases found and the fix."""
    records = [r for r in records if r.connector == connector]
    aliases = sorted({r.cluster for r in records})
    if not records or source_alias in aliases:
        return []
    return [
        Problem(
            path,
            f"MM2's committed offsets name source cluster(s) {', '.join(map(repr, aliases))}, not "
            f"the flow's source alias {source_alias!r}: MM2's remote topics carry its alias, so name the "
            "flow's source cluster as MM2 did for the same remote topics to continue",
        )
    ]


def plan_takeover(
    partitions: Iterable[TopicPartitionKey],
    committed: Mapping[TopicPartitionKey, int],
    synced: Mapping[TopicPartitionKey, int],
    source_bounds: Mapping[TopicPartitionKey, tuple[int, int]],
    remote_ends: Mapping[TopicPartitionKey, int],
    remote_topic: Callable[[str], str],
    path: str,
) -> TakeoverPlan:
    """Where each of `partitions` resumes (see the module doc).

    `committed`/`synced`: MM2's last copied source offset per partition from its committed
    offsets / its newest offset sync; `source_bounds`: each source partition's (log start, end);
    `remote_ends`: the end offset of each partition's remote partition on the target (missing:
    no such partition); `remote_topic`: the flow's remote topic name of a source topic."""
    resume: dict[TopicPartitionKey, int] = {}
    points: list[TakeoverPoint] = []
    problems: list[Problem] = []
    for tp in sorted(set(partitions)):
        topic, partition = tp
        start, end = source_bounds[tp]
        remote = f"{remote_topic(topic)}[{partition}]"
        remote_end = remote_ends.get(tp, 0)
        copied, found_in = (committed[tp], "committed offsets") if tp in committed else (synced.get(tp), "offset syncs")
        if copied is None:
            if remote_end > 0:
                problems.append(
                    Problem(
                        path,
                        f"{topic}[{partition}]: remote partition {remote} holds records "
                        f"(end offset {remote_end}) but neither MM2's committed offsets nor its "
                        "offset syncs name a source offset for it; resuming from the start would "
                        "copy them again. Check offsets_topic and offset_syncs_topic, or choose "
                        "another starting_offsets knowingly",
                    )
                )
            else:
                resume[tp] = start  # MM2 never copied this partition: nothing can be copied twice
            continue
        if remote_end == 0:
            problems.append(
                Problem(
                    path,
                    f"{topic}[{partition}]: MM2's {found_in} say it copied up to offset "
                    f"{copied}, but remote partition {remote} holds no record: the flow's "
                    "replication_policy must name remote topics as MM2 did (MM2's default: "
                    "'<source alias>.<topic>')",
                )
            )
            continue
        if copied + 1 > end:
            problems.append(
                Problem(
                    path,
                    f"{topic}[{partition}]: MM2's {found_in} say it copied up to offset "
                    f"{copied}, past the partition's end offset {end}: the source topic was "
                    "recreated since MM2 ran; choose another starting_offsets knowingly",
                )
            )
            continue
        resume[tp] = copied + 1
        points.append(TakeoverPoint(topic, partition, copied + 1, remote_end, found_in))
    return TakeoverPlan(resume, tuple(points), tuple(problems))
