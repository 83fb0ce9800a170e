"""Several flows in one application (spark_app.several_flows): argument handling and the
supervisor's restarts, with fakes (no Spark, no broker)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from kmirror.errors import ConnectionFailure, KmirrorError, ValidationError
from kmirror.flow.spec import load_flow_spec
from spark_app import main as app_main
from spark_app import several_flows
from spark_app.several_flows import run_flows, supervise


def flow_file(tmp_path: Path, name: str, target: str = "127.0.0.1:9092", **changes: object) -> str:
    raw = {
        "id": f"{name}->east",
        "topics": ["orders"],
        "topics_exclude": [],
        "source": {"alias": name, "bootstrap_servers": f"{name}.example:9092", "config": {}},
        "target": {"alias": "east", "bootstrap_servers": target, "config": {}},
        "replication_policy": {"type": "default"},
        "checkpoint_location": str(tmp_path / f"ckpt-{name}"),
        **changes,
    }
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(raw))
    return str(path)


@pytest.fixture
def no_spark(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Any session or flow start is recorded (a refused run must start none); signals untouched."""
    started: list[str] = []
    monkeypatch.setattr(app_main.signal, "signal", lambda *args: None)
    monkeypatch.setattr("spark_app.session.build_session", lambda *a, **k: started.append("session"))
    monkeypatch.setattr(app_main, "run_flow", lambda spec, **k: started.append(spec.id))
    return started


def test_flows_with_different_targets_exit_2_naming_the_flows_the_field_and_the_fix(
    tmp_path: Path, no_spark: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    a = flow_file(tmp_path, "west")
    b = flow_file(tmp_path, "north", target="other:9092")
    assert app_main.main(["--flow", a, "--flow", b, "--once"]) == 2
    err = capsys.readouterr().err
    assert "target.bootstrap_servers" in err and "west->east" in err and "north->east" in err
    assert "run one application per target cluster" in err and "Traceback" not in err
    assert no_spark == []


@pytest.mark.parametrize(
    "second, extra, expected",
    [
        ({"name": "west"}, [], "id: 'west->east' is used by several flows"),
        ({"name": "north"}, ["--checkpoint", "/tmp/x"], "--checkpoint: '/tmp/x' names one query's directory"),
        ({"name": "north", "max_records_per_triger": 5}, [], "max_records_per_triger: unknown key"),
        ({"name": "north", "consumer": {"no.such.property": "1"}}, [], "consumer.no.such.property: unknown librdkafka"),
    ],
)
def test_any_flows_invalid_input_refuses_the_run_before_anything_starts(
    tmp_path: Path,
    no_spark: list[str],
    capsys: pytest.CaptureFixture[str],
    second: dict[str, Any],
    extra: list[str],
    expected: str,
) -> None:
    a = flow_file(tmp_path, "west")
    other = tmp_path / "second"
    other.mkdir()
    b = flow_file(other, **second)
    assert app_main.main(["--flow", a, "--flow", b, "--once", *extra]) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err
    assert no_spark == []


def test_one_flow_keeps_its_checkpoint_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(app_main.signal, "signal", lambda *args: None)
    monkeypatch.setattr(app_main, "run_flow", lambda spec, **k: seen.update(k, id=spec.id))
    assert app_main.main(["--flow", flow_file(tmp_path, "west"), "--checkpoint", "/tmp/c", "--once"]) == 0
    assert seen["id"] == "west->east" and seen["checkpoint"] == "/tmp/c"


class RecordingStop(threading.Event):
    """A stop event whose waits return at once and are recorded."""

    def __init__(self, stop_after: int = 1000) -> None:
        super().__init__()
        self.waits: list[float] = []
        self.stop_after = stop_after

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(float(timeout or 0))
        if len(self.waits) >= self.stop_after:
            self.set()
        return self.is_set()


def test_a_failing_flow_restarts_with_doubling_backoff_capped_and_one_line_each_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls = []

    def run() -> None:
        calls.append(1)
        if len(calls) <= 8:
            raise ConnectionFailure("cluster 'west' (w:9092) unreachable")

    stop = RecordingStop()
    assert supervise("west->east", run, stop, once=False, clock=lambda: 0.0) == 0
    assert stop.waits == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    assert len(calls) == 9
    lines = [line for line in capsys.readouterr().err.splitlines() if "starting it again" in line]
    assert len(lines) == 8 and all("flow west->east failed: cluster 'west'" in line for line in lines)


def test_backoff_resets_after_a_run_as_long_as_the_cap() -> None:
    now = [0.0]

    def run() -> None:
        now[0] += 400.0  # each run lasted longer than the cap
        raise KmirrorError("boom")

    stop = RecordingStop(stop_after=3)
    assert supervise("f", run, stop, once=False, clock=lambda: now[0]) == 0
    assert stop.waits == [5.0, 5.0, 5.0]


def test_input_errors_and_once_runs_are_not_restarted() -> None:
    def invalid() -> None:
        raise ValidationError([], source="x")

    def failing() -> None:
        raise KmirrorError("boom")

    stop = RecordingStop()
    assert supervise("f", invalid, stop, once=False) == 2
    assert supervise("f", failing, stop, once=True) == 1
    assert stop.waits == []


def test_a_stop_during_the_backoff_ends_the_flow_cleanly() -> None:
    def failing() -> None:
        raise KmirrorError("boom")

    stop = RecordingStop(stop_after=1)
    assert supervise("f", failing, stop, once=False) == 0 and stop.waits == [5.0]


def specs(tmp_path: Path, *names: str) -> list[Any]:
    return [load_flow_spec(flow_file(tmp_path, name)) for name in names]


def test_once_runs_every_flow_and_exits_with_the_worst_code(tmp_path: Path) -> None:
    ran: list[str] = []

    def runner(spec: Any, **kwargs: Any) -> None:
        ran.append(spec.id)
        assert kwargs["spark"] == "SESSION" and kwargs["once"] is True
        assert kwargs["validated"] is True  # checked once by run_flows, not again by run_flow at each restart
        if spec.id == "west->east":
            raise KmirrorError("west failed")
        if spec.id == "north->east":
            raise ValidationError([], source="north")

    code = run_flows(specs(tmp_path, "west", "north", "south"), runner, once=True, spark="SESSION", stagger_s=0)
    assert code == 2 and sorted(ran) == ["north->east", "south->east", "west->east"]
    only_runtime = run_flows(specs(tmp_path, "west", "south"), runner, once=True, spark="SESSION", stagger_s=0)
    assert only_runtime == 1


def test_streaming_restarts_a_failed_flow_while_the_others_keep_running(tmp_path: Path) -> None:
    stop = threading.Event()
    starts: dict[str, int] = {}
    restarted = threading.Event()

    def runner(spec: Any, **kwargs: Any) -> None:
        starts[spec.id] = starts.get(spec.id, 0) + 1
        if spec.id == "west->east":
            if starts[spec.id] == 1:
                raise KmirrorError("west's source went away")
            restarted.set()
        kwargs["stop"].wait(30)  # runs until stopped

    result: list[int] = []
    thread = threading.Thread(
        target=lambda: result.append(
            run_flows(specs(tmp_path, "west", "north"), runner, stop=stop, spark="S", first_s=0.01, stagger_s=0)
        )
    )
    thread.start()
    assert restarted.wait(10)
    assert starts["north->east"] == 1  # the other flow was never stopped
    stop.set()
    thread.join(10)
    assert result == [0] and starts == {"west->east": 2, "north->east": 1}


def test_the_restart_backoff_defaults_are_5_s_doubling_to_5_min() -> None:
    assert (several_flows.RESTART_FIRST_S, several_flows.RESTART_CAP_S) == (5.0, 300.0)


def test_run_flow_skips_the_checks_run_flows_made_and_makes_them_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """run_flow validates client configs (and a transform) itself unless told its caller did."""
    import kmirror_engine.clients.factory as factory
    import spark_app.main as main

    checked: list[str] = []
    monkeypatch.setattr(factory, "validate_client_configs", lambda route, copy: checked.append(route.flow_id))

    class Reached(Exception):
        pass

    def stop_here(*args: Any, **kwargs: Any) -> None:
        raise Reached

    monkeypatch.setattr(main, "check_clusters", stop_here)
    [spec] = specs(tmp_path, "west")
    for validated, expected in ((True, []), (False, [spec.id])):
        checked.clear()
        with pytest.raises(Reached):
            main.run_flow(spec, spark="S", validated=validated)
        assert checked == expected
