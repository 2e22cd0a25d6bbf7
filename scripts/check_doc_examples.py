#!/usr/bin/env python3
"""Compiles and runs every code block in README.md and docs/*.md that is a complete
program, against the installed package: C blocks with `int main` (mpicc and mpirun -np 2
when they call MPI_Init), Fortran blocks with `program` (the installed ztree module;
mpif90 and mpirun when they use MPI). Rust blocks are compiled as doc tests by
`cargo test --doc` (src/lib.rs includes these pages). Usage:
check_doc_examples.py PREFIX WORKDIR [FILES...]"""

import glob
import os
import re
import subprocess
import sys

FENCE = re.compile(r"^```([\w+-]*)[^\n]*\n(.*?)^```", re.M | re.S)


def blocks(path):
    text = open(path, encoding="utf-8").read()
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        yield m.group(1).lower(), m.group(2), line


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return r


def main():
    prefix, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    files = sys.argv[3:] or ["README.md"] + sorted(glob.glob("docs/*.md"))
    os.makedirs(work, exist_ok=True)
    lib, inc = os.path.join(prefix, "lib"), os.path.join(prefix, "include")
    env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(lib, "pkgconfig"))
    pc = run(["pkg-config", "--cflags", "--libs", "ztree"], env=env).stdout.split()
    mpirun = ["mpirun", "-np", "2"]
    checked, failed = 0, []
    # Rust blocks are doc tests: every page with one must be included by src/lib.rs.
    lib_rs = open("src/lib.rs", encoding="utf-8").read()
    for path in files:
        if any(lang.startswith("rust") for lang, _, _ in blocks(path)) and f'include_str!("../{path}")' not in lib_rs:
            failed.append(f"{path}: has Rust code blocks but src/lib.rs does not include it as doc tests")
    for path in files:
        for lang, code, line in blocks(path):
            name = re.sub(r"\W", "_", f"{os.path.splitext(os.path.basename(path))[0]}_{line}")
            uses_mpi = "MPI_Init" in code or re.search(r"^\s*use\s+mpi", code, re.M | re.I)
            try:
                if lang == "c" and re.search(r"\bint\s+main\s*\(", code):
                    src, exe = os.path.join(work, name + ".c"), os.path.join(work, name)
                    open(src, "w").write(code)
                    cc = "mpicc" if uses_mpi else os.environ.get("CC", "cc")
                    run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", src, "-o", exe, *pc, f"-Wl,-rpath,{lib}", "-lm"])
                    run((mpirun if uses_mpi else []) + [exe], cwd=work)
                elif lang in ("fortran", "f90") and re.search(r"^\s*program\s+\w+", code, re.M | re.I):
                    src, exe = os.path.join(work, name + ".f90"), os.path.join(work, name)
                    open(src, "w").write(code)
                    fc = "mpif90" if uses_mpi else "gfortran"
                    mod = os.path.join(inc, "ztree", "ztree.f90")
                    run([fc, "-J", work, mod, src, "-o", exe, f"-L{lib}", "-lztree", f"-Wl,-rpath,{lib}"], cwd=work)
                    run((mpirun if uses_mpi else []) + [exe], cwd=work)
                else:
                    continue
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                failed.append(f"{path}:{line}: {e}")
                continue
            checked += 1
            print(f"doc example {path}:{line} ({lang}): compiled and ran")
    for f in failed:
        print(f"FAILED {f}", file=sys.stderr)
    if failed:
        sys.exit(1)
    if checked == 0:
        sys.exit("no complete C or Fortran program found in the documentation")
    print(f"doc examples: {checked} programs compiled and ran")


if __name__ == "__main__":
    main()
