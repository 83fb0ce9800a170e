"""`kmirror pause|resume --flow ID --topology FILE | --stack NAME | --flow FLOW.json [--reason TEXT]`:
stop and restart a running flow's copying without a redeploy or a Spark restart (issue 46).

Writes the flow's control record on its TARGET cluster (compacted topic
`kmirror-flow-control.internal`, key = flow id, value = `{"state", "by", "at", "reason"}`; see
`kmirror_engine.planning.flow_control`). The driver reads it at its next trigger: paused, it plans
no copy work (heartbeats and checkpoints go on); resumed, it copies from where it stopped.
Exit codes: 0 written, 1 the write failed (the message names the cluster and the fix), 2 bad input.
"""

from __future__ import annotations

import argparse
import datetime
import getpass
from typing import Any

from kmirror_cli.flow_args import add_flow_arguments, load_flow

STATE = {"pause": "paused", "resume": "running"}


def register(subparsers: Any, name: str = "pause") -> None:
    verb = "Pause" if name == "pause" else "Resume"
    parser = subparsers.add_parser(name, help=f"{verb} a running flow's copying (a control record on its target).")
    add_flow_arguments(parser)
    parser.add_argument("--reason", metavar="TEXT", help="why (kept in the control record and the audit line)")
    parser.set_defaults(func=run, control_state=STATE[name])


def user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no login name (a container's numeric uid)
        return "unknown"


def run(args: argparse.Namespace) -> int:
    from kmirror_engine.planning import ControlState, write_state

    spec = load_flow(args)
    at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    state = ControlState(args.control_state, by=user(), at=at, reason=args.reason)
    write_state(spec.id, spec.target, state)
    print(
        f"flow {spec.id}: {state.state} (by {state.by} at {state.at}"
        + (f", reason: {state.reason}" if state.reason else "")
        + f"); control record written on {spec.target.alias}"
    )
    return 0
