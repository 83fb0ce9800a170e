"""Many groups at once (`kmirror failover|failback --group PATTERN | --all-groups`, issue 46):
which groups the arguments name (pure) and the argument errors (exit 2, naming the flag, the value
and the fix). The moves on real brokers: tests/e2e/test_many_groups_e2e.py."""

from __future__ import annotations

from typing import Any

import pytest

from kmirror.errors import ValidationError
from kmirror_cli.cli import main
from kmirror_cli.group_batch import chosen_groups

FLOW = ["--topology", "stacks/topology.yaml", "--flow", "west-1->east-1"]
CANDIDATES = ["app-1", "app-2", "billing"]


def test_patterns_expand_against_the_flows_groups_and_names_are_taken_as_given() -> None:
    assert chosen_groups(["app-*"], False, CANDIDATES, "west-1") == ["app-1", "app-2"]
    assert chosen_groups(["app-?", "late"], False, CANDIDATES, "west-1") == ["app-1", "app-2", "late"]
    assert chosen_groups([], True, CANDIDATES, "west-1") == CANDIDATES


def test_a_pattern_matching_nothing_names_it_and_the_groups_found() -> None:
    with pytest.raises(ValidationError) as info:
        chosen_groups(["pay*"], False, CANDIDATES, "west-1")
    assert [str(p) for p in info.value.problems] == [
        "--group: pattern 'pay*' matches no group of the flow on west-1 (groups there: app-1, app-2, billing); "
        "check the pattern or the flow's `groups`"
    ]
    with pytest.raises(ValidationError, match="--all-groups: the flow selects no consumer group on west-1"):
        chosen_groups([], True, [], "west-1")


@pytest.mark.parametrize("command", ["failover", "failback"])
def test_both_or_neither_of_group_and_all_groups_is_refused(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, *FLOW, "--group", "app-1", "--all-groups"]) == 2
    assert (
        "--all-groups: cannot be combined with --group 'app-1'; give the groups or --all-groups, not both"
        in capsys.readouterr().err
    )
    assert main([command, *FLOW]) == 2
    assert "--group: required: a group id or pattern ('app-*'), or pass --all-groups" in capsys.readouterr().err


def test_status_ages_and_its_argument_error(capsys: pytest.CaptureFixture[str]) -> None:
    from kmirror_cli.commands.status import newest_age_ms

    assert newest_age_ms([(1_000, True), (4_000, False), (3_000, True), (None, True)], 10_000) == 7_000
    assert newest_age_ms([(4_000, False)], 10_000) is None
    assert main(["status", *FLOW, "--stale-after", "0"]) == 2
    assert "--stale-after: 0 is not a positive number of seconds; give e.g. --stale-after 60" in capsys.readouterr().err


def test_describe_group_retries_a_coordinator_still_loading() -> None:
    """A broker just restarted answers COORDINATOR_LOAD_IN_PROGRESS for a while (seen in
    test_failover_source_gone_e2e's failback under load): retried, other errors are not."""
    from concurrent.futures import Future
    from types import SimpleNamespace

    from kmirror_engine.failover.group_sync import GroupAdminError, describe_group

    class Admin:
        def __init__(self, answers: list[Any]) -> None:
            self.answers, self.calls = answers, 0

        def describe_consumer_groups(self, groups: list[str], request_timeout: float) -> dict[str, Future[Any]]:
            future: Future[Any] = Future()
            answer = self.answers[min(self.calls, len(self.answers) - 1)]
            self.calls += 1
            future.set_exception(answer) if isinstance(answer, Exception) else future.set_result(answer)
            return {groups[0]: future}

    loading = RuntimeError('KafkaError{code=COORDINATOR_LOAD_IN_PROGRESS,val=14,str="ConsumerGroupDescribe: "}')
    idle = SimpleNamespace(state=SimpleNamespace(name="EMPTY"), members=[])
    admin = Admin([loading, loading, idle])
    assert describe_group(admin, "g", "west", retry_s=10).state == "EMPTY" and admin.calls == 3
    with pytest.raises(GroupAdminError, match="COORDINATOR_LOAD_IN_PROGRESS"):
        describe_group(Admin([loading]), "g", "west", retry_s=0.6)
    denied = Admin([RuntimeError("KafkaError{code=GROUP_AUTHORIZATION_FAILED}"), idle])
    with pytest.raises(GroupAdminError, match="GROUP_AUTHORIZATION_FAILED"):
        describe_group(denied, "g", "west", retry_s=10)
    assert denied.calls == 1
