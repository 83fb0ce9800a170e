"""The engine's side of a multi-language component, over real gRPC, with the SDK's mocks behind it.

`PluginEngine` serves a resource monitor (the SDK's MockMonitor with the recording of
tests/pulumi/harness.py) and an engine service (log messages kept), starts the plugin as the engine
starts it (`python components <engine address>`, reading the port it prints), sends Configure, then
one Construct per resource with the monitor's address: the plugin's component code runs in its own
process and registers its children on this monitor, as under `pulumi up`.
"""

from __future__ import annotations

import subprocess
import sys
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
from google.protobuf import empty_pb2, json_format, struct_pb2
from pulumi.runtime import rpc
from pulumi.runtime.proto import (
    engine_pb2,
    engine_pb2_grpc,
    provider_pb2,
    provider_pb2_grpc,
    resource_pb2,
    resource_pb2_grpc,
)

from tests.pulumi.harness import Mocks, RecordingMonitor, Run
from tests.pulumi.yaml_program import Constructed, Value

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_VALUE = rpc._special_output_value_sig


class _Monitor(RecordingMonitor):
    """URNs as the engine makes them: a resource parented to the stack has no `Stack$` prefix."""

    def __init__(self, run: Run, project: str, stack: str) -> None:
        super().__init__(Mocks(), run)
        self.project, self.stack = project, stack

    def make_urn(self, parent: str, type_: str, name: str) -> str:
        if parent and "::pulumi:pulumi:Stack::" not in parent:
            type_ = parent.split("::")[2].split("$").pop() + "$" + type_
        return f"urn:pulumi:{self.stack}::{self.project}::{type_}::{name}"


class _MonitorService(resource_pb2_grpc.ResourceMonitorServicer):
    """The ResourceMonitor service over gRPC: each call handed to the mock monitor."""

    def __init__(self, monitor: _Monitor) -> None:
        self.monitor = monitor

    def SupportsFeature(self, request: Any, context: Any) -> Any:
        return resource_pb2.SupportsFeatureResponse(hasSupport=self.monitor.SupportsFeature(request).hasSupport)


def _delegate(method: str) -> Any:
    return lambda self, request, context: getattr(self.monitor, method)(request)


for _method in (
    "GetDeploymentInfo",
    "Invoke",
    "ReadResource",
    "RegisterResource",
    "RegisterResourceOutputs",
    "RegisterPackage",
    "RegisterStackTransform",
    "RegisterStackInvokeTransform",
    "RegisterResourceHook",
    "RegisterErrorHook",
    "SignalAndWaitForShutdown",
):
    setattr(_MonitorService, _method, _delegate(_method))


class _EngineService(engine_pb2_grpc.EngineServicer):
    def __init__(self, stack_urn: str) -> None:
        self.stack_urn = stack_urn
        self.logs: list[str] = []

    def Log(self, request: Any, context: Any) -> Any:
        self.logs.append(f"{engine_pb2.LogSeverity.Name(request.severity)} {request.urn} {request.message}")
        return empty_pb2.Empty()

    def GetRootResource(self, request: Any, context: Any) -> Any:
        return engine_pb2.GetRootResourceResponse(urn=self.stack_urn)

    def SetRootResource(self, request: Any, context: Any) -> Any:
        return engine_pb2.SetRootResourceResponse()


class PluginEngine:
    """Use as a context manager; `construct` is a yaml_program.Construct."""

    def __init__(self, project: str, stack: str, config: dict[str, str], secret_keys: set[str]) -> None:
        self.project, self.stack = project, stack
        self.config = {f"{project}:{k}": v for k, v in config.items()}
        self.secret_keys = [f"{project}:{k}" for k in secret_keys]
        self.stack_urn = f"urn:pulumi:{stack}::{project}::pulumi:pulumi:Stack::{project}-{stack}"
        self.run = Run()
        self.requests: dict[str, dict[str, Any]] = {}  # name -> the Construct request's inputs, as sent
        self.states: dict[str, struct_pb2.Struct] = {}  # urn -> the Construct response's state, as sent
        self.engine = _EngineService(self.stack_urn)
        self.stderr = ""

    def __enter__(self) -> PluginEngine:
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
        resource_pb2_grpc.add_ResourceMonitorServicer_to_server(
            _MonitorService(_Monitor(self.run, self.project, self.stack)), self.server
        )
        engine_pb2_grpc.add_EngineServicer_to_server(self.engine, self.server)
        self.address = f"127.0.0.1:{self.server.add_insecure_port('127.0.0.1:0')}"
        self.server.start()
        self.plugin = subprocess.Popen(
            [sys.executable, str(ROOT / "components"), self.address],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT / "components",
        )
        port = self.plugin.stdout.readline().strip() if self.plugin.stdout else ""
        if not port.isdigit():
            self.__exit__()
            raise RuntimeError(f"the plugin printed no port: {port!r}\n{self.stderr}")
        self.channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        self.provider = provider_pb2_grpc.ResourceProviderStub(self.channel)
        self.configured = self.provider.Configure(
            provider_pb2.ConfigureRequest(acceptSecrets=True, acceptResources=True), timeout=60
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if getattr(self, "channel", None) is not None:
            self.channel.close()
        self.plugin.terminate()
        _, self.stderr = self.plugin.communicate(timeout=30)
        self.server.stop(grace=None)

    def _wire_input(self, value: Value) -> Any:
        """As the engine sends an input: an output value (secretness and dependencies inside) to a
        provider that accepts outputs, else a secret-wrapped or plain value."""
        if self.configured.acceptOutputs and (value.secret or value.deps):
            return {
                rpc._special_sig_key: OUTPUT_VALUE,
                "value": value.data,
                "secret": value.secret,
                "dependencies": sorted(value.deps),
            }
        return {rpc._special_sig_key: rpc._special_secret_sig, "value": value.data} if value.secret else value.data

    def construct(self, name: str, typ: str, inputs: dict[str, Value], depends_on: list[str]) -> Constructed:
        wire = struct_pb2.Struct()
        wire.update({k: self._wire_input(v) for k, v in inputs.items()})
        request = provider_pb2.ConstructRequest(
            project=self.project,
            stack=self.stack,
            config=self.config,
            configSecretKeys=self.secret_keys,
            dryRun=False,
            parallel=8,
            monitorEndpoint=self.address,
            type=typ,
            name=name,
            parent=self.stack_urn,
            inputs=wire,
            dependencies=depends_on,
            organization="organization",
            inputDependencies={
                k: provider_pb2.ConstructRequest.PropertyDependencies(urns=sorted(v.deps))
                for k, v in inputs.items()
                if v.deps
            },
        )
        self.requests[name] = json_format.MessageToDict(wire)
        reply = self.provider.Construct(request, timeout=300)
        self.states[reply.urn] = reply.state
        return Constructed(reply.urn, json_format.MessageToDict(reply.state))
