"""The TypeScript example against an SDK made by Pulumi's own tools: the real CLI's
`pulumi package get-schema` asks the component provider (started by the engine) for its schema,
Pulumi's Node.js generator writes `@pulumi/kafka-mirror` from it, `tsc` builds that SDK and then
type-checks examples/typescript/index.ts against it (--strict).

`pulumi package gen-sdk --language nodejs` itself needs `pulumi-language-nodejs`, which the Go
module proxy refuses (403, every version): `pulumi-codegen-nodejs` (deploy-tools/) calls the same
generator (pkg/v3/codegen/nodejs.GeneratePackage) that host runs for gen-sdk."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kmirror_cli.deploy_tools import tool_path
from tests.deploy.conftest import _require_tools
from tests.deploy.engine import REPO, Engine
from tests.pulumi.test_typescript_example import TSC_FLAGS, linked_node_modules, node_modules

pytestmark = pytest.mark.registry  # npm packages (@pulumi/pulumi, typescript), cached after the first run


def test_the_typescript_example_checks_against_the_sdk_pulumi_generates(engine: Engine, tmp_path: Path) -> None:
    _require_tools("pulumi-codegen-nodejs")
    schema = engine.run("package", "get-schema", str(REPO / "components"), cwd=tmp_path).stdout
    assert json.loads(schema)["name"] == "kafka-mirror"
    (tmp_path / "schema.json").write_text(schema)
    work = tmp_path / "example"
    sdk = work / "sdk"
    subprocess.run([str(tool_path("pulumi-codegen-nodejs")), str(tmp_path / "schema.json"), str(sdk)], check=True)

    modules = node_modules()
    linked = linked_node_modules(work, modules)
    (linked / "@pulumi" / "kafka-mirror").symlink_to(sdk)
    tsc = str(modules / ".bin" / "tsc")
    built = subprocess.run([tsc, "-p", str(sdk)], cwd=sdk, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-4000:]
    package = json.loads((sdk / "package.json").read_text())
    (sdk / "package.json").write_text(json.dumps({**package, "main": "bin/index.js", "types": "bin/index.d.ts"}))

    (work / "index.ts").write_text((REPO / "examples" / "typescript" / "index.ts").read_text())
    done = subprocess.run([tsc, *TSC_FLAGS, "index.ts"], cwd=work, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:]
    wrong = (REPO / "examples" / "typescript" / "index.ts").read_text().replace("    image: ", "    imageName: ", 1)
    (work / "index.ts").write_text(wrong)
    refused = subprocess.run([tsc, *TSC_FLAGS, "index.ts"], cwd=work, capture_output=True, text=True, timeout=300)
    assert refused.returncode != 0 and "imageName" in refused.stdout, refused.stdout
