"""The real Pulumi engine for the deploy tests: the CLI and plugins built by
kmirror_cli.deploy_tools, a file backend and a passphrase secrets provider in the test's tmp dir,
and kmirror_cli.python_host as `pulumi-language-python` (why: that module's docstring).

`Engine.run(*args, cwd=...)` runs `pulumi ARGS --non-interactive` with that environment and
returns the finished process (raising with its output when it fails and `check`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kmirror_cli.deploy_tools import bin_dir, go_env

REPO = Path(__file__).resolve().parents[2]
SDK_VERSION = "3.274.1"


def python_exec_script() -> Path:
    """pulumi-language-python-exec from the sdk/v3 module the CLI was built from (in the Go module cache)."""
    mod = Path(go_env()["GOMODCACHE"]) / f"github.com/pulumi/pulumi/sdk/v3@v{SDK_VERSION}"
    script = mod / "python" / "cmd" / "pulumi-language-python-exec"
    if not script.is_file():
        raise FileNotFoundError(f"{script}: build the CLI first (make deploy-tools)")
    return script


@dataclass
class Engine:
    root: Path
    passphrase: str = "kmirror-test-passphrase"

    def __post_init__(self) -> None:
        self.tools = bin_dir()
        self.hosts = self.root / "hosts"
        self.hosts.mkdir(parents=True, exist_ok=True)
        host = self.hosts / "pulumi-language-python"
        host.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m kmirror_cli.python_host "$@"\n')
        host.chmod(host.stat().st_mode | stat.S_IXUSR)
        (self.root / "state").mkdir(exist_ok=True)

    def env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            PATH=os.pathsep.join([str(self.hosts), str(self.tools), str(Path(sys.executable).parent), env["PATH"]]),
            PULUMI_HOME=str(self.root / "pulumi-home"),
            PULUMI_BACKEND_URL=f"file://{self.root / 'state'}",
            PULUMI_CONFIG_PASSPHRASE=self.passphrase,
            PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION="true",
            PULUMI_SKIP_UPDATE_CHECK="1",
            PULUMI_LANGUAGE_PYTHON_EXEC=str(python_exec_script()),
            PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "components")]),
            NO_COLOR="1",
        )
        env.update(extra)
        return env

    def run(
        self, *args: str, cwd: Path, check: bool = True, timeout: float = 600, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.tools / "pulumi"), *args, "--non-interactive"]
        done = subprocess.run(
            cmd, cwd=cwd, env=self.env(**(env or {})), capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(
                f"`pulumi {' '.join(args)}` exited {done.returncode}\n--- stdout\n{done.stdout[-6000:]}\n"
                f"--- stderr\n{done.stderr[-4000:]}"
            )
        return done

    def export(self, stack: str, cwd: Path) -> dict[str, Any]:
        return dict(json.loads(self.run("stack", "export", "-s", stack, cwd=cwd).stdout))

    def state_text(self) -> str:
        """Every byte the file backend holds (state, history, backups), as text."""
        return "\n".join(p.read_text(errors="replace") for p in sorted((self.root / "state").rglob("*")) if p.is_file())


def copy_project(dest: Path) -> Path:
    """The deploy project (Pulumi.yaml, __main__.py, stacks/) in `dest`, so tests edit copies."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Pulumi.yaml", "__main__.py"):
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "stacks", dest / "stacks", dirs_exist_ok=True)
    return dest
