"""Side-by-side peer benchmark: ztree through its public C API, built as shipped
(release, no native CPU flags), against kiddo 6.3 built with -C target-cpu=native and fat
LTO, scipy cKDTree, pykdtree (when importable) and hfof (when HFOF_PATH points at a built
checkout). Every run is a fresh process; the peers of a case run in interleaved rounds
(the order rotating each round) and the table gives the median over the rounds.

    make bench-peers [PEERS_ARGS="--quick --rounds 1"] [HFOF_PATH=/path/to/hfof]
    python benches/peers/run.py [--rounds 3] [--quick] [--only SUBSTRING ...] [--threads 2] [--calls N]

`make bench-peers` builds what this needs (the installed package, the C runner, kiddo);
run directly, it expects build/peers/ztree_run and build/kiddo-native/release/kiddo_native
(or ZTREE_RUN and KIDDO_NATIVE). Data: ../shared/bench/gen.py (uniform and clustered, 1e6
and 4e6), ../shared/bench/make_tiled.py (the GADGET-4 z ~ 1 snapshot and its 2x2x2 tiling),
the same for the z = 0 snapshot (`write_z0`) and the adversarial sets (`ADVERSARIAL`),
written once into build/peers-data (or PEERS_DATA). Raw records (one per run) are appended
to build/peers-results.jsonl (--log).

Timed region, for every peer: the points in memory to the full kNN lists (indices and
distances, tree build included) or to a FoF label per point; ztree's FoF also builds its
halo catalogue (groups >= 20 members), the others stop at the labels. ztree's context is
created before the clock (it lives for a whole simulation). Checksums (mean k-th distance;
groups >= 20 and the largest) are compared across peers; a mismatch prints a WARNING.
With --calls N each process makes N calls: the table stays the first call's, and a
second table gives the later calls (a simulation calls the library every time step;
the first call alone pays the page faults of its fresh memory).

The cores probe (cores_probe.c: an integer loop on 1 and on --threads threads) runs before
every round of a case; its median is the main table's last column. The thread-scaling rows
(ztree on 1 thread against --threads) run --scaling-rounds rounds, each run between two
probes, and give the median and the best run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
BUILD = os.path.join(ROOT, "build")
DATA = os.environ.get("PEERS_DATA", os.path.join(BUILD, "peers-data"))
ZTREE_RUN = os.environ.get("ZTREE_RUN", os.path.join(BUILD, "peers", "ztree_run"))
KIDDO = os.environ.get("KIDDO_NATIVE", os.path.join(BUILD, "kiddo-native", "release", "kiddo_native"))
PROBE = os.environ.get("CORES_PROBE", os.path.join(BUILD, "peers", "cores_probe"))
HFOF_PATH = os.environ.get("HFOF_PATH", "")
PY = sys.executable
PY_PEER = os.path.join(HERE, "py_peer.py")

# Column order of the main table, and the labels the peers get there.
PEERS = ["ztree", "kiddo", "scipy", "pykdtree", "hfof", "sklearn"]
LABEL = {"ztree": "ztree", "kiddo": "kiddo-native", "scipy": "scipy cKDTree",
         "pykdtree": "pykdtree", "hfof": "hfof (1 thread)", "ztree-1t": "ztree 1 thread",
         "sklearn": "scikit-learn DBSCAN"}
KNN_RTOL = 1e-12
GADGET_LINK = 0.15625


@dataclass
class Case:
    title: str
    job: str          # "knn", "fof", "dbscan" or "radius"
    data: str         # file name in DATA (f64 or f32 as the case says)
    param: str        # k, the linking length, or "eps:min_pts"
    box: float        # 0: open domain
    peers: list
    scaling: bool = False
    files: dict = field(default_factory=dict)  # a peer reading another file (hfof: f64)
    threads: int = 0  # 0: --threads; else every peer of the case on this many
    box_sides: str = ""  # a periodic box that is not a cube: "Lx,Ly,Lz" (box is then 0)


@dataclass
class Result:
    case: Case
    med: dict       # peer -> median seconds (first call)
    rec: dict       # peer -> its median-time record
    later: dict     # peer -> median seconds of the later calls (--calls > 1)
    recs: dict      # peer -> every record
    probes: list    # the cores probe's ratios over the case's rounds (or runs)


def npy(name):
    return os.path.join(DATA, name)


def fmt_n(n):
    m, e = f"{n:.0e}".split("e")
    return f"{m}e{int(e)}"


def cases(sizes):
    """The cases: `sizes` are the point counts of the large cases, the first one for the rest."""
    n0 = sizes[0]
    knn_peers = ["ztree", "kiddo", "scipy", "pykdtree"]
    out = []
    for n in sizes:
        for dist in ("uniform", "clustered"):
            out.append(Case(f"kNN k=16 f64 self {dist} {fmt_n(n)}", "knn", f"{dist}_{n}_src_f64.npy", "16", 0, knn_peers))
    out.append(Case(f"kNN k=16 f64 self uniform {fmt_n(n0)} periodic", "knn", f"uniform_{n0}_src_f64.npy", "16", 1.0,
                    ["ztree", "kiddo", "scipy"]))
    for k in (1, 2, 64):
        for dist in ("uniform", "clustered"):
            out.append(Case(f"kNN k={k} f64 self {dist} {fmt_n(n0)}", "knn", f"{dist}_{n0}_src_f64.npy", str(k), 0,
                            knn_peers))
    for n in sizes:
        out.append(Case(f"FoF b=0.2 periodic clustered {fmt_n(n)} (+catalogue)", "fof", f"clustered_{n}_src_f64.npy",
                        repr(0.2 * n ** (-1.0 / 3.0)), 1.0, ["ztree", "kiddo", "hfof"]))
    for z in (1, 0):
        for name, box, what in ((f"g4z{z}", 50.0, "262k, box 50"), (f"g4z{z}tiled", 100.0, "tiled 2x2x2, 2.1M, box 100")):
            out.append(Case(f"FoF GADGET-4 z={z} {what} (f32, l=0.15625)", "fof", f"{name}_f32.npy", repr(GADGET_LINK), box,
                            ["ztree", "kiddo", "hfof"], files={"hfof": f"{name}_f64.npy"}))
    # DBSCAN, HACC's galaxy case (min_pts 10) and FoF's (min_pts 2), eps = 0.2 mean
    # spacings, open domain (scikit-learn has no periodic mode).
    for n in sizes:
        for min_pts in (10, 2):
            eps = 0.2 * n ** (-1.0 / 3.0)
            out.append(Case(f"DBSCAN min_pts={min_pts} eps=0.2 spacings clustered {fmt_n(n)}", "dbscan", f"clustered_{n}_src_f64.npy",
                            f"{eps!r}:{min_pts}", 0, ["ztree", "sklearn"]))
    # Radius self-queries (SPH neighbours): the radius of 32 neighbours at the mean density.
    for n in sizes:
        r = (32 * 3 / (4 * 3.141592653589793 * n)) ** (1 / 3)
        for dist in ("uniform", "clustered"):
            for mode in ("counts", "lists"):
                # scipy's lists are Python lists: the clustered set's ~7e8 entries do not
                # fit in 24 GiB.
                peers = ["ztree", "kiddo"] if (dist, mode) == ("clustered", "lists") else ["ztree", "kiddo", "scipy"]
                out.append(Case(f"radius {mode} r=32 mean neighbours f64 periodic {dist} {fmt_n(n)}", "radius", f"{dist}_{n}_src_f64.npy",
                                f"{r!r}:{mode}", 1.0, peers))
    # Adversarial inputs, one thread (goal: never slower than scipy): most points on one
    # spot in a long periodic box; every point on one line; one tight clump in a large box.
    for name, sides, what in ADVERSARIAL:
        n = int(name.split("_")[2])
        vol = sides[0] * sides[1] * sides[2]
        spacing = (vol / n) ** (1 / 3)
        r32 = (32 * 3 * vol / (4 * 3.141592653589793 * n)) ** (1 / 3)
        box = ",".join(repr(s) for s in sides)
        for k in (32, 8):
            out.append(Case(f"adversarial: kNN k={k} {what}", "knn", f"{name}.npy", str(k), 0, ["ztree", "scipy"], threads=1, box_sides=box))
        # (scipy's pairs in the clump, 1.6e10, and scikit-learn's neighbourhoods there do
        # not fit in memory.)
        clump = "clump" in name
        fof_peers = ["ztree"] if clump else ["ztree", "scipy"]
        out.append(Case(f"adversarial: FoF b=0.2 {what}", "fof", f"{name}.npy", repr(0.2 * spacing), 0, fof_peers, threads=1, box_sides=box))
        out.append(Case(f"adversarial: radius counts r=32 mean neighbours {what}", "radius", f"{name}.npy", f"{r32!r}:counts", 0,
                        ["ztree", "scipy"], threads=1, box_sides=box))
        out.append(Case(f"adversarial: DBSCAN min_pts=10 eps=0.2 spacings {what} (open)", "dbscan", f"{name}.npy", f"{0.2 * spacing!r}:10", 0,
                        ["ztree"] if clump else ["ztree", "sklearn"], threads=1))
    # Thread scaling: ztree on 1 thread against the default thread count.
    out.append(Case(f"scaling: kNN k=16 f64 clustered {fmt_n(n0)}", "knn", f"clustered_{n0}_src_f64.npy", "16", 0,
                    ["ztree", "ztree-1t"], scaling=True))
    n = sizes[-1]
    out.append(Case(f"scaling: FoF b=0.2 periodic clustered {fmt_n(n)}", "fof", f"clustered_{n}_src_f64.npy",
                    repr(0.2 * n ** (-1.0 / 3.0)), 1.0, ["ztree", "ztree-1t"], scaling=True))
    return out


# The adversarial sets: file stem (adv_<shape>_<n>), the periodic box's sides, and what.
ADVERSARIAL = [
    ("adv_spot_17736", (26.5, 0.3, 0.3), "17,736 points, 2/3 on one spot, periodic box 26.5 x 0.3 x 0.3"),
    ("adv_line_200000", (1.0, 1.0, 1.0), "200,000 points on one line, periodic unit box"),
    ("adv_clump_200000", (1.0, 1.0, 1.0), "200,000 points, 90% in a clump of width 1e-5, periodic unit box"),
]


def write_adversarial(stem):
    """Writes one adversarial set (f64, inside its box) into DATA."""
    import numpy as np
    rng = np.random.default_rng(20261206)
    shape, n = stem.split("_")[1], int(stem.split("_")[2])
    sides = np.array(next(s for name, s, _ in ADVERSARIAL if name == stem))
    x = rng.random((n, 3)) * sides
    if shape == "spot":
        x[rng.permutation(n)[: 2 * n // 3]] = sides * [0.37, 0.52, 0.61]
    elif shape == "line":
        x[:, 1:] = sides[1:] * 0.5
    elif shape == "clump":
        m = 9 * n // 10
        x[:m] = np.mod(sides * 0.5 + 1e-5 * rng.standard_normal((m, 3)), sides)
    np.save(npy(stem + ".npy"), np.ascontiguousarray(x, dtype=np.float64))


Z0 = os.path.join(SHARED, "data", "gadget4-64-z0-seed424242")


def write_z0():
    """The GADGET-4 z = 0 snapshot and its 2x2x2 tiling (box 100), as make_tiled.py writes
    the z ~ 1 one: g4z0_f32/f64.npy and g4z0tiled_f32/f64.npy."""
    import numpy as np
    p = np.fromfile(os.path.join(Z0, "pos.f32"), dtype=np.float32).reshape(-1, 3)
    t = np.concatenate([(p.astype(np.float64) + np.array(s) * 50.0).astype(np.float32) for s in np.ndindex(2, 2, 2)])
    t[t >= 100.0] = 0.0
    for name, a in (("g4z0", p), ("g4z0tiled", t)):
        np.save(npy(f"{name}_f32.npy"), a)
        np.save(npy(f"{name}_f64.npy"), a.astype(np.float64))


def ensure_data(todo):
    """Writes the .npy files the cases need (once)."""
    os.makedirs(DATA, exist_ok=True)
    gen = os.path.join(SHARED, "bench", "gen.py")
    for c in todo:
        if os.path.exists(npy(c.data)):
            continue
        if c.data.startswith("adv_"):
            write_adversarial(c.data[: -len(".npy")])
        elif c.data.startswith("g4z1"):
            if not os.path.exists(os.path.join(SHARED, "data", "gadget4-64-z1", "pos.f32")):
                continue  # reported as skipped by the caller
            subprocess.run([PY, os.path.join(SHARED, "bench", "make_tiled.py"), DATA], check=True)
        elif c.data.startswith("g4z0"):
            if os.path.exists(os.path.join(Z0, "pos.f32")):
                write_z0()
        else:
            dist, n = c.data.split("_")[:2]
            print(f"generating {dist} {n} into {DATA}", file=sys.stderr, flush=True)
            subprocess.run([PY, gen, "--out", DATA, "--sizes", n, "--dists", dist], check=True)


def command(case, peer, threads):
    path = npy(case.files.get(peer, case.data))
    args = [case.job, path, case.param]
    box = case.box_sides or repr(case.box)
    threads = case.threads or threads
    if peer == "ztree":
        return [ZTREE_RUN, *args, str(threads), box]
    if peer == "ztree-1t":
        return [ZTREE_RUN, *args, "1", box]
    if peer == "kiddo":
        return [KIDDO, *args, str(threads), box]
    if peer in ("scipy", "pykdtree", "sklearn"):
        return [PY, PY_PEER, peer, *args, str(threads), box]
    if peer == "hfof":
        return [PY, PY_PEER, "hfof", *args, "1", box]
    raise ValueError(peer)


def run_one(cmd, threads, calls=1):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), HFOF_PATH=HFOF_PATH, PEER_CALLS=str(calls))
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    wall = time.perf_counter() - t0
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT "):])
            res["wall"] = wall
            return res
    raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr[-2000:]}")


def probe(threads):
    """The cores probe's ratio (cores_probe.c): about `threads` when that many threads get a
    core each right now; None when the probe is missing."""
    if not os.access(PROBE, os.X_OK):
        return None
    r = subprocess.run([PROBE, str(threads)], capture_output=True, text=True, timeout=60)
    for line in r.stdout.splitlines():
        if line.startswith("PROBE "):
            return json.loads(line[len("PROBE "):])["ratio"]
    return None


def run_probed(cmd, threads, calls=1):
    """`run_one` between two runs of the cores probe (a scaling row's runs): the record gets
    `probe`, the lower of the two ratios (how far the machine itself scaled around the run)."""
    before = probe(threads)
    res = run_one(cmd, threads, calls)
    after = probe(threads)
    if before is not None and after is not None:
        res["probe"] = min(before, after)
    return res


def available_peers():
    """Peers that can run here, and notes on the others."""
    have, notes = {"ztree", "ztree-1t"}, []
    for exe, name in ((ZTREE_RUN, "ztree"), (KIDDO, "kiddo")):
        if not os.access(exe, os.X_OK):
            sys.exit(f"{exe} is missing: run `make bench-peers` (or set {'ZTREE_RUN' if name == 'ztree' else 'KIDDO_NATIVE'})")
    have.add("kiddo")
    for mod, peer in (("scipy", "scipy"), ("pykdtree", "pykdtree"), ("sklearn", "sklearn")):
        if subprocess.run([PY, "-c", f"import {mod}"], capture_output=True).returncode == 0:
            have.add(peer)
        else:
            notes.append(f"{mod}: not importable by {PY}, skipped")
    if HFOF_PATH and os.path.isdir(os.path.join(HFOF_PATH, "hfof")):
        have.add("hfof")
    else:
        notes.append("hfof: skipped (set HFOF_PATH to a checkout of github.com/pec27/hfof built with its Makefile)")
    return have, notes


def git_commit():
    """HEAD, with "+dirty" when tracked files differ from it (the package builds the work tree)."""
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    d = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True)
    return (r.stdout.strip() or "unknown") + ("+dirty" if d.stdout.strip() else "")


def cpu_model():
    """The host's CPU model (ratios differ between hosts: BENCHMARKS.md records which)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def checksum_mismatches(case, first):
    """Compares every peer's checksum with ztree's (`first`: one record of each peer, of one round)."""
    z = first.get("ztree") or first.get("ztree-1t")
    out = []
    for peer, res in first.items():
        if res is z:
            continue
        if case.job == "knn":
            a, b = z["mean_kth"], res["mean_kth"]
            rel = abs(a - b) / abs(a) if a else abs(b)
            if rel > KNN_RTOL:
                out.append(f"MISMATCH {case.title}: mean k-th distance {LABEL[peer]} {b!r} vs ztree {a!r} (rel {rel:.1e})")
        elif case.job == "radius":
            if res["pairs"] != z["pairs"]:
                out.append(f"MISMATCH {case.title}: pairs {LABEL[peer]} {res['pairs']} vs ztree {z['pairs']}")
        elif case.job == "dbscan":
            # Border points are order-dependent in scikit-learn; clusters and noise are not.
            if (res["clusters"], res["noise"]) != (z["clusters"], z["noise"]):
                out.append(f"MISMATCH {case.title}: clusters / noise {LABEL[peer]} {res['clusters']} / {res['noise']}"
                           f" vs ztree {z['clusters']} / {z['noise']}")
        else:
            if (res["groups20"], res["largest"]) != (z["groups20"], z["largest"]):
                out.append(f"MISMATCH {case.title}: groups >= 20 / largest {LABEL[peer]} {res['groups20']} / {res['largest']}"
                           f" vs ztree {z['groups20']} / {z['largest']}")
    return out


def median_record(recs):
    """The record with the median time (the lower one of the middle two)."""
    s = sorted(recs, key=lambda r: r["secs"])
    return s[(len(s) - 1) // 2]


def stage_line(rec):
    return ", ".join(f"{name} {secs:.3f}" for name, secs in rec.get("stages", []) if secs >= 0.0005)


def stage_sum(rec, prefix):
    return sum(secs for name, secs in rec.get("stages", []) if name.startswith(prefix))


def per_point(rec, key):
    return (rec["peak_rss"] - rec["rss_before"]) / rec["n"] if key == "peak" else rec["scratch_bytes"] / rec["n"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs per peer and case (median reported)")
    ap.add_argument("--quick", action="store_true", help="the first size only (1e6)")
    ap.add_argument("--sizes", default="1e6,4e6", help="point counts of the generated sets (comma-separated)")
    ap.add_argument("--only", action="append", default=[],
                    help="run the cases whose title contains this (repeatable: any of them)")
    ap.add_argument("--threads", type=int, default=2, help="threads of every multi-threaded peer")
    ap.add_argument("--calls", type=int, default=1,
                    help="calls per process (N > 1: also the median of the N - 1 later calls, as in a simulation)")
    ap.add_argument("--scaling-rounds", type=int, default=6,
                    help="rounds of the thread-scaling rows (each run between two runs of the cores probe)")
    ap.add_argument("--log", default=os.path.join(BUILD, "peers-results.jsonl"), help="jsonl of raw records")
    a = ap.parse_args()

    have, notes = available_peers()
    sizes = [int(float(x)) for x in a.sizes.split(",")]
    only = [o.lower() for o in a.only] or [""]
    todo = [c for c in cases(sizes[:1] if a.quick else sizes) if any(o in c.title.lower() for o in only)]
    if not todo:
        sys.exit(f"no case matches {a.only!r}")
    ensure_data(todo)
    missing = [c for c in todo if not os.path.exists(npy(c.data))]
    for c in missing:
        notes.append(f"{c.title}: skipped ({npy(c.data)} missing: its snapshot in ../shared/data not found)")
    todo = [c for c in todo if c not in missing]

    commit, started = git_commit(), time.strftime("%Y-%m-%dT%H:%M:%S")
    load0 = os.getloadavg()[0]
    os.makedirs(os.path.dirname(os.path.abspath(a.log)), exist_ok=True)
    print(f"# ztree {commit}, {a.threads} threads, {a.rounds} round(s), median; {os.cpu_count()} CPUs ({cpu_model()}), "
          f"load average {load0:.2f} at start", flush=True)
    if load0 > 0.5 * (os.cpu_count() or 1):
        print("# NOTE: the machine is busy (load average above half the CPUs): times are noisy", flush=True)
    if "target-cpu" in os.environ.get("RUSTFLAGS", ""):
        print("# NOTE: RUSTFLAGS sets target-cpu: if the package was built with it, ztree is not as shipped", flush=True)

    results, mismatches = [], []
    for case in todo:
        peers = [p for p in case.peers if p in have]
        recs = {p: [] for p in peers}
        rounds = max(a.rounds, a.scaling_rounds) if case.scaling else a.rounds
        run = run_probed if case.scaling else run_one
        probes = []
        for r in range(rounds):
            order = peers[r % len(peers):] + peers[:r % len(peers)]
            if not case.scaling:
                probes.append(probe(a.threads))
            for p in order:
                res = run(command(case, p, a.threads), a.threads, a.calls)
                if "probe" in res:
                    probes.append(res["probe"])
                recs[p].append(res)
                with open(a.log, "a") as f:
                    # The runner's own "peer" field ("ztree" for ztree-1t too) gives way to the column's.
                    f.write(json.dumps({**res, "case": case.title, "peer": p, "round": r, "commit": commit,
                                        "started": started, "load": os.getloadavg()[0]}) + "\n")
        # Every round's records, not only the first: a peer (or ztree) must give the same
        # answer in every process.
        for r in range(rounds):
            w = checksum_mismatches(case, {p: v[r] for p, v in recs.items()})
            for line in w:
                print(line, flush=True)
            mismatches += w
        med = {p: statistics.median(x["secs"] for x in v) for p, v in recs.items()}
        later = {p: statistics.median(x["later_secs"] for x in v) for p, v in recs.items() if all("later_secs" in x for x in v)}
        results.append(Result(case, med, {p: median_record(v) for p, v in recs.items()}, later, recs,
                              [x for x in probes if x is not None]))
        print(f"# {case.title}: " + ", ".join(f"{LABEL[p]} {t:.3f} s" for p, t in med.items()), flush=True)

    main_rows = [x for x in results if not x.case.scaling]
    cols = [p for p in PEERS if any(p in x.med for x in main_rows)]
    if main_rows:  # (none when only scaling rows were asked for)
        print()
        print("| case | " + " | ".join(f"{LABEL[p]} (s)" for p in cols) + " | probe |")
        print("|---|" + "---|" * (len(cols) + 1))
        for row in main_rows:
            case, med = row.case, row.med
            z = med["ztree"]
            cells = []
            for p in cols:
                if p not in med:
                    cells.append("–")
                elif p == "ztree":
                    cells.append(f"{z:.3f}")
                else:
                    cells.append(f"{med[p]:.3f} ({med[p] / z:.2f}x)")
            cells.append(f"{statistics.median(row.probes):.2f}" if row.probes else "–")
            print(f"| {case.title} | " + " | ".join(cells) + " |")
        print()
        print("Ratios are peer / ztree (above 1: ztree faster). ztree's FoF includes the halo catalogue. Probe: the "
              "median over the rounds of the cores probe (cores_probe.c, run before each round): how far an integer "
              f"loop scaled from 1 to {a.threads} threads then; well below {a.threads} means the host gave the threads "
              "less than a core each, which slows ztree and the multi-threaded peers against hfof (one thread).")

    later_rows = [(x.case, x.later) for x in main_rows if "ztree" in x.later]
    if later_rows:
        print()
        print(f"Later calls in the same process (median of calls 2..{a.calls} of each run, then over the rounds): "
              "ztree on the same context and caller arrays, as a simulation calls every time step; the peers "
              "repeat their call the same way.")
        print()
        print("| case (later calls) | " + " | ".join(f"{LABEL[p]} (s)" for p in cols) + " |")
        print("|---|" + "---|" * len(cols))
        for case, later in later_rows:
            z = later["ztree"]
            cells = ["–" if p not in later else f"{z:.3f}" if p == "ztree" else f"{later[p]:.3f} ({later[p] / z:.2f}x)"
                     for p in cols]
            print(f"| {case.title} | " + " | ".join(cells) + " |")

    print()
    print("ztree's stages (s, of its median run) and memory in bytes per particle: scratch (ztree_get_stats) and "
          "the peak resident growth over the call, outputs included (ztree: i64 indices and f64 distances, or i64 "
          "labels and the catalogue; kiddo, for comparison: u32 indices and squared distances, or u32 labels); "
          "the minor page faults of ztree's call (fresh 4 KiB pages, its outputs included).")
    print()
    print("| case | threads | stages (s) | scratch B/pt | peak B/pt | kiddo peak B/pt | page faults |")
    print("|---|---|---|---|---|---|---|")
    for case, rec in ((x.case, x.rec) for x in results):
        for p in ("ztree", "ztree-1t"):
            if p in rec:
                z = rec[p]
                kid = f"{per_point(rec['kiddo'], 'peak'):.0f}" if "kiddo" in rec else "–"
                flt = f"{z['minor_faults']:,}" if "minor_faults" in z else "–"
                print(f"| {case.title} | {z['threads']} | {stage_line(z)} | {per_point(z, 'scratch'):.0f} | "
                      f"{per_point(z, 'peak'):.0f} | {kid} | {flt} |")

    scaling = [x for x in results if x.case.scaling]
    if scaling:
        t = a.threads
        print()
        print(f"Thread scaling, {max(a.rounds, a.scaling_rounds)} rounds: the median of the runs, then the best "
              "run (noise on a shared host only adds time). Probe: the machine's own speedup in the same rounds, "
              f"an integer loop on 1 and on {t} threads run just before and after each run (benches/peers/"
              "cores_probe.c; on a VM whose vCPUs share physical cores with other guests it moves between 1.0 and "
              f"{t}.0 within seconds).")
        print()
        print(f"| thread scaling | runs | probe (median) | 1 thread (s) | {t} threads (s) | speedup | "
              f"walk 1 / {t} (s) | walk speedup | leaf 1 / {t} (s) | leaf speedup |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for row in scaling:
            case, recs = row.case, row.recs
            pm = f"{statistics.median(row.probes):.2f}" if row.probes else "–"
            runs = " + ".join(f"{len(recs[p])}" for p in ("ztree-1t", "ztree"))
            for label, pick in (("median", statistics.median), ("best", min)):
                cells = []
                for what in ("secs", "walk", "leaf"):
                    s1, s2 = (pick(x["secs"] if what == "secs" else stage_sum(x, what) for x in recs[p])
                              for p in ("ztree-1t", "ztree"))
                    if what == "secs":
                        cells += [f"{s1:.3f}", f"{s2:.3f}", f"{s1 / s2:.2f}x"]
                    else:  # "–" for a stage the job does not have (kNN has no leaf-self pass)
                        cells += [f"{s1:.3f} / {s2:.3f}", f"{s1 / s2:.2f}x"] if s2 else ["–", "–"]
                print(f"| {case.title.removeprefix('scaling: ')} ({label}) | {runs} | {pm} | " + " | ".join(cells) + " |")

    print()
    for n in notes:
        print(f"# {n}")
    print(f"# raw records appended to {a.log}")
    if mismatches:
        # A benchmark whose answers disagree measures nothing: it fails.
        print(f"# {len(mismatches)} checksum MISMATCH(es): see above", flush=True)
        sys.exit(1)
    print("# checksums agree across peers in every round (kNN mean k-th distance to 1e-12 relative; FoF groups >= 20 and largest)")


if __name__ == "__main__":
    main()
