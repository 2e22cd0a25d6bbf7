// Friends-of-friends on the device (src/backend/cpu/fof.rs, fof_leaf.rs): a lock-free
// union–find over z-indices (every parent pointer points to a smaller index, so a group's
// root is its smallest member: the partition comes out the same whatever order the links
// are made in), the leaves' own pairs, the node–node passes and the leaf–leaf pass.
//
// Node–node test for a pair A < B (f64 box bounds from the T bounds, conservative):
// d_min² > l²(1 + 1e-12): drop; both internally connected and in one group: drop;
// d_max² <= l²(1 - 1e-12): every point of A is within l of every point of B, so put both
// whole into one group and drop; otherwise refine. A node's flag says all its points are
// in one group (or will be once the thread that set it has linked them, within the pass).
#include "zt_walk.cuh"

// The linking job: l² and its conservative bounds (computed on the host, as the CPU's),
// the positions in z-order, the union–find and the per-node flags.
template <class T>
struct ZtFof {
    double l2, l2_lo, l2_hi;
    const T* pos[3];
    u32* parent;
    u32* flags;
    // Nodes connected whole whose points are still to be linked (zt_fof_flush), and how many.
    u32* pending;
    u32* npending;
};

// ---- union–find (src/fof/union_find.rs) ----

// The root of x, halving the path on the way (benign races: every store writes an
// ancestor). Loads are volatile: another thread may have moved a pointer meanwhile.
ZT_HD u32 zt_find(u32* parent, u32 x) {
    volatile u32* p = parent;
    for (;;) {
        u32 px = p[x];
        if (px == x) return x;
        u32 g = p[px];
        if (g == px) return px;
        p[x] = g;
        x = g;
    }
}

// Hooks the larger root under the smaller with a compare-and-swap, retried when another
// thread got there first.
ZT_HD void zt_union(u32* parent, u32 a, u32 b) {
    a = zt_find(parent, a);
    b = zt_find(parent, b);
    while (a != b) {
        u32 lo = a < b ? a : b, hi = a < b ? b : a;
        if (atomicCAS(&parent[hi], hi, lo) == hi) return;
        a = zt_find(parent, hi);
        b = zt_find(parent, lo);
    }
}

template <class T, int D>
ZT_HD void zt_point(ZtFof<T> f, u32 z, double* p) {
    for (int d = 0; d < D; ++d) p[d] = (double)f.pos[d][z];
}

template <class T, int D>
ZT_HD void zt_box(ZtTree<T> t, u32 n, double* lo, double* hi) {
    for (int d = 0; d < D; ++d) {
        lo[d] = (double)t.src_lo[D * n + d];
        hi[d] = (double)t.src_hi[D * n + d];
    }
}

// Puts every point of `node` into the group of point `anchor` and flags the node: its
// first point is linked now; the first thread to flag it queues the node, whose other points
// zt_fof_flush links to its first after the kernel, a warp per node (a node of thousands of
// points would otherwise be one thread's loop). Until then the flag already holds in the
// sense the walk needs: the node's points will all be in one group.
template <class T>
ZT_HD void zt_connect(ZtTree<T> t, ZtFof<T> f, u32 node, u32 anchor) {
    if (atomicExch(&f.flags[node], 1u) == 0 && t.src_count[node] > 1) f.pending[atomicAdd(f.npending, 1u)] = node;
    zt_union(f.parent, t.src_start[node], anchor);
}

// Links every point of each queued node to the node's first point (warp per node).
extern "C" __global__ void ZT_BOUNDS_2 zt_fof_flush(const u32* src_start, const u32* src_count, u32* parent, const u32* pending, u32 count) {
    u32 e = zt_grid_warp(), lane = zt_lane();
    if (e >= count) return;
    u32 node = pending[e], s0 = src_start[node];
    for (u32 z = s0 + 1 + lane; z < s0 + src_count[node]; z += 32) zt_union(parent, z, s0);
}
ZT_EXPORT(zt_fof_flush)

// Pair of a with itself: true when it is resolved (a is, or now is, internally connected).
template <class T, int D>
ZT_HD bool zt_self_pair(ZtTree<T> t, ZtFof<T> f, ZtMetric<double, D> m, u32 a) {
    if (f.flags[a]) return true;
    double lo[3], hi[3];
    zt_box<T, D>(t, a, lo, hi);
    if (m.box_max2(lo, hi, lo, hi) <= f.l2_lo) {
        zt_connect(t, f, a, t.src_start[a]);
        return true;
    }
    return false;
}

// The node–node test for a != b: true when the pair must be refined.
template <class T, int D>
ZT_HD bool zt_node_pair(ZtTree<T> t, ZtFof<T> f, ZtMetric<double, D> m, u32 a, u32 b) {
    double alo[3], ahi[3], blo[3], bhi[3];
    zt_box<T, D>(t, a, alo, ahi);
    zt_box<T, D>(t, b, blo, bhi);
    if (m.box_min2(alo, ahi, blo, bhi) > f.l2_hi) return false;
    u32 fa = t.src_start[a], fb = t.src_start[b];
    if (f.flags[a] && f.flags[b] && zt_find(f.parent, fa) == zt_find(f.parent, fb)) return false;
    if (m.box_max2(alo, ahi, blo, bhi) <= f.l2_lo) {
        zt_connect(t, f, b, fb);
        zt_connect(t, f, a, fb);
        return false;
    }
    return true;
}

// ---- the leaves' own pairs ----

// Warp per leaf: a leaf small enough is connected whole; otherwise every pair i < j
// within l is linked (lanes over i).
template <class T, int D>
__device__ void fof_leaf_self(ZtTree<T> t, ZtMetric<double, D> m, ZtFof<T> f, u32 num_leaves) {
    u32 a = zt_grid_warp(), lane = zt_lane();
    if (a >= num_leaves) return;
    int resolved = 0;
    if (lane == 0) resolved = zt_self_pair<T, D>(t, f, m, a);
    if (__shfl_sync(0xffffffffu, resolved, 0)) return;
    u32 s0 = t.src_start[a], n = t.src_count[a];
    for (u32 i = lane; i < n; i += 32) {
        double p[3], q[3];
        zt_point<T, D>(f, s0 + i, p);
        for (u32 j = i + 1; j < n; ++j) {
            zt_point<T, D>(f, s0 + j, q);
            if (m.dist2(p, q) <= f.l2) zt_union(f.parent, s0 + i, s0 + j);
        }
    }
}

// Flags the nodes of one plane whose points are all in one group: a leaf whose points
// share a root; an upper node whose children are all flagged and share a root.
template <class T>
__device__ void fof_flags(ZtTree<T> t, ZtFof<T> f, u32 first, u32 len, u32 leaves) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i >= len) return;
    u32 n = first + i;
    if (f.flags[n]) return;
    u32 r = zt_find(f.parent, t.src_start[n]);
    if (leaves) {
        for (u32 z = t.src_start[n] + 1; z < t.src_start[n] + t.src_count[n]; ++z)
            if (zt_find(f.parent, z) != r) return;
    } else {
        u32 c0 = t.child_start[n], c1 = c0 + t.child_count[n];
        if (c0 == c1) return;
        for (u32 c = c0; c < c1; ++c)
            if (!f.flags[c] || zt_find(f.parent, t.src_start[c]) != r) return;
    }
    f.flags[n] = 1;
}

// ---- the node passes: decide (count) -> scan -> keep (zt_cand_keep) ----

// Warp per child a of the pass: for each candidate b of its parent, whether a keeps b
// (b > a and the pair must be refined, or b = a and a's own pairs are unresolved),
// written to keep[doff[ai] + i]; the number kept to cnt[ai].
template <class T, int D>
__device__ void fof_decide(ZtTree<T> t, ZtMetric<double, D> m, ZtFof<T> f, u32 child_first, u32 child_len, ZtCands c, const u32* doff,
                           u8* keep, u32* cnt) {
    u32 ai = zt_grid_warp(), lane = zt_lane();
    if (ai >= child_len) return;
    u32 a = child_first + ai, p = c.parent_of[ai];
    u32 c0 = c.coff[p], mm = c.coff[p + 1] - c0, kept = 0;
    for (u32 i = lane; i < mm; i += 32) {
        u32 b = c.cand[c0 + i];
        bool k = b == a ? !zt_self_pair<T, D>(t, f, m, a) : b > a && zt_node_pair<T, D>(t, f, m, a, b);
        keep[doff[ai] + i] = k;
        kept += k;
    }
    kept = zt_warp_sum(kept);
    if (lane == 0) cnt[ai] = kept;
}

// ---- the leaf–leaf pass ----

// Point pairs between leaves a and b, the warp's lanes over the probe leaf's points. The
// probe is tested against the target after a point–box filter; when the target is
// internally connected one link per probe point is enough, and none for a point already
// in its group.
template <class T, int D>
ZT_HD void fof_leaf_pair(ZtTree<T> t, ZtMetric<double, D> m, ZtFof<T> f, u32 a, u32 b) {
    bool ca = f.flags[a] != 0, cb = f.flags[b] != 0;
    u32 p = ca && !cb ? b : a, q = ca && !cb ? a : b;
    bool q_conn = ca || cb;
    u32 p0 = t.src_start[p], pn = t.src_count[p], q0 = t.src_start[q], qn = t.src_count[q];
    double qlo[3], qhi[3];
    zt_box<T, D>(t, q, qlo, qhi);
    for (u32 k = zt_lane(); k < pn; k += 32) {
        u32 i = p0 + k;
        double pt[3];
        zt_point<T, D>(f, i, pt);
        if (m.box_min2(pt, pt, qlo, qhi) > f.l2_hi) continue;
        if (q_conn && zt_find(f.parent, i) == zt_find(f.parent, q0)) continue;
        if (m.box_max2(pt, pt, qlo, qhi) <= f.l2_lo) {
            zt_connect(t, f, q, i);
            continue;
        }
        for (u32 j = q0; j < q0 + qn; ++j) {
            double s[3];
            zt_point<T, D>(f, j, s);
            if (m.dist2(pt, s) <= f.l2) {
                zt_union(f.parent, i, j);
                if (q_conn) break;
            }
        }
    }
}

// Warp per leaf a: the node test with every candidate b > a (lanes over candidates), then
// the point pairs of the pairs to refine, one after another with the whole warp.
template <class T, int D>
__device__ void fof_leaf_pass(ZtTree<T> t, ZtMetric<double, D> m, ZtFof<T> f, u32 num_leaves, ZtCands c, unsigned long long* pairs) {
    u32 a = zt_grid_warp(), lane = zt_lane();
    if (a >= num_leaves) return;
    u32 p = c.parent_of[a], c0 = c.coff[p], mm = c.coff[p + 1] - c0;
    if (mm == 0) return;
    if (lane == 0) atomicAdd(pairs, (unsigned long long)mm);
    for (u32 i0 = 0; i0 < mm; i0 += 32) {
        u32 b = i0 + lane < mm ? c.cand[c0 + i0 + lane] : 0;
        bool refine = i0 + lane < mm && b > a && zt_node_pair<T, D>(t, f, m, a, b);
        unsigned mask = __ballot_sync(0xffffffffu, refine);
        while (mask) {
            int j = __ffs((int)mask) - 1;
            mask &= mask - 1;
            u32 bj = __shfl_sync(0xffffffffu, b, j);
            fof_leaf_pair<T, D>(t, m, f, a, bj);
        }
    }
}

// roots[z] = the root of z (the smallest z-index of its group).
extern "C" __global__ void ZT_BOUNDS_2 zt_fof_roots(u32* parent, u32 n, u32* roots) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z < n) roots[z] = zt_find(parent, z);
}
ZT_EXPORT(zt_fof_roots)

#define ZT_FOF(suffix, T, D)                                                                                                          \
    extern "C" __global__ void ZT_BOUNDS_2 zt_fof_leaf_self_##suffix(ZtTree<T> t, ZtMetric<double, D> m, ZtFof<T> f, \
                                                                                     u32 num_leaves) {                               \
        fof_leaf_self<T, D>(t, m, f, num_leaves);                                                                                    \
    }                                                                                                                                \
    ZT_EXPORT(zt_fof_leaf_self_##suffix)                                                                                             \
    extern "C" __global__ void ZT_BOUNDS_2 zt_fof_decide_##suffix(ZtTree<T> t, ZtMetric<double, D> m, ZtFof<T> f,   \
                                                                                  u32 child_first, u32 child_len, ZtCands c,        \
                                                                                  const u32* doff, u8* keep, u32* cnt) {            \
        fof_decide<T, D>(t, m, f, child_first, child_len, c, doff, keep, cnt);                                                      \
    }                                                                                                                                \
    ZT_EXPORT(zt_fof_decide_##suffix)                                                                                                \
    extern "C" __global__ void ZT_BOUNDS_2 zt_fof_leaf_pass_##suffix(ZtTree<T> t, ZtMetric<double, D> m, ZtFof<T> f, \
                                                                                     u32 num_leaves, ZtCands c,                      \
                                                                                     unsigned long long* pairs) {                    \
        fof_leaf_pass<T, D>(t, m, f, num_leaves, c, pairs);                                                                          \
    }                                                                                                                                \
    ZT_EXPORT(zt_fof_leaf_pass_##suffix)
ZT_FOF(f32_2, float, 2)
ZT_FOF(f32_3, float, 3)
ZT_FOF(f64_2, double, 2)
ZT_FOF(f64_3, double, 3)

#define ZT_FOF_FLAGS(suffix, T)                                                                                              \
    extern "C" __global__ void ZT_BOUNDS_2 zt_fof_flags_##suffix(ZtTree<T> t, ZtFof<T> f, u32 first, u32 len, \
                                                                                 u32 leaves) {                               \
        fof_flags<T>(t, f, first, len, leaves);                                                                              \
    }                                                                                                                        \
    ZT_EXPORT(zt_fof_flags_##suffix)
ZT_FOF_FLAGS(f32, float)
ZT_FOF_FLAGS(f64, double)
