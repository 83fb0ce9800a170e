"""The order in which `pulumi up` runs the stacks for a topology change (no pulumi import).

A flow that moves between datacenters must stop in the stack that loses it before it starts in
the stack that gains it, or two apps write the same flow at once (two writers, two checkpoints).
`stack_order` turns the moves of a `kmirror diff` into that order: for every move, the losing
stack comes before the gaining one; otherwise stacks that lose flows come first, then by name.
Moves in opposite directions between the same stacks cannot be ordered: they are refused, with
the fix (split the change in two pull requests, one direction each).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from kmirror.errors import KmirrorError
from kmirror.estate.diff import PlanDiff


class StackOrderError(KmirrorError):
    """Moves that no stack order can perform without two writers."""


def stack_order(diff: PlanDiff, stacks: Iterable[str], datacenter_stacks: Mapping[str, str]) -> list[str]:
    """Every stack of `stacks`, ordered so each moved flow's old stack precedes its new one.

    `datacenter_stacks` maps a datacenter to the stack that deploys it (datacenters without a
    stack, e.g. on-premises ones, impose no order). Raises StackOrderError for a cycle."""
    names = sorted(set(stacks))
    after: dict[str, set[str]] = {s: set() for s in names}  # stack -> stacks that must wait for it
    losing: set[str] = set()
    moves: list[str] = []
    for dc_diff in diff.datacenters.values():
        for move in dc_diff.moved:
            old, new = datacenter_stacks.get(move.from_dc), datacenter_stacks.get(move.to_dc)
            moves.append(f"{move.id}: {move.from_dc} -> {move.to_dc}")
            if old in after and new in after and old != new:
                after[old].add(new)
            if old in after:
                losing.add(old)
    for dc, dc_diff in diff.datacenters.items():
        if dc_diff.removed and datacenter_stacks.get(dc) in after:
            losing.add(datacenter_stacks[dc])
    waiting = {s: sum(s in later for later in after.values()) for s in names}
    order: list[str] = []
    ready = [s for s in names if waiting[s] == 0]
    while ready:
        ready.sort(key=lambda s: (s not in losing, s))
        stack = ready.pop(0)
        order.append(stack)
        for later in sorted(after[stack]):
            waiting[later] -= 1
            if waiting[later] == 0:
                ready.append(later)
    if len(order) != len(names):
        stuck = ", ".join(s for s in names if s not in order)
        raise StackOrderError(
            f"flows move in both directions between stacks {stuck} ({'; '.join(sorted(moves))}): no order of "
            "`pulumi up` stops every moved flow before it starts elsewhere; split the change into one pull "
            "request per direction"
        )
    return order
