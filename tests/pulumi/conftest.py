"""pulumi_aws warns about its own deprecated classes at import time; not actionable here.

Marker `registry`: the test reaches PyPI (the only registry these machines reach); deselect with
`-m "not registry"` offline."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:pulumi_aws.*")
    config.addinivalue_line("markers", "registry: resolves packages against PyPI (needs the registry)")
