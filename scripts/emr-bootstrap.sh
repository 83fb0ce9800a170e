#!/usr/bin/env bash
# EMR bootstrap action of kafka-mirror: runs on every node when it joins the cluster
# (components/emr_spark_platform.py passes the arguments; see docs/deploy.md).
#
#   emr-bootstrap.sh --bundle s3://B/app/kmirror-bundle-SHA.zip --requirements s3://B/bootstrap/app-requirements.txt
#                    --secrets s3://B/bootstrap/secrets.tsv --sync s3://B/bootstrap/kmirror-sync-secrets.py
#                    --region R [--gssapi]
#
# 1. Python 3.11 venv at /opt/kmirror/venv with the app's deps (spark.pyspark.python points at it).
# 2. --gssapi: librdkafka built from source with Cyrus SASL (GSSAPI/Kerberos) and confluent-kafka
#    built against it (the PyPI wheel has no GSSAPI); kinit from krb5-workstation.
# 3. The secrets the flows reference, written to /etc/kmirror/secrets/<dir>/<key> now and every
#    minute after (systemd timer), so new flows' secrets and rotations arrive without a reboot.
set -euo pipefail

LIBRDKAFKA_VERSION="${LIBRDKAFKA_VERSION:-2.16.0}"
CONFLUENT_KAFKA_VERSION="${CONFLUENT_KAFKA_VERSION:-2.16.1}"
HOME_DIR=/opt/kmirror
VENV="$HOME_DIR/venv"
BUNDLE="" REQUIREMENTS="" SECRETS="" SYNC="" REGION="" GSSAPI=0

while [ $# -gt 0 ]; do
  case "$1" in
    --bundle) BUNDLE="$2"; shift 2 ;;
    --requirements) REQUIREMENTS="$2"; shift 2 ;;
    --secrets) SECRETS="$2"; shift 2 ;;
    --sync) SYNC="$2"; shift 2 ;;
    --region) REGION="$2"; shift 2 ;;
    --gssapi) GSSAPI=1; shift ;;
    *) echo "emr-bootstrap.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for required in BUNDLE REQUIREMENTS SECRETS SYNC REGION; do
  if [ -z "${!required}" ]; then
    echo "emr-bootstrap.sh: --$(echo "$required" | tr 'A-Z' 'a-z') is required" >&2
    exit 2
  fi
done

sudo mkdir -p "$HOME_DIR/bin" /etc/kmirror/secrets
sudo dnf install -y -q python3.11 python3.11-pip krb5-workstation
sudo python3.11 -m venv "$VENV"
aws s3 cp --quiet "$REQUIREMENTS" /tmp/kmirror-requirements.txt
aws s3 cp --quiet "$BUNDLE" /tmp/kmirror-bundle.zip
aws s3 cp --quiet "$SYNC" /tmp/kmirror-sync-secrets.py
sudo install -m 0644 /tmp/kmirror-bundle.zip "$HOME_DIR/kmirror-bundle.zip"
sudo install -m 0755 /tmp/kmirror-sync-secrets.py "$HOME_DIR/bin/kmirror-sync-secrets.py"

if [ "$GSSAPI" = 1 ]; then
  sudo dnf install -y -q gcc gcc-c++ make cyrus-sasl-devel cyrus-sasl-gssapi openssl-devel zlib-devel \
    libzstd-devel lz4-devel python3.11-devel
  workdir="$(mktemp -d)"
  curl -fsSL "https://github.com/confluentinc/librdkafka/archive/refs/tags/v${LIBRDKAFKA_VERSION}.tar.gz" \
    | tar -xz -C "$workdir"
  (cd "$workdir/librdkafka-${LIBRDKAFKA_VERSION}" && ./configure --prefix=/usr/local --enable-sasl --enable-ssl \
    && make -j"$(nproc)" && sudo make install)
  echo /usr/local/lib | sudo tee /etc/ld.so.conf.d/librdkafka.conf >/dev/null
  sudo ldconfig
  sudo C_INCLUDE_PATH=/usr/local/include LIBRARY_PATH=/usr/local/lib "$VENV/bin/pip" install -q \
    --no-binary confluent-kafka "confluent-kafka==${CONFLUENT_KAFKA_VERSION}"
  # Fail the bootstrap (and so the node) now rather than every Kerberos flow later.
  "$VENV/bin/python" -c 'import confluent_kafka as c; c.Producer({"security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "true"})'
  grep -v '^confluent-kafka' /tmp/kmirror-requirements.txt > /tmp/kmirror-requirements-rest.txt
  sudo "$VENV/bin/pip" install -q -r /tmp/kmirror-requirements-rest.txt boto3
else
  sudo "$VENV/bin/pip" install -q -r /tmp/kmirror-requirements.txt boto3
fi

sync_cmd="$VENV/bin/python $HOME_DIR/bin/kmirror-sync-secrets.py --manifest $SECRETS --region $REGION --group hadoop"
sudo tee /etc/systemd/system/kmirror-secrets.service >/dev/null <<UNIT
[Unit]
Description=kafka-mirror: sync Secrets Manager secrets to /etc/kmirror/secrets
[Service]
Type=oneshot
ExecStart=$sync_cmd
UNIT
sudo tee /etc/systemd/system/kmirror-secrets.timer >/dev/null <<UNIT
[Unit]
Description=kafka-mirror: sync secrets every minute
[Timer]
OnBootSec=30s
OnUnitActiveSec=60s
[Install]
WantedBy=timers.target
UNIT
# The hadoop group exists only once EMR installed its applications: sync as root now, chgrp later.
sudo $VENV/bin/python "$HOME_DIR/bin/kmirror-sync-secrets.py" --manifest "$SECRETS" --region "$REGION"
sudo systemctl daemon-reload
sudo systemctl enable --now kmirror-secrets.timer
echo "kafka-mirror bootstrap done (gssapi=$GSSAPI)"
