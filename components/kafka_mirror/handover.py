"""Cross-stack safety for a flow moved between datacenters ("never two writers" across stacks).

A flow whose `run_in` moves from datacenter A to B must stop in A's stack before it starts in B's.
CI ordering alone does not guarantee it (a re-run, a manual `up`, a failed A), so the gaining
stack checks: stack config `kafka-mirror:peer_stacks` lists the other stacks of the estate (as
`pulumi stack` names them: `org/project/stack`, or `stack` in the same project), the program
reads each one's `flows` output through a Pulumi StackReference, and refuses to deploy a flow
another stack still runs. The apps of this stack depend on that check (`guard`), so a refused
flow gets nothing here; the fix named in the error is to deploy the losing stack first.

A peer stack must exist (its first `up` done) before it is listed: a StackReference to a stack
that does not exist fails the `up` (docs/deploy.md, "Moving a flow between datacenters").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pulumi

from kmirror.errors import Problem, ValidationError
from kmirror.stack.config import NS

PEER_STACKS_KEY = "peer_stacks"


def parse_peer_stacks(raw: Any, own: str) -> tuple[str, ...]:
    """The configured peer stacks (`kafka-mirror:peer_stacks`, a list of stack names; none when
    unset). Raises ValidationError naming the key, the value and the fix."""
    if raw is None:
        return ()
    path = f"{NS}:{PEER_STACKS_KEY}"
    if not isinstance(raw, list) or not all(isinstance(s, str) and s for s in raw):
        fix = "a list of stack names, e.g. [acme/kafka-mirror/west, acme/kafka-mirror/east]"
        raise ValidationError([Problem(path, f"must be {fix}, got {raw!r}")])
    mine = [s for s in raw if s.rsplit("/", 1)[-1] == own]
    if mine:
        raise ValidationError([Problem(path, f"lists this stack itself ({mine[0]!r}); list only the other stacks")])
    return tuple(dict.fromkeys(raw))


def still_running(ours: Iterable[str], peers: Mapping[str, Sequence[str] | None]) -> list[Problem]:
    """One problem per flow of `ours` that a peer stack's `flows` output still lists (a peer
    without that output, e.g. never deployed with it, runs nothing we know of)."""
    problems = []
    for flow in ours:
        for stack, flows in sorted(peers.items()):
            if flow in (flows or ()):
                problems.append(
                    Problem(
                        f"flow {flow}",
                        f"stack {stack} still runs this flow (its `flows` output lists it): two stacks "
                        f"must never mirror one flow at once; deploy {stack} first (its `pulumi up` "
                        "removes the flow there), then this stack",
                    )
                )
    return problems


def guard(peer_stacks: Sequence[str], ours: Sequence[str]) -> pulumi.Output[None] | None:
    """An Output that resolves once no peer stack runs any of `ours`, and fails the deployment
    (ValidationError from `still_running`) while one does. None without peers or flows."""
    if not peer_stacks or not ours:
        return None
    outputs = {name: pulumi.StackReference(name).get_output("flows") for name in peer_stacks}

    def check(found: Mapping[str, Any]) -> None:
        problems = still_running(ours, {k: list(v) if isinstance(v, list) else None for k, v in found.items()})
        if problems:
            raise ValidationError(problems, f"stack {pulumi.get_stack()}")

    return pulumi.Output.all(**outputs).apply(check)
