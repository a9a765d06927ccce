#!/usr/bin/env bash
# Idle-group cost: three `idle_groups` processes (one node each) on loopback host N groups
# (default 100) of three replicas over gRPC with default RaftTiming. Once every node sees a
# leader for every group, each process's CPU (utime + stime from /proc/<pid>/stat) is measured
# over a window and printed as % of one core. The processes are stopped by PID afterwards.
#
# Usage: scripts/bench-idle.sh [--groups N] [--secs S] [--release]
#   Dev profile by default (RocksDB's C++ is prebuilt; jetraft and deps at opt-level 1).
set -euo pipefail
cd "$(dirname "$0")/.."

groups=100
secs=20
profile=debug
build_flags=()
while [ $# -gt 0 ]; do
    case "$1" in
        --groups) groups="$2"; shift 2 ;;
        --secs) secs="$2"; shift 2 ;;
        --release) profile=release; build_flags=(--release); shift ;;
        *) echo "unknown argument: $1" >&2; exit 2 ;;
    esac
done

CARGO_TARGET_DIR="$(scripts/target-dir.sh)"
export CARGO_TARGET_DIR
cargo build --quiet -p jetraft-raft --example idle_groups "${build_flags[@]}"
target="$CARGO_TARGET_DIR"
bin="$target/$profile/examples/idle_groups"

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${pids[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

# Three free loopback ports (bound and released by Python, then handed to the nodes).
ports=$(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(",".join(str(s.getsockname()[1]) for s in ss))
')

for i in 0 1 2; do
    mkdir -p "$work/n$i"
    RUST_LOG=warn "$bin" "$i" "$ports" "$work/n$i" "$groups" >"$work/n$i.log" 2>"$work/n$i.err" &
    pids+=($!)
done

deadline=$((SECONDS + 180))
for i in 0 1 2; do
    until grep -q '^ready' "$work/n$i.log"; do
        if [ $SECONDS -ge $deadline ]; then
            echo "node $i: not every group has a leader after 180 s" >&2
            tail -5 "$work/n$i.log" "$work/n$i.err" >&2
            exit 1
        fi
        if ! kill -0 "${pids[$i]}" 2>/dev/null; then
            echo "node $i exited early" >&2
            tail -20 "$work/n$i.err" >&2
            exit 1
        fi
        sleep 0.5
    done
done
# Let elections and connection setup settle before measuring.
sleep 3

ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
before=()
for pid in "${pids[@]}"; do before+=("$(ticks "$pid")"); done
sleep "$secs"
echo "idle_groups: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), $profile build"
echo "$groups groups x 3 replicas, default RaftTiming, CPU over $secs s:"
total=0
for i in 0 1 2; do
    now=$(ticks "${pids[$i]}")
    used=$((now - before[i]))
    total=$((total + used))
    pct=$(awk -v t="$used" -v hz="$hz" -v s="$secs" 'BEGIN { printf "%.1f", 100 * t / hz / s }')
    leading=$(grep '^ready' "$work/n$i.log" | sed 's/.*leading=//')
    echo "  node $((i + 1)): ${pct}% of one core (leads $leading groups)"
done
awk -v t="$total" -v hz="$hz" -v s="$secs" 'BEGIN { printf "  total: %.1f%% of one core\n", 100 * t / hz / s }'
