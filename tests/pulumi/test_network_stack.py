"""Brownfield network ids from a network stack's outputs (issue 43, day two): `kafka-mirror:network`
names the platform team's network stack, and `{network_output: NAME}` in `kafka-mirror:spark` takes an
id from its outputs through a StackReference (`components/kafka_mirror/network.py`).

The central (EMR) stack under Pulumi mocks with its VPC, subnet, KMS key and Prometheus security group
read from a mocked network stack: the cluster and the prerequisite checks get the same ids as the
stack file's; a missing output, and a reference without `kafka-mirror:network`, refuse the run before
any resource is registered, naming the key, the output and the fix.
"""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from kafka_mirror.network import resolve_network
from kmirror.errors import ValidationError
from tests.pulumi.harness import Mocks, Run, run_program, stack_config, unwrap
from tests.pulumi.test_program import bundle  # noqa: F401 (autouse: one bundle and wheelhouse per module)

NETWORK = "acme/network/eu-central-1"
SPARK = json.loads(stack_config("central")["kafka-mirror:spark"])
OUTPUTS = {  # what the network stack exports: the ids central's stack file writes out
    "vpcId": SPARK["vpc_id"],
    "privateSubnetA": SPARK["subnet_id"],
    "ebsKeyArn": SPARK["encryption"]["kms_key_arn"],
    "scrapersSg": SPARK["prometheus"]["security_group_id"],
}


class NetworkMocks(Mocks):
    """The harness's account plus the network stack (a StackReference is read as a resource)."""

    def __init__(self, outputs: dict[str, Any]) -> None:
        super().__init__()
        self.outputs = outputs
        self.references: list[tuple[str, str]] = []

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        if args.typ == "pulumi:pulumi:StackReference":
            self.references.append((args.name, args.inputs["name"]))
            return args.inputs["name"], {"name": args.inputs["name"], "outputs": self.outputs, "secretOutputNames": []}
        return super().new_resource(args)


def by_reference(**network: Any) -> dict[str, str]:
    config = stack_config("central")
    spark = dict(SPARK)
    spark["vpc_id"] = {"network_output": "vpcId"}
    spark["subnet_id"] = {"network_output": "privateSubnetA"}
    spark["encryption"] = {**SPARK["encryption"], "kms_key_arn": {"network_output": "ebsKeyArn"}}
    spark["prometheus"] = {"security_group_id": {"network_output": "scrapersSg"}}
    config["kafka-mirror:spark"] = json.dumps(spark)
    if network:
        config["kafka-mirror:network"] = json.dumps(network)
    return config


def test_the_ids_come_from_the_network_stacks_outputs() -> None:
    mocks = NetworkMocks(OUTPUTS)
    run: Run = run_program("central", by_reference(stack=NETWORK), mocks=mocks)
    assert mocks.references == [("network-acme-network-eu-central-1", NETWORK)]
    [cluster] = run.of_type("aws:emr/cluster:Cluster")
    inputs = unwrap(cluster.inputs)
    assert inputs["ec2Attributes"]["subnetId"] == OUTPUTS["privateSubnetA"]
    # the prerequisites were checked on the ids read (the subnet's VPC against the VPC output too)
    assert f"aws:ec2/getSubnet:getSubnet {OUTPUTS['privateSubnetA']}" in mocks.invokes
    assert f"aws:ec2/getVpc:getVpc {OUTPUTS['vpcId']}" in mocks.invokes
    assert any(OUTPUTS["ebsKeyArn"] in call for call in mocks.invokes)
    assert any(OUTPUTS["scrapersSg"] in call for call in mocks.invokes)


def test_a_missing_output_is_refused_naming_key_output_and_fix() -> None:
    mocks = NetworkMocks({k: v for k, v in OUTPUTS.items() if k != "ebsKeyArn"})
    with pytest.raises(ValidationError) as raised:
        run_program("central", by_reference(stack=NETWORK), mocks=mocks)
    text = str(raised.value)
    assert "kafka-mirror:spark.encryption.kms_key_arn" in text and "'ebsKeyArn'" in text
    assert f"pulumi stack output --stack {NETWORK}" in text
    assert not [c for c in mocks.invokes if not c.startswith("aws:lambda")]  # refused before any check


def test_a_reference_without_a_network_stack_is_refused_with_the_command_that_sets_it() -> None:
    with pytest.raises(ValidationError) as raised:
        resolve_network({"spark": {"vpc_id": {"network_output": "vpcId"}}}, None, read=pytest.fail)
    assert "kafka-mirror:spark.vpc_id" in str(raised.value)
    assert "pulumi config set --path kafka-mirror:network.stack ORG/PROJECT/STACK" in str(raised.value)


def test_outputs_that_are_not_ids_and_bad_network_keys_are_refused() -> None:
    raw = {"spark": {"cluster": {"subnet_ids": {"network_output": "private"}, "vpc_id": {"network_output": "vpc"}}}}
    with pytest.raises(ValidationError) as raised:
        resolve_network(raw, {"stack": NETWORK}, read=lambda s, n: {"private": [], "vpc": {"id": "vpc-1"}})
    text = str(raised.value)
    assert "spark.cluster.subnet_ids" in text and "spark.cluster.vpc_id" in text and "not an id" in text
    ok = resolve_network(raw, {"stack": NETWORK}, read=lambda s, n: {"private": ["subnet-1", "subnet-2"], "vpc": "v"})
    assert ok["spark"]["cluster"] == {"subnet_ids": ["subnet-1", "subnet-2"], "vpc_id": "v"}
    for bad in ("acme/network", {"stack": "x"}, {"stack": NETWORK, "outputs": {}}):
        with pytest.raises(ValidationError, match="kafka-mirror:network"):
            resolve_network(raw, bad if isinstance(bad, dict) else {"stack": bad}, read=pytest.fail)


def test_a_config_without_references_reads_no_stack() -> None:
    raw = {"spark": dict(SPARK)}
    assert resolve_network(raw, None, read=pytest.fail) is raw
