#!/usr/bin/env bash
# Installs what ztree's build, tests and benchmarks need on a fresh Debian machine.
# Idempotent and quick when everything is already there (stamp files).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
have() { command -v "$1" >/dev/null 2>&1; }
have cc || need_apt+=(gcc)
have g++ || need_apt+=(g++)
have python3 || need_apt+=(python3)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv)
have cmake || need_apt+=(cmake)
have gfortran || need_apt+=(gfortran)
have mpicc || need_apt+=(libopenmpi-dev)
have mpirun || need_apt+=(openmpi-bin)
have pkg-config || need_apt+=(pkg-config)
# clang builds the checked CUDA emulator (make test-emu-check).
have clang++ || need_apt+=(clang)
have valgrind || need_apt+=(valgrind)
# rsmpi generates its MPI bindings with bindgen, which needs libclang.
ls /usr/lib/llvm-*/lib/libclang.so* >/dev/null 2>&1 || need_apt+=(libclang-dev clang)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "bootstrap: apt-get install ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "bootstrap: cargo not found; install Rust (rustup) first" >&2
  exit 1
fi

# Pinned cbindgen for the header (generated and diffed by `make test`).
cbindgen="$HOME/.cargo/bin/cbindgen"
if ! "$cbindgen" --version 2>/dev/null | grep -q "0.29.4"; then
  echo "bootstrap: cargo install cbindgen 0.29.4"
  cargo install cbindgen --version 0.29.4 --locked -q
fi

# Python venv for the scipy cross-check test and the benchmark peers.
req=scripts/requirements.txt
stamp=.venv/.ztree-requirements
if [ ! -f "$stamp" ] || ! cmp -s "$req" "$stamp"; then
  echo "bootstrap: creating .venv from $req"
  python3 -m venv .venv
  .venv/bin/pip install -q -r "$req"
  cp "$req" "$stamp"
fi
echo "bootstrap: ok"
