"""Every registration of every example stack (both `spark.apps_per` modes) and of MirrorDeployment
built directly (EKS with its own kubeconfig and a PodMonitor, EMR), under the SDK's mocks, as one
canonical JSON: type, name, URN, parent, provider, dependencies (sorted), property dependencies,
inputs, options (protect, retain_on_delete, delete_before_replace, aliases, ...), component outputs
and stack exports. A refactoring of the components that changes nothing deployed leaves it byte-equal:

    .venv/bin/python -m tests.pulumi.render_all /tmp/before.json   # before the change
    .venv/bin/python -m tests.pulumi.render_all /tmp/after.json    # after it
    cmp /tmp/before.json /tmp/after.json

The app bundle and wheelhouse are built once under `--work` (default /tmp/kmirror-render-all) and
reused, so changes elsewhere in the tree do not move the EMR step arguments between the two runs.
Source positions (file and line of each registration) are left out: moving code moves them.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import json_format
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings

from tests.pulumi.harness import SECRET_VALUES, TWO_CLUSTER_TOPOLOGY, Mocks, _without_resource_refs, stack_config

STACKS = ("west", "east", "central", "local")
APPS_PER = ("flow", "target")
VOLATILE = ("object", "sourcePosition", "stackTrace", "parentStackTraceHandle")


def canonical(value: Any) -> Any:
    """Inputs as plain JSON: assets by content, numbers as the engine sends them."""
    if isinstance(value, pulumi.FileAsset):
        return {"file": Path(value.path).name, "bytes": len(Path(value.path).read_bytes())}
    if isinstance(value, pulumi.StringAsset):
        return {"text": value.text}
    if isinstance(value, pulumi.AssetArchive):
        return {"archive": canonical(dict(value.assets))}
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [canonical(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


class Recorder(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.records: list[dict[str, Any]] = []
        self.outputs: dict[str, Any] = {}

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            record = json_format.MessageToDict(request, preserving_proto_field_name=True)
            for key in VOLATILE:
                record.pop(key, None)
            record["dependencies"] = sorted(record.get("dependencies", []))
            for deps in record.get("propertyDependencies", {}).values():
                deps["urns"] = sorted(deps.get("urns", []))
            inputs = rpc.deserialize_properties(_without_resource_refs(request.object), keep_unknowns=True)
            record["inputs"] = canonical(dict(inputs))
            record["urn"] = response.urn
            self.records.append(record)
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        self.outputs[request.urn] = canonical(dict(rpc.deserialize_properties(request.outputs, keep_unknowns=True)))
        return super().RegisterResourceOutputs(request)


def _run(stack: str, config: dict[str, str], body: Any) -> dict[str, Any]:
    mocks = Mocks()
    monitor = Recorder(mocks)
    settings.ROOT.set(None)
    pulumi.runtime.set_mocks(mocks, project="kafka-mirror", stack=stack, preview=False, monitor=monitor)
    pulumi.runtime.set_all_config(config, [f"kafka-mirror:{k}" for k in SECRET_VALUES])
    exported: dict[str, Any] = {}

    @pulumi.runtime.test
    def program() -> Any:
        real_export = pulumi.export
        pulumi.export = lambda key, value: exported.__setitem__(key, value)  # type: ignore[assignment]
        try:
            body()
        finally:
            pulumi.export = real_export

        def keep(values: dict[str, Any]) -> None:
            exported.clear()
            exported.update(values)

        return pulumi.Output.from_input(dict(exported)).apply(keep)

    program()
    resources = sorted(monitor.records, key=lambda r: (r["urn"], json.dumps(r, sort_keys=True)))
    return {"resources": resources, "outputs": monitor.outputs, "exports": canonical(exported)}


def stack_case(stack: str, apps_per: str) -> dict[str, Any]:
    config = stack_config(stack)
    spark = json.loads(config["kafka-mirror:spark"])
    config["kafka-mirror:spark"] = json.dumps({**spark, "apps_per": apps_per})

    def body() -> None:
        from kafka_mirror import program

        program.main()

    return _run(stack, config, body)


def direct_case() -> dict[str, Any]:
    """MirrorDeployment as another program builds it: EKS with a kubeconfig of its own, a PodMonitor,
    secrets and a depends_on; EMR through the platform's deployment target."""

    def body() -> None:
        from kafka_mirror import EksSparkPlatform, EmrSparkPlatform, MirrorDeployment, ReplicationTopology

        topology = ReplicationTopology(
            "east", {"datacenter": "east", "checkpoint_root": "s3a://b/ck", "topology_yaml": TWO_CLUSTER_TOPOLOGY}
        )
        image = f"repo/kafka-mirror@sha256:{'a' * 64}"
        eks = EksSparkPlatform(
            "east-eks", {"namespace": "mirror", "image": image, "operator": {"install": False}, "metrics_port": 9500}
        )
        emr = EmrSparkPlatform("east-emr", {"bucket": "acme-mirror", "cluster_id": "j-EXISTING", "region": "eu-west-1"})
        spec = topology.flow_specs.apply(lambda s: s["west-1->east-1"])
        MirrorDeployment(
            "mirror-eks",
            {
                "flow_spec": spec,
                "eks": eks.deployment_target,
                "kubeconfig": "apiVersion: v1\nkind: Config\n",
                "pod_monitor": True,
                "secret_names": ["east-1-scram"],
                "spark": {"executors": 3, "executor_memory": "3g", "options": {"spark.x": "1"}},
            },
            pulumi.ResourceOptions(depends_on=[topology]),
        )
        MirrorDeployment("mirror-eks-plain", {"flow_spec": spec, "eks": eks.deployment_target})
        MirrorDeployment(
            "mirror-emr",
            {"flow_spec": spec, "emr": emr.deployment_target, "spark": {"executors": 2}},
            pulumi.ResourceOptions(depends_on=topology),
        )

    return _run("direct", {}, body)


def render_all(work: Path) -> dict[str, Any]:
    from kafka_mirror.bundle import build_bundle
    from tests.pulumi.test_program import fake_wheelhouse

    bundle = work / "bundle.zip"
    if not bundle.exists():
        built, _ = build_bundle(Path(__file__).resolve().parents[2], work / "build")
        os.replace(built, bundle)
    wheelhouse = work / "wheelhouse"
    if not wheelhouse.exists():
        fake_wheelhouse(wheelhouse)
    os.environ["KMIRROR_BUNDLE"] = str(bundle)
    os.environ["KMIRROR_WHEELHOUSE"] = str(wheelhouse)
    cases = {f"{stack}/{apps_per}": stack_case(stack, apps_per) for stack in STACKS for apps_per in APPS_PER}
    cases["direct"] = direct_case()
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--work", type=Path, default=Path("/tmp/kmirror-render-all"))
    ns = parser.parse_args()
    ns.work.mkdir(parents=True, exist_ok=True)
    cases = render_all(ns.work)
    ns.out.write_text(json.dumps(cases, indent=1, sort_keys=True, default=str) + "\n")
    print(ns.out, {case: len(value["resources"]) for case, value in cases.items()})


if __name__ == "__main__":
    main()
