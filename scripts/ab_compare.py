"""Same-run A/B comparison of two ztree builds through the C peer runner
(../shared/bench/ztree_peer.c built against each): interleaved rounds, each run a fresh
process, median wall seconds per case and the ratio B/A.

    python scripts/ab_compare.py PEER_A PEER_B DATA_DIR [--rounds 3] [--quick]
DATA_DIR holds ../shared/bench/gen.py output (1e6, 4e6) and make_tiled.py output.
"""
import argparse, json, os, statistics, subprocess, sys

def cases(data, quick):
    f = lambda d, n, t="f64": os.path.join(data, f"{d}_{n}_src_{t}.npy")
    sizes = [1000000] if quick else [1000000, 4000000]
    out = []
    for n in sizes:
        for d in ("uniform", "clustered"):
            out.append((f"kNN k=16 f64 {d} {n:.0e}", ["knn", "f64", f(d, n), "self", "16", "2", "0"], {}))
    out.append(("kNN k=16 f64 uniform 1e6 periodic", ["knn", "f64", f("uniform", 1000000), "self", "16", "2", "1"], {}))
    for n in sizes:
        out.append((f"FoF b=0.2 clustered {n:.0e}", ["fof", "f64", f("clustered", n), repr(0.2 * n ** (-1 / 3)), "2", "1"], {}))
    for name, box in (("g4z1", "50.0"), ("g4z1tiled", "100.0")):
        p = os.path.join(data, f"{name}_f32.npy")
        if os.path.exists(p):
            out.append((f"FoF {name} f32", ["fof", "f32", p, "0.15625", "2", "1"], {"ZTREE_BOX": box}))
    return out

def run(cmd, env):
    r = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **env), timeout=900)
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"{cmd}: {r.stderr[-400:]}")

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a"); ap.add_argument("b"); ap.add_argument("data")
    ap.add_argument("--rounds", type=int, default=3); ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    print("| case | A (s) | B (s) | B/A |\n|---|---|---|---|")
    for title, args, env in cases(a.data, a.quick):
        t = {"A": [], "B": []}
        for _ in range(a.rounds):
            for k, exe in (("A", a.a), ("B", a.b)):
                t[k].append(run([exe] + args, env)["secs"])
        ma, mb = statistics.median(t["A"]), statistics.median(t["B"])
        print(f"| {title} | {ma:.3f} | {mb:.3f} | {mb / ma:.2f} |", flush=True)

if __name__ == "__main__":
    main()
