#!/usr/bin/env bash
# Prints the cargo target dir of this checkout: $CARGO_TARGET_DIR if it is set, else
# /var/cache/jetraft/targets/<key>, where <key> is the checkout's real absolute path with every
# '/' replaced by '-' and the leading '-' dropped (/work/main -> work-main).
#
# Why: the dir lives in the machine's persistent cache, so a fresh clone at the same path (CI)
# reuses the previous build; the key is the checkout's path, so two checkouts never share (and
# overwrite) each other's binaries. The Makefile and every script that runs cargo export it as
# CARGO_TARGET_DIR, and scripts/setup.sh links ./target to it, so plain `cargo` in the checkout
# builds there too.
#
# Must not run cargo (the Makefile calls it on every `make`, and cargo metadata is slow).
set -euo pipefail

if [ -n "${CARGO_TARGET_DIR:-}" ]; then
  printf '%s\n' "$CARGO_TARGET_DIR"
  exit 0
fi

cache=/var/cache/jetraft/targets # keep in sync with the README (Quick start)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
key="${root//\//-}"
key="${key#"${key%%[!-]*}"}" # drop the leading '-'s
printf '%s/%s\n' "$cache" "${key:-root}"
