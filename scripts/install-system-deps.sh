#!/usr/bin/env bash
# Installs the Debian packages the security tests need (idempotent; skips what is present).
set -euo pipefail
need=()
for pkg in stunnel4 krb5-kdc krb5-admin-server krb5-user libsasl2-modules-gssapi-mit librdkafka-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${need[*]}; run as root or: sudo apt-get install ${need[*]}" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
