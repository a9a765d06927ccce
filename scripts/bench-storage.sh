#!/usr/bin/env bash
# Storage engine benchmark (issue 3): prints a markdown table of figures.
#
# Runs the `storage_bench` example in the dev profile (the shared target dir holds a dev-profile
# RocksDB; a release build would recompile it for ~20 minutes). jetraft-storage itself is built
# at opt-level 3 via [profile.dev.package.jetraft-storage]; RocksDB's C++ at -O1.
#
# Usage: scripts/bench-storage.sh [--dir DIR] [--secs N]
#   --dir  where the temporary database goes (must be a real disk, not tmpfs: fsync is measured)
#   --secs seconds per figure (default 3)
set -euo pipefail
cd "$(dirname "$0")/.."
echo "storage_bench: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), dev profile"
echo
cargo run --quiet -p jetraft-storage --example storage_bench -- "$@"
