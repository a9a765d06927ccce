# jetraft developer entry points. `make run` and `make test` are the two commands of the README.
SHELL := /bin/bash
.DEFAULT_GOAL := help

.PHONY: help run test check bench setup clean-data

help:
	@echo "make run    - build (release) and run one node: clients :4222, monitoring :8222, data ./data"
	@echo "make test   - install what is missing, then fmt + clippy + every test tier"
	@echo "make bench  - jetraft vs the real nats-server side by side (release), then the storage engine (dev)"

setup:
	./scripts/setup.sh

run:
	./scripts/setup.sh --system-only
	cargo build --release -p jetraft-server --bin jetraft
	"$$(./scripts/target-dir.sh)/release/jetraft" -js -p 4222 -m 8222 -sd ./data

test:
	./scripts/test.sh

bench:
	./scripts/bench.sh
	./scripts/bench-storage.sh

clean-data:
	rm -rf ./data
