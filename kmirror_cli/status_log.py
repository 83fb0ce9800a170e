"""`kmirror status --log FILE`: what the driver's log says about one flow (issue 46), pure.

The app writes one structured line per event to stderr (the driver's log): `kmirror progress`,
`kmirror control`, `kmirror data_loss`, `kmirror warning`, ... (JSON with a "flow" field), and plain
`kmirror: ...` / `kmirror run: ...` lines when a query is retried, restarted or the run fails.
`summarize` keeps the flow's newest progress and control records and its last problems.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

PROBLEM_PREFIXES = ("kmirror data_loss ", "kmirror warning ")  # structured: JSON with "flow"
PLAIN_PROBLEMS = ("kmirror: ", "kmirror run: ", "Traceback (most recent call last)")
KEEP_PROBLEMS = 5


def _record(line: str, prefix: str, flow_id: str) -> dict[str, Any] | None:
    if not line.startswith(prefix):
        return None
    try:
        record = json.loads(line[len(prefix) :])
    except ValueError:
        return None
    return record if isinstance(record, dict) and record.get("flow") in (flow_id, None) else None


def summarize(lines: Iterable[str], flow_id: str) -> dict[str, Any]:
    """`{"last_progress": {...}|null, "last_control": {...}|null, "problems": [line, ...]}`: the
    newest `kmirror progress` / `kmirror control` record of `flow_id` and its last `KEEP_PROBLEMS`
    problem lines (structured ones of other flows left out; plain ones name no flow: all kept)."""
    progress = control = None
    problems: list[str] = []
    for raw in lines:
        line = raw.rstrip("\n")
        progress = _record(line, "kmirror progress ", flow_id) or progress
        control = _record(line, "kmirror control ", flow_id) or control
        if any(_record(line, p, flow_id) for p in PROBLEM_PREFIXES) or line.startswith(PLAIN_PROBLEMS):
            problems.append(line)
    return {"last_progress": progress, "last_control": control, "problems": problems[-KEEP_PROBLEMS:]}
