#!/usr/bin/env bash
# Fetch MirrorMaker 2 (connect-mirror, connect-mirror-client, connect-runtime) into
# .cache/kafka/mm2-<version>/ once; prints that directory. Usage: fetch-mm2.sh [kafka version]
set -euo pipefail
version="${1:-4.1.1}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="$root/.cache/kafka/mm2-$version"
if [ ! -f "$dest/.complete" ]; then
  mkdir -p "$dest"
  mvn -q -B -f "$root/scripts/kafka/mm2/pom.xml" -Dkafka.version="$version" \
    dependency:copy-dependencies -DoutputDirectory="$dest" -DincludeScope=runtime >&2
  touch "$dest/.complete"
fi
echo "$dest"
