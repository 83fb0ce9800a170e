"""Driver of the mirror: `python -m spark_app --flow FLOW.json [--once] [--checkpoint DIR] [--master local[*]]`.
Several `--flow` files (one target cluster) share one application: `spark_app.several_flows`.

Wires "kmirror-source" (plans offset ranges) -> "kmirror-sink" (copies them) for one flow.
- `--once`: mirror what is available at start in batches of at most `max_records_per_trigger`,
  exit 0. On a Spark with admission control for Python sources, one Trigger.AvailableNow query;
  without it (Spark 4.0, 4.1), a loop of AvailableNow queries of one bounded batch each, up to
  the end offsets frozen at start (`run_once`, `spark_app.stream_readers`).
- streaming (default): a micro-batch every `trigger_interval_ms` until SIGTERM/SIGINT, then
  stop after the current batch and exit 0.
- any failure exits 1 with one line naming the cause (an operator must see a failed driver);
  an invalid flow spec exits 2 naming the key; neither prints a traceback.
- an unreachable cluster at start: `--once` fails within ~30 s naming the cluster alias and
  address; streaming retries with backoff and reports every failure.
`run_flow` is the same thing in-process (tests pass their shared SparkSession).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kmirror.errors import ConnectionFailure, KmirrorError
from kmirror.flow.spec import FlowSpec, load_flow_spec
from kmirror.flow.views import CopySettings
from kmirror_engine.planning import run_token
from spark_app.query_watch import run_query

if TYPE_CHECKING:
    from kmirror_engine.planning import RangePlanner

log = logging.getLogger("kmirror.main")
START_CHECK_TIMEOUT_S = 15.0  # per cluster; two clusters stay within the ~30 s bound


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--flow",
        required=True,
        action="append",
        help="flow spec JSON file (see docs/spark-app.md); repeat it to run several flows of one target cluster "
        "in one application",
    )
    parser.add_argument("--once", action="store_true", help="mirror what is available now, then exit 0")
    parser.add_argument("--checkpoint", help="Spark checkpoint directory (default: the spec's checkpoint_location)")
    parser.add_argument(
        "--master", default=None, help="Spark master for a local run, e.g. local[*] (default: spark-submit's)"
    )


def check_clusters(spec: FlowSpec, once: bool, stop: threading.Event) -> None:
    """Both clusters answer (and the client supports their security); see module doc."""
    from kmirror_engine.clients import check_flow_security

    backoff = 1.0
    while True:
        try:
            check_flow_security(spec.source, spec.target, timeout_s=START_CHECK_TIMEOUT_S)
            return
        except ConnectionFailure as exc:
            if once or stop.is_set():
                raise
            log.warning("%s: %s; retrying in %.0f s", spec.id, exc, backoff)
            print(f"kmirror: {exc}; retrying in {backoff:.0f} s", file=sys.stderr, flush=True)
            stop.wait(backoff)
            backoff = min(30.0, backoff * 2)


def _require_internal_topic_access(spec: FlowSpec) -> None:
    """The start-up check of the internal topics' and the dead-letter topic's ACLs, then the
    dead-letter topic created when missing (the target's `internal_topics` sizing): a record the
    target refuses must find it, not fail its batch after all."""
    from kmirror_engine.clients import admin_client, ensure_topic
    from kmirror_engine.planning import InternalTopicAccess

    InternalTopicAccess.for_flow(spec).require(admin_client(spec.target))
    if spec.copy.dead_letter_topic:
        ensure_topic(spec.target, spec.copy.dead_letter_topic, {}, spec.target.internal_topics.partitions or 1)


def start_query(
    spark: Any, spec: FlowSpec, once: bool, checkpoint: str, reader_api: str = "auto", until: str | None = None
) -> Any:
    """Register both data sources and start the streaming query of `spec` (`until`: frozen end
    offsets as JSON, for --once on the position-tracking reader)."""
    from spark_app.sink import SINK_NAME, MirrorSink
    from spark_app.source import SOURCE_NAME, MirrorSource

    # The JVM resolves a Python data source through the *thread's* active session: a query
    # started from another thread (an embedding service, a test) would not find "kmirror-sink".
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    spark.dataSource.register(MirrorSource)
    spark.dataSource.register(MirrorSink)
    spec_json = json.dumps(spec.to_dict())
    task_count = max(1, spark.sparkContext.defaultParallelism)
    reader = (
        spark.readStream.format(SOURCE_NAME)
        .option("flow_spec", spec_json)
        .option("mode", "once" if once else "stream")
        .option("task_count", str(task_count))
        .option("reader_api", reader_api)
    )
    if until is not None:
        reader = reader.option("until_offsets", until)
    ranges = reader.load()
    if spec.copy.transform_sql is not None:  # records through Spark (spark_app.transform); validated first
        from spark_app.transform import transform_writer

        writer = transform_writer(spark, ranges, spec, task_count)
    else:
        # query_token: the sink fences exactly-once ids once per query start, not per streamWriter call;
        # ordered by start time, it is also the run recorded with exactly-once offsets (a newer driver wins)
        writer = ranges.writeStream.format(SINK_NAME).option("flow_spec", spec_json).option("query_token", run_token())
    writer = writer.option("checkpointLocation", checkpoint).queryName(f"kmirror {spec.id}")
    if once:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{spec.copy.trigger_interval_ms} milliseconds")
    return writer.start()


def run_flow(
    spec: FlowSpec,
    spark: Any = None,
    once: bool = False,
    checkpoint: str | None = None,
    master: str | None = "local[*]",
    stop: threading.Event | None = None,
    reader_api: str | None = None,
    validated: bool = False,
) -> None:
    """Mirror `spec` (see module doc); raises KmirrorError on any failure. A session it builds
    itself is stopped at the end; a session passed in stays open. `reader_api` forces one
    streaming API ("position-tracking" runs Spark 4.0's path on any Spark; tests use it), else
    env KMIRROR_READER_API, else "auto". `validated`: the caller already checked the flow's client
    configs and transform on this session (`several_flows.run_flows`, once, not at every restart)."""
    from kmirror_engine.clients import validate_client_configs
    from kmirror_engine.side_work import FlowSideWork
    from spark_app.stream_readers import reader_class

    reader_api = reader_api or os.environ.get("KMIRROR_READER_API", "auto")
    reader_class(reader_api)  # an unknown or unsupported API is refused before any client is made

    stop = stop or threading.Event()
    if not validated:
        # a bad librdkafka property is invalid input (exit 2), not a task failure
        validate_client_configs(spec.route, spec.copy)
    # before any Spark session: an unsupported or unreachable cluster fails fast, with one clean line
    check_clusters(spec, once, stop)
    _require_internal_topic_access(spec)  # a missing ACL is refused before anything is copied
    own_session = spark is None
    if spark is None:
        from spark_app.session import build_session

        # records stay out of the JVM unless a SQL transform runs over them
        spark = build_session(
            master, app_name=f"kmirror {spec.id}", quick_start=True, quick_jit=spec.copy.transform_sql is None
        )
        from spark_app.jvm_signals import stop_after_signal_to_jvm

        stop_after_signal_to_jvm(spark, stop)
    side_work = FlowSideWork.for_flow(spec, once)  # the engine's: heartbeats, checkpoints, topic sync...
    try:
        if spec.copy.transform_sql is not None and not validated:  # a bad query is refused before anything is written
            from spark_app.transform import validate_transform

            validate_transform(spark, spec.id, spec.copy)
        side_work.start()
        checkpoint = checkpoint or spec.checkpoint_location
        if once:
            run_once(spark, spec, checkpoint, stop, reader_api)
            # their offset-sync heads before the final checkpoint reads them
            _close_driver_listeners(spec.id, spec.copy)
            side_work.finish()
        else:
            run_query(lambda: start_query(spark, spec, False, checkpoint, reader_api), stop)
    finally:
        _close_driver_listeners(spec.id, spec.copy)
        side_work.stop()
        if own_session:
            spark.stop()
            from spark_app import jvm_classes

            jvm_classes.finish()  # the first run's JVM leaves a class archive for the next start-up


def run_once(spark: Any, spec: FlowSpec, checkpoint: str, stop: threading.Event, reader_api: str = "auto") -> None:
    """--once (module doc). Without admission control each AvailableNow query runs at most one
    bounded batch; the loop ends when a query found nothing to do or its end did not move."""
    from spark_app.stream_readers import reader_class

    if reader_class(reader_api).api == "admission-control":
        run_query(lambda: start_query(spark, spec, True, checkpoint, reader_api), stop)
        return
    from kmirror_engine.planning import RangePlanner

    task_count = max(1, spark.sparkContext.defaultParallelism)
    until = frozen_end_offsets(RangePlanner.for_flow(spec, once=True, task_count=task_count))
    previous_end: Any = None
    while not stop.is_set():
        query = run_query(lambda: start_query(spark, spec, True, checkpoint, reader_api, until=until), stop)
        end = last_batch_end(query)
        if end is None or end == previous_end:
            return
        previous_end = end


def frozen_end_offsets(planner: RangePlanner) -> str:
    """End offsets of every partition `planner` (a `--once` planner) mirrors now, as the reader's
    offset JSON (--once's bound)."""
    from kmirror_engine.planning import offsets_to_json

    return json.dumps(offsets_to_json(planner.available()))


def last_batch_end(query: Any) -> Any:
    """The end offset of the last batch `query` ran (None: it ran none; no-data triggers count
    as none: their start equals their end)."""
    end = None
    for progress in query.recentProgress:
        for source in progress["sources"]:
            start, stop = source["startOffset"], source["endOffset"]
            if stop is not None and _as_json(start) != _as_json(stop):
                end = _as_json(stop)
    return end


def _as_json(offset: Any) -> Any:
    """Progress reports offsets as JSON text (4.3), or as an object or an empty string (4.0)."""
    if not isinstance(offset, str):
        return offset
    try:
        return json.loads(offset)
    except ValueError:
        return offset or None


def _close_driver_listeners(flow_id: str, copy: CopySettings) -> None:
    """A transform flow's listeners run in this driver (its foreachBatch calls them): closed when its
    query ends, with their clients and threads (idempotent). The copy path's live in the sink's
    commit process and close at its exit. A failure is logged (the copy is delivered by then)."""
    if copy.transform_sql is None:
        return
    from spark_app.listeners import close_listeners

    try:
        close_listeners(False, flow_id)
    except Exception as exc:  # side work after delivery: logged, never failing the run or hiding its error
        log.warning("%s: closing the flow's listeners failed: %s", flow_id, exc)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--self-check" in argv:
        return _self_check(argv)
    parser = argparse.ArgumentParser(prog="python -m spark_app", description="Mirror one Kafka flow with Spark.")
    add_arguments(parser)
    parser.add_argument("--self-check", action="store_true", help="check this node can run the app, then exit")
    args = parser.parse_args(argv)
    return run_cli(args)


def _self_check(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark_app --self-check",
        description="Check that the app starts on this node's Spark and Python (no broker needed).",
    )
    parser.add_argument("--self-check", action="store_true", required=True)
    parser.add_argument("--master", default=None, help="Spark master (default: local[1])")
    args = parser.parse_args(argv)
    from spark_app.self_check import self_check

    return self_check(args.master)


def default_master(master: str | None) -> str | None:
    """`--master`, else spark-submit's master when launched by it, else local[*]."""
    if master:
        return master
    from spark_app.jvm_signals import launched_by_spark_submit

    return None if launched_by_spark_submit() else "local[*]"


def run_cli(args: argparse.Namespace) -> int:
    """Shared by `python -m spark_app` and `kmirror run`: exit codes 0/1/2, no tracebacks."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    from spark_app.jvm_signals import stop_on_signal

    requested = stop_on_signal(stop)

    def request_stop(signum: int, frame: Any) -> None:
        requested(signum)

    paths = [args.flow] if isinstance(args.flow, str) else list(args.flow)
    try:
        specs = [load_flow_spec(path) for path in paths]  # every file checked before anything starts
        if len(specs) > 1:
            from spark_app.several_flows import check_flow_set

            check_flow_set(specs, args.checkpoint)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, request_stop)
            signal.signal(signal.SIGINT, request_stop)
        if len(specs) > 1:
            from spark_app.several_flows import run_flows

            return run_flows(specs, run_flow, once=args.once, master=default_master(args.master), stop=stop)
        run_flow(specs[0], once=args.once, checkpoint=args.checkpoint, master=default_master(args.master), stop=stop)
    except KmirrorError as exc:
        print(f"kmirror run: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    return 0
