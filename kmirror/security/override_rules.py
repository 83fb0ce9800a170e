"""What `producer`, `consumer` and `spark.options` overrides (and a flow spec's cluster
`config`) may contain.

- No literal secrets: `kmirror plan --format json`, diffs, flow specs and manifests print
  overrides. A secret belongs in the cluster's `security` section as a reference; for a
  property that section does not cover (an OAuth client secret), a reference string
  (`${env:VAR}` / `${file:/abs/path}`) resolved by the app right before a client is created.
- References only where secrets go: `resolve_references` reads a file or variable only for a
  property that carries a secret (`carries_secret`); anywhere else (`client.id`) a reference
  would send the file's content to the brokers, so it is refused.
- Nothing that runs or loads code on the hosts: `sasl.kerberos.kinit.cmd` (a shell command on
  every executor), `plugin.library.paths`, OpenSSL engines and providers, callbacks.
- Only what librdkafka accepts, in the map of the client that reads it, and never a producer
  setting that could lose records (`kmirror.security.client_properties`).

Messages name the property and the fix, never the value of a secret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from kmirror.errors import Problem
from kmirror.security.client_properties import ROLES, client_property_problems, producer_safety_problems
from kmirror.security.kerberos import kinit_property_problems
from kmirror.security.msk_iam import msk_iam_config_problems
from kmirror.security.secret_refs import is_reference

# Secret-bearing names by pattern, not by hand list, so new librdkafka properties are covered:
# sasl.password, ssl.key.password, ssl.keystore.password, ssl.truststore.password,
# sasl.oauthbearer.client.secret, spark.*.password, fs.s3a.secret.key, ssl.key.pem,
# sasl.oauthbearer.assertion.private.key.pem/.passphrase (JWT bearer assertion keys), ...
_SECRET_NAME_RE = re.compile(r"password|secret|passphrase|\.key\.pem$", re.IGNORECASE)
# Secret material without a telling name (PEM text, JAAS lines with password="...").
SECRET_PROPERTIES = frozenset({"ssl.key.pem", "sasl.jaas.config", "sasl.oauthbearer.config"})
# Where the planner writes `${env:VAR}` for an env REF of tls.ca / tls.cert (not secret, but referenced).
REFERENCED_PEM_PROPERTIES = frozenset({"ssl.ca.pem", "ssl.certificate.pem"})
CODE_PROPERTIES = frozenset(
    {
        "sasl.kerberos.kinit.cmd",  # a shell command librdkafka runs on every client host
        "plugin.library.paths",  # shared libraries loaded into the process
        "ssl.engine.location",  # an OpenSSL engine (shared library)
        "ssl.engine.id",
        "ssl_engine_callback_data",
        "ssl.providers",  # OpenSSL 3 providers (loaded modules)
        "oauth_cb",  # confluent-kafka's OAUTHBEARER token callback
        "oauthbearer_token_refresh_cb",
        "on_delivery",
        "on_commit",
        "logger",
    }
)
_CALLBACK_RE = re.compile(r"(?:_|\.)cb$")
SECURITY_FIX = (
    "give the cluster a `security` section with a secret reference ({env: VAR}, {file: PATH}, "
    "{k8s_secret: NAME, key: KEY}, ...) (docs/security.md)"
)


def is_secret_property(name: str) -> bool:
    """True for properties whose value is a secret (never printed, never literal in a topology)."""
    return name in SECRET_PROPERTIES or _SECRET_NAME_RE.search(name) is not None


def carries_secret(name: str) -> bool:
    """True for the properties where `${file:..}`/`${env:..}` references are resolved."""
    return is_secret_property(name) or name in REFERENCED_PEM_PROPERTIES


def runs_code(name: str) -> bool:
    """True for properties that make a client run a command or load code."""
    return name in CODE_PROPERTIES or _CALLBACK_RE.search(name) is not None


def _code_problem(name: str, path: str) -> Problem:
    fix = (
        "the cluster's security.kerberos section configures kinit"
        if name == "sasl.kerberos.kinit.cmd"
        else "remove it; plugins, engines and callbacks are not configurable through kmirror"
    )
    return Problem(f"{path}.{name}", f"cannot be overridden: it makes every client run or load code; {fix}")


def _reference_problem(name: str, value: str, path: str) -> Problem:
    return Problem(
        f"{path}.{name}",
        f"the reference {value} would be resolved into a property that carries no secret (its content would "
        "be sent to the brokers); references are resolved only in password/secret/ssl.*.pem properties: "
        "write the value itself",
    )


def client_override_problems(overrides: Mapping[str, Any], path: str, role: str | None = None) -> list[Problem]:
    """Problems of a librdkafka override map (`producer`, `consumer`) at `path`: code-running
    properties, literal secrets, references outside secret properties, what librdkafka would
    refuse, and (producer) unsafe settings. `role` defaults to the last part of `path`
    (`topologies[0].producer` -> producer), as every caller names the map by its key."""
    literal = (
        "a literal secret is not allowed in overrides (kmirror plan, diffs and flow specs print "
        f"them); {SECURITY_FIX}, or write a reference such as ${{env:VAR}} or ${{file:/abs/path}}"
    )
    role = role or _role_of(path)
    problems = []
    for name, value in overrides.items():
        name = str(name)
        if runs_code(name):
            problems.append(_code_problem(name, path))
        else:
            problems.extend(_value_problems(name, value, path, literal))
    problems += _librdkafka_problems(overrides, path, role)
    if role == "producer":  # one problem per property: an invalid value is not also reported as unsafe
        reported = {p.path for p in problems}
        problems += [p for p in producer_safety_problems(overrides, path) if p.path not in reported]
    return problems + kinit_property_problems(overrides, path)


def _role_of(path: str) -> str | None:
    last = path.rsplit(".", 1)[-1]
    return last if last in ROLES.values() else None


def _librdkafka_problems(properties: Mapping[str, Any], path: str, role: str | None) -> list[Problem]:
    """What librdkafka would refuse, for the properties not already refused as code-running."""
    checked = {k: v for k, v in properties.items() if not runs_code(str(k))}
    return client_property_problems(checked, path, role, is_secret_property)


def _value_problems(name: str, value: Any, path: str, literal_secret_message: str) -> list[Problem]:
    """A reference outside a secret property, or a literal value in one (shared by overrides and
    flow-spec cluster configs; only the literal-secret message differs)."""
    if is_reference(value) and not carries_secret(name):
        return [_reference_problem(name, value, path)]
    if is_secret_property(name) and not is_reference(value):
        return [Problem(f"{path}.{name}", literal_secret_message)]
    return []


def cluster_config_problems(config: Mapping[str, Any], path: str, allowed_code: Mapping[str, str]) -> list[Problem]:
    """Problems of a flow spec's `source.config` / `target.config` (written by the planner, which
    puts only references and the `allowed_code` values there, e.g. its own kinit command)."""
    literal = (
        f"a literal secret is not allowed in a flow spec; {SECURITY_FIX} and plan again, "
        "or write a reference such as ${env:VAR} or ${file:/abs/path}"
    )
    problems = []
    for name, value in config.items():
        name = str(name)
        if runs_code(name):
            if allowed_code.get(name) != value:
                problems.append(_code_problem(name, path))
        else:
            problems.extend(_value_problems(name, value, path, literal))
    # Read by every client of the cluster (consumer, producer, admin): no role to check.
    problems += _librdkafka_problems(config, path, None)
    problems += msk_iam_config_problems(config, path)
    return problems + kinit_property_problems(config, path)


def spark_option_problems(options: Mapping[str, Any], path: str) -> list[Problem]:
    """Spark confs are printed in plans and rendered into manifests: no secret may be one."""
    return [
        Problem(
            f"{path}.{name}",
            "a secret is not allowed in spark options (plans and Spark manifests print them); "
            f"Kafka credentials go in the cluster's security section: {SECURITY_FIX}",
        )
        for name in options
        if is_secret_property(str(name))
    ]
