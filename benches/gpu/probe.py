"""Tuning probe for the CUDA back end on a GPU machine: per-kernel times
(ZTREE_CUDA_KERNEL_TIMES) of each case, then each case's call time under NVRTC option
variants (NVRTC options such as `-DZT_PASS=8`, `leaf=N`, `ZTREE_X=v` environment settings),
each in a fresh process.

  python3 benches/gpu/probe.py --cases knn:1e7 knnc:1e7 knn:1e7:64 fof:1e7 --variants=",-DZT_PASS=8"

Cases: knn:N (uniform, k = 16), knn:N:k, knnc:N[:k] (clustered, periodic), fof:N
(clustered, b = 0.2, periodic).

Uses benches/gpu/run.py's data (build/gpu-data) and runner (ZTREE_RUN).
"""

import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402


def case(spec, gen):
    job, *rest = spec.split(":")  # knn:1e7 (k = 16) or knn:1e7:64
    if job not in ("knn", "knnc", "fof") or not 1 <= len(rest) <= (1 if job == "fof" else 2):
        sys.exit(f"case {spec!r}: want knn:N[:k], knnc:N[:k] or fof:N")
    n, k = int(float(rest[0])), int(rest[1]) if len(rest) > 1 else 16
    if job == "knn":
        return job, run.uniform(n), k, 0.0, n
    if job == "knnc":  # kNN on the clustered points (periodic unit box)
        return "knn", run.clustered(n, gen), k, 1.0, n
    return job, run.clustered(n, gen), 0.2 * n ** (-1.0 / 3.0), 1.0, n


def ztree(job, path, param, box, reps, env):
    cmd = [run.ZTREE_RUN, job, path, str(param), "1", repr(box), "cuda"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env={**os.environ, "ZTREE_RUN_REPS": str(reps), **env})
    line = next((l for l in out.stdout.splitlines() if l.startswith("RESULT ")), None)
    return out.returncode, line, out.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", nargs="+", default=["knn:1e7", "fof:1e7"])
    ap.add_argument("--variants", default="", help="ZTREE_NVRTC_OPTIONS values, comma-separated (--variants=,-DX=1: the shipped kernels, then X=1); '' only the shipped kernels; 'none' no variants")
    ap.add_argument("--times", nargs="*", default=None, help="cases to take kernel times of (default: all)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--gen", default=run.GEN)
    a = ap.parse_args()
    cases = {c: case(c, a.gen) for c in a.cases}
    for c in a.times if a.times is not None else a.cases:
        job, path, param, box, n = cases[c]
        rc, line, err = ztree(job, path, param, box, 1, {"ZTREE_CUDA_KERNEL_TIMES": "1"})
        print(f"\n== kernel times, {c} (first call and one more; rc {rc})\n{err.strip()}", flush=True)
    for c, (job, path, param, box, n) in cases.items():
        print(f"\n== variants, {c}", flush=True)
        for v in [] if a.variants == "none" else a.variants.split(","):
            # Space-separated words: "leaf=N" sets the leaf size, "ZTREE_X=v" an environment
            # variable, the rest are NVRTC options.
            env, opts = {}, []
            for word in v.split():
                if word.startswith("leaf="):
                    env["ZTREE_RUN_LEAF_SIZE"] = word[5:]
                elif word.startswith("ZTREE_") and "=" in word:
                    env.update([word.split("=", 1)])
                else:
                    opts.append(word)
            env["ZTREE_NVRTC_OPTIONS"] = " ".join(opts)
            rc, line, err = ztree(job, path, param, box, a.reps, env)
            if rc != 0 or line is None:
                print(f"  {v or '(shipped)':<40} FAILED rc {rc}: {err.strip()[-400:]}", flush=True)
                continue
            r = run.json.loads(line[len("RESULT "):])
            st = dict(r["stages"])
            check = r.get("mean_kth", r.get("largest"))
            print(f"  {v or '(shipped)':<40} {r['secs']:.4f} s  walk {st.get('walk', 0):.4f}  tree {st.get('tree', 0):.4f}  check {check}", flush=True)


if __name__ == "__main__":
    main()
