#!/usr/bin/env bash
# Makes sure the prebuilt static RocksDB library exists in the machine's cache.
#
# Why: librocksdb-sys compiles ~400 C++ files (15-20 minutes on 2 cores) and cargo rebuilds them
# whenever the build script's own dependency features shift (any new proc-macro crate in the
# workspace can do that). .cargo/config.toml points ROCKSDB_LIB_DIR at this cache instead, so the
# C++ is compiled once per machine (shared by every checkout) and every build after that only
# runs bindgen and links.
#
# On x86_64 the C++ is compiled with SSE4.2 and PCLMUL (x86-64-v2, every x86 server CPU since
# 2010): RocksDB picks its CRC32C implementation at compile time, and without them every WAL
# write, flush and checksummed read uses the table-driven software CRC (2.2% of the CPU of an
# R1 publish run, BENCHMARKS.md). librocksdb-sys only passes these flags on when the Rust
# target has the features, which would mean RUSTFLAGS for the whole workspace; CXXFLAGS reach
# the C++ alone. The cache's name says which build it holds, so a machine with an older
# library in the cache compiles the new one.
#
# Compiles once (ROCKSDB_COMPILE=1) in a build dir of its own beside the cache, copies the library
# and removes the dir. Its own dir, not the checkout's target dir: librocksdb-sys re-runs its
# build only when ROCKSDB_COMPILE, ROCKSDB_LIB_DIR or ROCKSDB_STATIC change (not CXXFLAGS), so in a
# target dir that compiled RocksDB before, cargo could keep the old library.
set -euo pipefail
cd "$(dirname "$0")/.."

version=11.8.1
cache="/var/cache/jetraft/rocksdb-$version-v2" # keep in sync with .cargo/config.toml
lib="$cache/librocksdb.a"
[ -s "$lib" ] && exit 0
mkdir -p "$cache"

CARGO_TARGET_DIR="$cache-build"
export CARGO_TARGET_DIR
if [ "$(uname -m)" = x86_64 ]; then
  for flag in sse4_2 pclmulqdq; do
    grep -qw "$flag" /proc/cpuinfo || { echo "rocksdb-lib: this CPU lacks $flag (x86-64-v2 needed)" >&2; exit 1; }
  done
  export CXXFLAGS="${CXXFLAGS:-} -msse4.2 -mpclmul"
fi

echo "rocksdb-lib: compiling RocksDB $version once for this machine (15-20 minutes on 2 cores)" >&2
rm -rf "$CARGO_TARGET_DIR" # what an interrupted run left
ROCKSDB_COMPILE=1 cargo build -p jetraft-storage --locked
# The fresh dir holds one librocksdb-sys build; its build script finished if cargo wrote `output`.
built=""
for out in "$CARGO_TARGET_DIR"/debug/build/librocksdb-sys-*/out; do
  if [ -s "$out/librocksdb.a" ] && grep -qs "rustc-link-lib=static=rocksdb" "$out/../output"; then
    built="$out/librocksdb.a"
  fi
done
[ -n "$built" ] || { echo "rocksdb-lib: the build left no librocksdb.a" >&2; exit 1; }
cp "$built" "$lib.tmp"
mv "$lib.tmp" "$lib"
rm -rf "$CARGO_TARGET_DIR"
echo "rocksdb-lib: cached $lib" >&2
