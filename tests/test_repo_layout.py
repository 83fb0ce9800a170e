"""The repository's own contracts: the README's two commands, `.ci/run`, `Pulumi.yaml`."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = re.search(r"## The two commands.*?```bash\n(.*?)```", readme, re.DOTALL)
    assert block, "README lost its two-commands section"
    commands = [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    lines = (ROOT / ".ci/run").read_text().splitlines()
    ci = [line for line in lines if line and not line.startswith(("#", "set ", "cd "))]
    assert ci == ["make test"]
    targets = set(re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.MULTILINE))
    assert {"demo", "test", "setup", "system-deps", "lint"} <= targets


def test_pulumi_project_file() -> None:
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["name"] == "kafka-mirror"
    assert project["runtime"]["name"] == "python"
    assert project["stackConfigDir"] == "stacks"
    assert (ROOT / "__main__.py").read_text().split() == ["from", "kafka_mirror.program", "import", "main", "main()"]
