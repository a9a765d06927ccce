#!/usr/bin/env bash
# Storage engine benchmark (issue 3): prints a markdown table of figures.
#
# Runs the `storage_bench` example in the dev profile (what `make test` builds, in this checkout's
# target dir, scripts/target-dir.sh). jetraft-storage itself is built at opt-level 3 via
# [profile.dev.package.jetraft-storage]; RocksDB's C++ is the prebuilt -O1 library.
#
# Usage: scripts/bench-storage.sh [--dir DIR] [--secs N]
#   --dir  where the temporary database goes (must be a real disk, not tmpfs: fsync is measured)
#   --secs seconds per figure (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "storage_bench: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), dev profile"
echo
CARGO_TARGET_DIR="$(scripts/target-dir.sh)"
export CARGO_TARGET_DIR
cargo run --quiet -p jetraft-storage --example storage_bench -- "$@"
