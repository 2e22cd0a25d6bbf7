// Radius queries on the device (src/backend/cpu/radius.rs): the largest radius per node,
// the node test, the leaf kernel that counts (or fills the entries of the sums and the
// lists), the sort keys of the entries and the reduction of the sorted entries.
//
// Node test for receiving node A and source node B: keep B when d_min(A, B)² <= r_A², r_A
// the largest radius of A's queries; point test d² <= r² in f64 from the coordinates, as
// the CPU's, so counts, lists and sums are the CPU's bit for bit (sums run in ascending
// source input index: the entries are sorted by it first).
#include "zt_walk.cuh"

// The radii: one for all (per_query null) or per query in z-order, with each node's
// largest (node_max); counts stop at count_limit (0: exact).
struct ZtRadii {
    double fixed;
    const double* per_query;
    const double* node_max;
    u64 count_limit;
};

ZT_HD double zt_node_radius(ZtRadii r, u32 a) { return r.per_query ? r.node_max[a] : r.fixed; }
ZT_HD double zt_query_radius(ZtRadii r, u32 z) { return r.per_query ? r.per_query[z] : r.fixed; }

template <class T, int D>
ZT_HD void zt_radius_box(const T* lo_t, const T* hi_t, u32 n, double* lo, double* hi) {
    for (int d = 0; d < D; ++d) {
        lo[d] = (double)lo_t[D * n + d];
        hi[d] = (double)hi_t[D * n + d];
    }
}

// ---- the largest radius per node ----

// out[n], leaves first .. first + len: the largest radius of the leaf's queries (0 without).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_radius_max_leaves(const u32* qry_start, const u32* qry_count, const double* per_query, u32 first, u32 len, double* out) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i >= len) return;
    u32 n = first + i, s = qry_start[n];
    double m = 0.0;
    for (u32 z = s; z < s + qry_count[n]; ++z) m = per_query[z] > m ? per_query[z] : m;
    out[n] = m;
}
ZT_EXPORT(zt_radius_max_leaves)

// out[n], nodes first .. first + len of an upper plane: the largest of their children's.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_radius_max_up(const u32* child_start, const u32* child_count, u32 first, u32 len, double* out) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i >= len) return;
    u32 n = first + i, c0 = child_start[n];
    double m = 0.0;
    for (u32 c = c0; c < c0 + child_count[n]; ++c) m = out[c] > m ? out[c] : m;
    out[n] = m;
}
ZT_EXPORT(zt_radius_max_up)

// ---- the node test: decide (count) -> scan -> keep (zt_cand_keep) ----

// Warp per child a of the pass (with queries): for each candidate b of its parent, whether
// a keeps it, at keep[doff[ai] + i]; the number kept at cnt[ai].
template <class T, int D>
__device__ void radius_decide(ZtTree<T> t, ZtMetric<double, D> m, ZtRadii r, u32 child_first, u32 child_len, ZtCands c, const u32* doff,
                              u8* keep, u32* cnt) {
    u32 ai = zt_grid_warp(), lane = zt_lane();
    if (ai >= child_len) return;
    u32 a = child_first + ai, p = c.parent_of[ai];
    u32 c0 = c.coff[p], mm = c.coff[p + 1] - c0, kept = 0;
    if (t.qry_count[a] > 0) {
        double alo[3], ahi[3];
        zt_radius_box<T, D>(t.qry_lo, t.qry_hi, a, alo, ahi);
        double ra = zt_node_radius(r, a), r2 = ra * ra;
        for (u32 i = lane; i < mm; i += 32) {
            u32 b = c.cand[c0 + i];
            double blo[3], bhi[3];
            zt_radius_box<T, D>(t.src_lo, t.src_hi, b, blo, bhi);
            bool k = m.box_min2(alo, ahi, blo, bhi) <= r2;
            keep[doff[ai] + i] = k;
            kept += k;
        }
    }
    kept = zt_warp_sum(kept);
    if (lane == 0) cnt[ai] = kept;
}

// ---- the leaf kernel ----

// What the leaf kernel reads and writes. Counting (flag 1 clear): each query's count into
// counts (input order) and counts_z (z-order), the pairs into *pairs; with flag 2 (counts
// only) a leaf wholly within the radius is counted without distances and counts stop at
// the limit. Filling (flag 1): the entries of row `row` (z, or the input index with flag
// 4) from row_off[row] - base, for the queries z0 <= z < z1: source z-index, distance²
// and row.
template <class T>
struct ZtRadJob {
    const T* src[3];
    const T* qry[3];
    const u32* qorig;
    i64* counts;
    u32* counts_z;
    unsigned long long* pairs;
    const u32* row_off;
    u32* ent_j;
    double* ent_d2;
    u32* ent_row;
    u64 base;
    u64 z_range;  // z0 | z1 << 32
    u64 flags;
};

// Warp per query leaf, a lane per query: the leaf's kept source leaves in list order, their
// points in z-order (the same walk in both modes, so a row's entries fill what its count
// counted).
template <class T, int D>
__device__ void radius_leaf(ZtTree<T> t, ZtMetric<double, D> m, ZtRadii r, ZtRadJob<T> j, u32 num_leaves, ZtLists kept) {
    u32 a = zt_grid_warp(), lane = zt_lane();
    if (a >= num_leaves) return;
    bool fill = (j.flags & 1) != 0, count_only = (j.flags & 2) != 0, by_orig = (j.flags & 4) != 0;
    u32 z0 = (u32)j.z_range, z1 = (u32)(j.z_range >> 32);
    u32 q0 = t.qry_start[a], qn = t.qry_count[a];
    u32 k0 = kept.offsets[a], k1 = kept.offsets[a + 1];
    u64 limit = count_only && r.count_limit ? r.count_limit : ~0ull;
    for (u32 qi = lane; qi < qn; qi += 32) {
        u32 z = q0 + qi;
        if (fill && (z < z0 || z >= z1)) continue;
        double x[3];
        for (int d = 0; d < D; ++d) x[d] = (double)j.qry[d][z];
        double rq = zt_query_radius(r, z), r2 = rq * rq;
        u32 row = by_orig ? j.qorig[z] : z;
        u64 at = fill ? (u64)j.row_off[row] - j.base : 0, n = 0;
        for (u32 e = k0; e < k1 && n < limit; ++e) {
            u32 b = kept.items[e];
            double blo[3], bhi[3];
            zt_radius_box<T, D>(t.src_lo, t.src_hi, b, blo, bhi);
            if (m.box_min2(x, x, blo, bhi) > r2) continue;
            u32 s0 = t.src_start[b], sc = t.src_count[b];
            if (count_only && m.box_max2(x, x, blo, bhi) <= r2) {
                n += sc;
                continue;
            }
            for (u32 s = s0; s < s0 + sc; ++s) {
                double y[3];
                for (int d = 0; d < D; ++d) y[d] = (double)j.src[d][s];
                double d2 = m.dist2(x, y);
                if (d2 <= r2) {
                    if (fill) {
                        j.ent_j[at + n] = s;
                        j.ent_d2[at + n] = d2;
                        j.ent_row[at + n] = row;
                    }
                    ++n;
                }
            }
        }
        if (fill) continue;
        if (n > limit) n = limit;
        if (j.counts) j.counts[j.qorig[z]] = (i64)n;
        if (j.counts_z) j.counts_z[z] = (u32)n;
        if (n) atomicAdd(j.pairs, (unsigned long long)n);
    }
}

// ---- the entries: sort keys, the sorted lists, the sums ----

// keys[e] = row << 32 | the input index of entry e's source; vals[e] = e.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_radius_row_index_keys(const u32* ent_row, const u32* ent_j, const u32* src_orig, u32 n, u64* keys, u32* vals) {
    u32 e = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (e >= n) return;
    keys[e] = (u64)ent_row[e] << 32 | src_orig[ent_j[e]];
    vals[e] = e;
}
ZT_EXPORT(zt_radius_row_index_keys)

// keys[e] = the bits of entry vals[e]'s distance² (non-negative: they order as the values).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_radius_d2_keys(const double* ent_d2, const u32* vals, u32 n, u64* keys) {
    u32 e = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (e < n) keys[e] = zt_double_bits(ent_d2[vals[e]]);
}
ZT_EXPORT(zt_radius_d2_keys)

// keys[e] = entry vals[e]'s row.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_radius_row_keys(const u32* ent_row, const u32* vals, u32 n, u64* keys) {
    u32 e = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (e < n) keys[e] = ent_row[vals[e]];
}
ZT_EXPORT(zt_radius_row_keys)

// The lists in sorted order: source input indices, and distances² (d2 null: none).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_radius_gather_entries(const u32* vals, const u32* ent_j, const double* ent_d2, const u32* src_orig, u32 n, u32* idx, double* d2) {
    u32 e = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (e >= n) return;
    u32 v = vals[e];
    idx[e] = src_orig[ent_j[v]];
    if (d2) d2[e] = ent_d2[v];
}
ZT_EXPORT(zt_radius_gather_entries)

// The cubic spline of src/radius/mod.rs `sph_kernel`, operation for operation.
template <int D>
ZT_HD double zt_sph_kernel(double r, double h) {
    if (h <= 0.0 || r > h) return 0.0;
    const double pi = 3.141592653589793;
    double sigma = D == 2 ? 40.0 / (7.0 * pi) : 8.0 / pi;
    double q = r / h, u = 1.0 - q;
    double w = q <= 0.5 ? 1.0 - 6.0 * q * q + 6.0 * q * q * q : 2.0 * (u * u * u);
    double hd = D == 2 ? h * h : h * h * h;
    return sigma * w / hd;
}

// The sums of the queries z0 <= z < z1 (thread per query), from their entries sorted by
// source input index (vals: entry of each sorted slot): the scalar's sum and mean and the
// SPH density, from +0 in that order, into the outputs at the query's input index.
struct ZtRadSums {
    const u32* row_off;
    const u32* vals;
    const u32* ent_j;
    const double* ent_d2;
    const double* masses;
    const double* scalar;
    const u32* qorig;
    double* sum;
    double* mean;
    double* density;
    u64 base;
    u64 z_range;
};

template <int D>
__device__ void radius_sums(ZtRadSums s, ZtRadii r) {
    u32 z0 = (u32)s.z_range, z1 = (u32)(s.z_range >> 32);
    u32 z = z0 + blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z >= z1) return;
    u64 e0 = s.row_off[z] - s.base, e1 = s.row_off[z + 1] - s.base;
    double h = zt_query_radius(r, z), sum = 0.0, rho = 0.0;
    for (u64 e = e0; e < e1; ++e) {
        u32 v = s.vals[e], jj = s.ent_j[v];
        if (s.scalar) sum = sum + s.scalar[jj];
        if (s.density) rho = rho + (s.masses ? s.masses[jj] : 1.0) * zt_sph_kernel<D>(zt_sqrt(s.ent_d2[v]), h);
    }
    u32 i = s.qorig[z];
    if (s.scalar && s.sum) s.sum[i] = sum;
    if (s.scalar && s.mean) s.mean[i] = e1 == e0 ? zt_from_bits(0x7ff8000000000000ull) : sum / (double)(e1 - e0);
    if (s.density) s.density[i] = rho;
}

#define ZT_RADIUS(suffix, T, D)                                                                                                      \
    extern "C" __global__ void ZT_BOUNDS_2 zt_radius_decide_##suffix(ZtTree<T> t, ZtMetric<double, D> m, ZtRadii r, u32 child_first, \
                                                                     u32 child_len, ZtCands c, const u32* doff, u8* keep, u32* cnt) {  \
        radius_decide<T, D>(t, m, r, child_first, child_len, c, doff, keep, cnt);                                                    \
    }                                                                                                                                \
    ZT_EXPORT(zt_radius_decide_##suffix)                                                                                             \
    extern "C" __global__ void ZT_BOUNDS_2 zt_radius_leaf_##suffix(ZtTree<T> t, ZtMetric<double, D> m, ZtRadii r, ZtRadJob<T> j,     \
                                                                   u32 num_leaves, ZtLists kept) {                                   \
        radius_leaf<T, D>(t, m, r, j, num_leaves, kept);                                                                             \
    }                                                                                                                                \
    ZT_EXPORT(zt_radius_leaf_##suffix)
ZT_RADIUS(f32_2, float, 2)
ZT_RADIUS(f32_3, float, 3)
ZT_RADIUS(f64_2, double, 2)
ZT_RADIUS(f64_3, double, 3)

#define ZT_RADIUS_SUMS(D)                                                                                    \
    extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_radius_sums_##D(ZtRadSums s, ZtRadii r) { \
        radius_sums<D>(s, r);                                                                                \
    }                                                                                                        \
    ZT_EXPORT(zt_radius_sums_##D)
ZT_RADIUS_SUMS(2)
ZT_RADIUS_SUMS(3)

// out[qorig[z]] = counts_z[z]: the counts in the queries' input order.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_radius_counts_by_input(const u32* counts_z, const u32* qorig, u32 n, u32* out) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z < n) out[qorig[z]] = counts_z[z];
}
ZT_EXPORT(zt_radius_counts_by_input)

// out[i] = in[i] for i < n.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_radius_copy_u32(const u32* in, u32 n, u32* out) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) out[i] = in[i];
}
ZT_EXPORT(zt_radius_copy_u32)
