"""`spark_app.jvm_signals` without a JVM: when it forwards, what the handler does, and a JVM that
refuses. The real path (spark-submit's JVM signalled, the driver stops after its batch, exit 0):
tests/cluster (`ClusterApp.stop`, legs 1c and 2c) on both Spark lines."""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import pytest

from spark_app import jvm_signals


class FakeJvm:
    """`jvm.sun.misc.Signal` as py4j shows it: Signal(name) and Signal.handle(signal, handler)."""

    def __init__(self, refuse: bool = False) -> None:
        self.handled: dict[str, Any] = {}
        jvm = self

        class Signal:
            def __init__(self, name: str) -> None:
                self.name = name

            def getNumber(self) -> int:  # the Java method's name
                return {"TERM": 15, "INT": 2}[self.name]

            @staticmethod
            def handle(signal: Signal, handler: Any) -> None:
                if refuse:
                    raise RuntimeError("Signal already used by VM or OS: SIGINT")
                jvm.handled[signal.name] = handler

        self.sun = SimpleNamespace(misc=SimpleNamespace(Signal=Signal))


def spark_with(jvm: FakeJvm) -> Any:
    return SimpleNamespace(sparkContext=SimpleNamespace(_gateway=object(), _jvm=jvm))


@pytest.fixture
def no_callback_server(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    started: list[Any] = []
    import pyspark.java_gateway

    monkeypatch.setattr(pyspark.java_gateway, "ensure_callback_server_started", started.append)
    return started


def test_a_driver_that_launched_its_jvm_itself_forwards_nothing(
    monkeypatch: pytest.MonkeyPatch, no_callback_server: list[Any]
) -> None:
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    jvm = FakeJvm()
    assert jvm_signals.stop_after_signal_to_jvm(spark_with(jvm), threading.Event()) == []
    assert jvm.handled == {} and no_callback_server == []


def test_under_spark_submit_term_and_int_to_the_jvm_stop_the_mirror_after_its_batch(
    monkeypatch: pytest.MonkeyPatch, no_callback_server: list[Any], capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    jvm, stop = FakeJvm(), threading.Event()
    assert jvm_signals.stop_after_signal_to_jvm(spark_with(jvm), stop) == ["TERM", "INT"]
    assert len(no_callback_server) == 1 and set(jvm.handled) == {"TERM", "INT"}
    handler = jvm.handled["TERM"]
    assert handler.Java.implements == ["sun.misc.SignalHandler"]
    assert not stop.is_set()
    handler.handle(jvm.sun.misc.Signal("TERM"))  # what the JVM's signal thread calls through py4j
    assert stop.is_set()
    assert "kmirror: signal 15: stopping after the current batch" in capsys.readouterr().err


def test_a_jvm_that_refuses_the_handler_leaves_the_mirror_running_and_says_so(
    monkeypatch: pytest.MonkeyPatch, no_callback_server: list[Any], caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "40000")
    assert jvm_signals.stop_after_signal_to_jvm(spark_with(FakeJvm(refuse=True)), threading.Event()) == []
    assert "cannot forward the JVM's signals" in caplog.text and "Signal already used" in caplog.text


def test_under_spark_submit_the_apps_logger_levels_are_set_on_the_jvm_it_did_not_start() -> None:
    """spark-submit's JVM read the platform's log4j2 config: the app's levels are set at run time."""
    from spark_app.session import LOG4J2, apply_logger_levels, logger_levels

    levels = logger_levels(LOG4J2)
    assert levels["org.apache.spark"] == "WARN"
    assert levels["org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"] == "ERROR"
    assert levels["org.apache.spark.scheduler.DAGScheduler"] == "ERROR"
    set_to: dict[str, str] = {}
    jvm = SimpleNamespace(
        org=SimpleNamespace(
            apache=SimpleNamespace(
                logging=SimpleNamespace(
                    log4j=SimpleNamespace(
                        Level=SimpleNamespace(valueOf=lambda name: f"Level.{name}"),
                        core=SimpleNamespace(
                            config=SimpleNamespace(
                                Configurator=SimpleNamespace(setLevel=lambda n, lvl: set_to.__setitem__(n, lvl))
                            )
                        ),
                    )
                )
            )
        )
    )
    assert sorted(apply_logger_levels(jvm)) == sorted(levels)
    assert set_to == {name: f"Level.{value}" for name, value in levels.items()}
    assert apply_logger_levels(SimpleNamespace()) == []  # no log4j2 on the JVM: left as it is
