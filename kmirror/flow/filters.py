"""Topic and group selection with MirrorMaker's meaning.

Each pattern is a regular expression matched against the whole name; a comma inside one
string means "or" (MirrorMaker's whitelist convenience); excludes always win over includes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kmirror.errors import Problem
from kmirror.flow.replication_policy import ReplicationPolicy, is_cycle, is_heartbeats_topic, is_internal_topic


def split_patterns(patterns: Iterable[str]) -> list[str]:
    """Flatten `["a,b", "c"]` into `["a", "b", "c"]`, dropping blanks."""
    out: list[str] = []
    for item in patterns:
        out.extend(p.strip() for p in str(item).split(",") if p.strip())
    return out


def pattern_problems(patterns: object, path: str) -> list[Problem]:
    """Problems with a list of regexes: not a list, or a pattern that does not compile."""
    if isinstance(patterns, str) or not isinstance(patterns, list):
        return [Problem(path, f"must be a list of regular expressions, got {patterns!r}")]
    problems = []
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str):
            problems.append(Problem(f"{path}[{index}]", f"must be a string, got {pattern!r}"))
            continue
        for part in split_patterns([pattern]):
            try:
                re.compile(part)
            except re.error as exc:
                problems.append(Problem(f"{path}[{index}]", f"invalid regular expression {part!r}: {exc}"))
    return problems


def _compile(patterns: Sequence[str]) -> re.Pattern[str] | None:
    parts = split_patterns(patterns)
    if not parts:
        return None
    return re.compile("|".join(f"(?:{p})" for p in parts))


@dataclass(frozen=True)
class NameSelection:
    """Include/exclude regexes over names (topics or consumer groups)."""

    include: tuple[str, ...] = (".*",)
    exclude: tuple[str, ...] = ()
    heartbeats: bool = True  # topics only: heartbeats topics are mirrored whatever the patterns say (MM2)
    _include_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _exclude_re: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_include_re", _compile(self.include))
        object.__setattr__(self, "_exclude_re", _compile(self.exclude))

    def matches(self, name: str) -> bool:
        if self._include_re is None or not self._include_re.fullmatch(name):
            return False
        return not (self._exclude_re is not None and self._exclude_re.fullmatch(name))


TopicSelection = NameSelection
GroupSelection = NameSelection


def should_replicate_topic(selection: NameSelection, policy: ReplicationPolicy, topic: str, target_alias: str) -> bool:
    """MM2's rule: selected (or a heartbeats topic, unless `heartbeats_replication_enabled` is off),
    not internal, and not a cycle back to the target."""
    wanted = selection.matches(topic) or (selection.heartbeats and is_heartbeats_topic(policy, topic))
    return wanted and not is_internal_topic(topic) and not is_cycle(policy, topic, target_alias)
