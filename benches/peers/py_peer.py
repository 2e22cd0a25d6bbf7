"""The Python peers of ztree's side-by-side benchmark (run by benches/peers/run.py).

    py_peer.py scipy    knn <points.npy> <k> <threads> <box>   cKDTree(boxsize).query(workers)
    py_peer.py pykdtree knn <points.npy> <k> <threads> <box>   KDTree.query (OpenMP: OMP_NUM_THREADS)
    py_peer.py hfof     fof <points.npy> <link> <threads> <box>  hfof.fof (one thread; HFOF_PATH)
    py_peer.py scipy    fof <points.npy> <link> <threads> <box>  query_pairs + connected_components
    py_peer.py scipy    radius <points.npy> <r:counts|r:lists> <threads> <box>  query_ball_point
    py_peer.py sklearn  dbscan <points.npy> <eps:min_pts> <threads> 0  DBSCAN(kd_tree)

box > 0: periodic cube [0, box)^3, or "Lx,Ly,Lz" a periodic box of those sides (pykdtree and
scikit-learn have no periodic mode); 0: open domain.
Timed region: the points in memory (a C-order numpy array) to the full neighbour lists
(tree build included) or to a label per point. Prints one line `RESULT {json}` like the
other peers: secs, the checksum, and the resident memory before the call and its peak
during the call (VmHWM after resetting it through /proc/self/clear_refs). PEER_CALLS=N
(N > 1): the same call runs N - 1 more times after the first, and `later_secs` is their
median.
"""
import contextlib
import json
import os
import statistics
import sys
import time

import numpy as np


def status_bytes(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reset_peak():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def first_call(call):
    """Runs `call` once under the clock: (its result, seconds, resident bytes before, peak
    resident bytes during)."""
    rss0 = status_bytes("VmRSS:")
    reset_peak()
    t0 = time.perf_counter()
    res = call()
    secs = time.perf_counter() - t0
    return res, secs, rss0, status_bytes("VmHWM:")


def later_secs(call):
    """The median time of PEER_CALLS - 1 repeats of `call` (None for one call)."""
    calls = max(1, min(100, int(os.environ.get("PEER_CALLS", "1"))))
    if calls == 1:
        return None
    times = []
    for _ in range(calls - 1):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    peer, job, path, param, threads, box = sys.argv[1:]
    threads = int(threads)
    # "L": the periodic cube [0, L)^3; "Lx,Ly,Lz": a periodic box of those sides; 0: open.
    sides = [float(v) for v in box.split(",")]
    box = None if sides[0] <= 0 else (sides[0] if len(sides) == 1 else np.array(sides))
    x = np.load(path)
    if x.ndim != 2 or x.shape[1] != 3:
        sys.exit(f"{path}: want shape (N, 3)")
    out = {"peer": peer, "n": len(x), "dtype": {"float32": "f32", "float64": "f64"}[x.dtype.name], "threads": threads}

    if job == "knn":
        k = int(param)
        if peer == "scipy":
            from scipy.spatial import cKDTree

            def call():
                return cKDTree(x, boxsize=box).query(x, k=[k] if k == 1 else k, workers=threads)
        elif peer == "pykdtree":
            if box is not None:
                sys.exit("pykdtree has no periodic mode")
            from pykdtree.kdtree import KDTree

            def call():
                return KDTree(x, leafsize=16).query(x, k=k)
        else:
            sys.exit(f"unknown kNN peer {peer}")
        (dist, idx), secs, rss0, peak = first_call(call)
        dist = np.asarray(dist, dtype=np.float64).reshape(len(x), k)
        out.update(secs=secs, mean_kth=float(np.mean(dist[:, -1])))
        del dist, idx
        later = later_secs(call)
    elif job == "fof" and peer == "hfof":
        hfof_path = os.environ.get("HFOF_PATH")
        if not hfof_path:
            sys.exit("HFOF_PATH is not set")
        sys.path.insert(0, hfof_path)
        import hfof
        from hfof import lib as hfof_lib

        link = float(param)
        x = np.ascontiguousarray(x, dtype=np.float64)  # hfof works in f64
        with contextlib.redirect_stdout(sys.stderr):
            hfof_lib._initlib()  # loads the C library (prints a line): outside the clock

        def call():
            with contextlib.redirect_stdout(sys.stderr):
                return hfof.fof(x, link, boxsize=box)
        labels, secs, rss0, peak = first_call(call)
        count = np.bincount(labels)
        out.update(secs=secs, groups=int(len(count)), groups20=int((count >= 20).sum()), largest=int(count.max()))
        del labels
        later = later_secs(call)
    elif job == "fof" and peer == "scipy":
        # A scipy user's FoF: the pairs within the linking length, then connected components.
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components
        from scipy.spatial import cKDTree

        link = float(param)

        def call():
            pairs = cKDTree(x, boxsize=box).query_pairs(link, output_type="ndarray")
            n = len(x)
            graph = coo_matrix((np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
            return connected_components(graph, directed=False)[1]
        labels, secs, rss0, peak = first_call(call)
        count = np.bincount(labels)
        out.update(secs=secs, groups=int(len(count)), groups20=int((count >= 20).sum()), largest=int(count.max()))
        del labels
        later = later_secs(call)
    elif job == "dbscan" and peer == "sklearn":
        from sklearn.cluster import DBSCAN

        eps, min_pts = param.split(":")
        eps, min_pts = float(eps), int(min_pts)
        if box is not None:
            sys.exit("scikit-learn's DBSCAN has no periodic mode")

        def call():
            return DBSCAN(eps=eps, min_samples=min_pts, algorithm="kd_tree", n_jobs=threads).fit(x).labels_
        labels, secs, rss0, peak = first_call(call)
        out.update(secs=secs, clusters=int(labels.max() + 1), noise=int((labels < 0).sum()))
        del labels
        later = later_secs(call)
    elif job == "radius" and peer == "scipy":
        from scipy.spatial import cKDTree

        r, mode = param.split(":")
        r = float(r)

        def call():
            t = cKDTree(x, boxsize=box)
            return t.query_ball_point(x, r, workers=threads, return_length=mode == "counts")
        res, secs, rss0, peak = first_call(call)
        pairs = int(np.sum(res)) if mode == "counts" else int(sum(len(v) for v in res))
        out.update(secs=secs, pairs=pairs)
        del res
        later = later_secs(call)
    else:
        sys.exit(f"unknown peer/job {peer} {job}")
    out.update(rss_before=rss0, peak_rss=peak)
    if later is not None:
        out.update(later_secs=later)
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
