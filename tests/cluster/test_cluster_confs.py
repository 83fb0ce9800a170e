"""The standalone harness submits the app with the executor confs the deployments render (leg 1
only: the Pulumi components need the main venv). A change of either side fails here."""

from __future__ import annotations

from kafka_mirror.eks.specs import EksSettings, spark_application_manifest
from kafka_mirror.emr.specs import EmrSettings, emr_step_args
from tests.cluster.standalone import DEPLOY_EXECUTOR_CONFS

FLOW = {
    "id": "west->east",
    "source": {"alias": "west", "bootstrap_servers": "w:9092"},
    "target": {"alias": "east", "bootstrap_servers": "e:9092"},
    "topics": [".*"],
}


def test_harness_executor_confs_are_the_deployments() -> None:
    args = emr_step_args(FLOW["id"], "s3://f", "s3://b", "s3://m", {}, EmrSettings(bucket="acme"))
    emr = dict(args[i + 1].split("=", 1) for i, a in enumerate(args) if a == "--conf")
    eks_app = spark_application_manifest(FLOW, {}, EksSettings())["spec"]
    eks = eks_app["sparkConf"]
    assert DEPLOY_EXECUTOR_CONFS["spark.executor.cores"] == emr["spark.executor.cores"]
    assert int(DEPLOY_EXECUTOR_CONFS["spark.executor.cores"]) == eks_app["executor"]["cores"]
    assert DEPLOY_EXECUTOR_CONFS["spark.dynamicAllocation.enabled"] == emr["spark.dynamicAllocation.enabled"]
    assert "spark.dynamicAllocation.enabled" not in eks or eks["spark.dynamicAllocation.enabled"] == "false"
    for key in ("spark.authenticate", "spark.network.crypto.enabled"):  # EKS's hardened RPC
        assert DEPLOY_EXECUTOR_CONFS[key] == eks[key], key
    # neither deployment sets a master: spark-submit's decides, so the app's local measures stay off
    assert "--master" not in eks_app.get("arguments", []) and args.count("--master") == 1  # spark-submit's own
