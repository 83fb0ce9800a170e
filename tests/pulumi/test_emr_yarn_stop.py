"""Never two writers on EMR: a flow's step stops its YARN application, and the replacement starts
only once it is gone.

Fakes behave as AWS and YARN document: cancelling a RUNNING step signals the step's process only
(SIGTERM, or SIGKILL with TERMINATE_PROCESS), the step is CANCEL_PENDING until that process exits,
then CANCELLED; a cluster-mode Spark application keeps running in YARN when its spark-submit dies;
`yarn application -kill` ends an application (here after a configurable delay, as the
ResourceManager does asynchronously). The step wrapper is run exactly as the step runs it
(`python -c <source> ...` from `emr_step_args`), with fake `yarn` and `spark-submit` on PATH
sharing their application table in a JSON file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from kafka_mirror.emr.specs import (
    STEP_STRINGS_MAX_CHARS,
    VENV_PYTHON,
    EmrSettings,
    emr_step_args,
    step_wrapper_source,
    yarn_tag,
)
from kafka_mirror.emr.step_lambda import StepRunner, apply_action

FLOW = "a->b"
TAG = yarn_tag(FLOW)
LIVE = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")

FAKE_TABLE = """
import fcntl, json, os, sys, time
STATE = os.environ["FAKE_YARN_STATE"]
LIVE = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED", "RUNNING")

def locked(update):
    with open(STATE + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(STATE) as f:
                data = json.load(f)
        except FileNotFoundError:
            data = {"next": 1, "apps": {}}
        result = update(data)
        with open(STATE + ".tmp", "w") as f:
            json.dump(data, f)
        os.replace(STATE + ".tmp", STATE)
        return result

def state(app):
    if app["kill_at"] is not None and time.time() >= app["kill_at"]:
        return "KILLED"
    return app["state"]
"""

FAKE_YARN = """
time.sleep(float(os.environ.get("FAKE_YARN_CALL_S", "0")))  # a loaded box: every yarn call a slow start
argv = sys.argv[1:]
if argv[:2] == ["application", "-list"]:
    states = argv[argv.index("-appStates") + 1].split(",")
    tag = argv[argv.index("-appTags") + 1]
    rows = locked(lambda d: [(i, a) for i, a in sorted(d["apps"].items()) if state(a) in states and tag in a["tags"]])
    print(f"Total number of applications (application-types: [], states: {states} and tags: [{tag}]):{len(rows)}")
    print("                Application-Id\\t    Application-Name\\t    Application-Type\\t      User\\t     Queue\\t"
          "             State\\t       Final-State\\t       Progress\\t                       Tracking-URL")
    for i, a in rows:
        print(f"{i}\\t{a['name']}\\t SPARK\\t hadoop\\t default\\t {state(a)}\\t UNDEFINED\\t 10%\\t http://node:4040")
elif argv[:2] == ["application", "-kill"]:
    app_id = argv[2]
    def kill(d):
        app = d["apps"].get(app_id)
        if app is None or state(app) not in LIVE:
            return f"Application {app_id} has already finished "
        if not os.environ.get("FAKE_YARN_KILL_IGNORED") and app["kill_at"] is None:
            app["kill_at"] = time.time() + float(os.environ.get("FAKE_YARN_KILL_DELAY_S", "0"))
        return f"Killing application {app_id}"
    print(locked(kill))
else:
    sys.exit(f"fake yarn: unsupported {argv}")
"""

# Cluster mode with waitAppCompletion: registers the application, then only reports on it. Its
# default SIGTERM handling ends this process alone; the application keeps running.
FAKE_SPARK_SUBMIT = """
args = sys.argv[1:]
tags = [t for a in args if a.startswith("spark.yarn.tags=") for t in a.split("=", 1)[1].split(",")]
name = args[args.index("--name") + 1]
def submit(d):
    app_id = f"application_1700000000000_{d['next']:04d}"
    d["next"] += 1
    d["apps"][app_id] = {"name": name, "tags": tags, "state": "RUNNING", "kill_at": None, "submitted_at": time.time()}
    return app_id
app_id = locked(submit)
print("submitted", app_id, flush=True)
while True:
    now = locked(lambda d: state(d["apps"][app_id]))
    if now != "RUNNING":
        sys.exit(0 if now == "FINISHED" else 1)
    time.sleep(0.05)
"""


@dataclass
class FakeYarn:
    """The fake cluster's application table and the environment that puts the fakes on PATH."""

    state: Path
    env: dict[str, str]
    procs: list[subprocess.Popen[str]] = field(default_factory=list)

    def apps(self) -> dict[str, dict[str, Any]]:
        """Every application with its effective state (a kill takes effect at `kill_at`)."""
        if not self.state.exists():
            return {}
        apps: dict[str, dict[str, Any]] = json.loads(self.state.read_text())["apps"]
        for app in apps.values():
            if app["kill_at"] is not None and time.time() >= app["kill_at"]:
                app["state"] = "KILLED"
        return apps

    def live(self, tag: str = TAG) -> list[str]:
        return sorted(i for i, a in self.apps().items() if a["state"] in LIVE and tag in a["tags"])

    def leftover(self, tag: str = TAG) -> str:
        """An application a previous step left RUNNING (its wrapper was SIGKILLed)."""
        app = {"name": "mirror-a-to-b", "tags": [tag], "state": "RUNNING", "kill_at": None, "submitted_at": 0.0}
        self.state.write_text(json.dumps({"next": 2, "apps": {"application_1700000000000_0001": app}}))
        return "application_1700000000000_0001"

    def start(self, args: list[str], **env: str) -> subprocess.Popen[str]:
        # its own process group: the teardown ends the fake spark-submits it started, too
        proc = subprocess.Popen(
            runnable(args), env={**self.env, **env}, text=True, stderr=subprocess.PIPE, start_new_session=True
        )
        self.procs.append(proc)
        return proc


def _script(path: Path, body: str) -> None:
    # -S: no site (the fakes need only the standard library), a cheaper start for each of many calls
    path.write_text(f"#!{sys.executable} -S\n{FAKE_TABLE}\n{body}")
    path.chmod(0o755)


@pytest.fixture
def yarn(tmp_path: Path) -> Iterator[FakeYarn]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "yarn", FAKE_YARN)
    _script(bin_dir / "spark-submit", FAKE_SPARK_SUBMIT)
    state = tmp_path / "yarn-state.json"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_YARN_STATE": str(state)}
    fake = FakeYarn(state, env)
    yield fake
    for proc in fake.procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # the wrapper may be gone and its spark-submit not
        proc.wait()


def step_args(stop_timeout_s: int = 30) -> list[str]:
    """The step's command-runner.jar args, as the deployment renders them.

    The wrapper's kill bound is half `stop_timeout_s`: 15 s by default, far above what a kill that
    works takes even when every fake `yarn` call is a fresh Python at load 25 (CI is a loaded 2-core
    box). It only ends a wait for a kill that never takes effect, so the tests of that bound pass
    their own small `stop_timeout_s`; the others assert the order, which a bound cannot change."""
    settings = EmrSettings(bucket="acme", region="eu-central-1", step_stop_timeout_s=stop_timeout_s)
    return emr_step_args(FLOW, "s3://acme/f/flow.json", "s3://acme/app/b.zip", "s3://acme/app/m.py", {}, settings)


def runnable(args: list[str]) -> list[str]:
    """The step's args on this machine: this interpreter for the nodes' venv, a fast poll."""
    if args[0] != VENV_PYTHON:
        return args
    return [sys.executable, "-c", args[2], "--poll-s", "0.1", *args[3:]]


def wait_for(check: Callable[[], Any], timeout_s: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := check():
            return found
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout_s} s: {check}")


def test_the_step_runs_the_wrapper_with_the_flows_tag_and_waits_for_the_app() -> None:
    args = step_args(stop_timeout_s=4)
    assert args[:3] == [VENV_PYTHON, "-c", step_wrapper_source()]
    assert args[3:8] == ["--tag", "kmirror-a-to-b", "--kill-timeout-s", "2", "--"]
    assert args[8:11] == ["spark-submit", "--deploy-mode", "cluster"]
    confs = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    assert confs["spark.yarn.tags"] == "kmirror-a-to-b" and confs["spark.yarn.submit.waitAppCompletion"] == "true"
    assert sum(len(a) for a in args) <= STEP_STRINGS_MAX_CHARS
    compile(step_wrapper_source(), "kmirror-step", "exec")
    assert '"""' not in step_wrapper_source().splitlines()[0]  # the module docstring is not shipped


def test_user_options_cannot_remove_the_tag_or_the_wait() -> None:
    settings = EmrSettings(bucket="acme", spark_conf={"spark.yarn.submit.waitAppCompletion": "false"})
    spark = {"options": {"spark.yarn.tags": "team-a"}}
    args = emr_step_args(FLOW, "s3://f", "s3://b", "s3://m", spark, settings)
    confs = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    assert (
        confs["spark.yarn.tags"] == "team-a,kmirror-a-to-b" and confs["spark.yarn.submit.waitAppCompletion"] == "true"
    )
    with pytest.raises(ValueError, match=r"flow 'a->b' are \d+ characters; EMR accepts at most 10240 in total"):
        emr_step_args(FLOW, "s3://f", "s3://b", "s3://m", {"options": {"spark.x": "y" * 6000}}, settings)


# 0.6 s a `yarn` call: a fresh Python at load 25 (where a 2 s kill bound failed this test, exit 3)
@pytest.mark.parametrize("call_s", ["0", "0.6"])
def test_sigterm_kills_the_yarn_app_and_the_wrapper_exits_only_once_it_is_gone(yarn: FakeYarn, call_s: str) -> None:
    wrapper = yarn.start(step_args(), FAKE_YARN_KILL_DELAY_S="1.5", FAKE_YARN_CALL_S=call_s)
    [app] = wait_for(yarn.live)
    wrapper.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    assert wrapper.poll() is None and yarn.live() == [app]  # the kill is not done: still waiting
    assert wrapper.wait(60) == 143
    assert yarn.apps()[app]["state"] == "KILLED" and yarn.live() == []


def test_a_leftover_app_is_killed_and_gone_before_the_new_submit(yarn: FakeYarn) -> None:
    old = yarn.leftover()
    yarn.start(step_args(), FAKE_YARN_KILL_DELAY_S="1")
    [new] = wait_for(lambda: [i for i in yarn.live() if i != old])
    apps = yarn.apps()
    assert apps[old]["state"] == "KILLED" and apps[new]["submitted_at"] >= apps[old]["kill_at"]


def test_a_kill_that_never_takes_effect_fails_the_stop_naming_the_app(yarn: FakeYarn) -> None:
    wrapper = yarn.start(step_args(stop_timeout_s=4), FAKE_YARN_KILL_IGNORED="1")
    [app] = wait_for(yarn.live)
    started = time.monotonic()
    wrapper.send_signal(signal.SIGTERM)
    _, stderr = wrapper.communicate(timeout=15)
    assert wrapper.returncode == 3 and time.monotonic() - started >= 2  # its bound: half the provider's
    assert re.search(  # its own run's tag (kmirror-a-to-b-run-<random>): never another step's application
        rf"kmirror-step: YARN application\(s\) {app} with tag kmirror-a-to-b-run-[0-9a-f]{{12}} still live 2 s after "
        r"yarn application -kill; the step stopped but they may still write\. Kill them on the primary node",
        stderr,
    )


def test_a_leftover_that_cannot_be_killed_blocks_the_submit(yarn: FakeYarn) -> None:
    old = yarn.leftover()
    wrapper = yarn.start(step_args(stop_timeout_s=2), FAKE_YARN_KILL_IGNORED="1")
    _, stderr = wrapper.communicate(timeout=15)
    assert wrapper.returncode == 3 and yarn.live() == [old] and len(yarn.apps()) == 1
    assert f"YARN application(s) {old} with tag kmirror-a-to-b still live 1 s after" in stderr
    assert "nothing was submitted" in stderr


class FakeEmr:
    """describe_step / list_steps / cancel_steps / add_job_flow_steps over real step processes, as
    AWS documents them, with StepConcurrencyLevel > 1 (a new step starts at once). Records, for
    every added step, the applications with the flow's tag that were RUNNING at that moment."""

    def __init__(self, yarn: FakeYarn) -> None:
        self.yarn = yarn
        self.steps: dict[str, dict[str, Any]] = {}
        self.running_at_add: list[list[str]] = []

    def add_job_flow_steps(self, JobFlowId: str, Steps: list[dict[str, Any]]) -> dict[str, Any]:
        [step] = Steps
        self.running_at_add.append([i for i in self.yarn.live() if self.yarn.apps()[i]["state"] == "RUNNING"])
        step_id = f"s-{len(self.steps) + 1}"
        proc = self.yarn.start(step["HadoopJarStep"]["Args"])
        self.steps[step_id] = {"proc": proc, "cancel": None, "name": step["Name"]}
        return {"StepIds": [step_id]}

    def _state(self, step_id: str) -> str:
        step = self.steps[step_id]
        code = step["proc"].poll()
        if step["cancel"]:
            return "CANCEL_PENDING" if code is None else "CANCELLED"
        return "RUNNING" if code is None else ("COMPLETED" if code == 0 else "FAILED")

    def describe_step(self, ClusterId: str, StepId: str) -> dict[str, Any]:
        return {"Step": {"Id": StepId, "Name": self.steps[StepId]["name"], "Status": {"State": self._state(StepId)}}}

    def get_paginator(self, operation: str) -> Any:
        assert operation == "list_steps"
        fake = self

        class Pages:
            def paginate(self, ClusterId: str, StepStates: list[str]) -> list[dict[str, Any]]:
                found = [fake.describe_step(ClusterId, i)["Step"] for i in sorted(fake.steps, reverse=True)]
                return [{"Steps": [s for s in found if s["Status"]["State"] in StepStates]}]

        return Pages()

    def cancel_steps(self, ClusterId: str, StepIds: list[str], StepCancellationOption: str) -> dict[str, Any]:
        for step_id in StepIds:
            step = self.steps[step_id]
            step["cancel"] = StepCancellationOption
            if step["proc"].poll() is None:
                sig = signal.SIGKILL if StepCancellationOption == "TERMINATE_PROCESS" else signal.SIGTERM
                step["proc"].send_signal(sig)
        return {"CancelStepsInfoList": [{"StepId": s, "Status": "SUBMITTED"} for s in StepIds]}


def replace_the_step(emr: FakeEmr, args: list[str]) -> None:
    """Create a step, then update it with new args, as the step function's Invocation does."""
    runner = StepRunner(lambda region: emr)
    # the step function's wait for the cancelled step: a bound (not the order the tests assert) under 60 s,
    # so it polls each second
    step = {"cluster_id": "j-1", "name": "mirror-a-to-b", "args": args, "region": "eu-central-1", "stop_timeout_s": 50}
    apply_action(runner, {**step, "tf": {"action": "create", "prev_input": None}})
    wait_for(emr.yarn.live)
    news = {**step, "args": [*args[:-1], "flow-v2.json"]}
    apply_action(runner, {**news, "tf": {"action": "update", "prev_input": step}})


def test_the_replacement_step_is_added_only_once_the_old_app_is_gone(yarn: FakeYarn) -> None:
    emr = FakeEmr(yarn)
    replace_the_step(emr, step_args())
    assert emr.running_at_add == [[], []]
    [first, second] = wait_for(lambda: len(yarn.apps()) == 2 and sorted(yarn.apps()))
    assert yarn.apps()[first]["state"] == "KILLED" and yarn.live() == [second]


def test_cancelling_a_bare_spark_submit_step_leaves_its_app_running(yarn: FakeYarn) -> None:
    """The fake is faithful: without the wrapper (the step args before this fix), the cancelled
    step ends while its application runs on, and the replacement is a second writer."""
    emr = FakeEmr(yarn)
    bare = step_args()[step_args().index("--") + 1 :]
    replace_the_step(emr, bare)
    [first] = emr.running_at_add[1]
    assert emr.running_at_add[0] == [] and yarn.apps()[first]["state"] == "RUNNING"
