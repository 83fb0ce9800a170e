#!/usr/bin/env bash
# Builds a SEPARATE venv (default .venv-gssapi) whose confluent-kafka links Debian's system
# librdkafka (built with Cyrus SASL, hence GSSAPI/Kerberos). The PyPI wheel of confluent-kafka
# bundles a librdkafka without GSSAPI. Idempotent: an existing working venv is kept.
# Needs: apt-get install librdkafka-dev libsasl2-modules-gssapi-mit python3-venv (scripts/install-system-deps.sh).
set -euo pipefail
VENV="${1:-$(cd "$(dirname "$0")/.." && pwd)/.venv-gssapi}"
VERSION="${CONFLUENT_KAFKA_GSSAPI_VERSION:-2.0.2}"  # must match Debian's librdkafka (2.0.2 on bookworm)
check='import confluent_kafka as c; c.Producer({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "true", "log_level": 0})'
if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "$check" >/dev/null 2>&1; then
  exit 0
fi
if ! dpkg -s librdkafka-dev >/dev/null 2>&1; then
  echo "librdkafka-dev is missing: run scripts/install-system-deps.sh (apt-get install librdkafka-dev libsasl2-modules-gssapi-mit)" >&2
  exit 1
fi
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --no-binary confluent-kafka "confluent-kafka==$VERSION"
"$VENV/bin/python" -c "$check"
echo "built $VENV (confluent-kafka $VERSION against system librdkafka with GSSAPI)"
