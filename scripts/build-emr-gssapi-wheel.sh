#!/usr/bin/env bash
# Builds, ONCE per confluent-kafka pin and node architecture, the GSSAPI-capable confluent-kafka
# wheel the EMR wheelhouse needs when the stack sets `gssapi: true` (PyPI's wheels bundle a
# librdkafka without Cyrus SASL, so they cannot do Kerberos). Run it on Amazon Linux 2023 with
# python3.11 on the nodes' architecture (an EMR 8 node, an AL2023 EC2 instance, or
# `docker run --platform linux/arm64 -v "$PWD:/src" -w /src amazonlinux:2023 scripts/build-emr-gssapi-wheel.sh ...`),
# on a machine with internet access; EMR nodes themselves download nothing.
#
#   scripts/build-emr-gssapi-wheel.sh --librdkafka-sha256 HEX [--out build/gssapi-wheels]
#
# --librdkafka-sha256: the sha256 of librdkafka's source tarball
#   https://github.com/confluentinc/librdkafka/archive/refs/tags/v<VERSION>.tar.gz
# (VERSION = the confluent-kafka pin's major.minor.0 unless LIBRDKAFKA_VERSION is set). The
# script refuses to build from a tarball that does not match it; record the value you reviewed.
# Output: confluent_kafka-<pin>-1gssapi-cp311-cp311-<platform>.whl with librdkafka vendored
# (auditwheel) and linked to the system's libsasl2/OpenSSL, which every AL2023 node has; the
# `1gssapi` build tag lets the deploy tell it from PyPI's wheel.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="$ROOT/build/gssapi-wheels" SHA256=""
while [ $# -gt 0 ]; do
  case "$1" in
    --librdkafka-sha256) SHA256="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    *) echo "build-emr-gssapi-wheel.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
if ! [[ "$SHA256" =~ ^[0-9a-f]{64}$ ]]; then
  echo "build-emr-gssapi-wheel.sh: --librdkafka-sha256 (64 hex digits) is required" >&2
  exit 2
fi
PIN="$(sed -n 's/^confluent-kafka==\([^;[:space:]]*\).*/\1/p' "$ROOT/scripts/app-requirements.txt")"
if [ -z "$PIN" ]; then
  echo "build-emr-gssapi-wheel.sh: no confluent-kafka==<version> pin in scripts/app-requirements.txt" >&2
  exit 2
fi
LIBRDKAFKA_VERSION="${LIBRDKAFKA_VERSION:-$(echo "$PIN" | cut -d. -f1,2).0}"
if ! grep -q 'Amazon Linux.*2023' /etc/os-release 2>/dev/null; then
  echo "build-emr-gssapi-wheel.sh: run on Amazon Linux 2023 (the EMR 8 nodes' OS); this is $(uname -sr)" >&2
  exit 1
fi

sudo dnf install -y -q gcc gcc-c++ make tar gzip python3.11 python3.11-devel python3.11-pip \
  cyrus-sasl-devel openssl-devel zlib-devel libzstd-devel lz4-devel patchelf
work="$(mktemp -d)"
tarball="$work/librdkafka-$LIBRDKAFKA_VERSION.tar.gz"
curl -fsSL -o "$tarball" "https://github.com/confluentinc/librdkafka/archive/refs/tags/v$LIBRDKAFKA_VERSION.tar.gz"
echo "$SHA256  $tarball" | sha256sum --check --quiet || {
  echo "build-emr-gssapi-wheel.sh: $tarball does not match --librdkafka-sha256 $SHA256; not building" >&2
  exit 1
}
tar -xzf "$tarball" -C "$work"
prefix="$work/prefix"
(cd "$work/librdkafka-$LIBRDKAFKA_VERSION" && ./configure --prefix="$prefix" --enable-sasl --enable-ssl \
  --disable-curl && make -j"$(nproc)" && make install)
python3.11 -m venv "$work/venv"
"$work/venv/bin/pip" install -q auditwheel wheel
C_INCLUDE_PATH="$prefix/include" LIBRARY_PATH="$prefix/lib" "$work/venv/bin/pip" wheel -q --no-deps \
  --no-binary confluent-kafka -w "$work/raw" "confluent-kafka==$PIN"
# Vendor librdkafka; libsasl2/OpenSSL/zlib/zstd/lz4 stay the node's own (its SASL plugins must
# match its libsasl2).
LD_LIBRARY_PATH="$prefix/lib" "$work/venv/bin/auditwheel" repair -w "$work/repaired" \
  --exclude 'libsasl2.so.*' --exclude 'libssl.so.*' --exclude 'libcrypto.so.*' --exclude 'libz.so.*' \
  --exclude 'libzstd.so.*' --exclude 'liblz4.so.*' "$work"/raw/confluent_kafka-*.whl
"$work/venv/bin/wheel" tags --build 1gssapi --remove "$work"/repaired/confluent_kafka-*.whl
check='import confluent_kafka as c; c.Producer({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "true"})'
python3.11 -m venv "$work/check"
"$work/check/bin/pip" install -q --no-index "$work"/repaired/confluent_kafka-*gssapi*.whl
sudo dnf install -y -q cyrus-sasl-gssapi
"$work/check/bin/python" -c "$check"
mkdir -p "$OUT"
cp "$work"/repaired/confluent_kafka-*gssapi*.whl "$OUT/"
ls "$OUT"/confluent_kafka-"$PIN"-1gssapi-*.whl
