"""Stack config files (`stacks/Pulumi.<stack>.yaml`) as the CLI reads them.

The Pulumi program reads the same keys through `pulumi.Config("kafka-mirror")`; this reader
lets `kmirror plan --stack NAME` show exactly what `pulumi up -s NAME` deploys, without the
Pulumi CLI. Relative topology paths are relative to the project (the folder of `stacks/`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kmirror.errors import Problem, ValidationError, did_you_mean

DEFAULT_TOPOLOGY = "stacks/topology.yaml"
NAMESPACE = "kafka-mirror"
STACKS_DIR = "stacks"


@dataclass(frozen=True)
class StackConfig:
    name: str
    datacenter: str
    topology: str
    config: dict[str, Any]


def stack_file(name: str, stacks_dir: str | Path = STACKS_DIR) -> Path:
    return Path(stacks_dir) / f"Pulumi.{name}.yaml"


def available_stacks(stacks_dir: str | Path = STACKS_DIR) -> list[str]:
    return sorted(p.name[len("Pulumi.") : -len(".yaml")] for p in Path(stacks_dir).glob("Pulumi.*.yaml"))


def read_stack_config(name: str, stacks_dir: str | Path = STACKS_DIR) -> StackConfig:
    """Read `kafka-mirror:datacenter` and `kafka-mirror:topology` of stack `name`.

    Raises ValidationError (exit 2) naming the file and key when the stack or key is missing.
    """
    path = stack_file(name, stacks_dir)
    if not path.is_file():
        stacks = available_stacks(stacks_dir)
        hint = did_you_mean(name, stacks) or f"; stacks here: {', '.join(stacks) or 'none'}"
        raise ValidationError([Problem("--stack", f"no stack config {str(path)!r}{hint}")])
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ValidationError([Problem("", f"not valid YAML: {exc}")], str(path)) from None
    config = raw.get("config") if isinstance(raw, dict) else None
    config = config if isinstance(config, dict) else {}
    datacenter = config.get(f"{NAMESPACE}:datacenter")
    if not isinstance(datacenter, str) or not datacenter:
        message = f"required: the datacenter this stack deploys; run: pulumi config set {NAMESPACE}:datacenter DC"
        raise ValidationError([Problem(f"config.{NAMESPACE}:datacenter", message)], str(path))
    topology = config.get(f"{NAMESPACE}:topology", DEFAULT_TOPOLOGY)
    project_root = Path(stacks_dir).resolve().parent
    topology_path = Path(str(topology))
    if not topology_path.is_absolute():
        topology_path = project_root / topology_path
    return StackConfig(name, datacenter, str(topology_path), config)
