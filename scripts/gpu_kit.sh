#!/usr/bin/env bash
# Prepares .gpukit/: what a GPU machine without a Rust toolchain, MPI or network needs to
# run the CUDA back end's tests on its device and the benchmark against jz-tree
# (BENCHMARKS.md, "How to run it on a GPU"): libztree without MPI, the C-API runner,
# examples-c/insitu_cuda, the unit-test binary (run.sh runs its device tests on the GPU
# alone, ZTREE_TEST_REAL_DEVICE_ONLY, with the GADGET-4 snapshot copied beside it), the
# data generator, and the jztree wheels. Then, on that machine, from the repository root:
# `bash .gpukit/run.sh [benchmark arguments]` (benches/gpu/probe.py for kernel times).
set -euo pipefail
cd "$(dirname "$0")/.."
kit=.gpukit
tgt=build/target-nompi
prefix=build/gpukit-prefix
cmake -S . -B build/ztree-nompi -DCMAKE_BUILD_TYPE=Release -DZTREE_MPI=OFF -DZTREE_CARGO_TARGET_DIR="$PWD/$tgt" >/dev/null
cmake --build build/ztree-nompi
cmake --install build/ztree-nompi --prefix "$prefix" >/dev/null
rm -rf "$kit"
mkdir -p "$kit/lib" "$kit/whl"
# The library under its soname (the name the kit's programs ask the loader for).
soname=$(objdump -p "$prefix/lib/libztree.so" | awk '/SONAME/ {print $2}')
cp -L "$prefix/lib/libztree.so" "$kit/lib/$soname"
${CC:-cc} -O2 -Wall -Wextra -I"$prefix/include" -Iexamples-c benches/peers/ztree_run.c -L"$prefix/lib" -lztree -ldl -lm -o "$kit/ztree_run"
tests=$(cargo test --release --no-default-features --features cuda,cuda-emu --lib --no-run --target-dir "$tgt" --message-format=json 2>/dev/null |
  python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "ztree":
        print(m["executable"])' | tail -1)
cp "$tests" "$kit/ztree_tests"
${CC:-cc} -O2 -Wall -Wextra -I"$prefix/include" -Iexamples-c examples-c/insitu_cuda.c -L"$prefix/lib" -lztree -ldl -lm -o "$kit/insitu_cuda"
strip "$kit/ztree_tests" "$kit/lib/$soname" "$kit/ztree_run" "$kit/insitu_cuda"
cp ../shared/bench/gen.py "$kit/gen.py"
mkdir -p "$kit/gadget4"
cp ../shared/data/gadget4-64-z1/*.{f32,i32,u32} ../shared/data/gadget4-64-z1/meta.json "$kit/gadget4/"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  -d "$kit/whl" jztree==1.1.0 jztree-cu13==1.1.0
cat > "$kit/run.sh" <<'RUN'
#!/usr/bin/env bash
# On the GPU machine, from the repository root: the device tests, then the benchmark.
set -uo pipefail
kit=.gpukit
export LD_LIBRARY_PATH="$PWD/$kit/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
nvidia-smi -L
# NVRTC: ztree looks on the loader path and in /usr/local/cuda (src/backend/cuda/nvrtc.rs);
# a toolkit installed by pip lives in site-packages instead: name it.
if [ -z "${ZTREE_NVRTC:-}" ] && ! ls /usr/local/cuda/lib64/libnvrtc.so.1[23] >/dev/null 2>&1; then
  ZTREE_NVRTC=$(python3 -c 'import glob, site, sys
c = [f for d in site.getsitepackages() for f in sorted(glob.glob(d + "/nvidia/**/libnvrtc.so.1[23]", recursive=True))]
print(c[0] if c else "")')
  [ -n "$ZTREE_NVRTC" ] && export ZTREE_NVRTC && echo "NVRTC: $ZTREE_NVRTC"
fi
export ZTREE_GADGET4_DIR="$PWD/$kit/gadget4" ZTREE_TEST_REAL_DEVICE_ONLY=1 ZTREE_REQUIRE_HARDWARE=gpu
echo "== CUDA back end tests on the GPU, one at a time (the emulator's runs are CI's)"
timeout 300 "$kit/ztree_tests" --test-threads 1 backend::cuda ffi::device 2>&1 | tail -30
# compute-sanitizer over the device tests on small inputs (the set `make test-emu-check`
# runs on the emulator): memory errors, races in shared memory, barrier misuse,
# uninitialised reads. 0 errors from each tool is the pass.
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$san" ] && [ "${ZTREE_KIT_SANITIZE:-1}" != 0 ]; then
  small="backend::cuda::tests:: backend::cuda::dist_tests backend::cuda::pipeline_tests::small_pipeline backend::cuda::pipeline_tests::input_checks"
  for tool in memcheck racecheck synccheck initcheck; do
    echo "== compute-sanitizer --tool $tool"
    timeout 900 "$san" --tool "$tool" --error-exitcode 86 --print-limit 20 "$kit/ztree_tests" --test-threads 1 $small > /tmp/zt_san.log 2>&1
    echo "$tool: exit $? ($(grep -c '========= ' /tmp/zt_san.log) report lines)"; grep -E 'ERROR SUMMARY|Error|RACECHECK SUMMARY' /tmp/zt_san.log | tail -3
  done
fi
# Several threads, each with its own handle on the one GPU, crashed (SIGSEGV) or hung
# inside the driver when each handle had a memory pool of its own (H200, driver 580); the
# pool is one per device, never destroyed (28 of 28 four- and eight-thread runs passed on
# an H200, 2026-11-27): a regression check, repeated runs on four threads. A crash or a hang
# here is a bug. ZTREE_KIT_THREADS=0 skips it.
if [ "${ZTREE_KIT_THREADS:-5}" -gt 0 ]; then
  echo "== the device tests on four threads, ${ZTREE_KIT_THREADS:-5} runs (pass / crash / hang at 30 s)"
  pass=0 crash=0 hang=0 other=0
  for i in $(seq 1 "${ZTREE_KIT_THREADS:-5}"); do
    timeout 30 "$kit/ztree_tests" --test-threads 4 backend::cuda >/tmp/zt_threads.log 2>&1
    case $? in 0) pass=$((pass+1));; 139) crash=$((crash+1));; 124) hang=$((hang+1));; *) other=$((other+1)); tail -5 /tmp/zt_threads.log;; esac
  done
  echo "four threads: $pass pass, $crash crash, $hang hang, $other fail"
fi
echo "== examples-c/insitu_cuda (device arrays in, device results out, checked against host)"
timeout 60 "$kit/insitu_cuda" 1000000
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site "$kit"/whl/*.whl && export PYTHONPATH=/tmp/site
echo "== ztree (CUDA) against jz-tree"
# JAX must not take the GPU's memory up front: ztree runs in its own processes beside it.
XLA_PYTHON_CLIENT_PREALLOCATE=false ZTREE_RUN="$PWD/$kit/ztree_run" PYTHONUNBUFFERED=1 python3 benches/gpu/run.py --gen "$kit/gen.py" "$@"
RUN
du -sh "$kit" "$kit"/* | sort -h | tail -8
echo "carry .gpukit (under 64 MiB); command: bash .gpukit/run.sh --sizes 1e6 1e7 --fof-size 1e7"
