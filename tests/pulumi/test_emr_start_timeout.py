"""`spark.step_start_timeout_s` (issue 43, item 6): how long an EMR stack's `up` waits for an added step
and its YARN application to be RUNNING comes from the stack config, reaches the step function's input,
and a value the function cannot wait within one Lambda run is refused before anything is created."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from kafka_mirror.emr.platform_args import emr_settings
from kafka_mirror.emr.specs import emr_step_input
from kafka_mirror.emr.step_lambda import MAX_STOP_TIMEOUT_S, StepSpec, parse_step
from kmirror.errors import ValidationError
from kmirror.stack.config import parse_stack_config
from kmirror.stack.models import EmrSparkConfig
from tests.pulumi.harness import ROOT, Run, run_program, stack_config, unwrap
from tests.pulumi.test_program import prebuilt_artifacts


def central_spark(**changes: object) -> dict[str, object]:
    raw = yaml.safe_load((ROOT / "stacks" / "Pulumi.central.yaml").read_text())["config"]
    return {**raw["kafka-mirror:spark"], **changes}


@pytest.fixture(scope="module")
def central(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    config = stack_config("central")
    config["kafka-mirror:spark"] = json.dumps(central_spark(step_start_timeout_s=720))
    with prebuilt_artifacts(tmp_path_factory):
        yield run_program("central", config)


def test_the_stacks_start_timeout_is_what_the_step_function_waits(central: Run) -> None:
    invocations = central.of_type("aws:lambda/invocation:Invocation")
    assert invocations
    for invocation in invocations:
        step = parse_step(json.loads(unwrap(invocation.inputs)["input"]))
        assert step.start_timeout_s == 720


def test_without_it_the_input_is_unchanged_and_the_function_waits_its_default() -> None:
    settings = emr_settings({"bucket": "acme", "region": "eu-central-1"})
    step = json.loads(emr_step_input("j-1", "a->b", ["x", "--", "spark-submit"], settings))
    assert "start_timeout_s" not in step  # no change (no Invocation update) for the stacks that do not set it
    assert parse_step(step).start_timeout_s == StepSpec.start_timeout_s == 300


@pytest.mark.parametrize("value", [0, 841, 1.5])
def test_a_start_timeout_the_function_cannot_wait_is_refused(value: object) -> None:
    with pytest.raises(ValidationError) as raised:
        parse_stack_config({"datacenter": "central", "spark": central_spark(step_start_timeout_s=value)})
    [problem] = [str(p) for p in raised.value.problems]
    assert problem.startswith("kafka-mirror:spark.step_start_timeout_s: "), problem
    # the component refuses it too (a program using the component provider has no stack config)
    with pytest.raises(ValidationError, match=r"step_start_timeout_s: .*840"):
        emr_settings({"bucket": "acme", "region": "eu-central-1", "step_start_timeout_s": value})  # type: ignore[typeddict-item]


def test_the_configs_bound_is_the_functions() -> None:
    bound = EmrSparkConfig.model_fields["step_start_timeout_s"].metadata
    assert [getattr(m, "le", None) for m in bound if getattr(m, "le", None)] == [MAX_STOP_TIMEOUT_S]
