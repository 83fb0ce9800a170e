"""Run the whole Pulumi program (`kafka_mirror.program.main`) under the SDK's mocks and record
every registration: type, logical name, parent, provider, dependencies, inputs (secret values
keep the SDK's secret wrapper, so a test sees whether a value travelled as a secret), and the
outputs components and the stack registered."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from google.protobuf import json_format, struct_pb2
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings

ROOT = Path(__file__).resolve().parents[2]
SECRET_VALUES = {
    "east1ScramPassword": "scram-pw-0xC0FFEE",
    "east1CaPem": "-----BEGIN CERTIFICATE-----\nCA-7f3a\n-----END CERTIFICATE-----\n",
    "centralKeytabB64": "BQIAAABHAAIAC0tNSVJST1IuVEVTVA==",
    "centralKrb5Conf": "[libdefaults]\n  default_realm = EXAMPLE.COM\n",
    "westKubeconfig": "apiVersion: v1\nkind: Config\n# west's kubeconfig (a stack secret)\n",
}
KIND_KUBECONFIG = ROOT / "tests" / "pulumi" / "data" / "kind-kubeconfig.yaml"
# Two clusters and one active-passive topology: the flow `west-1->east-1`, for programs that build
# the components themselves (through the provider, tests/pulumi/test_provider.py, or directly).
TWO_CLUSTER_TOPOLOGY = """
clusters:
  west-1: {bootstrap_servers: "b1.west-1.example.com:9092", datacenter: west}
  east-1: {bootstrap_servers: "b1.east-1.example.com:9092", datacenter: east}
topologies:
  - {name: dr, pattern: active-passive, primary: west-1, standby: east-1, topics: ["orders.*"]}
"""


@dataclass
class Registered:
    typ: str
    name: str
    urn: str
    parent: str
    provider: str
    dependencies: list[str]
    inputs: dict[str, Any]
    options: dict[str, Any] = field(default_factory=dict)  # protect, retain_on_delete, custom_timeouts


@dataclass
class Run:
    resources: list[Registered] = field(default_factory=list)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # urn -> registered outputs
    exports: dict[str, Any] = field(default_factory=dict)  # `pulumi.export`ed stack outputs, resolved
    exports_secret: bool = False

    def of_type(self, typ: str) -> list[Registered]:
        return [r for r in self.resources if r.typ == typ]

    def named(self, name: str) -> Registered:
        [found] = [r for r in self.resources if r.name == name]
        return found

    def by_urn(self, urn: str) -> Registered:
        [found] = [r for r in self.resources if r.urn == urn]
        return found


# The AWS account the example stacks deploy into, as the provider's data sources see it (the
# prerequisites a platform team made by hand: kafka_mirror.prerequisites). Anything else exists too,
# unless a test names it in `absent`.
SUBNET_VPCS = {
    "subnet-0c1d2e3f4a5b60001": "vpc-0c1d2e3f4a5b60001",
    "subnet-0a1b2c3d4e5f60001": "vpc-0a1b2c3d4e5f60001",
    "subnet-0a1b2c3d4e5f60002": "vpc-0a1b2c3d4e5f60001",
}
INVOKE_IDS = {
    "aws:ec2/getVpc:getVpc": "id",
    "aws:ec2/getSubnet:getSubnet": "id",
    "aws:kms/getKey:getKey": "keyId",
    "aws:s3/getBucket:getBucket": "bucket",
    "aws:s3/getObject:getObject": "key",
    "aws:sns/getTopic:getTopic": "name",
    "aws:ec2/getSecurityGroup:getSecurityGroup": "id",
    "aws:iam/getRole:getRole": "name",
}


TIMEOUT_KINDS = ("create", "update", "delete")


class Mocks(pulumi.runtime.Mocks):
    """Outputs = inputs, plus what real providers compute and the program reads; invokes answer as
    the example stacks' AWS account (`SUBNET_VPCS`), without the resources named in `absent`."""

    def __init__(self, absent: frozenset[str] = frozenset(), invokes: list[str] | None = None) -> None:
        self.absent = absent
        self.invokes = invokes if invokes is not None else []  # "token identifier", in call order

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[str, Any]]:
        out = dict(args.inputs)
        if args.typ == "aws:secretsmanager/secret:Secret":
            out["arn"] = f"arn:aws:secretsmanager:eu-central-1:123456789012:secret:{args.inputs['name']}-AbCdEf"
        if args.typ == "eks:index:Cluster":  # pulumi-eks (a remote component under mocks)
            kubeconfig = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": args.name}]}
            out = {}  # its inputs hold resource references (instance roles) the mocks cannot echo
            out.update(
                kubeconfigJson=json.dumps(kubeconfig),
                kubeconfig=kubeconfig,
                oidcProviderArn="arn:aws:iam::123456789012:oidc-provider/oidc.eks.us-east-1.amazonaws.com/id/EX",
                oidcProviderUrl="oidc.eks.us-east-1.amazonaws.com/id/EX",
                clusterSecurityGroupId="sg-0eks0cluster0000",
            )
        if args.typ == "eks:index:ManagedNodeGroup":
            return f"{args.name}-id", {}
        if args.typ == "aws:kms/key:Key":
            out["arn"] = f"arn:aws:kms:us-east-1:123456789012:key/{args.name}"
        if args.typ == "aws:eks/cluster:Cluster":
            out.update(endpoint="https://ABC.gr7.us-east-1.eks.amazonaws.com", certificateAuthority={"data": "Q0E="})
            out.setdefault("name", args.name)
        if args.typ == "aws:emr/cluster:Cluster":
            return "j-MOCKCLUSTER", out
        if args.typ == "aws:emr/securityConfiguration:SecurityConfiguration":
            out.setdefault("name", f"{args.name}-3d9e1f2")  # auto-naming
        if args.typ == "aws:lambda/function:Function":
            out.setdefault("name", f"{args.name}-5e1d2c0")  # auto-naming
            out["arn"] = f"arn:aws:lambda:eu-central-1:123456789012:function:{out['name']}"
        if args.typ == "aws:cloudwatch/logGroup:LogGroup":
            out.setdefault("name", f"{args.name}-0c4b7e9")
            out["arn"] = f"arn:aws:logs:eu-central-1:123456789012:log-group:{out['name']}"
        if args.typ == "aws:lambda/invocation:Invocation":  # what kafka_mirror.emr.step_lambda returns
            out["result"] = json.dumps({"step_id": f"s-{args.name.upper()[:10]}", "stopped": [], "added": True})
        if args.typ == "aws:iam/instanceProfile:InstanceProfile":
            out["arn"] = f"arn:aws:iam::123456789012:instance-profile/{out.get('name') or args.name}"
        if args.typ == "aws:iam/policy:Policy":
            out["arn"] = f"arn:aws:iam::123456789012:policy/{args.name}-5b2e8d0"
        if args.typ == "aws:iam/role:Role":
            out.setdefault("name", f"{args.name}-7f3a9c1")  # auto-naming: the logical name + a random suffix
            out["arn"] = f"arn:aws:iam::123456789012:role/{out['name']}"
        return f"{args.name}-id", out

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[str, Any], list[tuple[str, str]] | None]:
        if args.token == "aws:lambda/getInvocation:getInvocation":  # the step reader (kafka_mirror.emr.step_reader)
            self.invokes.append(f"{args.token} {args.args.get('functionName')}")
            return {"id": "read", "result": json.dumps({"state": "RUNNING", "drift": "none"}), **dict(args.args)}, []
        if args.token not in INVOKE_IDS:
            return {}, []
        identifier = str(args.args.get(INVOKE_IDS[args.token]))
        self.invokes.append(f"{args.token} {identifier}")
        if identifier in self.absent:  # what the provider reports, in short
            return {}, [(INVOKE_IDS[args.token], f"{identifier} not found")]
        if args.token == "aws:ec2/getSubnet:getSubnet":
            return {"id": identifier, "vpcId": SUBNET_VPCS.get(identifier, "vpc-unknown")}, []
        if args.token == "aws:kms/getKey:getKey":
            return {"id": identifier, "keyState": "Enabled", "keyManager": "CUSTOMER"}, []
        return {"id": identifier, "arn": f"arn:aws:mock:::{identifier}", "etag": "e", "vpcId": "vpc-x"}, []


def _refs_to_urns(value: Any) -> Any:
    if isinstance(value, dict):
        if value.get(rpc._special_sig_key) == rpc._special_resource_sig:
            return value["urn"]  # a resource passed as input (e.g. pulumi-eks' cluster): recorded by URN
        return {k: _refs_to_urns(v) for k, v in value.items()}
    return [_refs_to_urns(v) for v in value] if isinstance(value, list) else value


def _without_resource_refs(struct: Any) -> Any:
    """The inputs with resource references replaced by their URNs: deserialising a reference
    would look the resource up on the engine's event loop, which a mock monitor is not on."""
    plain = json_format.MessageToDict(struct)
    out = struct_pb2.Struct()
    out.update(_refs_to_urns(plain))
    return out


class RecordingMonitor(pulumi_mocks.MockMonitor):
    def __init__(self, mocks: pulumi.runtime.Mocks, run: Run) -> None:
        super().__init__(mocks)
        self.run = run

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            inputs = rpc.deserialize_properties(_without_resource_refs(request.object), keep_unknowns=True)
            self.run.resources.append(
                Registered(
                    request.type,
                    request.name,
                    response.urn,
                    request.parent,
                    request.provider,
                    list(request.dependencies),
                    dict(inputs),
                    {
                        "protect": bool(request.protect),
                        "retain_on_delete": bool(request.retainOnDelete),
                        "custom_timeouts": {k: getattr(request.customTimeouts, k) for k in TIMEOUT_KINDS},
                    },
                )
            )
        return response

    def RegisterResourceOutputs(self, request: Any) -> Any:
        self.run.outputs[request.urn] = dict(rpc.deserialize_properties(request.outputs, keep_unknowns=True))
        return super().RegisterResourceOutputs(request)


def stack_config(stack: str, topology: str | None = None) -> dict[str, str]:
    """`stacks/Pulumi.<stack>.yaml` as the CLI hands it to the program, plus the secret values
    `pulumi config set --secret` would hold."""
    raw = yaml.safe_load((ROOT / "stacks" / f"Pulumi.{stack}.yaml").read_text())["config"]
    kube = (raw.get("kafka-mirror:spark") or {}).get("kubeconfig") or {}
    if "file" in kube:  # the local stack's ~/.kube/config: a kind kubeconfig of the test data instead
        kube["file"] = str(KIND_KUBECONFIG)
    config = {k: v if isinstance(v, str) else json.dumps(v) for k, v in raw.items()}
    config.update({f"kafka-mirror:{k}": v for k, v in SECRET_VALUES.items()})
    if topology is not None:
        config["kafka-mirror:topology"] = topology
    return config


def run_program(
    stack: str, config: dict[str, str] | None = None, preview: bool = False, mocks: Mocks | None = None
) -> Run:
    """Run `kafka_mirror.program.main()` as stack `stack` (a `pulumi preview` with `preview`) and wait
    for every registration."""
    run = Run()
    mocks = mocks or Mocks()
    settings.ROOT.set(None)  # set_mocks keeps an earlier run's root Stack; each run is its own stack
    pulumi.runtime.set_mocks(
        mocks, project="kafka-mirror", stack=stack, preview=preview, monitor=RecordingMonitor(mocks, run)
    )
    pulumi.runtime.set_all_config(config or stack_config(stack), [f"kafka-mirror:{k}" for k in SECRET_VALUES])

    @pulumi.runtime.test
    def program() -> Any:
        from kafka_mirror import program as module

        exported: dict[str, Any] = {}
        real_export = pulumi.export
        pulumi.export = lambda key, value: exported.__setitem__(key, value)  # type: ignore[assignment]
        try:
            module.main()
        finally:
            pulumi.export = real_export
        everything = pulumi.Output.from_input(exported)

        async def record(values: dict[str, Any]) -> None:
            run.exports = values
            run.exports_secret = bool(await everything.is_secret())

        return everything.apply(record)

    program()
    return run


def is_secret(value: Any) -> bool:
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def unwrap(value: Any) -> Any:
    """A registered value with secret wrappers removed (what the provider would receive)."""
    if is_secret(value):
        return unwrap(value["value"])
    if isinstance(value, dict):
        return {k: unwrap(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)  # the engine's JSON numbers; Kubernetes schemas want integers
    return value


if __name__ == "__main__":  # `.venv/bin/python -m tests.pulumi.harness east`: what `pulumi up -s east` would register
    import sys

    result = run_program(sys.argv[1] if len(sys.argv) > 1 else "east")
    for registered in result.resources:
        print(f"{registered.typ:70} {registered.name}")
    print(json.dumps(result.exports, indent=2, sort_keys=True, default=str))


def assert_handler_stands_alone(archive: pulumi.AssetArchive, filename: str, tmp_path: Path) -> None:
    """A Lambda function's zip holds its handler file alone, and that file imports on the Lambda runtime
    (boto3 and the standard library) without loading anything of this project."""
    import subprocess
    import sys

    assert list(archive.assets) == [filename]
    source = archive.assets[filename]
    assert isinstance(source, pulumi.StringAsset)
    (tmp_path / filename).write_text(source.text)
    module = filename.removesuffix(".py")
    code = (
        "import sys; sys.path[:] = [p for p in sys.path if 'site-packages' in p or 'python3' in p]; "
        f"sys.path.insert(0, {str(tmp_path)!r}); import {module}; "
        "ours = sorted(m for m in sys.modules if m.startswith(('kmirror', 'kafka_mirror'))); "
        f"print(ours, callable({module}.handler))"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True"]
