"""central's first `pulumi preview` and `up` (EMR, `gssapi: true`) the way CI and a platform team run
them: without a prebuilt `$KMIRROR_WHEELHOUSE`, from the Pulumi project directory, where
scripts/build-emr-gssapi-wheel.sh writes the Kerberos wheel (`build/gssapi-wheels`). pip is faked
(what it downloads is checked by tests/pulumi/test_wheelhouse.py); everything else is the program."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kafka_mirror.bundle import build_bundle
from kafka_mirror.emr import wheelhouse
from kafka_mirror.emr.wheelhouse import WheelhouseError
from tests.pulumi.harness import ROOT, Run, run_program, stack_config, unwrap

OBJECT = "aws:s3/bucketObjectv2:BucketObjectv2"
GSSAPI_WHEEL = "confluent_kafka-2.16.1-1gssapi-cp311-cp311-manylinux_2_34_aarch64.whl"


def fake_download(args: list[str]) -> None:
    """`pip download -r LOCK --dest DIR`: one placeholder wheel per pinned line."""
    dest = Path(args[args.index("--dest") + 1])
    for line in Path(args[-1]).read_text().splitlines():
        name, version = line.split(" ")[0].split("==")
        (dest / f"{name.replace('-', '_')}-{version}-py3-none-any.whl").write_bytes(b"wheel")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A Pulumi project directory (the working directory of `pulumi up`) with nothing prebuilt."""
    bundle, _ = build_bundle(ROOT, tmp_path / "bundle")
    monkeypatch.setenv("KMIRROR_BUNDLE", str(bundle))
    for name in ("KMIRROR_WHEELHOUSE", "KMIRROR_BUILD_DIR", "KMIRROR_GSSAPI_WHEELS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(wheelhouse, "_run_pip", fake_download)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def central(preview: bool = False) -> Run:
    return run_program("central", stack_config("central", str(ROOT / "stacks" / "topology.yaml")), preview=preview)


def wheel_keys(run: Run) -> list[str]:
    return sorted(unwrap(o.inputs)["key"] for o in run.of_type(OBJECT) if "-wheel-" in o.name)


def test_up_takes_the_kerberos_wheel_where_the_build_script_writes_it(project: Path) -> None:
    wheels = project / "build" / "gssapi-wheels"  # scripts/build-emr-gssapi-wheel.sh's default --out
    wheels.mkdir(parents=True)
    (wheels / GSSAPI_WHEEL).write_bytes(b"kerberos wheel")
    keys = wheel_keys(central())
    assert f"bootstrap/wheelhouse/cp311-aarch64/{GSSAPI_WHEEL}" in keys
    assert not [k for k in keys if "confluent_kafka-2.16.1-py3" in k]  # never PyPI's wheel
    assert (project / "build" / "wheelhouse" / "cp311-aarch64" / GSSAPI_WHEEL).is_file()


def test_a_preview_without_the_kerberos_wheel_plans_the_rest(project: Path) -> None:
    keys = wheel_keys(central(preview=True))
    assert "bootstrap/wheelhouse/cp311-aarch64/requirements.lock" in keys
    assert "bootstrap/wheelhouse/cp311-aarch64/pyyaml-6.0.3-py3-none-any.whl" in keys
    assert not [k for k in keys if "confluent" in k]


def test_an_up_without_the_kerberos_wheel_refuses_naming_the_build_script(project: Path) -> None:
    with pytest.raises(WheelhouseError) as raised:
        central()
    message = str(raised.value)
    assert f"in {project / 'build' / 'gssapi-wheels'} (found 0)" in message
    assert "scripts/build-emr-gssapi-wheel.sh" in message
