"""Where CI runs each stack's jobs (GitHub Actions `runs-on`), read from the stack files: a stack
whose EKS API endpoint is private (`spark.cluster.deploy_from_vpc: true`) runs on the self-hosted
runner inside its VPC (`spark.cluster.runner_labels`), every other stack on `ubuntu-latest`.

`matrix`: the preview and drift jobs' `strategy.matrix` (one job per stack, each on its runner).
`up_runner`: the one `up` job deploys the stacks of `kmirror diff --format stack-order` one after
another on ONE runner, so that runner must reach every stack's API endpoint: refused when the
order needs two different VPC runners. Used by `kmirror stack-info --matrix/--up-runner`. Pure.
"""

from __future__ import annotations

from pathlib import Path

from kmirror.errors import Problem, ValidationError
from kmirror.stack.config import NAMESPACE, read_stack_config

HOSTED = ("ubuntu-latest",)  # GitHub-hosted: reaches public endpoints only


def stack_runner(stack: str, stacks_dir: str | Path = "stacks") -> tuple[str, ...]:
    """The `runs-on` labels of `stack`'s CI jobs (the whole stack file validated first)."""
    config = read_stack_config(stack, stacks_dir, plan_only=False)
    cluster = config.spark.get("cluster") or {}
    if config.platform == "eks" and cluster.get("deploy_from_vpc"):
        return tuple(cluster["runner_labels"])  # required then (kmirror.stack.platform_rules)
    return HOSTED


def matrix(stacks: list[str], stacks_dir: str | Path = "stacks") -> dict[str, list[dict[str, object]]]:
    """`{"include": [{"stack": S, "runs_on": [labels]}, ...]}` in the order given."""
    if not stacks:
        raise ValidationError([Problem("--matrix", "name at least one stack, e.g. --matrix west east central")])
    return {"include": [{"stack": s, "runs_on": list(stack_runner(s, stacks_dir))} for s in stacks]}


def up_runner(order: list[str], stacks_dir: str | Path = "stacks") -> list[str]:
    """The runner of the `up` job that deploys `order` one stack after another: ubuntu-latest when no
    stack needs a VPC runner, else the one VPC runner they need; ValidationError naming the stacks,
    their runners and the fixes when they need two different ones."""
    needs: dict[tuple[str, ...], list[str]] = {}
    for stack in order:
        if stack == "local":  # never deployed by CI (scripts/ci-deploy.sh skips it)
            continue
        runner = stack_runner(stack, stacks_dir)
        if runner != HOSTED:
            needs.setdefault(runner, []).append(stack)
    if not needs:
        return list(HOSTED)
    if len(needs) == 1:
        return list(next(iter(needs)))
    named = "; ".join(f"{', '.join(stacks)} on {list(runner)}" for runner, stacks in needs.items())
    key = f"{NAMESPACE}:spark.cluster.runner_labels"
    raise ValidationError(
        [
            Problem(
                key,
                f"the deploy order {order} needs two different VPC runners ({named}), but one `up` job deploys them "
                "one after another on one runner; give those stacks one runner that reaches every one of their "
                "VPCs (peering or Transit Gateway, admitted by each cluster's runner_security_group_id or "
                "runner_cidr_blocks) and the same runner_labels, or make all but one endpoint public "
                "(endpoint_public_access: true with public_access_cidrs: [the runner's egress CIDRs], "
                "deploy_from_vpc: false)",
            )
        ],
        "stack-info --up-runner",
    )
