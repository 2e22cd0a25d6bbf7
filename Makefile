# ztree: `make demo` runs the in-situ demo, `make test` runs every test.
CARGO ?= cargo
BUILD ?= $(CURDIR)/build
PREFIX ?= $(BUILD)/prefix
NP ?= 2
DEMO_PARTICLES ?= 2000000
CBINDGEN ?= $(HOME)/.cargo/bin/cbindgen

# OpenMPI refuses to run as root, or with more ranks than cores, unless told.
export OMPI_ALLOW_RUN_AS_ROOT = 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1
export OMPI_MCA_rmaps_base_oversubscribe = 1

.PHONY: all bootstrap build header header-check package test test-rust test-c test-fortran bench-build \
        examples demo bench bench-knn bench-fof clean

all: build

bootstrap:
	@bash scripts/bootstrap.sh

build: bootstrap
	$(CARGO) build --release

# Regenerates include/ztree.h (pinned cbindgen).
header: bootstrap
	$(CBINDGEN) --quiet --config cbindgen.toml --output include/ztree.h .

# Fails when the committed header differs from what cbindgen generates.
header-check: bootstrap
	@tmp=$$(mktemp) && $(CBINDGEN) --quiet --config cbindgen.toml --output $$tmp . && \
	  if ! diff -u include/ztree.h $$tmp; then echo "include/ztree.h is stale: run 'make header'" >&2; rm -f $$tmp; exit 1; fi; \
	  rm -f $$tmp; echo "header-check: include/ztree.h is up to date"

# Builds the library through CMake and installs it into $(PREFIX).
package: bootstrap
	cmake -S . -B $(BUILD)/ztree -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD)/ztree
	cmake --install $(BUILD)/ztree --prefix $(PREFIX) >/dev/null

# Every test the project has: Rust (oracles, invariants, scipy cross-check, GADGET-4
# snapshot, doc tests), the header check, C and Fortran tests against the installed
# package (valgrind included), and the examples build; benchmarks must compile.
test: bootstrap header-check bench-build examples test-c test-fortran test-rust

bench-build: bootstrap
	$(CARGO) bench --no-run

test-rust: bootstrap
	$(CARGO) test

test-c: package
	cmake -S tests/c -B $(BUILD)/tests-c -DCMAKE_PREFIX_PATH=$(PREFIX) >/dev/null
	cmake --build $(BUILD)/tests-c
	cd $(BUILD)/tests-c && ctest --output-on-failure

test-fortran: package
	cmake -S examples-fortran -B $(BUILD)/examples-fortran -DCMAKE_PREFIX_PATH=$(PREFIX) >/dev/null
	cmake --build $(BUILD)/examples-fortran
	cd $(BUILD)/examples-fortran && ctest --output-on-failure

examples: package
	cmake -S examples-c -B $(BUILD)/examples-c -DCMAKE_PREFIX_PATH=$(PREFIX) >/dev/null
	cmake --build $(BUILD)/examples-c
	$(BUILD)/examples-c/minimal

# The main job: the C in-situ driver on $(NP) MPI ranks.
demo: examples
	mpirun -np $(NP) $(BUILD)/examples-c/insitu $(DEMO_PARTICLES) 3

# Benchmarks: release binaries that print tables with peers and stage breakdowns.
bench: bench-knn bench-fof

bench-knn: bootstrap
	$(CARGO) bench --bench knn

bench-fof: bootstrap
	$(CARGO) bench --bench fof

clean:
	$(CARGO) clean
	rm -rf $(BUILD) .venv
