#!/usr/bin/env bash
# The whole test suite, as `make test` and CI run it:
#   setup -> deploy manifests -> fmt -> clippy -> build -> cargo nextest (every tier: the default
#   profile of .config/nextest.toml runs fast, cluster and long alike) -> nats-py tier ->
#   browser tier (the console in headless Chromium; screenshots in test-artifacts/console).
# Everything builds in the dev profile, once, into this checkout's target dir in the persistent
# cache (scripts/target-dir.sh). `make test-fast` / `test-cluster` / `test-long` run one tier.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_TARGET_DIR="$(./scripts/target-dir.sh)"
export CARGO_TARGET_DIR

step() { printf '\n==> %s\n' "$*"; }

step "setup"
./scripts/setup.sh

step "deploy manifests (Kubernetes schemas, compose, Dockerfile shape)"
.venv/bin/python scripts/validate-manifests.py

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

step "cargo build (target dir $CARGO_TARGET_DIR)"
cargo build --workspace --all-targets --locked
export JETRAFT_BIN="$CARGO_TARGET_DIR/debug/jetraft"

step "rust tests"
if command -v cargo-nextest >/dev/null 2>&1; then
  step "test tiers (every test in exactly one of fast, cluster, long)"
  ./scripts/check-tiers.sh --nextest
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi

step "python tests (nats-py)"
.venv/bin/python -m pytest -q tests/python --ignore=tests/python/browser

step "browser tests (the console in headless Chromium)"
.venv/bin/python -m pytest -q tests/python/browser
