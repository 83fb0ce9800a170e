"""What ships next to the components: the EMR secrets sync (against moto in server mode), the
bootstrap script, the entry script, the image's Dockerfile and the app's requirement pins."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from tests.pulumi.moto_support import moto_server

ROOT = Path(__file__).resolve().parents[2]
SYNC = ROOT / "scripts" / "kmirror-sync-secrets.py"
KEYTAB = b"\x05\x02\x00\x00\x00\x47binary-keytab"


@pytest.fixture(scope="module")
def aws() -> Iterator[tuple[str, dict[str, str]]]:
    env = {**os.environ, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}
    with moto_server() as url:
        yield url, env


def test_sync_writes_each_key_as_a_file_and_decodes_b64(aws: tuple[str, dict[str, str]], tmp_path: Path) -> None:
    url, env = aws
    session = boto3.session.Session(
        aws_access_key_id="testing", aws_secret_access_key="testing", region_name="eu-central-1"
    )
    sm = session.client("secretsmanager", endpoint_url=url)
    krb = sm.create_secret(
        Name="central-kerberos",
        SecretString=json.dumps(
            {"mirrormaker.keytab.b64": base64.b64encode(KEYTAB).decode(), "krb5.conf": "[libdefaults]\n"}
        ),
    )["ARN"]
    pw = sm.create_secret(Name="kmirror-cfg-pw", SecretString=json.dumps({"value": "s3cr3t-0xBEEF"}))["ARN"]
    missing = krb.replace("central-kerberos", "gone")
    s3 = session.client("s3", endpoint_url=url)
    s3.create_bucket(Bucket="acme", CreateBucketConfiguration={"LocationConstraint": "eu-central-1"})
    manifest = f"{krb}\tcentral-kerberos\n{pw}\tkmirror-cfg-pw\n{missing}\tgone\n"
    s3.put_object(Bucket="acme", Key="bootstrap/secrets.tsv", Body=manifest.encode())
    out = subprocess.run(
        [
            sys.executable,
            str(SYNC),
            "--manifest",
            "s3://acme/bootstrap/secrets.tsv",
            "--root",
            str(tmp_path),
            "--region",
            "eu-central-1",
            "--endpoint-url",
            url,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert out.returncode == 1  # the missing secret is reported, the others are written
    assert out.stderr.startswith(f"kmirror-sync-secrets: {missing} -> gone: ResourceNotFoundException")
    assert (tmp_path / "central-kerberos" / "mirrormaker.keytab").read_bytes() == KEYTAB
    assert (tmp_path / "central-kerberos" / "krb5.conf").read_text() == "[libdefaults]\n"
    assert (tmp_path / "kmirror-cfg-pw" / "value").read_text() == "s3cr3t-0xBEEF"
    # issue 26: only the app's user reads them (was 0640 for the whole hadoop group)
    assert stat.S_IMODE((tmp_path / "kmirror-cfg-pw" / "value").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "kmirror-cfg-pw").stat().st_mode) == 0o700
    assert sorted(p.name for p in (tmp_path / "central-kerberos").iterdir()) == ["krb5.conf", "mirrormaker.keytab"]
    assert "s3cr3t" not in out.stdout + out.stderr


def test_sync_rejects_a_manifest_line_that_escapes_the_root(tmp_path: Path) -> None:
    manifest = tmp_path / "secrets.tsv"
    manifest.write_text("arn:aws:secretsmanager:x:1:secret:a\t../etc\n")
    out = subprocess.run(
        [sys.executable, str(SYNC), "--manifest", str(manifest), "--root", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1 and "manifest line 1: expected '<ARN>\\t<directory>'" in out.stderr


def test_bootstrap_script_is_valid_bash_and_checks_its_arguments() -> None:
    from kafka_mirror.emr.specs import EmrSettings, bootstrap_args

    script = ROOT / "scripts" / "emr-bootstrap.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    out = subprocess.run(
        ["bash", str(script), "--wheelhouse", "s3://b/bootstrap/wheelhouse"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 2 and out.stderr.strip() == "emr-bootstrap.sh: --secrets is required"
    old = subprocess.run(["bash", str(script), "--bundle", "s3://b/x.zip"], capture_output=True, text=True, check=False)
    assert old.returncode == 2 and old.stderr.strip() == "emr-bootstrap.sh: unknown argument --bundle"
    text = script.read_text()
    flags = [a for a in bootstrap_args(EmrSettings(bucket="b"), gssapi=True) if a.startswith("--")]
    assert flags == ["--wheelhouse", "--secrets", "--sync", "--region", "--gssapi"]
    for flag in flags:
        assert f"{flag})" in text  # every argument kafka_mirror.emr.specs.bootstrap_args passes is handled
    # Nodes install without an index and download nothing from PyPI or GitHub.
    assert "--no-index" in text and "--require-hashes" in text
    assert not re.search(r"https?://|curl |pip\S* install (?!.*--no-index)", text)


def test_gssapi_wheel_script_is_valid_bash_and_insists_on_a_checksum() -> None:
    script = ROOT / "scripts" / "build-emr-gssapi-wheel.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    assert out.returncode == 2 and "--librdkafka-sha256 (64 hex digits) is required" in out.stderr
    text = script.read_text()
    assert "sha256sum --check" in text and "--build 1gssapi" in text


def test_entry_script_runs_the_app_from_outside_the_package(tmp_path: Path) -> None:
    """`kmirror_engine/copying/range_copy.py` would shadow stdlib `copy` if the entry ran from inside the package."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def entry(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(ROOT / "scripts" / "kmirror_main.py"), *args]
        return subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, check=False)

    out = entry("--help")
    assert out.returncode == 0 and "--flow" in out.stdout
    missing = entry("--flow", "/nope.json")
    assert missing.returncode == 2 and "file not found: '/nope.json'" in missing.stderr


def _pins(lines: list[str]) -> dict[str, str]:
    """`name==version` pins whose environment marker holds for this interpreter (the dev venv)."""
    from packaging.requirements import Requirement

    found = {}
    for line in lines:
        if re.match(r"^[A-Za-z0-9_.-]+==", line.strip()):
            requirement = Requirement(line.strip())
            if requirement.marker is None or requirement.marker.evaluate():
                found[requirement.name.lower()] = str(requirement.specifier).removeprefix("==")
    return found


def test_app_requirements_match_the_constraints_pins() -> None:
    project = _pins((ROOT / "constraints.txt").read_text().splitlines())
    app = _pins((ROOT / "scripts" / "app-requirements.txt").read_text().splitlines())
    assert set(app) == {
        "confluent-kafka",
        "prometheus-client",
        "pyyaml",
        "pyarrow",
        "pandas",
        "sqlglot",
        "kafka-python",
        "google-crc32c",
        "aws-msk-iam-sasl-signer-python",
    }
    assert {k: project[k] for k in app} == app


def test_dockerfile_builds_on_official_spark_4_with_gssapi_and_the_app() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^ARG SPARK_VERSION=4\.\d+\.\d+$", text, re.MULTILINE)
    # by digest (tests/test_image.py: the build refuses a missing SPARK_BASE_DIGEST)
    base = r"^FROM apache/spark:\$\{SPARK_VERSION\}-scala2\.13-java17-python3-ubuntu@\$\{SPARK_BASE_DIGEST\}$"
    assert re.search(base, text, re.MULTILINE)
    assert "--no-binary confluent-kafka" in text and "--enable-sasl" in text and "krb5-user" in text
    assert '"sasl.mechanisms": "GSSAPI"' in text  # the build fails if the client cannot do Kerberos
    for source, target in (
        ("kmirror", "/opt/kmirror/kmirror"),
        ("kmirror_engine", "/opt/kmirror/kmirror_engine"),
        ("spark_app", "/opt/kmirror/spark_app"),
        ("scripts/kmirror_main.py", "/opt/kmirror/kmirror_main.py"),
    ):
        assert f"COPY {source} {target}" in text
    assert "ENV PYTHONPATH=/opt/kmirror" in text
    assert re.search(r"^ARG LIBRDKAFKA_VERSION=\S+$", text, re.MULTILINE)
    # confluent-kafka's version is the image lock's (scripts/image-cp310-*.lock), which pins app-requirements.txt's
    pins = _pins((ROOT / "scripts" / "app-requirements.txt").read_text().splitlines())
    for arch in ("x86_64", "aarch64"):
        lock = (ROOT / "scripts" / f"image-cp310-{arch}.lock").read_text()
        assert f"confluent-kafka=={pins['confluent-kafka']} --hash=sha256:" in lock


def test_sync_hands_the_files_to_the_owner_and_writes_nothing_for_an_unknown_one(tmp_path: Path) -> None:
    """Issue 26: `--owner` (yarn on EMR) gets the files; a user that does not exist yet (before EMR
    installed its applications) fails the secret before anything is written."""
    import importlib.util
    import pwd

    spec = importlib.util.spec_from_file_location("kmirror_sync_secrets", SYNC)
    assert spec is not None and spec.loader is not None
    sync = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sync)
    me = pwd.getpwuid(os.getuid()).pw_name
    sync.write_atomically(tmp_path / "a", {"value": b"x"}, me)
    assert (tmp_path / "a" / "value").stat().st_uid == os.getuid()
    with pytest.raises(ValueError, match="user 'no-such-user-kmirror' does not exist"):
        sync.write_atomically(tmp_path / "b", {"value": b"x"}, "no-such-user-kmirror")
    assert not (tmp_path / "b").exists()
