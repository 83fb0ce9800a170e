#!/usr/bin/env bash
# Installs the Debian packages the security tests need (idempotent; skips what is present):
#   stunnel4                                   TLS / mutual-TLS front for tansu (tests/security/test_tls.py)
#   krb5-kdc krb5-admin-server krb5-user       a real MIT KDC on loopback, kadmin.local, kinit, klist
#   librdkafka-dev libsasl2-modules-gssapi-mit librdkafka with Cyrus SASL + its GSSAPI plugin, which
#   gcc libc6-dev python3-dev python3-venv     scripts/build-gssapi-client.sh compiles confluent-kafka against
#   maven, a Java 17 runtime                   the Apache Kafka test brokers (kmirror_cli/local_kafka.py)
#   gdb                                        a crashed test process's C stack (scripts/crash-report.sh)
set -euo pipefail
need=()
for pkg in stunnel4 krb5-kdc krb5-admin-server krb5-user libsasl2-modules-gssapi-mit librdkafka-dev \
           gcc libc6-dev python3-dev python3-venv gdb; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
# Maven and Java may come from elsewhere (SDKMAN, a Temurin JDK): only missing commands ask for packages.
command -v mvn >/dev/null 2>&1 || need+=(maven)
command -v java >/dev/null 2>&1 || need+=(openjdk-17-jre-headless)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${need[*]}; run as root or: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
started=$(date +%s)
apt-get update -qq
# krb5-config asks for a default realm: the tests bring their own krb5.conf, so accept its defaults.
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
echo "installed ${need[*]} in $(( $(date +%s) - started )) s"
