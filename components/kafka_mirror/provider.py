"""The component provider: hosts COMPONENTS under the package name `kafka-mirror`.

The engine starts it as a plugin (`python components <engine address>`, see
components/PulumiPlugin.yaml); `python -m kafka_mirror <engine address>` does the same from an
installed package. The host prints its gRPC port and serves the schema Pulumi's analyzer infers
from the components' type annotations.
"""

from importlib.metadata import PackageNotFoundError, version

from pulumi.provider.experimental import component_provider_host

from kafka_mirror import COMPONENTS, PACKAGE


def package_version() -> str:
    """The installed distribution's version (`0.0.0` when running from a bare checkout)."""
    try:
        return version("kafka-mirror")
    except PackageNotFoundError:
        return "0.0.0"


def main() -> None:
    """Serve the provider until the engine stops it (reads the engine address from sys.argv)."""
    component_provider_host(name=PACKAGE, components=list(COMPONENTS), version=package_version())
