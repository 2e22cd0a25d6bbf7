"""ztree's CUDA back end side by side with jz-tree (`jztree` + `jztree-cu13`) on one GPU.

The same points for both, generated here (or by ../shared/bench/gen.py for the clustered
set): kNN k = 16 self-query, uniform, f32, at each size; FoF b = 0.2 (labels; ztree also
builds its catalogue) on clustered points. ztree runs through its C API on device arrays
(build/peers/ztree_run ... cuda: one process per case, a first call that compiles the
kernels, then the median of --reps calls); jz-tree runs in this process (jit warm-up, then
the median of --reps calls, block_until_ready). Prints, per case, both times, their ratio,
ztree's stage breakdown, and each stage's achieved bandwidth against the bytes per particle
BENCHMARKS.md estimates (so a stage far below the device's bandwidth stands out).

Run on a GPU machine: `make bench-gpu` (builds the package and the runner), or
`python benches/gpu/run.py --sizes 1e6 1e7`. Needs jax with CUDA, jztree and jztree-cu13.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
DATA = os.path.join(BUILD, "gpu-data")
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
ZTREE_RUN = os.environ.get("ZTREE_RUN", os.path.join(BUILD, "peers", "ztree_run"))

# Estimated bytes moved per particle by each ztree stage (BENCHMARKS.md, "CUDA back end").
BYTES = {
    "knn": {"keys": 20, "sort": 200, "gather": 24, "levels": 9, "tree": 40, "walk": 330 + 256},
    "fof": {"keys": 20, "sort": 200, "gather": 24, "levels": 9, "tree": 40, "leaf self": 60, "walk": 300, "contract": 8,
            "count": 12, "group order": 100, "reduce": 40, "labels": 16},
}

def uniform(n):
    path = os.path.join(DATA, f"uniform_{n}_f32.npy")
    if not os.path.exists(path):
        os.makedirs(DATA, exist_ok=True)
        np.save(path, np.random.default_rng(1).random((n, 3), dtype=np.float32))
    return path


GEN = os.path.join(SHARED, "bench", "gen.py")


def clustered(n, gen=GEN):
    path = os.path.join(DATA, f"clustered_{n}_f32.npy")
    if not os.path.exists(path):
        os.makedirs(DATA, exist_ok=True)
        subprocess.run([sys.executable, gen, "--out", DATA, "--sizes", str(n), "--dists", "clustered"], check=True)
        os.replace(os.path.join(DATA, f"clustered_{n}_src_f32.npy"), path)
    return path


def run_ztree(job, path, param, box, reps, sync_stages=False):
    """ztree_run's device mode on one case; `sync_stages`: with ZTREE_CUDA_SYNC_STAGES=1,
    the stream waited for at the end of every stage, so each stage is billed its own
    device time (without it, work still queued when a stage returns shows in the next)."""
    cmd = [ZTREE_RUN, job, path, str(param), "1", repr(box), "cuda"]
    env = {**os.environ, "ZTREE_RUN_REPS": str(reps), "ZTREE_CUDA_SYNC_STAGES": "1" if sync_stages else "0"}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr}")
    line = next(l for l in out.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def timed(call, reps):
    import jax

    t0 = time.perf_counter()
    r = jax.block_until_ready(call())
    first = time.perf_counter() - t0
    secs = []
    for _ in range(reps):
        t0 = time.perf_counter()
        r = jax.block_until_ready(call())
        secs.append(time.perf_counter() - t0)
    return r, first, statistics.median(secs)


def run_jztree(job, path, param, box, reps):
    """jz-tree's time for the same job: kNN (radii and indices), FoF labels, and FoF labels
    with its catalogue (ztree's FoF always builds the catalogue)."""
    import jax
    import jax.numpy as jnp
    import jztree as jz

    pos = jnp.asarray(np.load(path))
    out = {"device": str(jax.devices()[0])}
    if job == "knn":
        r, out["first_secs"], out["secs"] = timed(lambda: jz.knn.knn.jit(pos, boxsize=None, k=int(param)), reps)
        out["check"] = float(jnp.mean(r[0][:, -1]))
        return out
    from jztree.config import FofConfig
    from jztree.data import ParticleData
    from jztree.fof import fof_and_catalogue, fof_labels

    import dataclasses

    # jz-tree's default node allocation (alloc_fac_nodes 1.1) is too small for clustered
    # sets ("Tree-Leaf allocation too small"): more room, the same algorithm.
    cfg = FofConfig(tree=dataclasses.replace(FofConfig().tree, alloc_fac_nodes=2.0))
    r, out["first_secs"], out["secs"] = timed(lambda: fof_labels.jit(pos, float(param), boxsize=box, cfg=cfg, output_order="z"), reps)
    out["check"] = int(jnp.max(jnp.bincount(r[1])))
    del r
    try:
        part = ParticleData(pos=pos, mass=jnp.ones(pos.shape[0], dtype=pos.dtype))
        _, out["catalogue_first_secs"], out["catalogue_secs"] = timed(lambda: fof_and_catalogue.jit(part, float(param), boxsize=box, cfg=cfg), reps)
    except Exception as e:  # report, keep the labels' time
        out["catalogue_error"] = f"{type(e).__name__}: {e}"[:400]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", nargs="+", default=["1e6", "1e7"], help="kNN sizes (uniform)")
    ap.add_argument("--fof-size", default="1e7", help="FoF size (clustered); 0 skips FoF")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-jztree", action="store_true", help="ztree only")
    ap.add_argument("--no-stages", action="store_true",
                    help="skip the second ztree process per case that times the stages (ZTREE_CUDA_SYNC_STAGES=1)")
    ap.add_argument("--gen", default=GEN, help="the data generator (../shared/bench/gen.py)")
    a = ap.parse_args()
    cases = [("knn", uniform(int(float(s))), 16, 0.0, int(float(s))) for s in a.sizes]
    nf = int(float(a.fof_size))
    if nf:
        cases.append(("fof", clustered(nf, a.gen), 0.2 * nf ** (-1.0 / 3.0), 1.0, nf))
    # ztree first (one process per case), then jz-tree in this process: JAX keeps the
    # memory it has taken, which ztree's later cases would otherwise miss.
    results = []
    for job, path, param, box, n in cases:
        name = f"{'kNN k=16 uniform' if job == 'knn' else 'FoF b=0.2 clustered'} f32 N={n:.0e}"
        try:
            z = run_ztree(job, path, param, box, a.reps)
        except Exception as e:
            print(f"\n== {name}\nztree-cuda FAILED: {e}")
            results.append((name, job, path, param, box, n, None))
            continue
        print(f"\n== {name}\nztree-cuda: {z['secs']:.4f} s (first call {z['first_secs']:.3f} s, with NVRTC); "
              f"device scratch {z['scratch_bytes'] / n:.0f} B/particle (ztree_get_stats, outputs not included)")
        # The stages from a second process that waits for the device at the end of each
        # stage (a few microseconds each): the timed calls above do not, so their own
        # breakdown bills a stage's queued tail to the next stage.
        st = z
        if not a.no_stages:
            try:
                st = run_ztree(job, path, param, box, 3, sync_stages=True)
                z["synced"] = {"secs": st["secs"], "stages": st["stages"]}
                print(f"  stages, each waited for (ZTREE_CUDA_SYNC_STAGES=1; that call {st['secs']:.4f} s):")
            except Exception as e:
                print(f"  stages of the timed calls (the synced run failed: {e}):")
        for stage, t in st["stages"]:
            b = BYTES[job].get(stage)
            bw = f"  {b * n / t / 1e9:8.1f} GB/s at ~{b} B/pt" if b and t > 0 else ""
            print(f"  {stage:<12} {t:9.4f} s{bw}")
        print("RESULT " + json.dumps({"case": name, "ztree": z}))
        results.append((name, job, path, param, box, n, z))
    if a.no_jztree:
        return
    # Smallest first: a case that runs out of memory in JAX cannot spoil the smaller ones.
    for name, job, path, param, box, n, z in sorted(results, key=lambda r: r[5]):
        try:
            j = run_jztree(job, path, param, box, a.reps)
        except Exception as e:
            print(f"\n== {name}\njztree FAILED: {type(e).__name__}: {str(e)[:600]}")
            continue
        zs = z["secs"] if z else float("nan")
        print(f"\n== {name}\njztree on {j['device']}: {j['secs']:.4f} s (first call {j['first_secs']:.3f} s); "
              f"ztree-cuda {zs:.4f} s; jztree / ztree = {j['secs'] / zs:.2f}x")
        if "catalogue_secs" in j:
            print(f"jztree with its catalogue (fof_and_catalogue): {j['catalogue_secs']:.4f} s; jztree / ztree = {j['catalogue_secs'] / zs:.2f}x")
        elif "catalogue_error" in j:
            print(f"jztree fof_and_catalogue failed: {j['catalogue_error']}")
        what = "mean k-th distance" if job == "knn" else "largest group"
        print(f"check ({what}): ztree {z and z.get('mean_kth', z.get('largest'))}, jztree {j['check']}")
        print("RESULT " + json.dumps({"case": name, "jztree": j}))


if __name__ == "__main__":
    main()
