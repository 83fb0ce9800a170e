"""The deploy plane's real tools, built from the Go module proxy and cached like the Kafka
distributions (`$KMIRROR_CACHE_DIR`, default `~/.cache/kmirror`):

- `pulumi`: the Pulumi CLI and engine (github.com/pulumi/pulumi/pkg/v3);
- `pulumi-resource-kubernetes`: the Kubernetes provider (github.com/pulumi/pulumi-kubernetes/provider/v4);
- `pulumi-language-yaml`: the YAML language host (github.com/pulumi/pulumi-yaml);
- `etcd`, `kube-apiserver` and `kube-controller-manager` (go.etcd.io/etcd/server/v3,
  k8s.io/kubernetes): the API server the deploy tests apply to (the controller manager finalizes
  deleted namespaces and collects garbage, as on a real cluster).

Each is built from a small wrapper module under `deploy-tools/<tool>/` (docs/testing.md says
why: the upstream modules have local `replace` directives, so `go install mod@version` refuses
them). The committed `go.sum` is what the build is verified against (`-mod=readonly`,
`GOSUMDB=off`: the checksum database is unreachable here). A tool's directory is keyed by its
version and a hash of its wrapper, carries a `.complete` marker, and concurrent builders wait on
its lock. Builds run one at a time, niced (the provider's link peaks near 5 GB).

`python -m kmirror_cli.deploy_tools build [TOOL...]` builds what is missing and prints the bin
directory; `path TOOL` prints one binary's path.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from kmirror_cli.local_kafka import cache_dir, filled_once

WRAPPERS = Path(__file__).resolve().parent.parent / "deploy-tools"
K8S_PROVIDER_MODULE = "github.com/pulumi/pulumi-kubernetes/provider/v4"
K8S_PROVIDER_PSEUDO = "v4.0.0-20260115033456-f47bc2d6f199"
# The provider source is upstream's main branch one day before its v4.25.0 tag (sdk/v4 v4.25.0 is
# dated 2026-01-16T18:15Z, this commit 2026-01-15T03:34Z): stamped as a pre-release of 4.25.0,
# the way Go names such a commit.
K8S_PROVIDER_VERSION = "4.25.0-0.20260115033456-f47bc2d6f199"


@dataclass(frozen=True)
class Tool:
    name: str  # the binary's name
    wrapper: str  # deploy-tools/<wrapper>
    package: str  # what `go build` builds, inside the wrapper module
    version: str
    ldflags: tuple[str, ...] = ()
    generate: bool = False  # the Kubernetes provider's embedded schema (see _generate_k8s_embeds)
    aliases: tuple[str, ...] = field(default=())


TOOLS: tuple[Tool, ...] = (
    Tool(
        "pulumi",
        "pulumi",
        "github.com/pulumi/pulumi/pkg/v3/cmd/pulumi",
        "3.274.1",
        ("-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v3.274.1",),
    ),
    Tool(
        "pulumi-resource-kubernetes",
        "kubernetes-provider",
        "./cmd/pulumi-resource-kubernetes",
        K8S_PROVIDER_VERSION,
        (f"-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version={K8S_PROVIDER_VERSION}",),
        generate=True,
    ),
    Tool(
        "etcd",
        "etcd",
        ".",
        "3.6.16",
    ),
    Tool(
        "kube-apiserver",
        "kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "1.34.4",
        (
            "-X k8s.io/component-base/version.gitVersion=v1.34.4",
            "-X k8s.io/component-base/version.gitMajor=1",
            "-X k8s.io/component-base/version.gitMinor=34",
        ),
    ),
    Tool(
        "kube-controller-manager",
        "kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "1.34.4",
        (
            "-X k8s.io/component-base/version.gitVersion=v1.34.4",
            "-X k8s.io/component-base/version.gitMajor=1",
            "-X k8s.io/component-base/version.gitMinor=34",
        ),
    ),
    Tool(
        "pulumi-language-yaml",
        "pulumi-yaml",
        "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml",
        "1.25.0",
        ("-X github.com/pulumi/pulumi-yaml/pkg/version.Version=v1.25.0",),
    ),
    # Pulumi's Node.js SDK generator for `pulumi package gen-sdk --language nodejs` without the
    # Node.js host (refused by the proxy): deploy-tools/pulumi-codegen-nodejs/main.go says how.
    Tool("pulumi-codegen-nodejs", "pulumi-codegen-nodejs", ".", "3.274.1"),
)
BY_NAME = {t.name: t for t in TOOLS}


class BuildError(RuntimeError):
    pass


def go_binary() -> str:
    found = os.environ.get("KMIRROR_GO") or shutil.which("go") or "/usr/local/go/bin/go"
    if not Path(found).exists():
        raise BuildError(
            "deploy tools: no Go toolchain (go on PATH or /usr/local/go/bin/go); install Go >= 1.26 "
            "(docs/testing.md), or set KMIRROR_GO=/path/to/go"
        )
    return found


def go_env() -> dict[str, str]:
    """The go command's environment: module and build caches beside the tools, so a warm cache
    makes a rebuild seconds; go.sum verified, never updated (`-mod=readonly`)."""
    root = cache_dir() / "go"
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(root / "mod"),
        GOCACHE=str(root / "build"),
        GOSUMDB="off",
        GOFLAGS="-mod=readonly",
        GOTOOLCHAIN="local",
    )
    return env


def wrapper_hash(tool: Tool) -> str:
    h = hashlib.sha256()
    for path in sorted((WRAPPERS / tool.wrapper).rglob("*")):
        if path.is_file():
            h.update(str(path.relative_to(WRAPPERS)).encode() + b"\0" + path.read_bytes())
    h.update(" ".join(tool.ldflags).encode())
    return h.hexdigest()[:12]


def tool_home(tool: Tool) -> Path:
    return cache_dir() / "deploy-tools" / f"{tool.name}-{tool.version}-{wrapper_hash(tool)}"


def tool_path(name: str) -> Path:
    """The built binary (raises BuildError naming the command that builds it when it is missing)."""
    home = tool_home(BY_NAME[name])
    if not (home / ".complete").exists():
        raise BuildError(
            f"{name} is not built: run `python -m kmirror_cli.deploy_tools build {name}` (or make deploy-tools)"
        )
    return home / "bin" / name


def _generate_k8s_embeds(module_dir: Path, out: Path) -> None:
    """What upstream's `go generate` (cmd/pulumi-resource-kubernetes/generate.go) makes before a
    build: schema.json with the version set, and terraform-mapping.json, both compacted."""
    src = module_dir / "cmd" / "pulumi-resource-kubernetes"
    schema = json.loads((src / "schema.json").read_text(encoding="utf-8"))
    schema["version"] = K8S_PROVIDER_VERSION
    (out / "schema-embed.json").write_text(json.dumps(schema, separators=(",", ":")), encoding="utf-8")
    mapping = json.loads((src / "terraform-mapping.json").read_text(encoding="utf-8"))
    (out / "terraform-mapping-embed.json").write_text(json.dumps(mapping, separators=(",", ":")), encoding="utf-8")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise BuildError(f"{cmd[1:3]} failed in {cwd} (exit {done.returncode}); log {log}:\n" + "\n".join(tail))


def build(tool: Tool, *, quiet: bool = False) -> Path:
    """The tool's binary, built once (later calls and concurrent builders reuse it)."""
    home = tool_home(tool)
    binary = home / "bin" / tool.name
    with filled_once(home) as to_fill:
        if not to_fill:
            return binary
        go, env = go_binary(), go_env()
        log = home / "build.log"
        log.write_text("")
        started, cpu0 = time.monotonic(), os.times()
        if not quiet:
            print(f"deploy-tools: building {tool.name} {tool.version} (log {log})", file=sys.stderr, flush=True)
        with tempfile.TemporaryDirectory(prefix=f"kmirror-build-{tool.wrapper}-") as tmp:
            work = Path(tmp) / tool.wrapper
            shutil.copytree(WRAPPERS / tool.wrapper, work)
            if tool.generate:
                _run([go, "mod", "download", f"{K8S_PROVIDER_MODULE}@{K8S_PROVIDER_PSEUDO}"], work, env, log)
                module_dir = Path(env["GOMODCACHE"]) / f"{K8S_PROVIDER_MODULE}@{K8S_PROVIDER_PSEUDO}"
                _generate_k8s_embeds(module_dir, work / "cmd" / "pulumi-resource-kubernetes")
            (home / "bin").mkdir(exist_ok=True)
            ldflags = " ".join(("-s", "-w", *tool.ldflags))
            cmd = ["nice", go, "build", "-trimpath", f"-ldflags={ldflags}", "-o", str(binary) + ".tmp", tool.package]
            _run(cmd, work, env, log)
        os.replace(str(binary) + ".tmp", binary)
        cpu1 = os.times()
        cpu = (cpu1.children_user - cpu0.children_user) + (cpu1.children_system - cpu0.children_system)
        (home / ".complete").write_text(f"built in {time.monotonic() - started:.0f} s wall, {cpu:.0f} s CPU\n")
        if not quiet:
            print(f"deploy-tools: {tool.name}: {(home / '.complete').read_text().strip()}", file=sys.stderr, flush=True)
    return binary


def bin_dir(names: list[str] | None = None) -> Path:
    """One directory with every built tool (symlinks), for PATH: the engine finds plugins there."""
    tools = [BY_NAME[n] for n in names] if names else list(TOOLS)
    key = hashlib.sha256("".join(str(tool_home(t)) for t in tools).encode()).hexdigest()[:12]
    out = cache_dir() / "deploy-tools" / f"bin-{key}"
    out.mkdir(parents=True, exist_ok=True)
    for t in tools:
        link = out / t.name
        target = tool_path(t.name)
        if not link.is_symlink() or Path(os.readlink(link)) != target:
            tmp = out / f".{t.name}.{os.getpid()}"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(target)
            os.replace(tmp, link)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kmirror_cli.deploy_tools", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build the missing tools (one at a time), print the bin directory")
    b.add_argument("tools", nargs="*", metavar="TOOL", help=", ".join(BY_NAME))
    p = sub.add_parser("path", help="print a built tool's path")
    p.add_argument("tool", choices=list(BY_NAME))
    args = parser.parse_args(argv)
    try:
        if args.command == "path":
            print(tool_path(args.tool))
            return 0
        names = args.tools or list(BY_NAME)
        if unknown := [n for n in names if n not in BY_NAME]:
            raise BuildError(f"unknown tool(s) {unknown}: choose from {', '.join(BY_NAME)}")
        for name in names:
            build(BY_NAME[name])
        print(bin_dir(names))
    except BuildError as e:
        print(f"deploy-tools: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
