#!/usr/bin/env bash
# Installs what ztree's build, tests and benchmarks need on a fresh Debian machine.
# Idempotent and quick when everything is already there (stamp files).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
python3 -c "import venv, ensurepip" >/dev/null 2>&1 || need_apt+=(python3-venv)
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
