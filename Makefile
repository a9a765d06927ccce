# jetraft developer entry points. `make run` and `make test` are the two commands of the README.
SHELL := /bin/bash
.DEFAULT_GOAL := help

# This checkout's own cargo target dir in the persistent cache (scripts/target-dir.sh; honours a
# CARGO_TARGET_DIR from the environment). Exported, so every cargo and script below uses it.
export CARGO_TARGET_DIR := $(shell ./scripts/target-dir.sh)

.PHONY: bench-tls bench-memory bench-scale bench-ab help run test test-fast test-cluster test-long check-tiers check bench bench-js bench-consume bench-kv bench-cluster bench-idle bench-failover bench-rolling chaos fuzz setup clean-data

help:
	@echo "make run    - build (release) and run one node: clients :4222, monitoring :8222, data ./data"
	@echo "make test   - install what is missing, then fmt + clippy + every test tier"
	@echo "make test-fast    - build, then unit, in-process and single-node tests (nextest profile fast)"
	@echo "make test-cluster - build, then the three-node cluster tests (nextest profile cluster)"
	@echo "make test-long    - build, then the long leader-kill failover tests (nextest profile long)"
	@echo "make check-tiers  - check that fast + cluster + long hold every test exactly once"
	@echo "make bench  - jetraft vs the real nats-server side by side (release): core, cross-node, JetStream; then the storage engine"
	@echo "make bench-js / bench-consume / bench-kv / bench-cluster / bench-idle / bench-tls / bench-memory - one benchmark family only"
	@echo "make bench-ab REF_BIN=... - this build against a reference jetraft build, same run (regression check)"
	@echo "make bench-failover - JetStream failover time after kill -9 of the stream leader (p50/p90/p99 of 20 kills)"
	@echo "make bench-rolling  - longest publish gap during a simulated Kubernetes rolling restart (3 runs per server)"
	@echo "make bench-scale    - 1,000 R3 streams, 10,000 consumers, catch-up of a wiped replica; jetraft vs nats-server"
	@echo "                      knobs: SCALE_STREAMS SCALE_CONSUMERS SCALE_CATCHUP_MB SCALE_SCENARIOS (scripts/bench-scale.py)"
	@echo "make chaos  - (root) fault injection into 3-node clusters in network namespaces, jetraft vs nats-server; table to RELIABILITY.md"
	@echo "             knobs: CHAOS_SCENARIOS=a,b  CHAOS_SERVER=jetraft|nats|nats-sync|all  RUNS=3  (never part of make test)"
	@echo "make fuzz   - the fuzz targets of server/tests/fuzz.rs for FUZZ_SECONDS (default 60) each (make chaos runs them first)"

setup:
	./scripts/setup.sh

run:
	./scripts/setup.sh --system-only
	cargo build --release -p jetraft-server --bin jetraft
	"$(CARGO_TARGET_DIR)/release/jetraft" -js -p 4222 -m 8222 -sd ./data

test:
	./scripts/test.sh

# One tier of .config/nextest.toml each (no fmt, clippy or nats-py); `make test` runs them all.
test-fast test-cluster test-long: test-%:
	./scripts/setup.sh
	@command -v cargo-nextest >/dev/null || { echo "make $@ needs cargo-nextest (cargo install cargo-nextest --locked)" >&2; exit 1; }
	cargo build --workspace --all-targets --locked
	cargo nextest run --workspace --locked --profile $*

check-tiers:
	./scripts/check-tiers.sh --nextest

# Every benchmark (and chaos) target builds the same two binaries: cargo unifies the features
# of the packages built together, so `jetraft` built alone is a different binary, with
# artifacts of its own that `make bench` had to recompile midway after any source change.
RELEASE_BUILD = cargo build --release -p jetraft-server --bin jetraft -p jetraft-tests --bin jetraft-bench

bench:
	./scripts/bench.sh
	$(MAKE) bench-cluster bench-js bench-consume bench-kv bench-tls bench-memory
	./scripts/bench-storage.sh

bench-cluster:
	$(RELEASE_BUILD)
	./scripts/bench-cluster.sh

bench-ab:
	@test -n "$(REF_BIN)" || { echo "make bench-ab REF_BIN=<reference jetraft release binary>" >&2; exit 2; }
	$(RELEASE_BUILD)
	REF_BIN="$(REF_BIN)" ./scripts/bench-ab.sh

bench-tls:
	$(RELEASE_BUILD)
	./scripts/bench-tls.sh

bench-js:
	$(RELEASE_BUILD)
	./scripts/bench-js.sh

bench-consume:
	$(RELEASE_BUILD)
	./scripts/bench-consume.sh

bench-kv:
	$(RELEASE_BUILD)
	./scripts/bench-kv.sh

bench-memory:
	$(RELEASE_BUILD)
	.venv/bin/python scripts/bench-memory.py --bin "$(CARGO_TARGET_DIR)/release/jetraft" --nats-bin .venv/bin/nats-server

# Not part of `make bench` or `make test` (tens of minutes); the knobs are env vars the script
# reads (SCALE_STREAMS=50 SCALE_CONSUMERS=200 SCALE_CATCHUP_MB=32 for a quick run).
bench-scale:
	$(RELEASE_BUILD)
	JETRAFT_BIN="$(CARGO_TARGET_DIR)/release/jetraft" .venv/bin/python scripts/bench-scale.py --nats-bin .venv/bin/nats-server

bench-idle:
	$(RELEASE_BUILD)
	.venv/bin/python scripts/bench-idle-streams.py --bin "$(CARGO_TARGET_DIR)/release/jetraft"
	./scripts/bench-idle.sh --release

bench-failover:
	$(RELEASE_BUILD)
	.venv/bin/python scripts/bench-failover.py --bin "$(CARGO_TARGET_DIR)/release/jetraft"
	.venv/bin/python scripts/bench-failover.py --bin .venv/bin/nats-server --nats-server

bench-rolling:
	$(RELEASE_BUILD)
	./scripts/bench-rolling.sh

# The fuzz targets (server/tests/fuzz.rs) for a bounded time each; `make test` runs them for a
# few thousand inputs only.
fuzz:
	JETRAFT_FUZZ_SECONDS="$(or $(FUZZ_SECONDS),60)" cargo nextest run -p jetraft-server --test fuzz --no-capture

# Not part of `make test` (needs root, takes up to ~30 minutes): scripts/chaos/README.md.
chaos: fuzz
	$(RELEASE_BUILD)
	JETRAFT_BIN="$(CARGO_TARGET_DIR)/release/jetraft" CHAOS_SCENARIOS="$(CHAOS_SCENARIOS)" \
	  CHAOS_SERVER="$(or $(CHAOS_SERVER),all)" RUNS="$(or $(RUNS),1)" ./scripts/chaos/chaos.sh

clean-data:
	rm -rf ./data
