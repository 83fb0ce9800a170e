#!/usr/bin/env bash
# EMR bootstrap action of kafka-mirror: runs on every node when it joins the cluster
# (components/emr_spark_platform.py passes the arguments; see docs/deploy.md).
#
#   emr-bootstrap.sh --wheelhouse s3://B/bootstrap/wheelhouse --secrets s3://B/bootstrap/secrets.tsv
#                    --sync s3://B/bootstrap/kmirror-sync-secrets.py --region R [--gssapi]
#
# Every argument is a fixed location: the app bundle travels with each step (--py-files), so an
# app release never changes this action (a changed bootstrap action replaces the EMR cluster).
#
# 1. A venv at /opt/kmirror/venv on the node's python3.11 (shipped with emr-spark-8.0.0) with the
#    app's deps, installed from the wheelhouse in the stack's bucket for this node's architecture
#    (`uname -m`): no package index, every wheel checked against the sha256 in requirements.lock.
#    Nothing is downloaded from PyPI or GitHub, so nodes in private subnets without NAT work (S3
#    through the VPC's S3 endpoint, as EMR itself needs).
# 2. --gssapi: the wheelhouse holds the user-built GSSAPI confluent-kafka; the node needs the Cyrus
#    SASL GSSAPI plugin and kinit. They are installed from Amazon Linux's own repositories (served
#    from S3 in the region) only when missing; the client is then checked to accept GSSAPI.
# 3. The secrets the flows reference, written to /etc/kmirror/secrets/<dir>/<key> now and every
#    minute after (systemd timer), so new flows' secrets and rotations arrive without a reboot.
set -euo pipefail

PYTHON="${KMIRROR_NODE_PYTHON:-python3.11}"
HOME_DIR=/opt/kmirror
VENV="$HOME_DIR/venv"
WHEELHOUSE="" SECRETS="" SYNC="" REGION="" GSSAPI=0

while [ $# -gt 0 ]; do
  case "$1" in
    --wheelhouse) WHEELHOUSE="${2%/}"; shift 2 ;;
    --secrets) SECRETS="$2"; shift 2 ;;
    --sync) SYNC="$2"; shift 2 ;;
    --region) REGION="$2"; shift 2 ;;
    --gssapi) GSSAPI=1; shift ;;
    *) echo "emr-bootstrap.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for required in WHEELHOUSE SECRETS SYNC REGION; do
  if [ -z "${!required}" ]; then
    echo "emr-bootstrap.sh: --$(echo "$required" | tr 'A-Z' 'a-z') is required" >&2
    exit 2
  fi
done

arch="$(uname -m)"
py_tag="$("$PYTHON" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")' 2>/dev/null)" || {
  echo "emr-bootstrap.sh: $PYTHON not found; emr-spark-8.0.0 nodes ship it (set KMIRROR_NODE_PYTHON otherwise)" >&2
  exit 1
}
local_wheels="$(mktemp -d)"
aws s3 cp --quiet --recursive "$WHEELHOUSE/$py_tag-$arch/" "$local_wheels/"
if [ ! -f "$local_wheels/requirements.lock" ]; then
  echo "emr-bootstrap.sh: no $WHEELHOUSE/$py_tag-$arch/requirements.lock: the stack built no wheelhouse for" \
    "$py_tag on $arch; set the stack's instance types to this node's type and run pulumi up" >&2
  exit 1
fi

if [ "$GSSAPI" = 1 ]; then
  missing=""
  for pkg in cyrus-sasl-gssapi krb5-workstation; do
    rpm -q "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    sudo dnf install -y -q $missing
  fi
fi

sudo mkdir -p "$HOME_DIR/bin" /etc/kmirror/secrets
# --without-pip + pip run from its own wheel: no ensurepip, no index, pip's version from the lock.
sudo "$PYTHON" -m venv --without-pip "$VENV"
pip_wheel="$(ls "$local_wheels"/pip-*.whl 2>/dev/null | head -n1)"
if [ -z "$pip_wheel" ]; then
  echo "emr-bootstrap.sh: the wheelhouse has no pip wheel (components.emr_specs.NODE_EXTRA_REQUIREMENTS)" >&2
  exit 1
fi
sudo "$VENV/bin/python" "$pip_wheel/pip" install --quiet --disable-pip-version-check --no-index \
  --find-links "$local_wheels" --require-hashes -r "$local_wheels/requirements.lock"
if [ "$GSSAPI" = 1 ]; then
  # Fail the bootstrap (and so the node) now rather than every Kerberos flow later.
  "$VENV/bin/python" -c 'import confluent_kafka as c; c.Producer({"security.protocol": "SASL_PLAINTEXT",
    "sasl.mechanisms": "GSSAPI", "sasl.kerberos.kinit.cmd": "true"})'
fi

aws s3 cp --quiet "$SYNC" /tmp/kmirror-sync-secrets.py
sudo install -m 0755 /tmp/kmirror-sync-secrets.py "$HOME_DIR/bin/kmirror-sync-secrets.py"
sync_cmd="$VENV/bin/python $HOME_DIR/bin/kmirror-sync-secrets.py --manifest $SECRETS --region $REGION --owner yarn"
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
# The yarn user (YARN runs the mirror's containers as it) exists only once EMR installed its
# applications: sync as root-only files now; the timer hands them to yarn (0600) once it exists.
sudo "$VENV/bin/python" "$HOME_DIR/bin/kmirror-sync-secrets.py" --manifest "$SECRETS" --region "$REGION"
sudo systemctl daemon-reload
sudo systemctl enable --now kmirror-secrets.timer
rm -rf "$local_wheels"
echo "kafka-mirror bootstrap done ($py_tag-$arch, gssapi=$GSSAPI)"
