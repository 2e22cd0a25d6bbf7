# ztree: `make demo` runs the in-situ demo, `make test` runs every test.
CARGO ?= cargo
BUILD ?= $(CURDIR)/build
PREFIX ?= $(BUILD)/prefix
NP ?= 2
DEMO_PARTICLES ?= 2000000
CBINDGEN ?= $(HOME)/.cargo/bin/cbindgen

# Tests build the CUDA emulator (the kernels compiled for the CPU) and find NVRTC and ptxas
# in the pip wheels bootstrap installs (no GPU or CUDA toolkit needed).
# (Looked up when a recipe runs: the venv may not exist before bootstrap.)
TEST_FEATURES ?= --features cuda-emu
CUDA_WHEELS = $$(ls -d $(CURDIR)/.venv/lib/python3*/site-packages/nvidia | head -1)
CUDA_ENV = LD_LIBRARY_PATH=$(CUDA_WHEELS)/cuda_nvrtc/lib$${LD_LIBRARY_PATH:+:$$LD_LIBRARY_PATH} ZTREE_PTXAS=$(CUDA_WHEELS)/cuda_nvcc/bin/ptxas

# OpenMPI refuses to run as root, or with more ranks than cores, unless told.
export OMPI_ALLOW_RUN_AS_ROOT = 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM = 1
export OMPI_MCA_rmaps_base_oversubscribe = 1
# Containers often forbid the cross-process memory copy (CMA) OpenMPI uses for large
# shared-memory messages; plain copies through shared memory work everywhere.
export OMPI_MCA_btl_vader_single_copy_mechanism ?= none

.PHONY: all bootstrap build header header-check package test check lint doc-examples test-emu-check miri test-rust test-device test-mpi test-c test-fortran test-consumers test-fuzz fuzz fuzz-build bench-build \
        examples demo bench bench-knn bench-fof bench-peers bench-gpu bench-runner gpu-kit clean

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
	@# Every function the header declares is part of the API: named ztree_*.
	@bad=$$(grep -v '^ *//' include/ztree.h | grep -oE '\b[a-z_0-9]+\(' | grep -v '^ztree_' | sort -u); \
	  if [ -n "$$bad" ]; then echo "include/ztree.h declares functions outside the API: $$bad" >&2; exit 1; fi

# Builds the library through CMake and installs it into $(PREFIX).
package: bootstrap
	cmake -S . -B $(BUILD)/ztree -DCMAKE_BUILD_TYPE=Release >/dev/null
	cmake --build $(BUILD)/ztree
	cmake --install $(BUILD)/ztree --prefix $(PREFIX) >/dev/null

# Every test the project has: Rust (oracles, invariants, scipy cross-check, GADGET-4
# snapshot, doc tests), the distributed tests on 1-4 MPI ranks, the header check, C and
# Fortran tests against the installed package (valgrind included), the examples and a
# distributed run of the in-situ demo; the build without MPI must compile. (The
# benchmarks are compiled by lint's clippy over every target; `make bench-build` links
# them too.)
test: bootstrap lint header-check examples doc-examples test-c test-fortran test-consumers test-fuzz test-mpi test-rust test-emu-check

# The edit loop (under 2 minutes after a build): unit tests, the CPU oracles and API tests,
# and the distributed tests on 2 ranks.
check:
	$(CUDA_ENV) $(CARGO) test $(TEST_FEATURES) --lib --test host
	@$(MAKE) --no-print-directory test-mpi MPI_RANKS=2 MPI_DEVICE_RANKS=2 MPI_DEMO=0

# Miri over the modules it can run (sort, tree, union-find, catalogue, metric, keys,
# disjoint writes; about 7 minutes). Needs a nightly toolchain with the miri component
# (`rustup +nightly component add miri rust-src`). Tree borrows: crossbeam-epoch (under
# rayon) is not Stacked-Borrows clean; rayon's pool threads outlive main (a leak to Miri).
miri:
	MIRIFLAGS="-Zmiri-tree-borrows -Zmiri-permissive-provenance -Zmiri-ignore-leaks" $(CARGO) +nightly miri test --no-default-features --lib

# Formatting (rustfmt.toml), clippy over every target with warnings as errors (with the
# test features, and the library alone without MPI), and the API docs without warnings
# (every public item documented).
lint: bootstrap
	$(CARGO) fmt --check
	$(CARGO) clippy --all-targets $(TEST_FEATURES) -- -D warnings
	$(CARGO) clippy --lib --no-default-features -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --lib -q

# The benchmarks built and linked in the test profile with the test features (sharing the
# library and dependencies the tests build, rather than a second optimised LTO build).
bench-build: bootstrap
	$(CARGO) test $(TEST_FEATURES) --benches --no-run

# The MPI test programs run under mpirun in test-mpi, not here.
test-rust: bootstrap
	$(CARGO) check --lib --no-default-features
	$(CUDA_ENV) $(CARGO) test $(TEST_FEATURES) --lib --test host
	$(CUDA_ENV) $(CARGO) test $(TEST_FEATURES) --doc

# The CUDA kernels on the emulator built with clang under AddressSanitizer and UBSan, with
# the interleaved schedule: threads switched at every shared- or global-memory access and
# atomic, in orders shuffled from a seed printed at the start (EMU_SEED=N replays it; add
# ZT_EMU_THREADS=1 for races between blocks). Every kernel on small inputs, the primitives,
# the distribution layer's kernels and the device calls' checks. The checked kernels are a
# shared library the library's test program loads in place of its linked ones
# (ZTREE_EMU_KERNELS), so the test program test-rust built serves.
EMU_CHECK_TESTS = backend::cuda::tests:: backend::cuda::dist_tests::owners backend::cuda::dist_tests::column backend::cuda::dist_tests::ball \
  backend::cuda::dist_tests::fragments backend::cuda::pipeline_tests::small_pipeline backend::cuda::pipeline_tests::input_checks \
  backend::cuda::pipeline_tests::field_checks ffi::device::tests::fof ffi::device::tests::device_scratch
EMU_SEED ?=
EMU_CHECK_LIB = $(BUILD)/emu-check/libztree_cuda_emu_check.so
$(EMU_CHECK_LIB): kernels/*.cu kernels/*.cuh kernels/emu/*
	@mkdir -p $(dir $@)
	clang++ -std=c++20 -O2 -ffp-contract=off -pthread -fPIC -shared -Wl,-Bsymbolic \
	  -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
	  -fsanitize-coverage=edge,trace-loads,trace-stores -fsanitize-coverage-ignorelist=kernels/emu/coverage_ignore.txt \
	  -DZT_EMU_INSTRUMENTED kernels/emu/all_kernels.cpp -o $@
test-emu-check: bootstrap $(EMU_CHECK_LIB)
	@bin=$$($(CARGO) test $(TEST_FEATURES) --lib --no-run --message-format=json | \
	  python3 -c 'import sys, json; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("reason") == "compiler-artifact" and m.get("executable")]'); \
	  $(CUDA_ENV) ZTREE_EMU_KERNELS=$(EMU_CHECK_LIB) ZT_EMU_SCHEDULE=interleave ZT_EMU_THREADS=2 $(if $(EMU_SEED),ZT_EMU_SEED=$(EMU_SEED)) \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  LD_PRELOAD="$$(gcc -print-file-name=libasan.so):$$(gcc -print-file-name=libubsan.so)" \
	  $$bin --test-threads 2 $(EMU_CHECK_TESTS)

# The CUDA back end's tests alone: kernels on the emulator (and on a GPU when present)
# against the CPU, NVRTC builds for sm_80/sm_90 and the ptxas spill check.
test-device: bootstrap
	$(CUDA_ENV) $(CARGO) test $(TEST_FEATURES) --lib -- backend::cuda ffi::device

# Distributed kNN, FoF, radius queries and DBSCAN against single-rank results on 1, 2, 3
# and 4 ranks (oversubscribed); the device-array tests (kernels on the emulator: slow) on
# 2 and 3 ranks, and once more with device buffers given to MPI directly (the CUDA-aware
# route, host memory on the emulator); then the C in-situ demo on 3 ranks.
MPI_TESTS = mpi_dist mpi_device
MPI_RANKS ?= 1 2 3 4
MPI_DEVICE_RANKS ?= 2 3
MPI_DEMO ?= 1
test-mpi:
	@bins=$$($(CARGO) test $(TEST_FEATURES) --no-run $(MPI_TESTS:%=--test %) --message-format=json | \
	  python3 -c 'import sys, json; [print(m["executable"]) for m in map(json.loads, sys.stdin) if m.get("reason") == "compiler-artifact" and m.get("executable")]'); \
	host=$$(echo "$$bins" | grep mpi_dist); dev=$$(echo "$$bins" | grep mpi_device); \
	for np in $(MPI_RANKS); do echo "mpirun -np $$np $$(basename $$host)"; timeout 900 mpirun -np $$np $$host || exit 1; done; \
	for np in $(MPI_DEVICE_RANKS); do echo "mpirun -np $$np $$(basename $$dev)"; timeout 900 mpirun -np $$np $$dev || exit 1; done; \
	echo "mpirun -np 2 $$(basename $$dev) (device buffers handed to MPI as if CUDA-aware)"; \
	ZTREE_CUDA_AWARE_MPI=1 timeout 900 mpirun -np 2 $$dev || exit 1
	@if [ "$(MPI_DEMO)" = 1 ]; then $(MAKE) --no-print-directory examples && mpirun -np 3 $(BUILD)/examples-c/insitu 30000 2; fi

test-c: package
	cmake -S tests/c -B $(BUILD)/tests-c -DCMAKE_PREFIX_PATH=$(PREFIX) >/dev/null
	cmake --build $(BUILD)/tests-c
	cd $(BUILD)/tests-c && ctest --output-on-failure

test-fortran: package
	cmake -S examples-fortran -B $(BUILD)/examples-fortran -DCMAKE_PREFIX_PATH=$(PREFIX) >/dev/null
	cmake --build $(BUILD)/examples-fortran
	cd $(BUILD)/examples-fortran && ctest --output-on-failure

# Consumers of the installed package: C++-only and Fortran mpi_f08 CMake projects, a
# Makefile with pkg-config (shared, static, relocated prefix), exported symbols.
test-consumers: package
	bash tests/consumers/run.sh $(PREFIX) $(BUILD)/consumers

# The C API fuzzed under AddressSanitizer and UBSan: 60 s in `make test`, longer with
# `make fuzz FUZZ_SECONDS=3600` (FUZZ_SEED replays a run). Huge requests fail as on a node
# with 2 GB per allocation.
FUZZ_SECONDS ?= 600
FUZZ_SEED ?= $(shell date +%s)
FUZZ_ENV = ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=2048:detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
fuzz-build: package
	$(CC) -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -Wall -Wextra -Werror \
	  -I$(PREFIX)/include tests/fuzz/fuzz.c -L$(PREFIX)/lib -lztree -Wl,-rpath,$(PREFIX)/lib -lm -o $(BUILD)/fuzz
test-fuzz: fuzz-build
	$(FUZZ_ENV) $(BUILD)/fuzz 40 $(FUZZ_SEED)
fuzz: fuzz-build
	$(FUZZ_ENV) $(BUILD)/fuzz $(FUZZ_SECONDS) $(FUZZ_SEED)

# Every code block in README.md and docs/ that is a complete C or Fortran program,
# compiled against the installed package and run (Rust blocks: doc tests in test-rust).
doc-examples: package
	python3 scripts/check_doc_examples.py $(PREFIX) $(BUILD)/doc-examples

examples: package
	cmake -S examples-c -B $(BUILD)/examples-c -DCMAKE_PREFIX_PATH=$(PREFIX) >/dev/null
	cmake --build $(BUILD)/examples-c
	$(BUILD)/examples-c/minimal
	$(BUILD)/examples-c/insitu_cuda 20000

# The main job: the C in-situ driver on $(NP) MPI ranks.
demo: examples
	mpirun -np $(NP) $(BUILD)/examples-c/insitu $(DEMO_PARTICLES) 3

# Benchmarks: release binaries that print tables with peers and stage breakdowns.
bench: bench-knn bench-fof

bench-knn: bootstrap
	$(CARGO) bench --bench knn

bench-fof: bootstrap
	$(CARGO) bench --bench fof

# Side-by-side peer benchmark (benches/peers/run.py): ztree through its C API as
# shipped (the installed package, built without native CPU flags) against kiddo 6.3 built
# with -C target-cpu=native and fat LTO, scipy cKDTree, pykdtree, and hfof when HFOF_PATH
# names a checkout of github.com/pec27/hfof built with its Makefile. Fresh process per run,
# interleaved rounds, medians. PEERS_ARGS: run.py's flags (--quick, --rounds N, --only S).
# Data from ../shared/bench's generators, written once into build/peers-data. Not in `make test`.
PEERS_ARGS ?=
bench-peers: bench-runner
	RUSTFLAGS="-C target-cpu=native" $(CARGO) build --release --locked \
	  --manifest-path benches/peers/kiddo_native/Cargo.toml --target-dir $(BUILD)/kiddo-native
	$(if $(HFOF_PATH),HFOF_PATH=$(HFOF_PATH)) $(CURDIR)/.venv/bin/python benches/peers/run.py $(PEERS_ARGS)

# ztree's CUDA back end against jz-tree on a GPU (benches/gpu/run.py; needs jax with CUDA,
# jztree and jztree-cu13 in the python3 on PATH). `bench-runner` builds the C-API runner both
# benchmarks use (build/peers/ztree_run against the package in build/prefix), so that a GPU
# machine without a toolchain can be handed those two folders.
bench-runner: bootstrap
	env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS $(MAKE) --no-print-directory package
	mkdir -p $(BUILD)/peers
	$(CC) -O2 -Wall -Wextra -I$(PREFIX)/include -Iexamples-c benches/peers/ztree_run.c -L$(PREFIX)/lib -lztree -ldl \
	  -Wl,-rpath,$(PREFIX)/lib -lm -o $(BUILD)/peers/ztree_run
	$(CC) -O2 -Wall -Wextra -pthread benches/peers/cores_probe.c -o $(BUILD)/peers/cores_probe

bench-gpu: bench-runner
	python3 benches/gpu/run.py $(GPU_ARGS)

# .gpukit/: what a GPU machine with no toolchain, MPI or network needs for the device tests
# and bench-gpu (scripts/gpu_kit.sh says how to use it).
gpu-kit: bootstrap
	bash scripts/gpu_kit.sh

clean:
	$(CARGO) clean
	rm -rf $(BUILD) .venv
