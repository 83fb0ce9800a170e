#!/usr/bin/env python3
"""Write the Secrets Manager secrets a node's mirror apps read into /etc/kmirror/secrets (EMR).

    kmirror-sync-secrets.py --manifest s3://BUCKET/bootstrap/secrets.tsv [--root /etc/kmirror/secrets]
                            [--region R] [--endpoint-url URL] [--owner yarn]

The manifest (written by the Pulumi program, `kafka_mirror.emr.specs.secrets_manifest`) has one
`<secret ARN>\\t<directory>` line per secret. Each secret is a JSON object; every key becomes the
file `<root>/<directory>/<key>` (mode 0600 in a 0700 directory, owned by `--owner`: on EMR `yarn`,
the user YARN runs the mirror's driver and executors as; nobody else, not the whole `hadoop` group,
can read them), keys ending in `.b64` are base64-decoded into the file without the suffix (keytabs,
PKCS#12). An owner that does not exist yet (before EMR installed its applications) fails each
secret before anything is written. Files are replaced atomically, so
an app never reads half a keytab. Run by scripts/emr-bootstrap.sh at boot and every minute
(new flows' secrets and rotations arrive without re-bootstrapping). Exits 1 naming the secret
(never its value) when one cannot be fetched; the others are still written.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pwd
import sys
import tempfile
from pathlib import Path

import boto3


def parse_manifest(text: str) -> list[tuple[str, str]]:
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        arn, sep, directory = line.partition("\t")
        if not sep or not directory or "/" in directory or directory.startswith("."):
            raise ValueError(f"manifest line {number}: expected '<ARN>\\t<directory>', got {line!r}")
        entries.append((arn.strip(), directory.strip()))
    return entries


def files_of(secret_string: str) -> dict[str, bytes]:
    """File name -> content of one secret's JSON object (`.b64` keys decoded)."""
    values = json.loads(secret_string)
    if not isinstance(values, dict):
        raise ValueError("secret is not a JSON object of file name -> value")
    out = {}
    for key, value in values.items():
        if "/" in key or key.startswith("."):
            raise ValueError(f"key {key!r} is not a plain file name")
        if key.endswith(".b64"):
            out[key[: -len(".b64")]] = base64.b64decode(value)
        else:
            out[key] = str(value).encode()
    return out


def owner_ids(owner: str | None) -> tuple[int, int] | None:
    """(uid, gid) of `owner`; None keeps the writer's. Raises ValueError for an unknown user."""
    if owner is None:
        return None
    try:
        entry = pwd.getpwnam(owner)
    except KeyError:
        raise ValueError(f"user {owner!r} does not exist (yet); nothing written") from None
    return entry.pw_uid, entry.pw_gid


def write_atomically(directory: Path, files: dict[str, bytes], owner: str | None) -> None:
    ids = owner_ids(owner)  # before anything is written
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)
    if ids is not None:
        os.chown(directory, *ids)
    for name, content in files.items():
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")  # 0600
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        if ids is not None:
            os.chown(tmp, *ids)
        os.replace(tmp, directory / name)


def read_manifest(uri: str, session: boto3.session.Session, endpoint_url: str | None) -> str:
    if not uri.startswith("s3://"):
        return Path(uri).read_text()
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    body = session.client("s3", endpoint_url=endpoint_url).get_object(Bucket=bucket, Key=key)["Body"]
    return str(body.read().decode())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--manifest", required=True)
    parser.add_argument("--root", default="/etc/kmirror/secrets")
    parser.add_argument("--region", default=None)
    parser.add_argument("--endpoint-url", default=None, help="tests: a moto server")
    parser.add_argument("--owner", default=None, help="the only user that may read the files (yarn on EMR)")
    args = parser.parse_args(argv)
    session = boto3.session.Session(region_name=args.region)
    entries = parse_manifest(read_manifest(args.manifest, session, args.endpoint_url))
    client = session.client("secretsmanager", endpoint_url=args.endpoint_url)
    failed = 0
    for arn, directory in entries:
        try:
            secret = client.get_secret_value(SecretId=arn)["SecretString"]
            write_atomically(Path(args.root) / directory, files_of(secret), args.owner)
        except Exception as exc:  # reported per secret; the others are still written
            failed += 1
            print(f"kmirror-sync-secrets: {arn} -> {directory}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
