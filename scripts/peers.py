"""Peers for ztree's benchmarks, timed on the same points.

Usage: peers.py knn FILE N K [--skip-slow]     (self-query kNN, tree build included)
       peers.py fof FILE N LINK BOX [--skip-slow]  (FoF labels: query_pairs + components, DBSCAN)
Prints `name seconds` per peer.
"""
import sys
import time

import numpy as np


def timed(f):
    t = time.perf_counter()
    f()
    return time.perf_counter() - t


def main():
    mode, path, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pts = np.fromfile(path, dtype="<f8").reshape(n, 3)
    skip_slow = "--skip-slow" in sys.argv
    if mode == "knn":
        k = int(sys.argv[4])
        from scipy.spatial import cKDTree
        print("scipy_cKDTree", timed(lambda: cKDTree(pts).query(pts, k=k, workers=-1)), flush=True)
        try:
            from pykdtree.kdtree import KDTree as PyKD
            print("pykdtree", timed(lambda: PyKD(pts).query(pts, k=k)), flush=True)
        except ImportError:
            pass
        if not skip_slow:
            from sklearn.neighbors import KDTree
            print("sklearn_KDTree", timed(lambda: KDTree(pts).query(pts, k=k)), flush=True)
    elif mode == "fof":
        link, box = float(sys.argv[4]), float(sys.argv[5])
        from scipy.spatial import cKDTree
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        def scipy_fof():
            t = cKDTree(pts, boxsize=box)
            pairs = t.query_pairs(link, output_type="ndarray")
            g = coo_matrix((np.ones(len(pairs), dtype=np.int8), (pairs[:, 0], pairs[:, 1])), shape=(n, n))
            connected_components(g, directed=False)

        print("scipy_pairs+cc", timed(scipy_fof), flush=True)
        if not skip_slow:
            from sklearn.cluster import DBSCAN
            print("sklearn_DBSCAN", timed(lambda: DBSCAN(eps=link, min_samples=1, n_jobs=-1).fit(pts)), flush=True)


if __name__ == "__main__":
    main()
