"""`kmirror status --flow ID --topology FILE | --stack NAME | --flow FLOW.json [--format json]
[--stale-after S] [--log FILE] [--metrics URL]`, or `kmirror status --topology FILE | --stack NAME`
(every flow): is a flow running, and how far behind is it (issue 46), from the clusters alone.

- running: the newest heartbeat (source -> target) on the target's `heartbeats` topic is at most
  `--stale-after` seconds old (default 60); null (unknown) when the flow emits no heartbeats;
- last_copy_age_ms: age of the newest offset sync on the target (written by every batch that
  copied records; null: none yet);
- newest_checkpoint_age_ms: age of the newest checkpoint for the source's groups (null: none);
- lag: per source topic, the sum over partitions of `kmirror lag`'s Lag; lag_total;
- log (with `--log FILE`, the driver's log): its newest progress and control records of the flow
  and its last problem lines (`kmirror_cli.status_log`);
- paused / control: the flow's newest control record (`kmirror pause|resume`) on the target:
  `{"state", "by", "at", "reason"}`, null when the flow was never paused or resumed.

JSON (stdout): `{"flow", "running", "heartbeat_age_ms", "last_copy_age_ms",
"newest_checkpoint_age_ms", "lag": {topic: n}, "lag_total", "paused", "control"}`, plus
`"log": {"last_progress", "last_control", "problems"}` with `--log`. Text: one line per field.
Exit codes: 0 running, 1 not running (no heartbeat, or a stale one), 3 unknown (heartbeats off),
4 paused (whatever the heartbeats say: `running` still tells whether its driver is alive),
2 bad input.

`--metrics URL` (one flow; its driver's Prometheus endpoint): adds `"metrics"`, the flow's error
counters (`kmirror_cli.status_metrics`); the exit code does not depend on them.

Several flows: `--topology FILE` or `--stack NAME` without `--flow` reports every flow of the
topology (with `--stack`, those that run in its datacenter), in plan order. JSON: a list of the
per-flow objects; a flow whose clusters cannot be read is `{"flow", "error"}`. Text: one table row
a flow. Exit code: the worst of the flows, in the order 1 (not running, or unreadable) > 3 (unknown)
> 4 (paused) > 0 (running); 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from kmirror_cli.flow_args import add_flow_arguments, load_flow

WORST_FIRST = (1, 3, 4, 0)  # several flows: the exit code is the first of these any flow has


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="Is a flow running; lag, last copy and checkpoint age.")
    add_flow_arguments(parser, flow_required=False)
    parser.add_argument(
        "--stale-after",
        type=float,
        default=60.0,
        metavar="S",
        help="a heartbeat older than S seconds means the flow is not running (default 60)",
    )
    parser.add_argument(
        "--log",
        metavar="FILE",
        help="the driver's log (its stderr): adds its newest progress and control lines and problems",
    )
    parser.add_argument(
        "--metrics",
        metavar="URL",
        help="the flow's Prometheus endpoint (http://HOST:METRICS_PORT/metrics): adds its error counters",
    )
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def newest_age_ms(records: Sequence[tuple[int | None, bool]], now_ms: int) -> int | None:
    """now - the newest timestamp among `records` (timestamp, counts) that count; None if none (pure)."""
    stamps = [t for t, counts in records if counts and t is not None and t > 0]
    return max(now_ms - max(stamps), 0) if stamps else None


def flow_status(spec: Any, stale_after_s: float, now_ms: int) -> dict[str, Any]:
    from kmirror.flow.replication_policy import checkpoints_topic, heartbeats_topic, offset_syncs_topic
    from kmirror.mm2.formats import decode_heartbeat
    from kmirror_cli.commands.lag import lag_rows
    from kmirror_engine.failover import read_partition0
    from kmirror_engine.planning import control_topic, newest_record

    source, target = spec.source.alias, spec.target.alias
    beats = []
    for m in read_partition0(spec.target, heartbeats_topic()):
        beat = decode_heartbeat(m.key() or b"", m.value() or b"")
        beats.append((beat.timestamp_ms, (beat.source_cluster_alias, beat.target_cluster_alias) == (source, target)))
    heartbeat_age = newest_age_ms(beats, now_ms)
    syncs = [(m.timestamp()[1], True) for m in read_partition0(spec.target, offset_syncs_topic(source))]
    checkpoints = [(m.timestamp()[1], True) for m in read_partition0(spec.target, checkpoints_topic(source))]
    lag: dict[str, int] = {}
    for row in lag_rows(spec.route, spec.consumer_group):
        lag[row["topic"]] = lag.get(row["topic"], 0) + int(row["lag"])
    controls = [(m.key(), m.value()) for m in read_partition0(spec.target, control_topic())]
    control = newest_record(controls, spec.id)
    running = None
    if spec.option("emit_heartbeats"):
        running = heartbeat_age is not None and heartbeat_age <= stale_after_s * 1000
    return {
        "flow": spec.id,
        "running": running,
        "heartbeat_age_ms": heartbeat_age,
        "last_copy_age_ms": newest_age_ms(syncs, now_ms),
        "newest_checkpoint_age_ms": newest_age_ms(checkpoints, now_ms),
        "lag": dict(sorted(lag.items())),
        "lag_total": sum(lag.values()),
        "paused": control is not None and control.paused,
        "control": None if control is None else asdict(control),
    }


def run(args: argparse.Namespace) -> int:
    from kmirror.errors import Problem, ValidationError

    if args.stale_after <= 0:
        raise ValidationError(
            [
                Problem(
                    "--stale-after",
                    f"{args.stale_after:g} is not a positive number of seconds; give e.g. --stale-after 60",
                )
            ]
        )
    if args.flow is None:
        return run_many(args)
    spec = load_flow(args)
    status = flow_status(spec, args.stale_after, int(time.time() * 1000))
    if args.log is not None:
        status["log"] = _read_log(args.log, spec.id)
    if args.metrics is not None:
        from kmirror_cli.status_metrics import read_metrics

        status["metrics"] = read_metrics(args.metrics, spec.id)
    if args.format == "json":
        print(json.dumps(status))
    else:
        state = {True: "running", False: "NOT running", None: "unknown (emit_heartbeats is off)"}[status["running"]]
        print(f"flow {spec.id}: {state}")
        if status["control"] is not None:
            c = status["control"]
            print(
                f"  control: {c['state'].upper() if status['paused'] else c['state']} (by {c['by']} at {c['at']}"
                + (f", reason: {c['reason']}" if c["reason"] else "")
                + ")"
            )
        for key in ("heartbeat_age_ms", "last_copy_age_ms", "newest_checkpoint_age_ms"):
            value, label = status[key], key.removesuffix("_ms").replace("_", " ")
            print(f"  {label}: {'none' if value is None else f'{value / 1000:.1f} s'}")
        print(f"  lag: {status['lag_total']} record(s)" + "".join(f"\n    {t}: {n}" for t, n in status["lag"].items()))
        if "log" in status:
            print(f"  last progress: {json.dumps(status['log']['last_progress'])}")
            print(
                f"  problems in the log: {len(status['log']['problems'])}"
                + "".join(f"\n    {line}" for line in status["log"]["problems"])
            )
        if "metrics" in status:
            print(f"  metrics: {json.dumps(status['metrics'])}")
    return exit_code(status)


def exit_code(status: dict[str, Any]) -> int:
    """One flow's exit code (module doc): 1 when its status could not be read."""
    if "error" in status:
        return 1
    return 4 if status["paused"] else {True: 0, False: 1, None: 3}[status["running"]]


def worst(codes: Sequence[int]) -> int:
    """The exit code of several flows: the first of WORST_FIRST any has (0 for none)."""
    return next((c for c in WORST_FIRST if c in codes), 0)


def run_many(args: argparse.Namespace) -> int:
    """Every flow of the topology or stack (module doc)."""
    from kmirror.errors import Problem, ValidationError
    from kmirror_cli.flow_args import planned_flows

    for flag in ("log", "metrics"):
        if getattr(args, flag) is not None:
            raise ValidationError(
                [
                    Problem(
                        f"--{flag}",
                        f"is for one flow; add --flow ID (one of the flows of the topology) or leave --{flag} out",
                    )
                ]
            )
    now_ms, statuses = int(time.time() * 1000), []
    for spec in planned_flows(args):
        try:
            statuses.append(flow_status(spec, args.stale_after, now_ms))
        except Exception as exc:  # one unreadable flow does not hide the others
            statuses.append({"flow": spec.id, "error": f"{type(exc).__name__}: {exc}"})
    if args.format == "json":
        print(json.dumps(statuses))
    else:
        print(_table(statuses))
    return worst([exit_code(s) for s in statuses])


def _age(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f}s"


def _table(statuses: Sequence[dict[str, Any]]) -> str:
    """One row a flow: FLOW STATE HEARTBEAT LAST-COPY CHECKPOINT LAG (pure)."""
    rows = [("FLOW", "STATE", "HEARTBEAT", "LAST-COPY", "CHECKPOINT", "LAG")]
    for s in statuses:
        if "error" in s:
            rows.append((s["flow"], "ERROR", "-", "-", "-", s["error"]))
            continue
        state = "paused" if s["paused"] else {True: "running", False: "NOT running", None: "unknown"}[s["running"]]
        ages = (_age(s["heartbeat_age_ms"]), _age(s["last_copy_age_ms"]), _age(s["newest_checkpoint_age_ms"]))
        rows.append((s["flow"], state, *ages, str(s["lag_total"])))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=True)) + "  " + r[5] for r in rows]
    return "\n".join(line.rstrip() for line in lines) + f"\n{len(statuses)} flow(s)"


def _read_log(path: str, flow_id: str) -> dict[str, Any]:
    from kmirror.errors import Problem, ValidationError
    from kmirror_cli.status_log import summarize

    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            return summarize(log, flow_id)
    except OSError as exc:
        raise ValidationError(
            [
                Problem(
                    "--log",
                    f"cannot read {path!r}: {exc.strerror}; give the driver's log file "
                    "(its stderr), or leave --log out",
                )
            ]
        ) from exc
