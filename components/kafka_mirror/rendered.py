"""Helpers of the deployment components, which render every manifest inside one output (`out`) so
that any input may be an output: a value at a path of that output, and a child's options."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi


def output_at(out: pulumi.Output[Any], *path: str) -> pulumi.Output[Any]:
    """The value at `path` (keys) inside the rendered `out`."""

    def pick(value: Any) -> Any:
        for key in path:
            value = value[key]
        return value

    return out.apply(pick)


def as_resources(depends_on: Any) -> list[pulumi.Resource]:
    """A component's `depends_on` as a list (a single resource, a list, or nothing)."""
    if depends_on is None:
        return []
    return [depends_on] if isinstance(depends_on, pulumi.Resource) else list(depends_on)


def child_options(
    parent: pulumi.Resource, depends_on: Sequence[pulumi.Resource], extra: Sequence[pulumi.Resource] = ()
) -> pulumi.ResourceOptions:
    """A child of `parent`: the component's own `depends_on` applies to it too (e.g. the Secrets it mounts)."""
    return pulumi.ResourceOptions(parent=parent, depends_on=[*depends_on, *extra])
