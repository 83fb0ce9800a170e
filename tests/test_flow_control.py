"""Pause/resume control records (issue 46): encoding, the newest state, the driver's incremental
reader and its audit lines, the planner's decision, and the `kmirror pause|resume|status` CLI."""

from __future__ import annotations

import io
import json
from dataclasses import asdict
from types import SimpleNamespace
from typing import Any

import pytest

from kmirror_engine.planning.flow_control import (
    PREFIX,
    RUNNING,
    ControlReader,
    ControlState,
    decode,
    encode,
    newest_record,
    newest_state,
)
from kmirror_engine.planning.internal_names import control_topic
from tests.planner_fakes import FakeAdmin, planner, raw_spec, spec

FLOW = raw_spec()
PAUSED = ControlState("paused", by="ops", at="2026-11-28T21:00:00Z", reason="target maintenance")


def test_a_control_record_round_trips_and_junk_is_no_state() -> None:
    value = encode(PAUSED)
    assert json.loads(value) == {
        "state": "paused",
        "by": "ops",
        "at": "2026-11-28T21:00:00Z",
        "reason": "target maintenance",
    }
    assert decode(value) == PAUSED and decode(value).paused  # type: ignore[union-attr]
    assert decode(encode(ControlState("running", by="ops"))) == ControlState("running", by="ops")
    for junk in (None, b"", b"not json", b"[1]", b'{"state": "stopped"}'):
        assert decode(junk) is None
    with pytest.raises(ValueError, match="paused, running"):
        encode(ControlState("stopped"))


def test_the_newest_valid_record_of_the_flow_wins() -> None:
    resumed = ControlState("running", by="ops", at="2026-11-28T21:05:00Z")
    log = [(b"a->b", encode(PAUSED)), (b"c->d", encode(resumed)), (b"a->b", b"junk"), (None, b"x")]
    assert newest_record(log, "a->b") == PAUSED  # c->d's record and junk do not count
    assert newest_state([*log, (b"a->b", encode(resumed))], "a->b") == resumed
    assert newest_record(log, "x->y") is None
    assert newest_state([], "a->b") == RUNNING
    assert newest_state([], "a->b", PAUSED) == PAUSED  # nothing new: the state stays


class FakeMessage:
    def __init__(self, key: bytes | None, value: bytes | None) -> None:
        self._key, self._value = key, value

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def error(self) -> None:
        return None


class FakeConsumer:
    """One partition of the control topic: consume() hands out what was appended since the last call."""

    def __init__(self, log: list[tuple[bytes, bytes]], exists: bool = True) -> None:
        self.log, self.exists, self.read, self.closed, self.consumes = log, exists, 0, False, 0

    def list_topics(self, topic: str, timeout: float) -> Any:
        topics = {topic: SimpleNamespace(error=None)} if self.exists else {}
        return SimpleNamespace(topics=topics)

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        return 0, len(self.log)

    def assign(self, tps: Any) -> None:
        assert [(tp.topic, tp.partition) for tp in tps] == [(control_topic(), 0)]

    def position(self, tps: Any) -> list[Any]:
        return [SimpleNamespace(offset=self.read)]

    def consume(self, n: int, timeout: float) -> list[FakeMessage]:
        self.consumes += 1
        new, self.read = self.log[self.read :], len(self.log)
        return [FakeMessage(k, v) for k, v in new]

    def close(self) -> None:
        self.closed = True


def reader(consumer: FakeConsumer, clock: list[float]) -> tuple[ControlReader, io.StringIO]:
    out = io.StringIO()
    made: list[FakeConsumer] = []

    def make() -> FakeConsumer:
        made.append(consumer)
        return consumer

    flow = spec()
    return ControlReader(flow.id, flow.target, make_consumer=make, out=out, clock=lambda: clock[0]), out


def audit_lines(out: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line.removeprefix(PREFIX)) for line in out.getvalue().splitlines() if line.startswith(PREFIX)]


def test_the_reader_reads_only_new_records_and_audits_each_change() -> None:
    log = [(b"west->east", encode(ControlState("running", by="ops"))), (b"west->east", encode(PAUSED))]
    consumer, clock = FakeConsumer(log), [0.0]
    r, out = reader(consumer, clock)
    assert r.current() == PAUSED  # the first read goes to the topic's end
    assert audit_lines(out) == [
        {
            "flow": "west->east",
            "state": "paused",
            "by": "ops",
            "at": "2026-11-28T21:00:00Z",
            "reason": "target maintenance",
        }
    ]
    assert r.current() == PAUSED and len(audit_lines(out)) == 1  # unchanged: no new line
    log.append((b"other->east", encode(ControlState("running"))))
    assert r.current() == PAUSED
    resumed = ControlState("running", by="ops", at="2026-11-28T21:05:00Z")
    log.append((b"west->east", encode(resumed)))
    assert r.current() == resumed
    assert [a["state"] for a in audit_lines(out)] == ["paused", "running"]
    assert consumer.read == len(log) and not consumer.closed and not r.holds()


def test_a_first_read_cut_short_holds_the_copying_until_it_reached_the_end() -> None:
    consumer, clock = FakeConsumer([(b"west->east", encode(PAUSED))]), [0.0]
    real_consume = consumer.consume

    def slow(n: int, timeout: float) -> list[FakeMessage]:  # the first read's deadline passes, nothing fetched
        clock[0] += 3
        consumer.consume = real_consume  # type: ignore[method-assign]
        return []

    consumer.consume = slow  # type: ignore[method-assign]
    r, _out = reader(consumer, clock)
    assert r.holds() and r.state == RUNNING  # the pause record is still unread: this trigger plans nothing
    assert r.holds() and r.state == PAUSED  # the next trigger read it
    consumer.log.append((b"west->east", encode(RUNNING)))
    assert not r.holds()


def test_no_control_topic_means_running_and_it_is_looked_for_again_later() -> None:
    consumer, clock = FakeConsumer([], exists=False), [100.0]
    r, out = reader(consumer, clock)
    assert r.current() == RUNNING and not consumer.closed and out.getvalue() == ""  # kept to look again
    consumer.exists = True
    consumer.log.append((b"west->east", encode(PAUSED)))
    assert r.current() == RUNNING  # not looked for again within RETRY_MISSING_S: no Kafka call per trigger
    clock[0] += 11
    assert r.current() == PAUSED
    r.close()
    assert consumer.closed


def test_a_read_failure_keeps_the_last_state_and_never_raises() -> None:
    consumer, clock = FakeConsumer([(b"west->east", encode(PAUSED))]), [0.0]
    r, out = reader(consumer, clock)
    assert r.current() == PAUSED

    def broken(n: int, timeout: float) -> list[Any]:
        raise RuntimeError("broker gone")

    consumer.consume = broken  # type: ignore[method-assign]
    assert r.current() == PAUSED
    assert "reading kmirror-flow-control.internal failed, keeping state 'paused': broker gone" in out.getvalue()


class Control:
    def __init__(self, state: ControlState) -> None:
        self.state = state

    def holds(self) -> bool:
        return self.state.paused


def test_a_paused_flow_plans_no_copy_work_and_resumes_where_it_stopped() -> None:
    source = FakeAdmin({"orders": [(0, 100)]})
    p = planner(source)
    p.control = Control(PAUSED)
    start = p.initial_offsets()
    assert p.next_end(start, None) == start == {("orders", 0): 0}  # paused: the batch end is its start
    assert p.plan(start, p.next_end(start, None)) == []
    p.control.state = RUNNING
    end = p.next_end(start, None)
    assert end == {("orders", 0): 100}
    [[rng]] = p.plan(start, end)
    assert (rng.start_offset, rng.end_offset) == (0, 100)  # from where it stopped: nothing skipped


def test_pause_and_resume_take_the_flow_selectors_and_write_the_record(
    monkeypatch: Any, tmp_path: Any, capsys: Any
) -> None:
    from kmirror_cli.cli import main
    from kmirror_engine.planning import flow_control

    written: list[tuple[str, ControlState]] = []
    monkeypatch.setattr(flow_control, "write_state", lambda flow_id, target, state: written.append((flow_id, state)))
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(FLOW))
    assert main(["pause", "--flow", str(flow), "--reason", "target maintenance"]) == 0
    assert main(["resume", "--flow", str(flow)]) == 0
    [(flow_id, paused), (_, resumed)] = written
    assert flow_id == "west->east" and (paused.state, paused.reason, resumed.state, resumed.reason) == (
        "paused",
        "target maintenance",
        "running",
        None,
    )
    assert paused.by and paused.at and paused.at.endswith("Z")
    assert "flow west->east: paused" in capsys.readouterr().out
    assert main(["pause", "--flow", "nope", "--topology", str(tmp_path / "missing.yaml")]) == 2


def test_a_failed_write_exits_1_naming_the_cluster_and_the_fix(monkeypatch: Any, tmp_path: Any, capsys: Any) -> None:
    from kmirror_cli.cli import main
    from kmirror_engine.clients import topic_admin

    def unreachable(endpoint: Any, topic: str, config: Any) -> None:
        raise RuntimeError("KafkaError{code=_TRANSPORT}")

    monkeypatch.setattr(topic_admin, "ensure_topic", unreachable)
    flow = tmp_path / "flow.json"
    flow.write_text(json.dumps(FLOW))
    assert main(["resume", "--flow", str(flow)]) == 1
    err = capsys.readouterr().err
    assert "cannot write the control record of west->east on east: KafkaError{code=_TRANSPORT}" in err
    assert "check that east (east:9092) is reachable" in err and "kmirror-flow-control.internal" in err


LOG = """\
WARNING: Using incubator modules: jdk.incubator.vector
kmirror progress {"flow": "west->east", "batch": 0, "records": 100, "lag": 0}
kmirror progress {"flow": "other->east", "batch": 7, "records": 5, "lag": 0}
kmirror data_loss {"flow": "west->east", "topic": "orders", "partition": 0, "first_lost_offset": 3, "skipped": 2}
kmirror data_loss {"flow": "other->east", "topic": "x", "partition": 0, "first_lost_offset": 0, "skipped": 1}
kmirror: planning process died; starting the query again from its checkpoint
kmirror control {"flow": "west->east", "state": "paused", "by": "ops", "at": "2026-11-28T21:00:00Z", "reason": null}
kmirror progress {"flow": "west->east", "batch": 1, "records": 0, "lag": 5
"""


def test_status_log_keeps_the_flows_newest_progress_control_and_problems() -> None:
    from kmirror_cli.status_log import summarize

    summary = summarize(LOG.splitlines(keepends=True), "west->east")
    assert summary["last_progress"] == {"flow": "west->east", "batch": 0, "records": 100, "lag": 0}  # cut line: skipped
    assert summary["last_control"]["state"] == "paused"
    assert summary["problems"] == [
        LOG.splitlines()[3],
        "kmirror: planning process died; starting the query again from its checkpoint",
    ]
    assert summarize([], "west->east") == {"last_progress": None, "last_control": None, "problems": []}


def test_status_with_a_log_reports_it_and_a_missing_log_is_bad_input(
    monkeypatch: Any, tmp_path: Any, capsys: Any
) -> None:
    from kmirror_cli.cli import main
    from kmirror_cli.commands import status

    monkeypatch.setattr(
        status,
        "flow_status",
        lambda spec, stale, now: {
            "flow": spec.id,
            "running": True,
            "paused": True,
            "control": asdict(PAUSED),
            "heartbeat_age_ms": 1,
            "last_copy_age_ms": None,
            "newest_checkpoint_age_ms": None,
            "lag": {},
            "lag_total": 0,
        },
    )
    flow, log = tmp_path / "flow.json", tmp_path / "driver.log"
    flow.write_text(json.dumps(FLOW))
    log.write_text(LOG)
    assert main(["status", "--flow", str(flow), "--log", str(log), "--format", "json"]) == 4  # paused
    out = json.loads(capsys.readouterr().out)
    assert out["log"]["last_progress"]["batch"] == 0 and len(out["log"]["problems"]) == 2
    assert main(["status", "--flow", str(flow), "--log", str(log)]) == 4
    text = capsys.readouterr().out
    assert "control: PAUSED (by ops at 2026-11-28T21:00:00Z, reason: target maintenance)" in text
    assert "problems in the log: 2" in text
    assert main(["status", "--flow", str(flow), "--log", str(tmp_path / "nope.log")]) == 2
    assert "--log: cannot read" in capsys.readouterr().err


def test_pause_from_the_topology_and_the_stack_writes_the_planned_flows_record(monkeypatch: Any, capsys: Any) -> None:
    from kmirror_cli.cli import main
    from kmirror_engine.planning import flow_control

    written: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        flow_control, "write_state", lambda flow_id, target, state: written.append((flow_id, target.alias, state.state))
    )
    assert main(["pause", "--topology", "stacks/topology.yaml", "--flow", "west-1->east-1"]) == 0
    assert main(["resume", "--stack", "east", "--flow", "west-1->east-1", "--reason", "done"]) == 0
    assert written == [("west-1->east-1", "east-1", "paused"), ("west-1->east-1", "east-1", "running")]
    assert main(["pause", "--topology", "stacks/topology.yaml", "--flow", "west-1->east1"]) == 2
    assert "did you mean 'west-1->east-1'?" in capsys.readouterr().err
