"""What the fuzz tests of the input files share: any JSON value, and a copy of a valid base
document with one value changed or removed at a path."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st


def json_scalars(text_size: int) -> st.SearchStrategy[Any]:
    """Any JSON scalar, strings up to `text_size` long."""
    return st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=text_size)


def json_values(text_size: int) -> st.SearchStrategy[Any]:
    """Any JSON value (what a flow or topology file can hold), strings up to `text_size` long."""
    return st.recursive(
        json_scalars(text_size),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
        max_leaves=8,
    )


def changed(base: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    """A deep copy of `base` with the value at `path` set to `value`."""
    raw = copy.deepcopy(base)
    node: Any = raw
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return raw


def removed(base: dict[str, Any], path: tuple[Any, ...]) -> dict[str, Any]:
    """A deep copy of `base` without the key at `path`."""
    raw = copy.deepcopy(base)
    node: Any = raw
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return raw
