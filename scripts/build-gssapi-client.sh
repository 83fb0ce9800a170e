#!/usr/bin/env bash
# Builds a SEPARATE venv (default .venv-gssapi) whose confluent-kafka links Debian's system
# librdkafka (built with Cyrus SASL, hence GSSAPI/Kerberos). The PyPI wheel of confluent-kafka
# bundles a librdkafka without GSSAPI. Idempotent: an existing working venv is kept (~0.3 s);
# a fresh build takes ~10 s (one small C extension).
# Usage: [PYTHON=/path/to/python] scripts/build-gssapi-client.sh [VENV]
# Needs: scripts/install-system-deps.sh (librdkafka-dev libsasl2-modules-gssapi-mit gcc python3-dev).
set -euo pipefail
VENV="${1:-$(cd "$(dirname "$0")/.." && pwd)/.venv-gssapi}"
PYTHON="${PYTHON:-python3}"  # the Makefile passes the project's venv python (same interpreter version)
VERSION="${CONFLUENT_KAFKA_GSSAPI_VERSION:-}"
if [ -z "$VERSION" ]; then
  # confluent-kafka's C extension must match the system librdkafka's version (2.0.2 on bookworm).
  VERSION="$(dpkg-query -W -f '${Version}' librdkafka-dev 2>/dev/null | sed 's/-[^-]*$//')" || true
fi
check='import confluent_kafka as c; c.Producer({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "true", "log_level": 0})'
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$check" >/dev/null 2>&1; then
  exit 0
fi
if [ -z "$VERSION" ] || ! dpkg -s librdkafka-dev >/dev/null 2>&1; then
  echo "librdkafka-dev is missing: run scripts/install-system-deps.sh (apt-get install librdkafka-dev libsasl2-modules-gssapi-mit)" >&2
  exit 1
fi
rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-binary confluent-kafka "confluent-kafka==$VERSION"
if ! "$VENV/bin/python" -c "$check"; then
  echo "$VENV: confluent-kafka $VERSION was built but refuses sasl.mechanisms=GSSAPI; is libsasl2-modules-gssapi-mit installed?" >&2
  exit 1
fi
echo "built $VENV (confluent-kafka $VERSION against the system librdkafka, with GSSAPI)"
