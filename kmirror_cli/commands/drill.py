"""`kmirror drill`: rehearse losing the source cluster, and measure RPO and RTO.

Local drill (the default): starts a pair of local brokers (`--broker`; Apache Kafka 4.1 when
`make kafka-dists` cached its jars, else tansu), fills a topic on A, mirrors it to B with the
engine (one `RangeCopier` pass feeding the real `FailoverListener`: offset syncs and
checkpoints, no Spark), commits an application group on A mid-way, writes more on A that the
mirror never copies (the records at risk), then kills A. From that decision on the clock runs:
`kmirror failover` (the command's own code), then a consumer of the group on B reads its first
record: RTO. Every record it reads must be exactly the one after the group's position on A.
The consumer reads a few records on B and commits there; A comes back; `kmirror failback`
moves the group home; on A it must resume at the first record it had not read on B and then
read everything else, the records at risk included: nothing skipped.

RPO is counted, not estimated: A's end offsets at the decision minus what the mirror copied.
tansu keeps nothing across a restart, so on tansu A is frozen (SIGSTOP) instead of killed.

Dry drill (`--flow F.json --group G`, real clusters): nothing is stopped. It runs translate,
failover --dry-run and failback --dry-run from the target's checkpoints (as if the source were
gone) and reports the RPO the target knows (records at risk per partition) and how long the plan
took. Exit 0 when every check passed, 1 otherwise; `--format json` prints
`{"rpo_records", "rto_s", "steps", "passed", ...}`.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kmirror.errors import KmirrorError, Problem, ValidationError
from kmirror_cli.commands import failback, failover, translate  # light: their clients load lazily
from kmirror_cli.drill_clusters import FENCE_KEY as FENCE_KEY  # old import path
from kmirror_cli.drill_clusters import (
    GROUP,
    REMOTE,
    SOURCE_ALIAS,
    TARGET_ALIAS,
    TOPIC,
    commit_group,
    create_topic,
    default_broker,
    end_offsets,
    fence,
    flow_raw,
    group_at,
    mirror_fences,
    mirror_pass,
    new_local_broker,
    produce,
    read_group,
    value,
    wait_serving,
)
from kmirror_cli.drill_clusters import READ_TIMEOUT_S as READ_TIMEOUT_S
from kmirror_cli.drill_report import DrillReport, Step, describe_row, print_report, resume_detail

FOREIGN = 2  # records B's topic held before the mirror started: offsets shift, as in production
BROKERS = ("kafka-4.1", "kafka-3.9", "tansu")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("drill", help="Fail over and back on a pair of clusters; report RPO and RTO.")
    parser.add_argument(
        "--broker",
        choices=BROKERS,
        default=None,
        help="local pair: kafka-4.1 if its jars are cached (make kafka-dists), else tansu",
    )
    parser.add_argument("--partitions", type=int, default=3, help="local: partitions of the drill topic")
    parser.add_argument("--records", type=int, default=20, help="local: records per partition the mirror copies")
    parser.add_argument(
        "--at-risk", type=int, default=5, help="local: records per partition written after the last mirror pass"
    )
    parser.add_argument(
        "--read-on-target",
        type=int,
        default=3,
        help="local: records per partition the group reads on B before failing back",
    )
    parser.add_argument(
        "--from-checkpoints",
        action="store_true",
        help="local: fail over without the 5 s source probe (`kmirror failover --from-checkpoints`)",
    )
    parser.add_argument(
        "--flow",
        help="dry drill against real clusters: the flow spec JSON, or a flow id "
        "('a->b') with --topology or --stack (nothing is stopped)",
    )
    parser.add_argument("--topology", metavar="FILE", help="dry drill: the topology file (--flow is a flow id)")
    parser.add_argument("--stack", metavar="NAME", help="dry drill: stack NAME's topology and datacenter")
    parser.add_argument("--group", help="dry drill: the consumer group to plan for")
    parser.add_argument("--format", choices=("text", "json"), default="text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.flow is None and (args.topology or args.stack):
        given = "--topology" if args.topology else "--stack"
        raise ValidationError(
            [Problem("--flow", f"required with {given} (the flow id to drill, e.g. 'a->b'); add --flow ID --group G")],
            "kmirror drill",
        )
    if (args.flow is None) != (args.group is None):
        given, missing = ("--flow", "--group") if args.flow else ("--group", "--flow")
        raise ValidationError([Problem(missing, f"required with {given} (a dry drill needs both)")], "kmirror drill")
    where = {"topology": args.topology, "stack": args.stack}
    if args.flow and (args.topology or args.stack):
        from kmirror_cli.flow_args import load_flow

        load_flow(args)  # an unknown flow id or another datacenter's flow: exit 2 before any step
    report = dry_drill(args.flow, args.group, **where) if args.flow else local_drill(args)
    if args.format == "json":
        out = {**asdict(report), "passed": report.passed}
        print(json.dumps(out))
    else:
        print_report(report)
    return 0 if report.passed else 1


# -- running commands and steps -------------------------------------------------------------


def call_command(func: Callable[[argparse.Namespace], int], **options: Any) -> tuple[int, str]:
    """Run a command function as `kmirror` would; returns (exit code, what it printed on both
    streams), its KmirrorError folded into the output so the drill can report it."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        try:
            code = int(func(argparse.Namespace(**options)) or 0)
        except KmirrorError as exc:
            print(f"error: {exc}")
            code = exc.exit_code
    return code, out.getvalue().strip()


@contextlib.contextmanager
def timed(report: DrillReport, name: str) -> Iterator[Step]:
    """A step whose time is measured; a KmirrorError inside fails the step (and the drill) with
    its message instead of aborting the report. Stray prints of engine code go into the detail."""
    from confluent_kafka import KafkaException

    step = Step(name, 0.0, True, "")
    report.steps.append(step)
    started, out = time.monotonic(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            yield step
    except (KmirrorError, KafkaException) as exc:
        step.passed, step.detail = False, f"{step.detail}\nerror: {exc}".strip()
        raise _Abort from None
    finally:
        step.seconds = round(time.monotonic() - started, 2)
        if out.getvalue().strip():
            step.detail = f"{step.detail}\n{out.getvalue().strip()}".strip()


class _Abort(Exception):
    """A step failed so that the next ones cannot run (their report stops there)."""


def check(step: Step, ok: bool, detail: str) -> None:
    step.passed = bool(step.passed) and ok
    step.detail = f"{step.detail}\n{detail}".strip() if step.detail else detail


# -- the local drill ------------------------------------------------------------------------


def check_sizes(args: argparse.Namespace) -> None:
    """Raises ValidationError naming every size that makes the drill meaningless."""
    problems = []
    if not 1 <= args.partitions <= 50:
        problems.append(Problem("--partitions", f"between 1 and 50, got {args.partitions}"))
    if args.records < 2 * args.partitions + 2:
        problems.append(
            Problem(
                "--records",
                f"at least 2 x partitions + 2 ({2 * args.partitions + 2}), got "
                f"{args.records}: the group stands mid-way, one apart per partition",
            )
        )
    if args.at_risk < 0:
        problems.append(Problem("--at-risk", f"0 or more, got {args.at_risk}"))
    if not 1 <= args.read_on_target <= args.records // 2:
        problems.append(
            Problem("--read-on-target", f"between 1 and records/2 ({args.records // 2}), got {args.read_on_target}")
        )
    if problems:
        raise ValidationError(problems, "kmirror drill")


def local_drill(args: argparse.Namespace) -> DrillReport:
    check_sizes(args)
    kind = args.broker or default_broker()
    report = DrillReport(dry=False, broker=kind, rpo_records=None, rto_s=None)
    workdir = Path(tempfile.mkdtemp(prefix="kmirror-drill-"))
    with contextlib.ExitStack() as stack:
        source, target = new_local_broker(kind, "drill-a"), new_local_broker(kind, "drill-b")
        try:
            with timed(report, "start brokers") as step:
                for broker in (source, target):
                    broker.start()
                    stack.callback(broker.remove if hasattr(broker, "remove") else broker.stop)
                step.detail = (
                    f"{kind}: {SOURCE_ALIAS}={source.bootstrap_servers} {TARGET_ALIAS}={target.bootstrap_servers}"
                )
            # clients the commands left to the garbage collector go before the brokers do (no
            # reconnect noise from librdkafka at exit)
            stack.callback(gc.collect)
            raw = flow_raw(source.bootstrap_servers, target.bootstrap_servers, workdir)
            (flow := workdir / "flow.json").write_text(json.dumps(raw, indent=2))
            home = {p: group_at(args.records, p) for p in range(args.partitions)}
            run_outage(Pair(kind, source, target, flow, home), args, report)
        except _Abort:
            pass  # the failed step is in the report
    return report


@dataclass
class Pair:
    """The local pair and what the drill did to it (offsets per partition of the drill topic)."""

    kind: str
    source: Any
    target: Any
    flow: Path
    home: dict[int, int]  # the application group's committed offsets on A
    mirrored: dict[int, int] = field(default_factory=dict)  # A's offsets the mirror copied up to
    ends: dict[int, int] = field(default_factory=dict)  # A's end offsets at the decision
    fences: int = 0  # tansu fences appended after the records at risk, per partition


def run_outage(pair: Pair, args: argparse.Namespace, report: DrillReport) -> None:
    """The drill's story, step by step; raises _Abort when a step leaves nothing to check after it."""
    source, target = pair.source, pair.target
    mirror_and_write_on(pair, args, report)
    decided = fail_over(pair, args, report)
    with timed(report, "consumer resumes on B") as step:
        got, first_at = read_group(target.bootstrap_servers, args.partitions, REMOTE, lambda p: args.read_on_target)
        report.rto_s = round(first_at - decided, 2)
        expected = {
            p: [(FOREIGN + at + i, value(p, at + i)) for i in range(args.read_on_target)] for p, at in pair.home.items()
        }
        detail = resume_detail("B", got, expected)
        check(step, got == expected, f"{detail}; committed {args.read_on_target} read(s) on B")
    fail_back(pair, report)
    with timed(report, "consumer resumes on A") as step:
        # the first record not read on B, then the rest: the mirrored ones, then the records at risk
        unread = {
            p: [*range(at + args.read_on_target, args.records), *range(pair.mirrored[p], pair.ends[p] - pair.fences)]
            for p, at in pair.home.items()
        }
        got, _ = read_group(source.bootstrap_servers, args.partitions, TOPIC, lambda p: len(unread[p]))
        expected = {p: [(o, value(p, o)) for o in offsets] for p, offsets in unread.items()}
        check(step, got == expected, resume_detail("A", got, expected) + " (the records at risk included)")


def mirror_and_write_on(pair: Pair, args: argparse.Namespace, report: DrillReport) -> None:
    """Fill A, commit the group mid-way, one mirror pass to B, then the writes it never copies."""
    from kmirror.flow.spec import load_flow_spec

    a, b, n, kind = pair.source.bootstrap_servers, pair.target.bootstrap_servers, args.partitions, pair.kind
    with timed(report, "mirror A->B") as step:
        create_topic(a, TOPIC, n)
        create_topic(b, REMOTE, n)
        produce(b, REMOTE, [(p, None, b"b-own-%d" % i) for p in range(n) for i in range(FOREIGN)])
        produce(a, TOPIC, [(p, b"k", value(p, i)) for p in range(n) for i in range(args.records)])
        fence(kind, a, TOPIC, n)
        commit_group(a, TOPIC, pair.home)
        pair.mirrored = mirror_pass(load_flow_spec(str(pair.flow)), end_offsets(a, TOPIC, n))
        fence(kind, b, REMOTE, n)
        mirror_fences(kind, b)
        step.detail = (
            f"{n} partition(s) x {args.records} records copied ({FOREIGN} of B's own first: offsets "
            f"shift); group {GROUP} committed on A at {pair.home}"
        )
    with timed(report, "write on A, unmirrored") as step:
        produce(a, TOPIC, [(p, b"k", value(p, pair.mirrored[p] + i)) for p in range(n) for i in range(args.at_risk)])
        pair.fences = fence(kind, a, TOPIC, n)
        pair.ends = end_offsets(a, TOPIC, n)
        report.rpo_records = sum(pair.ends[p] - pair.mirrored[p] - pair.fences for p in range(n))
        step.detail = (
            f"A ends at {pair.ends}; mirrored until {pair.mirrored}: {report.rpo_records} record(s) at "
            "risk, written after the mirror's last batch (so the target's records at risk, its last "
            "known lag, is a lower bound)"
        )


def fail_over(pair: Pair, args: argparse.Namespace, report: DrillReport) -> float:
    """Lose A, then `kmirror failover`; returns the monotonic time of the decision."""
    with timed(report, "source down") as step:
        if pair.kind == "tansu":
            pair.source.pause()
            step.detail = "A frozen (SIGSTOP: tansu loses its log on restart), the clock starts: the decision"
        else:
            pair.source.kill()
            step.detail = "A killed (SIGKILL), the clock starts: the decision"
    decided = time.monotonic()
    with timed(report, "failover") as step:
        code, out = call_command(
            failover.run,
            flow=str(pair.flow),
            group=GROUP,
            dry_run=False,
            from_checkpoints=args.from_checkpoints,
            allow_partial=False,
        )
        check(step, code == 0, f"kmirror failover --flow F --group {GROUP} -> exit {code}\n{out}")
        if code != 0:
            raise _Abort
    return decided


def fail_back(pair: Pair, report: DrillReport) -> None:
    """Bring A back with its log, then `kmirror failback`."""
    with timed(report, "source back") as step:
        if pair.kind == "tansu":
            pair.source.resume()
        else:
            pair.source.start()  # the same storage: A comes back with its log
        wait_serving(pair.source.bootstrap_servers, TOPIC)
        step.detail = f"A serves {TOPIC} again"
    with timed(report, "failback") as step:
        code, out = call_command(failback.run, flow=str(pair.flow), group=GROUP, dry_run=False, allow_partial=False)
        check(step, code == 0, f"kmirror failback --flow F --group {GROUP} -> exit {code}\n{out}")
        if code != 0:
            raise _Abort


# -- the dry drill --------------------------------------------------------------------------


def dry_drill(flow: str, group: str, topology: str | None = None, stack: str | None = None) -> DrillReport:
    """translate, failover --dry-run, failback --dry-run from the target's checkpoints: as if the
    source were gone, on clusters that keep running. Nothing is written, nothing stopped."""
    report = DrillReport(dry=True, broker=None, rpo_records=None, rto_s=None)
    common = {"flow": flow, "group": group, "from_checkpoints": True, "topology": topology, "stack": stack}
    with contextlib.suppress(_Abort), timed(report, "translate (target's checkpoints)") as step:
        code, out = call_command(translate.run, format="json", **common)
        rows = json.loads(out.splitlines()[-1]) if code == 0 else []
        risks = [r.get("records_at_risk") for r in rows]
        report.rpo_records = sum(risks) if rows and None not in risks else None
        check(step, code == 0, "\n".join(map(describe_row, rows)) if code == 0 else out)
    with contextlib.suppress(_Abort), timed(report, "failover --dry-run") as step:
        code, out = call_command(failover.run, dry_run=True, allow_partial=False, **common)
        check(step, code == 0, out)
    with contextlib.suppress(_Abort), timed(report, "failback --dry-run") as step:
        code, out = call_command(
            failback.run, flow=flow, group=group, topology=topology, stack=stack, dry_run=True, allow_partial=False
        )
        never_moved = code != 0 and "nothing to fail back" in out  # no offsets on the target yet
        check(step, code == 0 or never_moved, out)
        if never_moved:
            step.passed = None
    report.plan_s = round(sum(s.seconds for s in report.steps), 2)
    return report
