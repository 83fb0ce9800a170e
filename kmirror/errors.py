"""One error hierarchy for the whole project.

Every error says what is wrong, the value found and the fix. Validation collects every
problem first and raises them together, each with the path of the offending field.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass

EXIT_INVALID_INPUT = 2
EXIT_RUNTIME_FAILURE = 1


class KmirrorError(Exception):
    """Base class of every error kafka-mirror raises on purpose."""

    exit_code = EXIT_RUNTIME_FAILURE


@dataclass(frozen=True)
class Problem:
    """One validation problem: where it is (`topologies[1].primary`) and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class ValidationError(KmirrorError):
    """Invalid user input (topology file, flow spec, stack config). Exit code 2."""

    exit_code = EXIT_INVALID_INPUT

    def __init__(self, problems: Iterable[Problem], source: str = "") -> None:
        self.problems = sorted(set(problems), key=lambda p: (p.path, p.message))
        self.source = source
        where = f" in {source}" if source else ""
        lines = [f"{len(self.problems)} problem(s){where}:"]
        lines += [f"  - {p}" for p in self.problems]
        super().__init__("\n".join(lines))


class ConnectionFailure(KmirrorError):
    """A cluster could not be reached; the message names its alias and address."""


class DataLossError(KmirrorError):
    """Records the mirror still had to copy are gone from the source (retention, truncation)."""


def did_you_mean(value: str, candidates: Iterable[str]) -> str:
    """Return ` (did you mean 'x'?)` for the closest candidate, or an empty string."""
    close = difflib.get_close_matches(value, list(candidates), n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


class Problems:
    """Collects problems during validation; `raise_if_any` raises them all at once."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.items: list[Problem] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(Problem(path, message))

    def extend(self, problems: Iterable[Problem]) -> None:
        self.items.extend(problems)

    def __bool__(self) -> bool:
        return bool(self.items)

    def raise_if_any(self) -> None:
        if self.items:
            raise ValidationError(self.items, self.source)
