"""Issue 25: secret-bearing client properties are recognised by pattern, not a hand list."""

from __future__ import annotations

import pytest

from kmirror.security.override_rules import client_override_problems, is_secret_property


@pytest.mark.parametrize(
    "name",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.keystore.password",
        "ssl.key.pem",
        "sasl.oauthbearer.client.secret",
        "sasl.oauthbearer.assertion.private.key.pem",
        "sasl.oauthbearer.assertion.private.key.passphrase",
        "some.future.key.pem",
        "fs.s3a.secret.key",
        "sasl.jaas.config",
    ],
)
def test_secret_bearing_names_are_recognised(name: str) -> None:
    assert is_secret_property(name)
    problems = client_override_problems({name: "hunter2"}, "producer")
    assert problems and all("hunter2" not in str(p) for p in problems)


@pytest.mark.parametrize(
    "name", ["linger.ms", "ssl.ca.location", "sasl.username", "sasl.oauthbearer.assertion.private.key.file"]
)
def test_ordinary_names_are_not_secret(name: str) -> None:
    assert not is_secret_property(name)
