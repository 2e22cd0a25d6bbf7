# ztree: `make demo` runs the in-situ demo, `make test` runs every test.
CARGO ?= cargo

.PHONY: all bootstrap build test demo bench bench-knn bench-fof clean

all: build

bootstrap:
	@bash scripts/bootstrap.sh

build: bootstrap
	$(CARGO) build --release

# Every test the project has: unit, integration (brute-force oracles, scipy cross-check,
# GADGET-4 snapshot), doc tests; benchmarks must still compile.
test: bootstrap
	$(CARGO) test
	$(CARGO) bench --no-run

demo: bootstrap
	$(CARGO) run --release --example demo

# Benchmarks: release binaries that print tables with peers and stage breakdowns.
bench: bench-knn bench-fof

bench-knn: bootstrap
	$(CARGO) bench --bench knn

bench-fof: bootstrap
	$(CARGO) bench --bench fof

clean:
	$(CARGO) clean
	rm -rf .venv
