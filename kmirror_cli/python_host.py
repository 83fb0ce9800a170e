"""A minimal Pulumi language host for Python (`pulumi-language-python`), for engines built here.

Why it exists: the Go module proxy refuses Pulumi's own Python host module
(`github.com/pulumi/pulumi/sdk/python/cmd/pulumi-language-python/v3`, 403 for every version), so
a CLI built from the proxy has no way to run `runtime: python` programs, policy packs or
source-based plugins. The SDK's Automation API inline server (`--client`) would run a program
only, not the policy pack or the component provider the engine starts through a host's
`RunPlugin`; this host covers all three, and runs everything through Pulumi's own code:

- `Run`: `python -u pulumi-language-python-exec --monitor ... PROGRAM` (the script Pulumi's Go
  host runs, shipped in the `sdk/v3` module, found through `$PULUMI_LANGUAGE_PYTHON_EXEC`), the
  config in `PULUMI_CONFIG`/`PULUMI_CONFIG_SECRET_KEYS` as the Go host passes it;
- `RunPlugin`: `python -u PROGRAM_DIR ARGS...`, stdout/stderr streamed back (policy packs,
  component providers);
- plugins and packages are never installed (`GetRequiredPlugins` answers none; the engine finds
  plugins on PATH); `InstallDependencies` does nothing.

The interpreter: the program's `virtualenv` option when that directory exists, else this host's own
Python (Pulumi's host would create the virtualenv; the test bed installs everything in one venv).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from queue import Queue
from typing import Any

import grpc
from pulumi.runtime.proto import language_pb2, language_pb2_grpc, plugin_pb2

VERSION = "3.274.1"
EXEC_ENV = "PULUMI_LANGUAGE_PYTHON_EXEC"


def interpreter(info: Any, fallback: str = sys.executable) -> str:
    """The program's virtualenv's python (relative to its root directory) if it exists, else `fallback`."""
    options = dict(info.options.items()) if info is not None and info.HasField("options") else {}
    venv = options.get("virtualenv")
    if venv:
        root = Path(info.root_directory or info.program_directory or ".")
        python = (root / str(venv)).expanduser() / "bin" / "python"
        if python.exists():
            return str(python)
    return fallback


class PythonHost(language_pb2_grpc.LanguageRuntimeServicer):
    def __init__(self, engine: str) -> None:
        self.engine = engine

    def Handshake(self, request: Any, context: Any) -> Any:
        return language_pb2.LanguageHandshakeResponse()

    def GetPluginInfo(self, request: Any, context: Any) -> Any:
        return plugin_pb2.PluginInfo(version=VERSION)

    def GetRequiredPlugins(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPluginsResponse()

    def GetRequiredPackages(self, request: Any, context: Any) -> Any:
        return language_pb2.GetRequiredPackagesResponse()

    def GetProgramDependencies(self, request: Any, context: Any) -> Any:
        return language_pb2.GetProgramDependenciesResponse()

    def About(self, request: Any, context: Any) -> Any:
        v = sys.version_info
        return language_pb2.AboutResponse(executable=sys.executable, version=f"{v.major}.{v.minor}.{v.micro}")

    def InstallDependencies(self, request: Any, context: Any) -> Iterator[Any]:
        return iter(())

    def Run(self, request: Any, context: Any) -> Any:
        exec_script = os.environ.get(EXEC_ENV)
        if not exec_script or not Path(exec_script).is_file():
            error = f"${EXEC_ENV} must name pulumi-language-python-exec (sdk/v3's python/cmd)"
            return language_pb2.RunResponse(error=error)
        info = request.info if request.HasField("info") else None
        program_dir = (info.program_directory if info else "") or request.pwd or "."
        entry = (info.entry_point if info else "") or request.program or "."
        cmd = [
            interpreter(info),
            "-u",
            exec_script,
            "--monitor",
            request.monitor_address,
            "--engine",
            self.engine,
            "--project",
            request.project,
            "--stack",
            request.stack,
            "--pwd",
            request.pwd or program_dir,
            "--dry_run",
            "true" if request.dryRun else "false",
            "--parallel",
            str(request.parallel),
            "--organization",
            request.organization or "organization",
        ]
        if info and info.root_directory:
            cmd += ["--root_directory", info.root_directory]
        cmd += [str(Path(program_dir) / entry) if entry != "." else program_dir, *request.args]
        env = dict(os.environ)
        env["PULUMI_CONFIG"] = json.dumps(dict(request.config.items()))
        env["PULUMI_CONFIG_SECRET_KEYS"] = json.dumps(list(request.configSecretKeys))
        done = subprocess.run(cmd, env=env, cwd=request.pwd or program_dir, check=False)
        if done.returncode == 0:
            return language_pb2.RunResponse()
        # the program has reported its error to the engine already; say only that it failed
        return (
            language_pb2.RunResponse(bail=True)
            if done.returncode == 32
            else language_pb2.RunResponse(error=f"python program exited with code {done.returncode}")
        )

    def RunPlugin(self, request: Any, context: Any) -> Iterator[Any]:
        info = request.info if request.HasField("info") else None
        program_dir = (info.program_directory if info else "") or request.program or request.pwd
        env = dict(os.environ)
        env.update(e.split("=", 1) for e in request.env if "=" in e)
        proc = subprocess.Popen(
            [interpreter(info), "-u", program_dir, *request.args],
            cwd=request.pwd or program_dir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out: Queue[Any] = Queue()

        def pump(stream: Any, field: str) -> None:
            for chunk in iter(lambda: stream.read1(65536), b""):
                out.put(language_pb2.RunPluginResponse(**{field: chunk}))
            out.put(None)

        threads = [
            threading.Thread(target=pump, args=(s, f), daemon=True)
            for s, f in ((proc.stdout, "stdout"), (proc.stderr, "stderr"))
        ]
        for t in threads:
            t.start()
        context.add_callback(proc.kill)
        open_streams = len(threads)
        while open_streams:
            item = out.get()
            if item is None:
                open_streams -= 1
            else:
                yield item
        yield language_pb2.RunPluginResponse(exitcode=proc.wait())


def main(argv: list[str] | None = None) -> int:
    args = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")]
    engine = args[0] if args else ""
    options = [("grpc.max_receive_message_length", 2**30)]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), options=options)
    language_pb2_grpc.add_LanguageRuntimeServicer_to_server(PythonHost(engine), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    try:
        server.wait_for_termination()
    except KeyboardInterrupt:  # the engine interrupts its plugins when it is done with them
        server.stop(grace=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
