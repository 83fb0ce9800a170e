"""Several flows in one application: `python -m spark_app --flow a.json --flow b.json ...`.

One SparkSession serves every flow of one target cluster; each flow is its own streaming query
(its spec's checkpoint_location) run by `run_flow` in its own thread under a supervisor:
- input is checked for every flow before any query starts (`check_flow_set`, client configs,
  SQL transforms): one invalid flow refuses the whole run with exit 2, nothing half-started;
- streaming: a flow whose query fails (exit code 1) is started again from its checkpoint after
  a backoff (`RESTART_FIRST_S` doubling to `RESTART_CAP_S`, reset after a run that lasted the
  cap), one line per restart naming the flow; the others keep running. A flow failing on its
  input (exit 2) ends alone; SIGTERM/SIGINT (the shared `stop`) stops every flow after its batch;
- `--once`: every flow runs once; the exit code is the worst of theirs (2 > 1 > 0).
Per flow: its side work (`kmirror_engine.side_work.FlowSideWork`, started and stopped by
`run_flow`: tickers, listeners, metrics registries, one per flow id), start-up checks. Shared by
design: the session (and its JVM), the stop event, the class-archive finish at the end.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from kmirror.errors import KmirrorError, Problem, ValidationError
from kmirror.flow.spec import FlowSpec

log = logging.getLogger("kmirror.flows")
RESTART_FIRST_S = 5.0
RESTART_CAP_S = 300.0
# between flow starts: Spark gives a query's Python planning process 10 s to connect back, which
# several launched at once missed on a loaded 2-core machine
START_STAGGER_S = 2.0


def check_flow_set(specs: Sequence[FlowSpec], checkpoint: str | None) -> None:
    """Refuse a set of flows one application cannot run (ValidationError, exit 2)."""
    if len(specs) < 2:
        return
    if checkpoint is not None:
        raise _invalid(
            "--checkpoint",
            f"{checkpoint!r} names one query's directory but {len(specs)} flows were given: "
            "drop --checkpoint (each flow uses its spec's checkpoint_location)",
        )
    _refuse_repeats(specs, lambda s: s.id, "id", "give each flow its own id, or pass its file once")
    _refuse_repeats(
        specs, lambda s: s.checkpoint_location, "checkpoint_location", "give each flow its own checkpoint_location"
    )
    ports = [s for s in specs if s.checkpoints.metrics_port]
    _refuse_repeats(ports, lambda s: str(s.checkpoints.metrics_port), "metrics_port", "give each flow its own port")
    targets: dict[str, list[str]] = {}
    for spec in specs:
        targets.setdefault(spec.target.bootstrap_servers, []).append(spec.id)
    if len(targets) > 1:
        seen = "; ".join(f"{servers!r}: {', '.join(ids)}" for servers, ids in targets.items())
        raise _invalid(
            "target.bootstrap_servers",
            f"the flows of one application must share their target cluster; got {seen}: "
            "run one application per target cluster (pass each target's flows to its own application)",
        )


def _refuse_repeats(specs: Sequence[FlowSpec], key: Callable[[FlowSpec], str], field: str, fix: str) -> None:
    owners: dict[str, list[str]] = {}
    for spec in specs:
        owners.setdefault(key(spec), []).append(spec.id)
    repeated = {value: ids for value, ids in owners.items() if len(ids) > 1}
    if repeated:
        value, ids = next(iter(repeated.items()))
        raise _invalid(field, f"{value!r} is used by several flows ({', '.join(ids)}): {fix}")


def _invalid(field: str, message: str) -> ValidationError:
    return ValidationError([Problem(field, message)], source="the --flow files")


def supervise(
    flow_id: str,
    run: Callable[[], None],
    stop: threading.Event,
    once: bool,
    first_s: float = RESTART_FIRST_S,
    cap_s: float = RESTART_CAP_S,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run one flow until it ends; returns its exit code (module doc). Restarts wait on `stop`."""
    backoff = first_s
    while True:
        started = clock()
        try:
            run()
            return 0
        except Exception as exc:
            code = exc.exit_code if isinstance(exc, KmirrorError) else 1
            if code != 1 or once or stop.is_set():
                print(f"kmirror run: flow {flow_id}: {exc}", file=sys.stderr, flush=True)
                return code
            if clock() - started >= cap_s:
                backoff = first_s
            line = f"flow {flow_id} failed: {exc}; starting it again from its checkpoint in {backoff:.0f} s"
            log.warning("%s", line)
            print(f"kmirror: {line}", file=sys.stderr, flush=True)
            if stop.wait(backoff):
                return 0
            backoff = min(cap_s, backoff * 2)


def run_flows(
    specs: Sequence[FlowSpec],
    runner: Callable[..., None],
    once: bool = False,
    master: str | None = "local[*]",
    stop: threading.Event | None = None,
    spark: Any = None,
    reader_api: str | None = None,
    first_s: float = RESTART_FIRST_S,
    stagger_s: float = START_STAGGER_S,
) -> int:
    """Mirror every flow of `specs` in one session (module doc), each flow by
    `runner(spec, spark=, once=, stop=, reader_api=, validated=True)` (`spark_app.main.run_flow`;
    client configs and transforms are checked here, once, not again at each restart); returns the
    worst exit code. Raises ValidationError (before any query starts) for invalid input."""
    import os

    from kmirror_engine.clients import validate_client_configs
    from spark_app.stream_readers import reader_class

    check_flow_set(specs, None)
    reader_api = reader_api or os.environ.get("KMIRROR_READER_API", "auto")
    reader_class(reader_api)
    for spec in specs:
        _naming(spec.id, partial(validate_client_configs, spec.route, spec.copy))
    stop = stop or threading.Event()
    own_session = spark is None
    if spark is None:
        from spark_app.session import build_session

        quick_jit = all(s.copy.transform_sql is None for s in specs)
        name = f"kmirror -> {specs[0].target.alias} ({len(specs)} flows)"
        spark = build_session(master, app_name=name, quick_start=True, quick_jit=quick_jit)
        from spark_app.jvm_signals import stop_after_signal_to_jvm

        stop_after_signal_to_jvm(spark, stop)
    try:
        for spec in specs:
            if spec.copy.transform_sql is not None:
                from spark_app.transform import validate_transform

                _naming(spec.id, partial(validate_transform, spark, spec.id, spec.copy))
        codes: dict[str, int] = {}

        def one(spec: FlowSpec) -> None:
            def run() -> None:
                runner(spec, spark=spark, once=once, stop=stop, reader_api=reader_api, validated=True)

            codes[spec.id] = supervise(spec.id, run, stop, once, first_s=first_s)

        threads = [threading.Thread(target=one, args=(s,), name=f"kmirror {s.id}", daemon=True) for s in specs]
        for index, thread in enumerate(threads):
            if index and stop.wait(stagger_s):  # one query's planning process starting at a time
                break
            thread.start()
        for thread in threads:
            while thread.ident is not None and thread.is_alive():  # short joins: the main thread keeps handling signals
                thread.join(0.5)
        return max((codes.get(s.id, 0) for s in specs), default=0)  # not started: stopped first
    finally:
        if own_session:
            spark.stop()
            from spark_app import jvm_classes

            jvm_classes.finish()


def _naming(flow_id: str, check: Callable[[], object]) -> None:
    """`check()` of flow `flow_id`, a ValidationError naming the flow."""
    try:
        check()
    except ValidationError as exc:
        source = exc.source if flow_id in exc.source else f"flow {flow_id}"
        raise ValidationError(exc.problems, source=source) from None
