#!/usr/bin/env python3
"""The process of a flow's EMR step: runs `spark-submit --deploy-mode cluster` and owns the YARN
application it starts, so that a stopped step means a stopped mirror.

    kmirror-step.py --tag kmirror-a-to-b --kill-timeout-s 300 -- spark-submit ... \
        --conf spark.yarn.tags=kmirror-a-to-b --conf spark.yarn.submit.waitAppCompletion=true ...

Why: EMR's CancelSteps sends SIGTERM (SIGKILL with TERMINATE_PROCESS) to the step's process only;
a cluster-mode Spark application keeps running in YARN, so the replacement step would start a
second writer on the same checkpoint. This wrapper:

1. at start, kills every live YARN application carrying the flow's tag (the previous step's, whose
   wrapper may still be stopping it, or one left by a wrapper that was SIGKILLed) and waits until
   YARN lists none; if some survive the bound it exits 3 naming them and submits nothing;
2. adds a tag of its own run (`<flow tag>-run-<random>`) to spark.yarn.tags and runs spark-submit
   (which waits for the application) until it exits, or until SIGTERM, SIGINT or SIGHUP arrives,
   or its parent (the step runner) dies;
   with `--running-marker s3://...`, once YARN lists this run's application RUNNING it writes that
   object (`aws s3 cp`; the application id and run tag as JSON): the step function, outside the
   VPC, waits for it, so a green `up` means the flow's application runs, not only its step;
3. then stops spark-submit (so it can submit nothing more), kills the live applications with its
   run's tag only, and waits until YARN lists none; exits 3 naming the survivors past the bound,
   else 143 when stopped by a signal or spark-submit's own exit code.

EMR shows a cancelled step CANCELLED once the step's JVM is gone, possibly before this wrapper's
kill is done, so the step function (kafka_mirror.emr.step_lambda) may add the replacement early:
the order "old application gone, then the new one submitted" is kept by step 1 of the replacement,
and step 3 of the old wrapper can never kill the replacement's application (another run's tag).
Standard library only: EMR steps run
it inline (`python -c`, see kafka_mirror.emr.specs.emr_step_args), so the cluster needs no copy
and a new wrapper travels with the step that uses it. Comment lines and this docstring are
stripped before it is embedded (EMR caps a step's strings at 10240 characters in total).
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

LIVE_STATES = "NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING"
APP_ID = re.compile(r"^\s*(application_\d+_\d+)\s", re.MULTILINE)
EXIT_STILL_LIVE = 3
EXIT_STOPPED = 143  # 128 + SIGTERM
CLIENT_STOP_S = 10
stop_signals: list[int] = []


def on_signal(signum: int, _frame: object) -> None:
    """Only record the signal: the main loop does the stopping (a handler must not block)."""
    stop_signals.append(signum)


def say(message: str) -> None:
    print(f"kmirror-step: {message}", file=sys.stderr, flush=True)


def live_apps(yarn: str, tag: str) -> list[str]:
    """Ids of the applications with `tag` YARN lists as not yet ended; raises OSError or
    CalledProcessError when YARN cannot be asked."""
    cmd = [yarn, "application", "-list", "-appStates", LIVE_STATES, "-appTags", tag]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=120).stdout
    return sorted(set(APP_ID.findall(out)))


def kill_all(yarn: str, tag: str, timeout_s: float, poll_s: float) -> list[str]:
    """Kill every live application with `tag` until YARN lists none; return the ids (or the YARN
    error) still there after `timeout_s`, empty when all are gone."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            apps = live_apps(yarn, tag)
        except (OSError, subprocess.SubprocessError) as exc:
            apps = [f"unknown (yarn application -list failed: {exc})"]
        else:
            if not apps:
                return []
            for app in apps:
                say(f"killing YARN application {app} (tag {tag})")
                subprocess.run([yarn, "application", "-kill", app], capture_output=True, text=True, timeout=120)
        if time.monotonic() >= deadline:
            return apps
        time.sleep(poll_s)


def report_survivors(apps: list[str], tag: str, timeout_s: float, submitted: bool) -> int:
    what = "the step stopped but they may still write" if submitted else "nothing was submitted"
    say(
        f"YARN application(s) {', '.join(apps)} with tag {tag} still live {timeout_s:g} s after "
        f"yarn application -kill; {what}. Kill them on the primary node (yarn application -kill APP_ID), "
        "then run pulumi up again"
    )
    return EXIT_STILL_LIVE


def stop_client(client: subprocess.Popen[bytes]) -> None:
    """SIGTERM spark-submit, then SIGKILL: once it is gone it cannot submit anything more."""
    if client.poll() is None:
        client.terminate()
        try:
            client.wait(CLIENT_STOP_S)
        except subprocess.TimeoutExpired:
            client.kill()
            client.wait()


def with_run_tag(command: list[str], run_tag: str) -> list[str]:
    """`command` with `run_tag` added to its spark.yarn.tags (parse checked there is one)."""
    return [f"{a},{run_tag}" if a.startswith("spark.yarn.tags=") else a for a in command]


def publish_running(args: argparse.Namespace, run_tag: str) -> bool:
    """True once this run's application is RUNNING in YARN and `args.running_marker` is written."""
    cmd = [args.yarn, "application", "-list", "-appStates", "RUNNING", "-appTags", run_tag]
    try:
        apps = sorted(set(APP_ID.findall(subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout)))
    except (OSError, subprocess.SubprocessError):
        return False
    if not apps:
        return False
    body = json.dumps({"application_id": apps[0], "run_tag": run_tag, "state": "RUNNING"})
    put = [args.aws, "s3", "cp", "-", args.running_marker]
    try:
        done = subprocess.run(put, input=body, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        say(f"cannot write {args.running_marker} ({exc}); retrying")
        return False
    if done.returncode != 0:
        say(f"cannot write {args.running_marker} (aws s3 cp: {done.stderr.strip()[-300:]}); retrying")
        return False
    say(f"YARN application {apps[0]} is RUNNING: wrote {args.running_marker}")
    return True


def run(args: argparse.Namespace) -> int:
    parent = os.getppid()
    left = kill_all(args.yarn, args.tag, args.kill_timeout_s, args.poll_s)
    if left:
        return report_survivors(left, args.tag, args.kill_timeout_s, submitted=False)
    if stop_signals:
        return EXIT_STOPPED
    run_tag = f"{args.tag}-run-{uuid.uuid4().hex[:12]}"
    say(f"submitting with YARN tag {run_tag}")
    client = subprocess.Popen(with_run_tag(args.command, run_tag))
    published = not args.running_marker
    # A signal does not cut a sleep short (PEP 475), so stopping starts within poll_s.
    while client.poll() is None and not stop_signals and os.getppid() == parent:
        published = published or publish_running(args, run_tag)
        time.sleep(args.poll_s)
    if client.poll() is None:
        say(f"stopping (signal {stop_signals[0]})" if stop_signals else "the step runner is gone: stopping")
    stop_client(client)
    # Also after spark-submit's own exit: a client that died must not leave its application behind.
    # Only this run's: the flow's tag may by now name the replacement step's application.
    left = kill_all(args.yarn, run_tag, args.kill_timeout_s, args.poll_s)
    if left:
        return report_survivors(left, run_tag, args.kill_timeout_s, submitted=True)
    return EXIT_STOPPED if stop_signals else int(client.returncode)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="kmirror-step")
    parser.add_argument("--tag", required=True, help="the flow's YARN application tag (lowercase)")
    parser.add_argument("--kill-timeout-s", type=float, default=300.0)
    parser.add_argument("--poll-s", type=float, default=1.0)
    parser.add_argument("--yarn", default="yarn")
    parser.add_argument("--aws", default="aws")
    parser.add_argument("--running-marker", default="", help="s3:// object written once the application runs")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- spark-submit ...")
    args = parser.parse_args(argv)
    args.command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not args.command:
        parser.error("no command after --: expected -- spark-submit ...")
    tags = [a.split("=", 1)[1].split(",") for a in args.command if a.startswith("spark.yarn.tags=")]
    if not any(args.tag in t for t in tags):
        parser.error(f"the command sets no spark.yarn.tags containing {args.tag}: its application could not be found")
    return args


def main(argv: list[str]) -> int:
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    return run(parse(argv))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
