// kNN on the device (src/backend/cpu/knn.rs, knn_leaf.rs): the node test of every plane
// pass and of the leaf pass, the kept lists, and the leaf kernel with the reductions.
//
// Node test for a receiving node A (warp per node): r_A is the smallest radius such that
// the candidates B with d_max(A, B) <= r_A hold at least k sources (+inf when they all
// hold fewer); A keeps the candidates with d_min(A, B) <= r_A. r_A is 0 when k = 0 (a
// self-query's k = 1: src/pipeline/prepare.rs knn_node_k), else one of the candidates'
// d_max values: with up to `pairwise_max` candidates (their d_max cached in
// shared memory) the smallest d_max whose count reaches k, each lane counting for its own
// candidates; with more, a bisection over the bit patterns of T (non-negative reals order
// as their bits do). Either equals the CPU's incremental selection exactly.
#include "zt_walk.cuh"

// Candidates whose d_max and source count a warp keeps in shared memory (the rest are
// recomputed on every bisection step).
#define ZT_DMAX_CACHE 128

// The smallest of d[0 .. m) whose count W(d) = the sum of n[j] over d[j] <= d reaches k;
// `none` when no d does. The warp together (lanes over i), every lane gets it.
template <class T>
ZT_HD T zt_pairwise_select(const T* d, const u32* n, u32 m, u32 k, T none) {
    T best = none;
    for (u32 i = zt_lane(); i < m; i += 32) {
        T di = d[i];
        unsigned long long wi = 0;
        for (u32 j = 0; j < m; ++j) wi += d[j] <= di ? n[j] : 0;
        if (wi >= k && di < best) best = di;
    }
    for (int o = 16; o > 0; o >>= 1) best = zt_fmin(best, __shfl_xor_sync(0xffffffffu, best, o));
    return best;
}

// Candidates with d_max below the bound U that a warp collects for the pairwise count.
#ifndef ZT_SMALL_CAP
#define ZT_SMALL_CAP 64
#endif

template <class T, int D>
__device__ void knn_select(ZtTree<T> t, ZtMetric<T, D> m, u32 child_first, u32 child_len, ZtCands c, u32 k, u32 pairwise_max,
                           u32* cnt, T* r2, unsigned long long* pairs) {
    __shared__ T s_dmax[ZT_WARPS][ZT_DMAX_CACHE];
    __shared__ u32 s_cnt[ZT_WARPS][ZT_DMAX_CACHE];
    __shared__ T s_small_d[ZT_WARPS][ZT_SMALL_CAP];
    __shared__ u32 s_small_n[ZT_WARPS][ZT_SMALL_CAP];
    typedef typename ZtBitsOf<T>::type Bits;
    u32 ai = zt_grid_warp(), lane = zt_lane(), w = threadIdx.x >> 5;
    if (ai >= child_len) return;
    u32 a = child_first + ai, p = c.parent_of[ai];
    u32 c0 = c.coff[p], mm = c.coff[p + 1] - c0;
    if (t.qry_count[a] == 0 || mm == 0) {
        if (lane == 0) {
            cnt[ai] = 0;
            r2[ai] = (T)0;
        }
        return;
    }
    if (lane == 0 && pairs) atomicAdd(pairs, (unsigned long long)mm);
    const T *alo = t.qry_lo + D * a, *ahi = t.qry_hi + D * a;
    // Candidate i's d_max and source count (cached in shared memory for i < ZT_DMAX_CACHE).
    auto dmax_of = [&](u32 i, u32* n) -> T {
        if (i < ZT_DMAX_CACHE) {
            *n = s_cnt[w][i];
            return s_dmax[w][i];
        }
        u32 b = c.cand[c0 + i];
        *n = t.src_count[b];
        return m.box_max2(alo, ahi, t.src_lo + D * b, t.src_hi + D * b);
    };
    // U: the smallest d_max of a candidate holding k sources alone. R <= U, and R < U only
    // through candidates whose d_max is below U: usually few (none, for most leaves).
    T U = zt_inf<T>();
    for (u32 i = lane; i < mm; i += 32) {
        u32 b = c.cand[c0 + i], n = t.src_count[b];
        T dm = m.box_max2(alo, ahi, t.src_lo + D * b, t.src_hi + D * b);
        if (i < ZT_DMAX_CACHE) {
            s_dmax[w][i] = dm;
            s_cnt[w][i] = n;
        }
        if (n >= k && dm < U) U = dm;
    }
    for (int o = 16; o > 0; o >>= 1) U = zt_fmin(U, __shfl_xor_sync(0xffffffffu, U, o));
    __syncwarp();
    T R = zt_inf<T>();
    bool found = false;
    if (k == 0) {
        R = (T)0;  // nothing to find (a self-query's k = 1): keep the touching candidates
        found = true;
    } else if (U < zt_inf<T>() && pairwise_max > 0) {
        // The candidates below U, then the smallest of their d_max whose count reaches k
        // (counting only candidates below U: those at or above it are not <= a smaller
        // d_max), else U.
        u32 ns = 0;
        for (u32 i0 = 0; i0 < mm; i0 += 32) {
            u32 i = i0 + lane, n = 0;
            T dm = i < mm ? dmax_of(i, &n) : U;
            bool below = dm < U;
            u32 at = zt_warp_append(below, &ns);
            if (below && at < ZT_SMALL_CAP) {
                s_small_d[w][at] = dm;
                s_small_n[w][at] = n;
            }
        }
        __syncwarp();
        if (ns <= ZT_SMALL_CAP && ns <= pairwise_max) {
            R = zt_pairwise_select(s_small_d[w], s_small_n[w], ns, k, U);
            found = true;
        }
    }
    if (!found && mm <= pairwise_max && mm <= ZT_DMAX_CACHE) {
        R = zt_pairwise_select(s_dmax[w], s_cnt[w], mm, k, zt_inf<T>());
    } else if (!found) {
        // The smallest R (as bits) with W(R) = sum of counts with d_max <= R at least k;
        // W(U) >= k, so R is at most U.
        Bits lo = 0, hi = U < zt_inf<T>() ? zt_bits(U) : ZtBitsOf<T>::inf;
        while (lo < hi) {
            Bits mid = lo + (hi - lo) / 2;
            T Rm = zt_from_bits(mid);
            unsigned long long wsum = 0;
            for (u32 i = lane; i < mm; i += 32) {
                u32 n;
                T dmax = dmax_of(i, &n);
                if (dmax <= Rm) wsum += n;
            }
            wsum = zt_warp_sum(wsum);
            if (wsum >= k)
                hi = mid;
            else
                lo = mid + 1;
        }
        R = zt_from_bits(hi);
    }
    u32 kept = 0;
    for (u32 i = lane; i < mm; i += 32) {
        u32 b = c.cand[c0 + i];
        kept += m.box_min2(alo, ahi, t.src_lo + D * b, t.src_hi + D * b) <= R;
    }
    kept = zt_warp_sum(kept);
    if (lane == 0) {
        cnt[ai] = kept;
        r2[ai] = R;
    }
}

// The kept candidates of each child, in candidate order, at items[offsets[ai] ..].
template <class T, int D>
__device__ void knn_keep(ZtTree<T> t, ZtMetric<T, D> m, u32 child_first, u32 child_len, ZtCands c, const T* r2, const u32* offsets, u32* items) {
    u32 ai = zt_grid_warp(), lane = zt_lane();
    if (ai >= child_len) return;
    u32 base = offsets[ai];
    if (offsets[ai + 1] == base) return;
    u32 a = child_first + ai, p = c.parent_of[ai];
    u32 c0 = c.coff[p], mm = c.coff[p + 1] - c0;
    const T *alo = t.qry_lo + D * a, *ahi = t.qry_hi + D * a;
    T R = r2[ai];
    for (u32 i = 0; i < mm; i += 32) {
        u32 b = i + lane < mm ? c.cand[c0 + i + lane] : 0;
        bool keep = i + lane < mm && m.box_min2(alo, ahi, t.src_lo + D * b, t.src_hi + D * b) <= R;
        u32 at = zt_warp_append(keep, &base);
        if (keep) items[at] = b;
    }
}

// ---- the leaf kernel ----

// What the leaf kernel reads besides the tree: positions (one array per dimension) and
// input indices of sources and queries, the sources' masses and scalar (null when not
// needed), k, min(k, sources), and flags.
template <class T>
struct ZtKnnJob {
    const T* spos[3];
    const u32* sorig;
    const T* qpos[3];
    const u32* qorig;
    const double* masses;
    const double* scalar;
    u32 k;
    u32 kk;
    u32 self_query;
    u32 zorder;
    // Kept lists up to this long are sorted (at most ZT_KEPT_SORTED; tests lower it to
    // walk lists unsorted).
    u32 sorted_max;
    u32 pad;
};

// The caller's outputs (null when not asked for): rows of k, or one value per query.
template <class T>
struct ZtKnnOut {
    i64* indices;
    T* distances;
    T* d2;
    T* kth;
    T* kth_d2;
    double* density;
    double* mean;
    double* distances_wide;  // the distances and k-th distances widened to f64 (f32 T,
    double* kth_wide;        // the C API's doubles), instead of or besides the T arrays
};

// Kept leaves a warp sorts nearest first in shared memory (a leaf with more is walked in
// list order: the same result, pruned less).
#ifndef ZT_KEPT_SORTED
#define ZT_KEPT_SORTED 256
#endif
// Neighbours selected per pass over the kept leaves, held in registers (k > ZT_PASS takes
// several passes, each after the last neighbour of the one before).
#ifndef ZT_PASS
#define ZT_PASS 16
#endif
// Warps per block of the leaf kernel (the host launches it with as many: device.rs
// LEAF_WARPS, which it passes here on a real device).
#ifndef ZT_LEAF_WARPS
#define ZT_LEAF_WARPS 4
#endif
// Registers per thread the f32 leaf kernels may use: 96 lets five warps share each SM
// sub-partition's 16384 registers (four at the 106 they take uncapped), without spills.
#ifndef ZT_LEAF_MAXNREG_F32
#define ZT_LEAF_MAXNREG_F32 96
#endif
// The f64 kernels' (they take about 144; at 128 ptxas spills).
#ifndef ZT_LEAF_MAXNREG_F64
#define ZT_LEAF_MAXNREG_F64 168
#endif

// (d, r) orders before (e, s): by distance², then rank.
template <class T>
ZT_HD bool zt_before(T d, u32 r, T e, u32 s) {
    return d < e || (d == e && r < s);
}

// The best P candidates of one pass, sorted by (distance², rank); empty slots are (+inf,
// z = 0xffffffff). Every index is a compile-time constant (unrolled loops), so the slots
// stay in registers. Ranks are not held: only a tie in distance² (duplicates, lattices)
// needs them, and then the slot's rank is looked up from its z through `rank`. (H200,
// kNN 1e7, walk stage: ranks held in registers 35 ms; looked up at every slot 68 ms; the
// tie-free path below 32 ms.)
template <class T, int P>
struct ZtBest {
    T d[P];
    u32 z[P];

    ZT_HD void clear() {
ZT_UNROLL
        for (int i = 0; i < P; ++i) {
            d[i] = zt_inf<T>();
            z[i] = 0xffffffffu;
        }
    }
    // Whether (dd, rr) orders before slot i.
    template <class Rank>
    ZT_HD bool before(T dd, u32 rr, int i, Rank rank) const {
        return dd < d[i] || (dd == d[i] && rr < rank(z[i]));
    }
    // Whether (dd, zz) would be taken.
    template <class Rank>
    ZT_HD bool takes(T dd, u32 zz, Rank rank) const {
        return dd < d[P - 1] || (dd == d[P - 1] && rank(zz) < rank(z[P - 1]));
    }
    // Inserts (dd, zz), which `takes`; the last slot drops out.
    template <class Rank>
    ZT_HD void insert(T dd, u32 zz, Rank rank) {
        // Without a tie in distance² (the usual case) the order is by distance² alone.
        bool tie = false;
ZT_UNROLL
        for (int i = 0; i < P; ++i) tie |= dd == d[i];
        if (!tie) {
ZT_UNROLL
            for (int i = P - 1; i > 0; --i) {
                bool up = dd < d[i - 1], here = dd < d[i];
                d[i] = up ? d[i - 1] : here ? dd : d[i];
                z[i] = up ? z[i - 1] : here ? zz : z[i];
            }
            if (dd < d[0]) {
                d[0] = dd;
                z[0] = zz;
            }
            return;
        }
        u32 rr = rank(zz);
ZT_UNROLL
        for (int i = P - 1; i > 0; --i) {
            if (before(dd, rr, i - 1, rank)) {
                d[i] = d[i - 1];
                z[i] = z[i - 1];
            } else if (before(dd, rr, i, rank)) {
                d[i] = dd;
                z[i] = zz;
            }
        }
        if (before(dd, rr, 0, rank)) {
            d[0] = dd;
            z[0] = zz;
        }
    }
};

// src/knn/reduce.rs `ball_volume` (the same operations in the same order).
template <int D>
ZT_HD double zt_ball_volume(double r) {
    const double pi = 3.14159265358979323846;
    return D == 2 ? pi * r * r : 4.0 / 3.0 * pi * r * r * r;
}

template <class T, int D>
__device__ void knn_leaf(ZtTree<T> t, ZtMetric<T, D> m, u32 num_leaves, ZtLists kept, const T* leaf_r2, ZtKnnJob<T> job, ZtKnnOut<T> out) {
    __shared__ u32 s_node[ZT_LEAF_WARPS][ZT_KEPT_SORTED];
    __shared__ T s_min[ZT_LEAF_WARPS][ZT_KEPT_SORTED];
    __shared__ unsigned short s_order[ZT_LEAF_WARPS][ZT_KEPT_SORTED];
    __shared__ T s_pos[ZT_LEAF_WARPS][32][3];
    __shared__ u32 s_z[ZT_LEAF_WARPS][32];
    __shared__ u32 s_want[ZT_LEAF_WARPS][32];
    u32 lane = zt_lane(), w = threadIdx.x >> 5, a = blockIdx.x * ZT_LEAF_WARPS + w;
    if (a >= num_leaves) return;
    u32 qn = t.qry_count[a], k0 = kept.offsets[a], mk = kept.offsets[a + 1] - k0;
    if (qn == 0 || mk == 0) return;
    const T *alo = t.qry_lo + D * a, *ahi = t.qry_hi + D * a;
    bool sorted = mk <= ZT_KEPT_SORTED && mk <= job.sorted_max;
    if (sorted) {
        for (u32 i = lane; i < mk; i += 32) {
            u32 b = kept.items[k0 + i];
            s_node[w][i] = b;
            s_min[w][i] = m.box_min2(alo, ahi, t.src_lo + D * b, t.src_hi + D * b);
        }
        __syncwarp();
        // Rank sort by (d_min², node), as the CPU's `keep_leaves`.
        for (u32 i = lane; i < mk; i += 32) {
            T dm = s_min[w][i];
            u32 b = s_node[w][i], r = 0;
            for (u32 j = 0; j < mk; ++j) r += zt_before(s_min[w][j], s_node[w][j], dm, b);
            s_order[w][r] = (unsigned short)i;
        }
        __syncwarp();
    }
    const T R2 = leaf_r2[a];
    const u32 k = job.k, kk = job.kk;
    const unsigned full = 0xffffffffu;
    // Warp-uniform control: each lane holds one query of the leaf (32 at a time) and its
    // best list; the lanes walk the kept leaves together, each source leaf read once into
    // shared memory for the whole warp (coalesced).
    for (u32 q0 = 0; q0 < qn; q0 += 32) {
        bool live = q0 + lane < qn;
        u32 q = t.qry_start[a] + (live ? q0 + lane : 0);
        T qp[3];
        for (int d = 0; d < D; ++d) qp[d] = job.qpos[d][q];
        u32 self_z = job.self_query ? q : 0xffffffffu;
        ZtBest<T, ZT_PASS> best;
        u32 found = 0;
        bool active = live;
        // The last neighbour of the passes so far; before the first, (-1, 0) orders before
        // every candidate (distances² are not negative).
        T last_d = (T)-1;
        u32 last_r = 0;
        // Sums in rank order from -0.0, as Rust's f64 `Sum` (in shared memory: used once
        // per pass, they would take registers the distance loop needs).
        __shared__ double s_msum[ZT_LEAF_WARPS][32], s_ssum[ZT_LEAF_WARPS][32];
        s_msum[w][lane] = -0.0;
        s_ssum[w][lane] = -0.0;
        // A slot's rank from its z (the input index + 1; 0 for the query itself, which
        // orders first among equals; empty slots last).
        auto rank = [&](u32 z) -> u32 { return z == 0xffffffffu ? z : z == self_z ? 0u : job.sorig[z] + 1; };
        while (__any_sync(full, active)) {
            // This pass selects the next min(kk - found, ZT_PASS) neighbours (it fills all
            // ZT_PASS slots if it can: the threshold is the last slot's distance).
            u32 need = kk - found < ZT_PASS ? kk - found : ZT_PASS;
            best.clear();
            // Sources are staged 32 at a time (from one or more kept leaves, each with the
            // ballot of the round's queries that want it). The distance test is then the
            // warp's together: for each query wanting the tile, each lane tests its own
            // source against that query's threshold as of the tile's start (the current
            // one: nothing that belongs is lost), and the query's lane keeps the ballot of
            // survivors. Each lane then inserts its own survivors with the exact filters.
            // All lanes work in the distance test; insertion costs the warp the largest
            // survivor count of the tile, not one step per source that any lane takes.
            // (One lane per query testing every staged source, the kernel before this one:
            // walk stage 44 / 488 ms at 1e7 / 1e8 against 30 / 339 ms, H200. Survivors
            // queued per lane in shared memory and inserted by the warp together when a
            // queue filled: 5% slower.)
            T thr = R2;
            u32 fill = 0, tile_q = 0;
            // Takes (dd, z) into the best list if it belongs there (the exact filters).
            auto consider = [&](T dd, u32 z) {
                if (dd > R2 || dd > best.d[ZT_PASS - 1] || dd < last_d) return;
                if ((dd == last_d && rank(z) <= last_r) || !best.takes(dd, z, rank)) return;
                best.insert(dd, z, rank);
            };
            auto flush = [&](u32 n) {
                __syncwarp();
                u32 want = lane < n ? s_want[w][lane] : 0u;
                T sp[3];
                for (int d = 0; d < D; ++d) sp[d] = s_pos[w][lane < n ? lane : 0][d];
                u32 mine = 0;
                // The query's position and threshold, to every lane.
                auto test = [&](u32 qi) -> u32 {
                    T qq[3], tq;
                    for (int d = 0; d < D; ++d) qq[d] = __shfl_sync(full, qp[d], qi);
                    tq = __shfl_sync(full, thr, qi);
                    T dd = m.dist2(qq, sp);
                    return (u32)((want >> qi & 1u) != 0 && dd <= tq);
                };
                while (tile_q) {
                    u32 qi = (u32)__ffs((int)tile_q) - 1u;
                    tile_q &= tile_q - 1u;
                    // Two queries at a time: their chains of shuffles, distances and
                    // ballots interleave.
                    u32 qj = tile_q ? (u32)__ffs((int)tile_q) - 1u : qi;
                    tile_q &= tile_q - 1u;
                    u32 ti = test(qi), tj = test(qj);
                    u32 hi = __ballot_sync(full, ti), hj = __ballot_sync(full, tj);
                    if (lane == qi) mine = hi;
                    if (lane == qj) mine = hj;
                }
                while (mine) {
                    u32 i = (u32)__ffs((int)mine) - 1u;
                    mine &= mine - 1u;
                    T dd = m.dist2(qp, s_pos[w][i]);
                    u32 z = s_z[w][i];
                    consider(dd, z);
                }
                thr = zt_fmin(R2, best.d[ZT_PASS - 1]);
                __syncwarp();
            };
            for (u32 j = 0; j < mk; ++j) {
                u32 b;
                bool want = active;
                if (sorted) {
                    u32 o = s_order[w][j];
                    b = s_node[w][o];
                    // Nearest first: a lane past its threshold here stays past it.
                    want = want && s_min[w][o] <= thr;
                    if (!__any_sync(full, want)) break;
                } else {
                    b = kept.items[k0 + j];
                    want = want && m.box_min2(alo, ahi, t.src_lo + D * b, t.src_hi + D * b) <= thr;
                }
                want = want && m.box_min2(qp, qp, t.src_lo + D * b, t.src_hi + D * b) <= thr;
                u32 wm = __ballot_sync(full, want);
                if (wm == 0) continue;
                u32 s0 = t.src_start[b], cnt = t.src_count[b];
                for (u32 off = 0; off < cnt;) {
                    u32 take = cnt - off < 32 - fill ? cnt - off : 32 - fill;
                    if (lane < take) {
                        u32 at = fill + lane, z = s0 + off + lane;
                        for (int d = 0; d < D; ++d) s_pos[w][at][d] = job.spos[d][z];
                        s_z[w][at] = z;
                        s_want[w][at] = wm;
                    }
                    tile_q |= wm;
                    fill += take;
                    off += take;
                    if (fill == 32) {
                        flush(32);
                        fill = 0;
                    }
                }
            }
            if (fill > 0) flush(fill);
            if (!active) continue;
            u32 n = 0;
            u64 row = (u64)(job.zorder ? q : job.qorig[q]);  // recomputed, not held (registers)
ZT_UNROLL
            for (int i = 0; i < ZT_PASS; ++i) {
                if ((u32)i < need && best.z[i] != 0xffffffffu) {
                    u64 at = row * k + found + i;
                    if (out.indices) out.indices[at] = (i64)job.sorig[best.z[i]];
                    if (out.distances) out.distances[at] = zt_sqrt(best.d[i]);
                    if (out.distances_wide) out.distances_wide[at] = (double)zt_sqrt(best.d[i]);
                    if (out.d2) out.d2[at] = best.d[i];
                    if (job.masses) s_msum[w][lane] = s_msum[w][lane] + job.masses[best.z[i]];
                    if (job.scalar) s_ssum[w][lane] = s_ssum[w][lane] + job.scalar[best.z[i]];
                    last_d = best.d[i];
                    last_r = rank(best.z[i]);
                    n = i + 1;
                }
            }
            found += n;
            active = n == need && found < kk;
        }
        if (!live) continue;
        u64 row = (u64)(job.zorder ? q : job.qorig[q]);
        for (u32 j = found; j < k; ++j) {
            u64 at = row * k + j;
            if (out.indices) out.indices[at] = -1;
            if (out.distances) out.distances[at] = zt_inf<T>();
            if (out.distances_wide) out.distances_wide[at] = (double)zt_inf<T>();
            if (out.d2) out.d2[at] = zt_inf<T>();
        }
        T kth2 = found == k ? last_d : zt_inf<T>();
        T kth = zt_sqrt(kth2);
        if (out.kth_d2) out.kth_d2[row] = kth2;
        if (out.kth) out.kth[row] = kth;
        if (out.kth_wide) out.kth_wide[row] = (double)kth;
        if (out.density) out.density[row] = found < k ? 0.0 : (job.masses ? s_msum[w][lane] : (double)found) / zt_ball_volume<D>((double)kth);
        if (out.mean) out.mean[row] = s_ssum[w][lane] / (double)found;
    }
}

#define ZT_KNN(suffix, T, D, LEAF_BOUNDS)                                                                                                          \
    extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_knn_select_##suffix(ZtTree<T> t, ZtMetric<T, D> m, u32 child_first,   \
                                                                                  u32 child_len, ZtCands c, u32 k, u32 pairwise_max,  \
                                                                                  u32* cnt, T* r2, unsigned long long* pairs) {      \
        knn_select<T, D>(t, m, child_first, child_len, c, k, pairwise_max, cnt, r2, pairs);                                                       \
    }                                                                                                                                \
    ZT_EXPORT(zt_knn_select_##suffix)                                                                                                \
    extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_knn_keep_##suffix(ZtTree<T> t, ZtMetric<T, D> m, u32 child_first,     \
                                                                                u32 child_len, ZtCands c, const T* r2,              \
                                                                                const u32* offsets, u32* items) {                   \
        knn_keep<T, D>(t, m, child_first, child_len, c, r2, offsets, items);                                                        \
    }                                                                                                                                \
    ZT_EXPORT(zt_knn_keep_##suffix)                                                                                                  \
    extern "C" __global__ void LEAF_BOUNDS zt_knn_leaf_##suffix(ZtTree<T> t, ZtMetric<T, D> m, u32 num_leaves,      \
                                                                                ZtLists kept, const T* leaf_r2, ZtKnnJob<T> job,    \
                                                                                ZtKnnOut<T> out) {                                  \
        knn_leaf<T, D>(t, m, num_leaves, kept, leaf_r2, job, out);                                                                  \
    }                                                                                                                                \
    ZT_EXPORT(zt_knn_leaf_##suffix)
ZT_KNN(f32_2, float, 2, __maxnreg__(ZT_LEAF_MAXNREG_F32))
ZT_KNN(f32_3, float, 3, __maxnreg__(ZT_LEAF_MAXNREG_F32))
ZT_KNN(f64_2, double, 2, __maxnreg__(ZT_LEAF_MAXNREG_F64))
ZT_KNN(f64_3, double, 3, __maxnreg__(ZT_LEAF_MAXNREG_F64))
