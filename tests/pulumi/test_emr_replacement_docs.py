"""Every argument the EMR platform sets on its cluster is classified (replace / in place) in docs/deploy.md's
"Changes that replace the EMR cluster" (issue 43, first review: "ForceNew changes on a protected EMR cluster
undocumented"): a new cluster argument cannot be added without saying what changing it does."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from kafka_mirror.bundle import build_bundle
from tests.pulumi.harness import ROOT, Run, run_program
from tests.pulumi.test_program import fake_wheelhouse

SECTION = "### Changes that replace the EMR cluster"


def documented() -> dict[str, str]:
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text[text.index(SECTION) :].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| .* \| ([^|]+) \|$", section, re.MULTILINE)
    return {name: effect.strip() for name, effect in rows}


@pytest.fixture(scope="module")
def central(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    path, _ = build_bundle(ROOT, tmp_path_factory.mktemp("bundle"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KMIRROR_BUNDLE", str(path))
        patch.setenv("KMIRROR_WHEELHOUSE", str(fake_wheelhouse(tmp_path_factory.mktemp("wheelhouse"))))
        yield run_program("central")


def test_every_cluster_argument_is_documented_with_its_effect(central: Run) -> None:
    [cluster] = central.of_type("aws:emr/cluster:Cluster")
    table = documented()
    assert set(cluster.inputs) - {"__defaults"} <= set(table), "add the new argument to docs/deploy.md's table"
    assert set(table.values()) <= {"replace", "in place", "replace / in place"}
    # the arguments AWS can change on a running cluster (terraform-provider-aws: not ForceNew)
    in_place = {k for k, v in table.items() if v == "in place"}
    assert in_place == {"terminationProtection", "stepConcurrencyLevel", "unhealthyNodeReplacement", "tags"}
    assert central.named("central-emr-cluster").options["protect"] is True  # what makes a replace fail
