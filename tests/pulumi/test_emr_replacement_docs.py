"""Every argument the EMR platform sets on its cluster is classified (replace / in place) in docs/deploy.md's
"Changes that replace the EMR cluster" (issue 43, first review: "ForceNew changes on a protected EMR cluster
undocumented"): a new cluster argument cannot be added without saying what changing it does."""

from __future__ import annotations

import re

from tests.pulumi.harness import ROOT, Run
from tests.pulumi.test_emr_step_function import central  # noqa: F401 (the fixture: central under mocks)

SECTION = "### Changes that replace the EMR cluster"


def documented() -> dict[str, str]:
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text[text.index(SECTION) :].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| .* \| ([^|]+) \|$", section, re.MULTILINE)
    return {name: effect.strip() for name, effect in rows}


def test_every_cluster_argument_is_documented_with_its_effect(central: Run) -> None:  # noqa: F811
    [cluster] = central.of_type("aws:emr/cluster:Cluster")
    table = documented()
    assert set(cluster.inputs) - {"__defaults"} <= set(table), "add the new argument to docs/deploy.md's table"
    assert set(table.values()) <= {"replace", "in place", "replace / in place"}
    # the arguments AWS can change on a running cluster (terraform-provider-aws: not ForceNew)
    in_place = {k for k, v in table.items() if v == "in place"}
    assert in_place == {"terminationProtection", "stepConcurrencyLevel", "unhealthyNodeReplacement", "tags"}
    assert central.named("central-emr-cluster").options["protect"] is True  # what makes a replace fail
