"""Which copy loop a flow runs (option `copy_loop`), and the native loop's glue (no brokers).

The loops themselves run the same end-to-end tests: tests/test_copy.py, the mirror e2e and the
fault tests take the `copy_loop` fixture (tests/conftest.py)."""

from __future__ import annotations

from typing import Any

import pytest

from kmirror.errors import KmirrorError
from kmirror.flow.spec import FlowSpec, parse_flow_spec
from kmirror.flow.views import CopySettings
from kmirror_engine.copying import native_copy
from kmirror_engine.copying.native_copy import _progress, native_config, python_only_reasons, use_native_loop
from kmirror_engine.copying.ranges import CopyRange
from tests.planner_fakes import raw_spec


def _spec(**options: Any) -> FlowSpec:
    return parse_flow_spec(raw_spec(topics=["t"], **options))


def _flow(spec: FlowSpec) -> tuple[str, CopySettings]:
    """What `use_native_loop` reads of a flow: its id and `copy` view."""
    return spec.id, spec.copy


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_copy, "_module", object())


@pytest.fixture
def not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_copy, "_module", None)


def test_auto_picks_the_native_loop_when_built_and_the_flow_needs_nothing_else(built: None) -> None:
    assert use_native_loop(*_flow(_spec())) is True
    assert use_native_loop(*_flow(_spec(copy_loop="native"))) is True
    assert use_native_loop(*_flow(_spec(copy_loop="python"))) is False


@pytest.mark.parametrize("option", [{"exactly_once": True}, {"dead_letter_topic": "dlq"}])
def test_flows_only_the_python_loop_can_copy_fall_back_on_auto_and_fail_on_native(
    built: None, option: dict[str, Any]
) -> None:
    """Issue 41: `copy_loop: native` with such an option is refused by validate (before: with
    exactly_once the Python loop ran silently; with dead_letter_topic every writer task failed)."""
    assert use_native_loop(*_flow(_spec(**option))) is False
    name = next(iter(option))
    with pytest.raises(
        KmirrorError,
        match=rf"copy_loop: is 'native', but {name} is set and only the Python "
        rf"loop serves it; set copy_loop to auto \(it picks the Python loop for such a flow\) "
        rf"or remove {name}",
    ):
        _spec(copy_loop="native", **option)


def test_one_table_decides_which_loop_serves_which_flow() -> None:
    from kmirror.flow.spec import COPY_LOOP_CANNOT_SERVE, unserved_options
    from kmirror_engine.copying.task_copy import takes_batch_path

    assert COPY_LOOP_CANNOT_SERVE["native"] == native_copy.PYTHON_ONLY_OPTIONS
    for name in ("exactly_once", "dead_letter_topic", "skip_offsets", "max_records_per_second"):
        assert name in COPY_LOOP_CANNOT_SERVE["batch"] and name in COPY_LOOP_CANNOT_SERVE["native"]
    assert unserved_options("python", {"exactly_once": True}) == []
    assert unserved_options("batch", {"exactly_once": True, "dead_letter_topic": None}) == ["exactly_once"]
    assert not takes_batch_path(_spec(dead_letter_topic="dlq").copy)


def test_exactly_once_refuses_a_read_uncommitted_consumer() -> None:
    """Issue 41: exactly_once with `isolation.level: read_uncommitted` would copy aborted records."""
    with pytest.raises(
        KmirrorError,
        match=r"consumer: isolation.level is 'read_uncommitted', but exactly_once "
        r"copies committed records only",
    ):
        _spec(exactly_once=True, consumer={"isolation.level": "read_uncommitted"})
    assert _spec(exactly_once=True, consumer={"isolation.level": "read_committed"}).exactly_once
    assert not _spec(consumer={"isolation.level": "read_uncommitted"}).exactly_once  # at-least-once may


def test_a_missing_module_falls_back_on_auto_and_fails_on_native(not_built: None) -> None:
    assert use_native_loop(*_flow(_spec())) is False
    with pytest.raises(KmirrorError, match=r"the native module is not built for this Python"):
        use_native_loop(*_flow(_spec(copy_loop="native")))


def test_client_configs_with_python_callables_need_the_python_loop(built: None) -> None:
    assert python_only_reasons(_spec().copy, {"error_cb": print}) == ["client property error_cb is a Python callable"]
    assert use_native_loop(*_flow(_spec()), {"error_cb": print}) is False
    with pytest.raises(KmirrorError, match="error_cb is a Python callable"):
        native_config({"error_cb": print})


def test_native_config_gives_librdkafka_strings() -> None:
    assert native_config({"enable.idempotence": True, "linger.ms": 100, "acks": "all", "x": False}) == {
        "enable.idempotence": "true",
        "linger.ms": "100",
        "acks": "all",
        "x": "false",
    }


def test_an_unknown_copy_loop_is_a_flow_spec_problem() -> None:
    with pytest.raises(KmirrorError, match=r"copy_loop: must be one of auto, native, python, batch, got 'fast'"):
        _spec(copy_loop="fast")


def test_progress_from_the_native_accounting_matches_the_python_loops() -> None:
    rng = CopyRange("t", 1, 10, 20, "west.t", skipped_before=3)
    # drift 5 from offset 10, 7 from 14, last delivered upstream 19: the range end sync is added
    row = (10, 2000, 1_700_000_000_019, [(10, 15), (14, 21)], 7, 19, 3, 9, 50, 10)
    progress = _progress(rng, row)
    assert progress.offset_syncs == ((10, 15), (14, 21), (19, 26))
    assert (progress.records, progress.bytes, progress.next_offset, progress.skipped_records) == (10, 2000, 20, 3)
    assert (progress.latency_min_ms, progress.latency_max_ms, progress.latency_count) == (3, 9, 10)
    empty = _progress(CopyRange("t", 1, 20, 20, "west.t"), (0, 0, None, [], None, -1, 2**63 - 1, -(2**63), 0, 0))
    assert (empty.offset_syncs, empty.latency_min_ms, empty.last_timestamp_ms) == ((), None, None)


def test_a_target_topic_librdkafka_refuses_a_handle_for_fails_the_round_by_name() -> None:
    """Issue 41: rd_kafka_topic_new's NULL (here: a name over librdkafka's 512 characters) was
    stored unchecked and used by every produce; now the round fails naming the topic."""
    module = native_copy.native_module()
    if module is None:
        pytest.skip("native module not built here")
    loop = native_copy.new_loop(
        {"bootstrap.servers": "127.0.0.1:1", "group.id": "g"}, {"bootstrap.servers": "127.0.0.1:1"}
    )
    try:
        with pytest.raises(module.CopyFailure, match=r"target topic x+: librdkafka refused a handle for it"):
            loop.start([("t", 0, 0, 10, "x" * 600, 2**62, -1)])
        loop.start([("t", 0, 5, 5, "west.t", 2**62, -1)])  # the loop is still usable
    finally:
        loop.close()
