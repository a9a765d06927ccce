#!/usr/bin/env bash
# JetStream consumer benchmarks (issue 6): jetraft vs nats-server in the same run.
#
# Starts on loopback, with fresh store dirs: one jetraft node, one nats-server (default
# settings), one nats-server with `sync_interval: always`, and with CLUSTER=1 three-node
# clusters of both. Runs `jetraft-bench jsconsume` (128-byte messages) interleaved ROUNDS times:
# pull consume with explicit acks (batch 100) on R1 and R3, and ordered replay of REPLAY_MSGS
# on R1 and R3 (R3 through node 0, then with the client on the stream leader's node and on a
# follower's); prints medians and ratios. Servers are stopped by PID on exit.
#
# Knobs: ROUNDS=3 MSGS=50000 REPLAY_MSGS=500000 SIZE=128 CLUSTER=1 SKIP_R1_PULL=0, JETRAFT_BIN,
# JETRAFT_BENCH_BIN, NATS_SERVER_BIN (defaults: release binaries, .venv/bin/nats-server).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
MSGS=${MSGS:-50000}
REPLAY_MSGS=${REPLAY_MSGS:-500000}
SIZE=${SIZE:-128}
CLUSTER=${CLUSTER:-1}
SKIP_R1_PULL=${SKIP_R1_PULL:-0}
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

# run PORT CONSUMER REPLICAS MSGS: prints msgs/s (empty on failure); notes in $work/leader-PORT
# whether the stream leader was the node the client talked to (1) or not (0).
# With VIA=leader|follower (clusters only) the client consumes through that node.
run() {
  local out via=()
  [[ -n ${VIA:-} ]] && via=(--via "$VIA" --peer-urls "$(cat "$work/urls-$1")")
  out=$("$JETRAFT_BENCH_BIN" jsconsume --url "nats://127.0.0.1:$1" --consumer "$2" --replicas "$3" \
    --msgs "$4" --size "$SIZE" --batch 100 --timeout 600 "${via[@]}" 2>>"$work/bench-errors.log") || true
  sed -n 's/.* leader_local=\([01]\).*/\1/p' <<<"$out" >>"$work/leader-$1"
  sed -n 's/.* msgs_per_sec=\([0-9.]*\).*/\1/p' <<<"$out"
}

# local_leaders PORT: how many of the scenario's rounds had the leader on the client's node.
local_leaders() { grep -c '^1$' "$work/leader-$1" || true; }

# scenario LABEL CONSUMER REPLICAS MSGS JR_PORT NS_PORT [NSS_PORT]
scenario() {
  local label=$1 consumer=$2 rep=$3 msgs=$4 jp=$5 np=$6 sp=${7:-}
  local jr=() ns=() nss=()
  rm -f "$work/leader-$jp" "$work/leader-$np"
  for _ in $(seq "$ROUNDS"); do
    jr+=("$(run "$jp" "$consumer" "$rep" "$msgs")")
    ns+=("$(run "$np" "$consumer" "$rep" "$msgs")")
    [[ -n $sp ]] && nss+=("$(run "$sp" "$consumer" "$rep" "$msgs")")
  done
  report "$label" jr ns nss
  if ((rep > 1)); then
    echo "  stream leader on the client's node: jetraft $(local_leaders "$jp") of $ROUNDS rounds," \
      "nats-server $(local_leaders "$np") of $ROUNDS" >&2
  fi
}

echo "JetStream consumers, ${SIZE}-byte messages, median of $ROUNDS interleaved rounds (msgs/s)"
echo
echo "| scenario | jetraft | nats-server default | nats-server sync always | ratio vs default | ratio vs sync |"
echo "|---|---:|---:|---:|---:|---:|"
((SKIP_R1_PULL)) || scenario "pull, explicit acks, batch 100, R1 file ($MSGS msgs)" pull 1 "$MSGS" "$JR" "$NS" "$NSS"
# Replay reads what is stored: fsync policy does not matter, and filling 500k messages into
# nats-server with sync_interval: always takes minutes, so that column is skipped here.
scenario "ordered replay, R1 file ($REPLAY_MSGS msgs)" ordered 1 "$REPLAY_MSGS" "$JR" "$NS"
if ((CLUSTER)); then
  # Through node 0, wherever each server placed the stream leader; then with the client on the
  # leader's node and on a follower's (R3 rates depend on it, and placement differs per run).
  scenario "pull, explicit acks, batch 100, R3 file ($MSGS msgs, 3 nodes)" pull 3 "$MSGS" "$JRC" "$NSC"
  VIA=leader scenario "pull, explicit acks, batch 100, R3 file, client on the leader's node" \
    pull 3 "$MSGS" "$JRC" "$NSC"
  VIA=follower scenario "pull, explicit acks, batch 100, R3 file, client on a follower's node" \
    pull 3 "$MSGS" "$JRC" "$NSC"
  scenario "ordered replay, R3 file ($REPLAY_MSGS msgs, 3 nodes)" ordered 3 "$REPLAY_MSGS" "$JRC" "$NSC"
  VIA=leader scenario "ordered replay, R3 file, client on the leader's node" \
    ordered 3 "$REPLAY_MSGS" "$JRC" "$NSC"
  VIA=follower scenario "ordered replay, R3 file, client on a follower's node" \
    ordered 3 "$REPLAY_MSGS" "$JRC" "$NSC"
fi
report_errors bench-consume.sh
