#!/usr/bin/env bash
# Prints cargo's target directory for this workspace (honours CARGO_TARGET_DIR and .cargo/config.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo metadata --format-version 1 --no-deps 2>/dev/null |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])'
