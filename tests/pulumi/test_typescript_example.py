"""The TypeScript example type-checks against the package's schema (issue 27): `tsc --strict` over
examples/typescript/index.ts with @pulumi/pulumi, yaml and @types/node installed from npm and the
`@pulumi/kafka-mirror` declarations generated from components/schema.json
(tests/pulumi/ts_declarations.py; no Pulumi CLI here to run `pulumi package gen-sdk`). A wrong
input name, a missing required input or a wrong type fails the check, as the second test shows."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.pulumi.ts_declarations import declarations

pytestmark = pytest.mark.registry
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "typescript"
# exact versions (the example's package.json keeps ranges): the npm mirror's newest @pulumi/pulumi
NPM_PINS = {"@pulumi/pulumi": "3.270.0", "typescript": "5.9.3", "yaml": "2.9.1", "@types/node": "20.19.43"}
CACHE = Path.home() / ".cache" / "kmirror" / "ts-example"
TSC_FLAGS = [
    "--noEmit",
    "--strict",
    "--target",
    "es2020",
    "--module",
    "commonjs",
    "--moduleResolution",
    "node",
    "--esModuleInterop",
    "--skipLibCheck",
]


def node_modules() -> Path:
    """The pinned packages, installed once per pin set (npm, cached under ~/.cache/kmirror)."""
    if shutil.which("npm") is None:
        pytest.fail("npm is required (the machine's Node.js); see ../shared/TEST-ENV.md")
    key = hashlib.sha256(json.dumps(NPM_PINS, sort_keys=True).encode()).hexdigest()[:12]
    home = CACHE / key
    if not (home / "node_modules" / ".bin" / "tsc").exists():
        home.mkdir(parents=True, exist_ok=True)
        (home / "package.json").write_text(json.dumps({"name": "ts-example-deps", "private": True}))
        done = subprocess.run(
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--ignore-scripts",
                "--save-exact",
                *(f"{n}@{v}" for n, v in NPM_PINS.items()),
            ],
            cwd=home,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    return home / "node_modules"


def linked_node_modules(work: Path, modules: Path) -> Path:
    """work/node_modules with each of the cached `modules` (and each of their @pulumi/ scope) linked
    in, so the cache stays untouched when a test adds its own package there."""
    linked = work / "node_modules"
    (linked / "@pulumi").mkdir(parents=True)
    for entry in modules.iterdir():
        if entry.name != "@pulumi":
            (linked / entry.name).symlink_to(entry)
    for entry in (modules / "@pulumi").iterdir():
        (linked / "@pulumi" / entry.name).symlink_to(entry)
    return linked


def check(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    """`tsc` over `source` as the example's index.ts, with the generated `@pulumi/kafka-mirror` in
    node_modules beside the cached packages (each linked, so the cache stays untouched)."""
    modules = node_modules()
    work = tmp_path / "example"
    linked = linked_node_modules(work, modules)
    sdk = linked / "@pulumi" / "kafka-mirror"
    sdk.mkdir()
    (sdk / "index.d.ts").write_text(declarations(json.loads((ROOT / "components" / "schema.json").read_text())))
    (sdk / "package.json").write_text(json.dumps({"name": "@pulumi/kafka-mirror", "types": "index.d.ts"}))
    (work / "index.ts").write_text(source)
    return subprocess.run(
        [str(modules / ".bin" / "tsc"), *TSC_FLAGS, "index.ts"], cwd=work, capture_output=True, text=True, timeout=300
    )


def test_the_typescript_example_type_checks_against_the_schema(tmp_path: Path) -> None:
    pinned = json.loads((EXAMPLE / "package.json").read_text())
    assert "@pulumi/kafka-mirror" in pinned["dependencies"]
    done = check(tmp_path, (EXAMPLE / "index.ts").read_text())
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("edit", "error"),
    [
        (("    image: ", "    imageName: "), "imageName"),  # an input the schema does not have
        (('    username: "mirrormaker",\n', ""), "username"),  # a required input left out
        (('checkpointRoot: "s3a://acme-kafka-mirror/checkpoints"', "checkpointRoot: 42"), "number"),
        (("executorMemory: ", "executorMemroy: "), "executorMemroy"),  # a misspelt field of a typed core input
        (("eks: platform.deploymentTarget", 'eks: { platfrom: "eks", settings: {} }'), "platfrom"),
    ],
)
def test_a_call_the_schema_refuses_fails_the_check(tmp_path: Path, edit: tuple[str, str], error: str) -> None:
    source = (EXAMPLE / "index.ts").read_text()
    assert edit[0] in source
    done = check(tmp_path, source.replace(edit[0], edit[1], 1))
    assert done.returncode != 0 and error in done.stdout, done.stdout
