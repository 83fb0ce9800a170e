"""Brownfield network ids from the platform team's network stack (`kafka-mirror:network`).

A stack file may give any id of `kafka-mirror:spark` (VPC, subnets, KMS keys, security groups) as
`{network_output: NAME}` instead of the id itself; with `kafka-mirror:network: {stack:
ORG/PROJECT/STACK}` the program reads each NAME from that stack's outputs through a StackReference
before it validates the config, so the ids live where the network is made and no stack file copies
them. The prerequisite checks then run on the ids read, as on ids written in config.

    kafka-mirror:network: {stack: acme/network/eu-central-1}
    kafka-mirror:spark:
      vpc_id: {network_output: vpcId}
      subnet_id: {network_output: privateSubnetA}
      encryption: {kms_key_arn: {network_output: ebsKeyArn}, certificates_zip: s3://...}

An output that is missing, or not an id (a string, or a list of strings for a list key), fails
the run before anything is registered, naming the config key, the output and the fix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pulumi

from kmirror.errors import Problem, ValidationError
from kmirror.stack.config import NS

NETWORK_KEY = "network"
REF = "network_output"
Reader = Callable[[str, list[str]], Mapping[str, Any]]


def references(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """(config path, output name) of every `{network_output: NAME}` in `value`."""
    if isinstance(value, dict):
        if set(value) == {REF}:
            yield path, value[REF]
            return
        for key, item in value.items():
            yield from references(item, f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from references(item, f"{path}[{i}]")


def network_stack(raw: Any) -> str | None:
    """The network stack's name from `kafka-mirror:network` (None when unset); ValidationError otherwise."""
    if raw is None:
        return None
    stack = raw.get("stack") if isinstance(raw, dict) else None
    if not isinstance(stack, str) or stack.count("/") != 2 or set(raw) != {"stack"}:
        raise ValidationError(
            [
                Problem(
                    f"{NS}:{NETWORK_KEY}",
                    f"must be {{stack: ORG/PROJECT/STACK}} (the network stack whose outputs hold the ids), got {raw!r}",
                )
            ]
        )
    return stack


def _is_id(value: Any) -> bool:
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, str) and v for v in value)
    return isinstance(value, str) and bool(value)


def substitute(value: Any, outputs: Mapping[str, Any], stack: str, path: str, problems: list[Problem]) -> Any:
    """`value` with every reference replaced by its output (pure); appends a Problem per bad one."""
    if isinstance(value, dict) and set(value) == {REF}:
        name = value[REF]
        found = outputs.get(name) if isinstance(name, str) else None
        if found is None:
            problems.append(
                Problem(
                    path,
                    f"network stack {stack} has no output {name!r}: export it there (`pulumi stack output "
                    f"--stack {stack}` lists what it has), or write the id here instead of {{{REF}: {name!r}}}",
                )
            )
        elif not _is_id(found):
            problems.append(
                Problem(path, f"network stack {stack}'s output {name!r} is {found!r}, not an id or a list of ids")
            )
        return found
    if isinstance(value, dict):
        return {k: substitute(v, outputs, stack, f"{path}.{k}", problems) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, outputs, stack, f"{path}[{i}]", problems) for i, v in enumerate(value)]
    return value


def read_outputs(stack: str, names: list[str]) -> dict[str, Any]:
    """The named outputs of `stack` (a StackReference, read now: the config is validated before
    any resource is registered); a missing output is left out."""
    from pulumi.runtime.sync_await import _sync_await  # as the SDK's synchronous invokes wait

    ref = pulumi.StackReference(f"network-{stack.replace('/', '-')}", stack_name=stack)
    found = {}
    for name in names:
        details = _sync_await(ref.get_output_details(name))
        value = details.value if details.value is not None else details.secret_value
        if value is not None:
            found[name] = value
    return found


def resolve_network(raw: dict[str, Any], network: Any, read: Reader = read_outputs) -> dict[str, Any]:
    """`raw` (the `kafka-mirror:*` config) with the spark section's references replaced by the network
    stack's outputs; unchanged when it has none. Raises ValidationError listing every bad reference."""
    spark_path = f"{NS}:spark"
    refs = list(references(raw.get("spark"), spark_path))
    stack = network_stack(network)
    if not refs:
        return raw
    if stack is None:
        fix = f"run: pulumi config set --path {NS}:{NETWORK_KEY}.stack ORG/PROJECT/STACK (the network stack)"
        raise ValidationError(
            [
                Problem(path, f"takes the network output {name!r} but {NS}:{NETWORK_KEY} is not set; {fix}")
                for path, name in refs
            ]
        )
    bad = [
        Problem(path, f"{REF} must name an output, got {name!r}")
        for path, name in refs
        if not isinstance(name, str) or not name
    ]
    if bad:
        raise ValidationError(bad)
    outputs = read(stack, sorted({name for _, name in refs}))
    problems: list[Problem] = []
    spark = substitute(raw["spark"], outputs, stack, spark_path, problems)
    if problems:
        raise ValidationError(problems)
    return {**raw, "spark": spark}
