#!/usr/bin/env bash
# Consumer tests against an installed package, each in a clean build directory:
#   tests/consumers/run.sh PREFIX WORKDIR
# - the installed shared library exports only ztree_* and carries no debug info;
# - a C++-only CMake project (shared and static);
# - a Fortran-only mpi_f08 CMake project (a library and two executables, 2 ranks);
# - a plain Makefile with pkg-config (shared and static), against a copy of the prefix
#   moved elsewhere (ztree.pc is relocatable).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
prefix="$(cd "$1" && pwd)"
work="$2"
rm -rf "$work" && mkdir -p "$work"
lib="$prefix/lib"

echo "consumers: soname (0.x: major.minor, as Cargo's compatibility rule)"
ver=$(sed -n 's/^version = "\([0-9.]*\)"$/\1/p' "$here/../../Cargo.toml" | head -1)
major=${ver%%.*}; minor=${ver#*.}; minor=${minor%%.*}
if [ "$major" = 0 ]; then want="libztree.so.0.$minor"; else want="libztree.so.$major"; fi
got=$(readelf -d "$lib/libztree.so" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
[ "$got" = "$want" ] || { echo "soname $got, want $want (version $ver)" >&2; exit 1; }
[ -e "$lib/$want" ] || { echo "$lib/$want is not installed" >&2; exit 1; }

echo "consumers: exported symbols and debug info"
extra=$(nm -D --defined-only "$lib/libztree.so" | awk '{print $3}' | grep -v '^ztree_' || true)
[ -z "$extra" ] || { echo "libztree.so exports more than ztree_*: $extra" >&2; exit 1; }
for f in "$lib/libztree.so" "$lib/libztree.a"; do
  if readelf -S "$(readlink -f "$f")" 2>/dev/null | grep -q '\.debug_info'; then echo "$f carries debug info" >&2; exit 1; fi
done

echo "consumers: C++-only CMake project"
cmake -S "$here/cxx-cmake" -B "$work/cxx" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cxx" >/dev/null
"$work/cxx/fof_shared"
"$work/cxx/fof_static"

echo "consumers: Fortran mpi_f08 CMake project (library + two executables)"
cmake -S "$here/fortran-f08" -B "$work/f08" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/f08" >/dev/null
n_mod=$(find "$work/f08" -name 'ztree.mod' | wc -l)
[ "$n_mod" = 1 ] || { echo "ztree.mod built $n_mod times" >&2; exit 1; }
timeout 300 mpirun -np 2 "$work/f08/count_halos"
timeout 300 mpirun -np 2 "$work/f08/densities"

echo "consumers: Makefile + pkg-config (relocated prefix, shared and static)"
moved="$work/moved-prefix"
cp -a "$prefix" "$moved"
cp -a "$here/makefile-pkgconfig" "$work/make"
PKG_CONFIG_PATH="$moved/lib/pkgconfig" make -s -C "$work/make" SRC="$here/../../examples-c/minimal.c"
grep -q "$moved" <(PKG_CONFIG_PATH="$moved/lib/pkgconfig" pkg-config --cflags ztree) || { echo "ztree.pc is not relocatable" >&2; exit 1; }
"$work/make/demo_shared" >/dev/null
"$work/make/demo_static" >/dev/null
so=$(ldd "$work/make/demo_shared" | awk "/libztree/ {print \$3}")
[ "$(readlink -f "$so")" = "$(readlink -f "$moved/lib/libztree.so")" ] || { echo "demo_shared does not use the relocated library" >&2; exit 1; }
if ldd "$work/make/demo_static" | grep -q libztree; then echo "demo_static links libztree dynamically" >&2; exit 1; fi
echo "consumers: ok"
