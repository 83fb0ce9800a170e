"""The component provider: hosts COMPONENTS under the package name `kafka-mirror`.

The engine starts it as a plugin (`python components <engine address>`, see
components/PulumiPlugin.yaml); `python -m kafka_mirror <engine address>` does the same from an
installed package. The host prints its gRPC port and serves the schema Pulumi's analyzer infers
from the components' type annotations.
"""

import json
import re
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from pulumi.provider import main as serve
from pulumi.provider.experimental import host

from kafka_mirror import COMPONENTS, PACKAGE
from kafka_mirror.typed_provider import KafkaMirrorProvider

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def package_version() -> str:
    """The installed distribution's version; in the plugin's own venv (components/requirements.txt
    installs the dependencies, not the project), the checkout's pyproject.toml version."""
    try:
        return version("kafka-mirror")
    except PackageNotFoundError:
        pass
    found = re.search(r'^version = "([^"]+)"$', PYPROJECT.read_text(), re.MULTILINE) if PYPROJECT.exists() else None
    if found is None:
        raise RuntimeError(f"kafka-mirror is not installed and {PYPROJECT} has no version: install the project")
    return found.group(1)


# Inputs holding secret material: marked `secret` in the schema, so every generated SDK wraps
# them as secrets and the engine keeps them encrypted in state (the analyzer infers no secrets).
SECRET_INPUTS: dict[str, tuple[str, ...]] = {
    "ScramSecret": ("password",),
    "TlsSecret": ("keyPem", "keyPassword", "pkcs12B64", "pkcs12Password"),
    "KerberosSecret": ("keytabB64",),
    "EksSparkPlatform": ("kubeconfig",),
    "MirrorDeployment": ("kubeconfig",),
}


def mark_secrets(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with SECRET_INPUTS marked `secret: true`; a name missing from it is an error."""
    for component, names in SECRET_INPUTS.items():
        properties = schema["resources"][f"{PACKAGE}:index:{component}"]["inputProperties"]
        for name in names:
            if name not in properties:
                raise KeyError(f"SECRET_INPUTS names {component}.{name}, which the schema does not have")
            properties[name]["secret"] = True
    return schema


def main() -> None:
    """Serve the provider until the engine stops it (reads the engine address from sys.argv)."""
    host.is_hosting = True  # as component_provider_host: the analyzer must not start a second host
    provider = KafkaMirrorProvider(list(COMPONENTS), PACKAGE, None, package_version())
    provider.schema = json.dumps(mark_secrets(json.loads(provider.schema or "{}")))
    serve(provider, sys.argv[1:])
