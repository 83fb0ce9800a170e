"""pulumi_aws warns about its own deprecated classes at import time; not actionable here."""

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:pulumi_aws.*")
