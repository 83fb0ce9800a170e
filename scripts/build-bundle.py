#!/usr/bin/env python3
"""Build the app bundle (`spark_app` + `kmirror_engine` + `kmirror`) as a deterministic zip and print its sha256;
with `--wheelhouse ARCH`, also the EMR nodes' wheelhouse for ARCH (aarch64, x86_64).

    .venv/bin/python scripts/build-bundle.py [OUT_DIR]                        # default: build/
    .venv/bin/python scripts/build-bundle.py build --wheelhouse aarch64 [--gssapi-wheels DIR]

The Pulumi program builds the same zip and wheelhouse on EMR stacks (kafka_mirror.bundle,
kafka_mirror.emr.wheelhouse); use this to inspect them or to build them once in CI and deploy those
(`KMIRROR_BUNDLE=build/kmirror-bundle.zip KMIRROR_WHEELHOUSE=build/wheelhouse pulumi up`).
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "components")]  # kmirror, spark_app; kafka_mirror

from kafka_mirror.bundle import build_bundle  # noqa: E402  (needs the checkout on sys.path)
from kafka_mirror.emr.specs import ARCHITECTURES  # noqa: E402
from kafka_mirror.emr.wheelhouse import WheelhouseError, build_wheelhouse  # noqa: E402

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, default=ROOT / "build")
    parser.add_argument("--wheelhouse", action="append", choices=ARCHITECTURES, default=[], metavar="ARCH")
    parser.add_argument("--gssapi-wheels", type=Path, help="directory of the scripts/build-emr-gssapi-wheel.sh wheels")
    args = parser.parse_args()
    path, sha = build_bundle(ROOT, args.out)
    print(f"{path} sha256={sha}")
    for arch in args.wheelhouse:
        try:
            house = build_wheelhouse(
                ROOT / "scripts" / "app-requirements.txt", args.out / "wheelhouse", arch, args.gssapi_wheels
            )
        except WheelhouseError as error:
            sys.exit(f"build-bundle.py: {error}")
        print(f"{house.path} ({len(house.files) - 1} wheels)")
