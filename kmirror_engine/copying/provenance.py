"""Provenance headers (flow option `provenance_headers`, issue 46): identical topic names in both
directions without loops.

With the identity policy a mirrored topic keeps its name, so a record copied a->b could be
copied b->a again and circle forever (MirrorMaker 2 cannot run identity active/active at all).
With `provenance_headers` on, the record loop stamps each record it copies with one header,
`kmirror.provenance`, holding the alias of the cluster the record was first produced on
(its origin), and never copies a record whose origin is the flow's target:

- a record without the header was produced on the flow's source: it is stamped with the
  source's alias (appended after the user's headers, which are kept as they are, in order);
- a record with the header came from another mirror: the header is kept as it is (the origin
  is where it was first produced, however many hops ago), and the record is copied unless its
  origin is the target, in which case it is counted (`returned_home`) and not copied.

Only the record loops can add a header (the Python loop; the native loop copies headers as
they are and the batch path copies record batches untouched), so a flow with the option is
copied by the Python loop (`kmirror.flow.spec.COPY_LOOP_CANNOT_SERVE`). Pure: no client, no Spark.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

PROVENANCE_HEADER = "kmirror.provenance"
# The flow-spec option (kmirror.flow.spec.OPTIONS) turning the stamping and filtering on.
PROVENANCE_OPTION = "provenance_headers"

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Provenance:
    """The stamping and filtering of one flow: records copied `source` -> `target` (aliases)."""

    source: str
    target: str
    # the aliases as header values, encoded once (the loop compares them per record)
    source_value: bytes = field(init=False, repr=False)
    target_value: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "source_value", self.source.encode())
        object.__setattr__(self, "target_value", self.target.encode())

    def stamp(self, headers: Sequence[tuple[str, Any]] | None) -> Headers | None:
        """The headers to produce the record with, or None when its origin is the target (the
        record must not be copied). The user's headers are returned unchanged and in order; the
        provenance header is appended only when the record has none."""
        if not headers:
            return [(PROVENANCE_HEADER, self.source_value)]
        for name, value in headers:
            if name == PROVENANCE_HEADER:
                return None if value == self.target_value else list(headers)
        return [*headers, (PROVENANCE_HEADER, self.source_value)]


def origin_of(headers: Sequence[tuple[str, Any]] | None) -> str | None:
    """The origin alias a record's provenance header names (None: the record carries none)."""
    for name, value in headers or ():
        if name == PROVENANCE_HEADER:
            return bytes(value or b"").decode()
    return None


def provenance_for(options: Mapping[str, Any], source: str, target: str) -> Provenance | None:
    """The flow's `Provenance` when its `provenance_headers` option is on, else None."""
    return Provenance(source, target) if options.get(PROVENANCE_OPTION) else None
