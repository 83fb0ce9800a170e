"""The read-only Lambda handler that tells a preview or an `up` whether a flow's EMR step died (drift).

`aws.lambda_.Invocation` (the flow's step, `step_lambda.py`) has no Read: its state keeps the step
it added whatever became of it. So every program run (preview, `up`, the nightly `pulumi preview
--refresh --expect-no-changes`) invokes this function through the `aws.lambda_.getInvocation` data
source (`kafka_mirror.emr.step_drift`) and puts its `drift` token into the Invocation's `triggers`:
a step that died since the last `up` changes the token, the preview shows the change, and the next
`up` updates the Invocation, whose function re-adds a step that is no longer live.

The token is the newest step of the flow's name that ended on its own (FAILED, COMPLETED,
INTERRUPTED: Pulumi only ever cancels), "<id> <state>", or `none`. It does not change when the
step is re-added or replaced by Pulumi, so a repaired flow shows no diff afterwards. A step
CANCELLED outside Pulumi counts too while no step of the name is live (Pulumi never leaves a flow
without one): after its repair the token falls back, which shows one more update (a no-op: the
function keeps the live step).

The YARN application (this function runs outside the cluster's network): a step runs
spark-submit with `spark.yarn.submit.waitAppCompletion=true` under its wrapper, so an application
that finished, failed or was killed ends its step; a RUNNING step therefore means an application
in a non-final YARN state (RUNNING, or ACCEPTED between driver attempts), which is all it reports.

Standard library and boto3 only (the Lambda runtime's), like `step_lambda.py`; the role may only
list the cluster's steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

LIVE = ("PENDING", "RUNNING", "CANCEL_PENDING")
ENDED_ON_ITS_OWN = ("FAILED", "COMPLETED", "INTERRUPTED")
ALL_STATES = (*LIVE, "CANCELLED", *ENDED_ON_ITS_OWN)
NO_DRIFT = "none"
YARN_LIVE = "not final (RUNNING, or ACCEPTED between attempts): its step's spark-submit waits for it"
YARN_WAITING = "not submitted yet: its step is PENDING"
YARN_ENDED = "ended with its step"


def _state(step: Mapping[str, Any]) -> str:
    return str(step["Status"]["State"])


def _newest_first(steps: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """ListSteps' order is newest first; by creation time where every step has one (moto's order differs)."""
    times = [((s.get("Status") or {}).get("Timeline") or {}).get("CreationDateTime") for s in steps]
    if all(t is not None for t in times):
        order = sorted(range(len(steps)), key=lambda i: times[i], reverse=True)  # type: ignore[arg-type,return-value]
        return [steps[i] for i in order]
    return list(steps)


def read_steps(steps: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """What the preview sees of one flow from its steps (ListSteps entries of its name, any order):
    `step_id`/`state` (the live step, else the newest), `yarn_application` and the `drift` token."""
    ordered = _newest_first(steps)
    live = [s for s in ordered if _state(s) in LIVE]
    ended = [s for s in ordered if _state(s) in ENDED_ON_ITS_OWN]
    drift = f"{ended[0]['Id']} {_state(ended[0])}" if ended else NO_DRIFT
    if not live and ordered and _state(ordered[0]) == "CANCELLED":
        drift = f"{ordered[0]['Id']} CANCELLED"  # outside Pulumi: its own cancels are always followed by a step
    shown = live[0] if live else (ordered[0] if ordered else None)
    state = _state(shown) if shown else "MISSING"
    yarn = YARN_LIVE if state in ("RUNNING", "CANCEL_PENDING") else YARN_WAITING if state == "PENDING" else YARN_ENDED
    return {"step_id": shown["Id"] if shown else None, "state": state, "yarn_application": yarn, "drift": drift}


IAM_PROPAGATION_S = 40  # the role's policy may be minutes old on a first `up`: AccessDenied is retried (timeout 60)
IAM_RETRY_DELAY_S = 5


def _error_code(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    return str(((response or {}).get("Error") or {}).get("Code") or "") if isinstance(response, dict) else ""


def read_flow(
    emr_for: Callable[[str], Any],
    event: Mapping[str, Any],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """`read_steps` of the steps named `event["name"]` on `event["cluster_id"]` (every page). On the first
    `up` the role's policy was just made: AccessDenied is retried for IAM_PROPAGATION_S, then raised."""
    for key in ("cluster_id", "name", "region"):
        if not isinstance(event.get(key), str) or not event[key]:
            raise ValueError(
                f"input.{key}: expected a non-empty string, got {event.get(key)!r}; pass the flow's step input "
                "(kafka_mirror.emr.step_drift)"
            )
    deadline = clock() + IAM_PROPAGATION_S
    while True:
        try:
            pages = emr_for(event["region"]).get_paginator("list_steps")
            found = pages.paginate(ClusterId=event["cluster_id"], StepStates=list(ALL_STATES))
            steps = [s for page in found for s in page.get("Steps", []) if s.get("Name") == event["name"]]
            return read_steps(steps)
        except Exception as exc:
            if _error_code(exc) not in ("AccessDeniedException", "AccessDenied") or clock() >= deadline:
                raise
        sleep(IAM_RETRY_DELAY_S)


def handler(event: Mapping[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda entry point (`step_reader.handler`)."""
    import boto3  # the Lambda runtime's
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": 10}, connect_timeout=10, read_timeout=30)
    return read_flow(lambda region: boto3.client("emr", region_name=region, config=config), event)
