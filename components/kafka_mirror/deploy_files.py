"""What a deploy uploads besides Pulumi resources, found where this package is installed.

The EMR entry script, step wrapper, bootstrap, secrets sync and the app's requirements ship inside the package
(`kafka_mirror/deploy/`; in a checkout these are links to `scripts/`), and the app bundle is zipped
from wherever `spark_app` and `kmirror` are imported from: a checkout or site-packages. So a
program that `pip install`ed kafka-mirror deploys the same files as this repository's stacks.
"""

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import kmirror
from kafka_mirror.bundle import build_bundle

DEPLOY_DIR = Path(__file__).resolve().parent / "deploy"
ENTRY = "kmirror_main.py"
BOOTSTRAP = "emr-bootstrap.sh"
REQUIREMENTS = "app-requirements.txt"
SYNC = "kmirror-sync-secrets.py"
STEP_WRAPPER = "kmirror-step.py"  # run inline by each EMR step (kafka_mirror.emr.specs.emr_step_args)


def deploy_file(name: str) -> Path:
    """The packaged file `name`; raises FileNotFoundError naming the broken install."""
    path = DEPLOY_DIR / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: the kafka-mirror install is incomplete; reinstall the package")
    return path


def app_root() -> Path:
    """The directory holding the `spark_app` and `kmirror` packages the bundle is made of."""
    return Path(kmirror.__file__).resolve().parent.parent


def build_dir(environ: Mapping[str, str]) -> Path:
    """`$KMIRROR_BUILD_DIR`, else `build/` under the working directory (Pulumi runs a program in its project)."""
    return Path(environ.get("KMIRROR_BUILD_DIR") or Path.cwd() / "build")


def app_bundle(environ: Mapping[str, str] = os.environ) -> tuple[Path, str]:
    """The zip EMR nodes run and its sha256: `$KMIRROR_BUNDLE` (e.g. the one CI built and tested)
    or one built now from the installed `spark_app` and `kmirror` into `build_dir`."""
    if prebuilt := environ.get("KMIRROR_BUNDLE"):
        path = Path(prebuilt)
        return path, hashlib.sha256(path.read_bytes()).hexdigest()
    return build_bundle(app_root(), build_dir(environ))
