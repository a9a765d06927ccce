#!/usr/bin/env bash
# Makes sure the prebuilt static RocksDB library exists in the machine's cache.
#
# Why: librocksdb-sys compiles ~400 C++ files (15-20 minutes on 2 cores) and cargo rebuilds them
# whenever the build script's own dependency features shift (any new proc-macro crate in the
# workspace can do that). .cargo/config.toml points ROCKSDB_LIB_DIR at this cache instead, so the
# C++ is compiled once per machine (shared by every checkout) and every build after that only
# runs bindgen and links.
#
# Order: an existing cache wins; else a librocksdb.a left by an earlier complete build in this
# checkout's target dir (scripts/target-dir.sh) or in the old machine-wide target dir
# (/var/cache/jetraft/target, used before each checkout had its own) is copied; else it is
# compiled once (ROCKSDB_COMPILE=1) into this checkout's target dir and copied.
set -euo pipefail
cd "$(dirname "$0")/.."

version=11.8.1
cache="/var/cache/jetraft/rocksdb-$version" # keep in sync with .cargo/config.toml
lib="$cache/librocksdb.a"
[ -s "$lib" ] && exit 0
mkdir -p "$cache"

CARGO_TARGET_DIR="$(./scripts/target-dir.sh)"
export CARGO_TARGET_DIR
find_built() {
  # A build dir counts only if its build script finished (cargo wrote `output`).
  local dir out
  for dir in "$CARGO_TARGET_DIR" /var/cache/jetraft/target; do
    for out in $(ls -dt "$dir"/*/build/librocksdb-sys-*/out 2>/dev/null); do
      if [ -s "$out/librocksdb.a" ] && [ -s "$out/../output" ] && grep -q "rustc-link-lib=static=rocksdb" "$out/../output"; then
        echo "$out/librocksdb.a"
        return 0
      fi
    done
  done
  return 1
}

if ! built="$(find_built)"; then
  echo "rocksdb-lib: compiling RocksDB $version once for this machine (15-20 minutes on 2 cores)" >&2
  ROCKSDB_COMPILE=1 cargo build -p jetraft-storage --locked
  built="$(find_built)"
fi
cp "$built" "$lib.tmp"
mv "$lib.tmp" "$lib"
echo "rocksdb-lib: cached $lib" >&2
