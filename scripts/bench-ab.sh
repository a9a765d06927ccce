#!/usr/bin/env bash
# A/B of two jetraft builds in the same run (`make bench-ab REF=<commit>`): did a change cost
# throughput? B is this checkout's release build (JETRAFT_BIN), A a reference build (REF_BIN,
# e.g. the commit before a refactor, built in a worktree). Both run on loopback with fresh store
# dirs, one node each (and, with CLUSTER=1, three-node clusters of each), and every workload runs
# interleaved A, B, A, B ... ROUNDS times; the table shows medians and B/A.
#
# Workloads (jetraft-bench, 128-byte payloads):
#   core pub/sub        one publisher, one subscriber, PUBSUB_MSGS messages
#   JS async R1 file    one publisher, 256 publishes in flight, MSGS messages
#   JS async R1 memory  the same on a memory stream
#   JS sync R1 file     one publisher waiting for each PubAck, SYNC_MSGS messages
#   pull R1 file        pull consumer, explicit acks, batch 100, MSGS messages
#   JS async R3 file    (CLUSTER=1) 256 in flight through node 0, MSGS messages
#   pull R3 file        (CLUSTER=1) through node 0, MSGS messages
#   JS async / sync R3  (CLUSTER=1) with the client on the stream leader's node (--via leader)
#
# Knobs: REF_BIN (required), ROUNDS=5 MSGS=50000 SYNC_MSGS=2000 PUBSUB_MSGS=500000 CLUSTER=1,
# JETRAFT_BIN, JETRAFT_BENCH_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=${ROUNDS:-5}
MSGS=${MSGS:-50000}
SYNC_MSGS=${SYNC_MSGS:-2000}
PUBSUB_MSGS=${PUBSUB_MSGS:-500000}
CLUSTER=${CLUSTER:-1}
SIZE=128
[[ -n ${REF_BIN:-} && -x ${REF_BIN:-} ]] || {
  echo "bench-ab.sh: REF_BIN must name the reference jetraft binary" >&2
  exit 2
}
# bench-lib checks NATS_SERVER_BIN exists; this script never starts nats-server.
NATS_SERVER_BIN=$REF_BIN
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

A=$(start_single ref "$REF_BIN" -js)
B=$(start_single new "$JETRAFT_BIN" -js)
if ((CLUSTER)); then
  AC=$(start_cluster refc "$REF_BIN" -js)
  BC=$(start_cluster newc "$JETRAFT_BIN" -js)
fi
sleep 5

# value BENCH PORT ARGS...: the run's msgs_per_sec (empty on failure).
value() {
  local bench=$1 port=$2
  shift 2
  timeout --kill-after=5 300 "$JETRAFT_BENCH_BIN" "$bench" --url "nats://127.0.0.1:$port" "$@" \
    2>>"$work/bench-errors.log" | sed -n 's/^RESULT .* msgs_per_sec=\([0-9.]*\).*/\1/p' | tail -n 1 || true
}

echo "A/B: A = $REF_BIN, B = $JETRAFT_BIN; medians of $ROUNDS interleaved rounds (msgs/s)"
echo
echo "| workload | A | B | B/A |"
echo "|---|---:|---:|---:|"
# via PORT: with VIA=leader|follower, the arguments that make jetraft-bench use the stream
# leader's node (or a follower's) of the cluster whose first client port is PORT.
via() {
  [[ -n ${VIA:-} ]] && printf -- '--via\n%s\n--peer-urls\n%s\n' "$VIA" "$(cat "$work/urls-$1")"
  return 0
}
# ab LABEL A_PORT B_PORT BENCH ARGS...: one interleaved workload and its table row.
ab() {
  local label=$1 ap=$2 bp=$3
  shift 3
  local a=() b=() av bv
  mapfile -t av < <(via "$ap")
  mapfile -t bv < <(via "$bp")
  for _ in $(seq "$ROUNDS"); do
    a+=("$(value "$1" "$ap" "${@:2}" "${av[@]}")")
    b+=("$(value "$1" "$bp" "${@:2}" "${bv[@]}")")
  done
  local am bm
  am=$(printf '%s\n' "${a[@]}" | median)
  bm=$(printf '%s\n' "${b[@]}" | median)
  awk -v l="$label" -v a="$am" -v b="$bm" \
    'BEGIN { printf "| %s | %s | %s | %.2f |\n", l, a, b, (a > 0 ? b / a : 0) }'
  echo "  $label rounds: A ${a[*]}; B ${b[*]}" >&2
}
ab "core pub/sub, 1 node" "$A" "$B" pubsub --msgs "$PUBSUB_MSGS" --size "$SIZE"
ab "JS async 256 in flight, R1 file" "$A" "$B" jspub --storage file --replicas 1 \
  --inflight 256 --msgs "$MSGS" --size "$SIZE" --timeout 300
ab "JS async 256 in flight, R1 memory" "$A" "$B" jspub --storage memory --replicas 1 \
  --inflight 256 --msgs "$MSGS" --size "$SIZE" --timeout 300
ab "JS sync, R1 file" "$A" "$B" jspub --storage file --replicas 1 \
  --inflight 1 --msgs "$SYNC_MSGS" --size "$SIZE" --timeout 300
ab "pull, explicit acks, batch 100, R1 file" "$A" "$B" jsconsume --consumer pull --replicas 1 \
  --msgs "$MSGS" --size "$SIZE" --batch 100 --timeout 300
if ((CLUSTER)); then
  ab "JS async 256 in flight, R3 file, through node 0" "$AC" "$BC" jspub --storage file \
    --replicas 3 --inflight 256 --msgs "$MSGS" --size "$SIZE" --timeout 300
  ab "pull, explicit acks, batch 100, R3 file, through node 0" "$AC" "$BC" jsconsume \
    --consumer pull --replicas 3 --msgs "$MSGS" --size "$SIZE" --batch 100 --timeout 300
  # Through node 0 the rate depends on where each round's stream leader lands (two runs of the
  # same two builds gave 0.76 and 1.20): these rows put the client on the leader's node.
  VIA=leader ab "JS async 256 in flight, R3 file, client on the leader's node" "$AC" "$BC" \
    jspub --storage file --replicas 3 --inflight 256 --msgs "$MSGS" --size "$SIZE" --timeout 300
  VIA=leader ab "JS sync, R3 file, client on the leader's node" "$AC" "$BC" jspub \
    --storage file --replicas 3 --inflight 1 --msgs "$SYNC_MSGS" --size "$SIZE" --timeout 300
fi
report_errors bench-ab.sh
