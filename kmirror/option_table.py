"""Declarative option tables: the one place that says which keys a mapping may hold and what each may be.

An `OptionTable` is a set of named `Option(name, default, doc, check, nested)`. `table.problems(raw,
path)` reports every key the table does not know (`unknown_keys`: "unknown key (did you mean 'x'?)")
and every bad value (`check` gives the message; `nested` adds the problems deeper inside a value
the check accepted), each a `Problem` naming the key path, the value found and the fix.

The flow spec (`kmirror.flow.spec.OPTIONS`), the topology settings and their `spark` block
(`kmirror.flow.settings`) are tables; the topology file, the security model, the replication policy,
secret references and stack secrets report unknown keys with `unknown_keys`; the pydantic stack
models (`kmirror.stack.models`) word their unknown-key and bound errors with `unknown_key_message`
and `bound_message` (`kmirror.stack.config`). No other module writes an unknown-key message
(tests/test_option_table.py checks). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kmirror.errors import Problem, did_you_mean

Check = Callable[[Any], str | None]  # the message (without the path) for a bad value, None when it is fine
Nested = Callable[[Any, str], list[Problem]]  # the problems inside a value its check accepted, at its path


def key_path(path: str, key: object) -> str:
    """`path.key`, or just `key` at the top level (empty `path`)."""
    return f"{path}.{key}" if path else str(key)


def unknown_key_message(
    key: object,
    allowed: Iterable[object],
    *,
    list_allowed: bool = False,
    also_suggest: Iterable[str] = (),
    what: str = "key",
    hint: str = "",
) -> str:
    """`unknown key (did you mean 'x'?)`, then `; allowed: a, b` (sorted) with `list_allowed`, then `; hint`.

    `also_suggest`: further names a typo may be close to (aliases) that are not listed as allowed;
    `what` replaces "key" (e.g. "key for a file reference")."""
    names = [str(name) for name in allowed]
    message = f"unknown {what}{did_you_mean(str(key), [*names, *also_suggest])}"
    if list_allowed:
        message += f"; allowed: {', '.join(sorted(names))}"
    return f"{message}; {hint}" if hint else message


def unknown_keys(
    raw: Iterable[Any],
    allowed: Iterable[Any],
    path: str,
    *,
    list_allowed: bool = False,
    also_suggest: Iterable[str] = (),
    what: str = "key",
    hint: str = "",
) -> list[Problem]:
    """One problem per key of `raw` not in `allowed`, sorted, at `path.key` (see `unknown_key_message`)."""
    allowed = list(allowed)
    also_suggest = list(also_suggest)
    return [
        Problem(
            key_path(path, key),
            unknown_key_message(
                key, allowed, list_allowed=list_allowed, also_suggest=also_suggest, what=what, hint=hint
            ),
        )
        for key in sorted(set(raw) - set(allowed), key=str)
    ]


# Shared checks: each returns the message for a bad value, or None.


def is_int(value: Any) -> bool:
    """A whole number that is not a bool (YAML/JSON `true` is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def bound_message(bound: str, value: Any) -> str:
    """The one wording of a bound a whole number broke (`bound` e.g. `>= 1`)."""
    return f"must be an integer {bound}, got {value!r}"


def int_at_least(minimum: int) -> Check:
    def check(value: Any) -> str | None:
        return None if is_int(value) and value >= minimum else bound_message(f">= {minimum}", value)

    return check


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)


def optional(check: Check) -> Check:
    """`check`, with null (None) also accepted."""
    return lambda value: None if value is None else check(value)


def boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else f"must be true or false, got {value!r}"


def one_of(*choices: str) -> Check:
    return lambda value: None if value in choices else f"must be one of {', '.join(choices)}, got {value!r}"


def optional_str(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else f"must be a string, got {value!r}"


def anything(value: Any) -> str | None:
    return None


@dataclass(frozen=True)
class Option:
    """One key of a table: its default, its doc (the user-facing reference) and how it is checked."""

    name: str
    default: Any
    doc: str
    check: Check = anything
    nested: Nested | None = None

    def problems(self, value: Any, path: str) -> list[Problem]:
        """The problems of `value` found at `path` (the key's full path)."""
        if (message := self.check(value)) is not None:
            return [Problem(path, message)]
        return self.nested(value, path) if self.nested is not None else []


class OptionTable(Mapping[str, Option]):
    """Options by name, in declaration order; a name is declared once."""

    def __init__(self, *options: Option) -> None:
        self._options: dict[str, Option] = {}
        for option in options:
            if option.name in self._options:
                raise ValueError(f"option {option.name!r} declared twice")
            self._options[option.name] = option

    def __getitem__(self, name: str) -> Option:
        return self._options[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._options)

    def __len__(self) -> int:
        return len(self._options)

    def __repr__(self) -> str:
        return f"OptionTable({', '.join(self._options)})"

    def value_problems(self, raw: Mapping[Any, Any], path: str) -> list[Problem]:
        """The problems of every value of `raw` this table declares (unknown keys are not looked at)."""
        problems: list[Problem] = []
        for name, option in self._options.items():
            if name in raw:
                problems += option.problems(raw[name], key_path(path, name))
        return problems

    def problems(
        self,
        raw: Mapping[Any, Any],
        path: str,
        *,
        extra_keys: Iterable[str] = (),
        list_allowed: bool = False,
        also_suggest: Iterable[str] = (),
        hint: str = "",
    ) -> list[Problem]:
        """Every unknown key of `raw` (`extra_keys` are allowed too, unchecked) and every bad value."""
        allowed = [*self._options, *extra_keys]
        unknown = unknown_keys(raw, allowed, path, list_allowed=list_allowed, also_suggest=also_suggest, hint=hint)
        return unknown + self.value_problems(raw, path)
