#!/usr/bin/env bash
# Client TLS cost: core pub/sub and JetStream publish over TLS, jetraft vs nats-server, both
# with the same certificate (ECDSA P-256, generated here with openssl), same run, interleaved
# rounds (`make bench-tls`, also part of `make bench`).
#
# Workloads (median of ROUNDS interleaved rounds):
#   pubsub: 1 publisher + 1 subscriber connection over TLS, PUBSUB_MSGS messages of SIZE bytes
#   jspub:  1 connection over TLS, R1 file stream, 256 PubAcks in flight, MSGS messages of SIZE
#   bytes
# Knobs: ROUNDS=3 PUBSUB_MSGS=500000 MSGS=50000 SIZE=128; binaries as in scripts/bench-lib.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
PUBSUB_MSGS=${PUBSUB_MSGS:-500000}
MSGS=${MSGS:-50000}
SIZE=${SIZE:-128}
source scripts/bench-lib.sh

command -v openssl >/dev/null || { echo "bench-tls.sh: needs openssl to make the test certificate" >&2; exit 1; }
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
  -keyout "$work/key.pem" -out "$work/cert.pem" -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" 2>/dev/null
printf 'tls { cert_file: "%s", key_file: "%s" }\n' "$work/cert.pem" "$work/key.pem" >"$work/tls.conf"
export JETRAFT_BENCH_TLS_CA=$work/cert.pem

JR=$(start_single jetraft "$JETRAFT_BIN" -js -c "$work/tls.conf")
NS=$(start_single nats "$NATS_SERVER_BIN" -js -c "$work/tls.conf")
sleep 3

pubsub() {
  "$JETRAFT_BENCH_BIN" pubsub --url "tls://127.0.0.1:$1" --msgs "$PUBSUB_MSGS" --size "$SIZE" \
    --timeout 300 2>>"$work/bench-errors.log" | sed -n 's/.* msgs_per_sec=\([0-9.]*\).*/\1/p'
}
jspub() {
  "$JETRAFT_BENCH_BIN" jspub --url "tls://127.0.0.1:$1" --storage file --replicas 1 \
    --inflight 256 --msgs "$MSGS" --size "$SIZE" --timeout 300 2>>"$work/bench-errors.log" |
    sed -n 's/.* msgs_per_sec=\([0-9.]*\).*/\1/p'
}

scenario() {
  local label=$1 fn=$2 jr=() ns=() nss=()
  for r in $(seq "$ROUNDS"); do
    jr+=("$($fn "$JR")")
    ns+=("$($fn "$NS")")
  done
  report "$label" jr ns nss
}

echo "Over TLS (both servers: the same P-256 certificate, TLS 1.3), ${SIZE}-byte messages, median of $ROUNDS interleaved rounds (msgs/s)"
echo
echo "| scenario | jetraft | nats-server | - | ratio | - |"
echo "|---|---:|---:|---:|---:|---:|"
scenario "core pub/sub, 1 pub + 1 sub, $PUBSUB_MSGS msgs" pubsub
scenario "JetStream publish, R1 file, 256 in flight, $MSGS msgs" jspub
report_errors bench-tls.sh
