// The distribution layer's per-particle work on the device (src/backend/dist.rs
// `DistOps`, host side src/backend/cuda/dist.rs): key owners and histograms, rows grouped
// by destination rank, gathers and scatters of columns, the near-rank test of the ranks'
// ranges (interior cells, then the exact box distances), the kNN ball queries shipped from other ranks and the merge of their answers,
// and the FoF fragments. Each kernel is the twin of the CPU's loop in
// src/backend/cpu/dist.rs and gives the same bits.
#include "zt_block.cuh"
#include "zt_field.cuh"
#include "zt_geom.cuh"
#include "zt_walk.cuh"

#ifndef ZT_NONE
#define ZT_NONE 0xffffffffu
#endif

#define ZD_INDEX u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x

// ---- fills, casts, element-wise ----

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_fill4(u32* out, u32 n, u32 v) {
    ZD_INDEX;
    if (i < n) out[i] = v;
}
ZT_EXPORT(zd_fill4)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_fill8(u64* out, u32 n, u64 v) {
    ZD_INDEX;
    if (i < n) out[i] = v;
}
ZT_EXPORT(zd_fill8)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_sqrt_f32(const float* in, u32 n, float* out) {
    ZD_INDEX;
    if (i < n) out[i] = zt_sqrt(in[i]);
}
ZT_EXPORT(zd_sqrt_f32)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_sqrt_f64(const double* in, u32 n, double* out) {
    ZD_INDEX;
    if (i < n) out[i] = zt_sqrt(in[i]);
}
ZT_EXPORT(zd_sqrt_f64)

// offset + rows[i]: global indices of input rows.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_offset_rows(const u32* rows, u32 n, u64 offset, u64* out) {
    ZD_INDEX;
    if (i < n) out[i] = offset + rows[i];
}
ZT_EXPORT(zd_offset_rows)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_index_rows(const i64* idx, u32 n, u32* out) {
    ZD_INDEX;
    if (i < n) out[i] = (u32)idx[i];
}
ZT_EXPORT(zd_index_rows)

// ---- rows of columns ----

// Caller points at input rows, as one column of points (D values per point).
template <class T, int D>
ZT_HD void zd_gather_points(ZtStrided x, ZtStrided y, ZtStrided z, const u32* rows, u32 n, T* out) {
    ZD_INDEX;
    if (i >= n) return;
    ZtStrided a[3] = {x, y, z};
    for (int d = 0; d < D; ++d) out[(u64)i * D + d] = zt_raw<T>(a[d], rows[i]);
}
#define ZD_GATHER_POINTS(suffix, T, D)                                                                                           \
    extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_gather_points_##suffix(ZtStrided x, ZtStrided y, ZtStrided z,       \
                                                                                     const u32* rows, u32 n, T* out) {           \
        zd_gather_points<T, D>(x, y, z, rows, n, out);                                                                          \
    }                                                                                                                            \
    ZT_EXPORT(zd_gather_points_##suffix)
ZD_GATHER_POINTS(f32_2, float, 2)
ZD_GATHER_POINTS(f32_3, float, 3)
ZD_GATHER_POINTS(f64_2, double, 2)
ZD_GATHER_POINTS(f64_3, double, 3)

// out[j * w + e] = src[rows[j] * w + e], for 4- and 8-byte elements; one thread per element.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_gather4(const u32* src, const u32* rows, u32 n, u32 w, u32* out) {
    u64 t = (u64)blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (t >= (u64)n * w) return;
    u64 j = t / w, e = t % w;
    out[t] = src[(u64)rows[j] * w + e];
}
ZT_EXPORT(zd_gather4)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_gather8(const u64* src, const u32* rows, u32 n, u32 w, u64* out) {
    u64 t = (u64)blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (t >= (u64)n * w) return;
    u64 j = t / w, e = t % w;
    out[t] = src[(u64)rows[j] * w + e];
}
ZT_EXPORT(zd_gather8)

// out[rows[j] * w + e] = vals[j * w + e] (rows distinct).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_scatter4(u32* out, const u32* rows, u32 n, u32 w, const u32* vals) {
    u64 t = (u64)blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (t >= (u64)n * w) return;
    u64 j = t / w, e = t % w;
    out[(u64)rows[j] * w + e] = vals[t];
}
ZT_EXPORT(zd_scatter4)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_scatter8(u64* out, const u32* rows, u32 n, u32 w, const u64* vals) {
    u64 t = (u64)blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (t >= (u64)n * w) return;
    u64 j = t / w, e = t % w;
    out[(u64)rows[j] * w + e] = vals[t];
}
ZT_EXPORT(zd_scatter8)

// f32 values into a caller's f64 array (the C API's doubles), widened.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_scatter_wide(double* out, const u32* rows, u32 n, u32 w, const float* vals) {
    u64 t = (u64)blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (t >= (u64)n * w) return;
    u64 j = t / w, e = t % w;
    out[(u64)rows[j] * w + e] = (double)vals[t];
}
ZT_EXPORT(zd_scatter_wide)

// Caller ids (any integer type) at input rows, as i64.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_gather_ids(ZtField ids, const u32* rows, u32 n, i64* out) {
    ZD_INDEX;
    if (i < n) out[i] = zt_int(ids, rows[i]);
}
ZT_EXPORT(zd_gather_ids)

// The number of leading valid entries (>= 0) of each row of w indices.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_row_counts(const i64* idx, u32 nrows, u32 w, u32* counts) {
    ZD_INDEX;
    if (i >= nrows) return;
    u32 c = 0;
    while (c < w && idx[(u64)i * w + c] >= 0) c++;
    counts[i] = c;
}
ZT_EXPORT(zd_row_counts)

// The first counts[r] entries of each row r of w, at starts[r] (the counts' exclusive scan).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_compact4(const u32* v, const u32* counts, const u32* starts, u32 nrows, u32 w, u32* out) {
    u64 t = (u64)blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (t >= (u64)nrows * w) return;
    u64 r = t / w, e = t % w;
    if (e < counts[r]) out[starts[r] + e] = v[t];
}
ZT_EXPORT(zd_compact4)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_compact8(const u64* v, const u32* counts, const u32* starts, u32 nrows, u32 w, u64* out) {
    u64 t = (u64)blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (t >= (u64)nrows * w) return;
    u64 r = t / w, e = t % w;
    if (e < counts[r]) out[starts[r] + e] = v[t];
}
ZT_EXPORT(zd_compact8)

// ---- keys, owners, ranks ----

// For each interval s (shapes[3s] = lo, [3s + 1] = hi - 1, [3s + 2] = shift), the keys in
// [lo, hi) counted into bins bins of 2^shift keys.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_key_hist(const u64* keys, u32 n, const u64* shapes, u32 nshapes, u32 bins, u64* out) {
    ZD_INDEX;
    if (i >= n) return;
    u64 k = keys[i];
    for (u32 s = 0; s < nshapes; ++s) {
        u64 lo = shapes[3 * s], last = shapes[3 * s + 1];
        if (k >= lo && k <= last) atomicAdd(&out[(u64)s * bins + ((k - lo) >> shapes[3 * s + 2])], 1ull);
    }
}
ZT_EXPORT(zd_key_hist)

// The owner of each key: the number of starts[1..=p] at or below it (starts as (hi, lo)
// u64 pairs of the 128-bit starts).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_key_owner(const u64* keys, u32 n, const u64* starts, u32 p, u32* owner) {
    ZD_INDEX;
    if (i >= n) return;
    u64 k = keys[i];
    u32 lo = 0, hi = p;
    while (lo < hi) {
        u32 mid = (lo + hi) / 2;
        bool at_or_below = starts[2 * mid] == 0 && starts[2 * mid + 1] <= k;
        if (at_or_below) lo = mid + 1;
        else hi = mid;
    }
    owner[i] = lo;
}
ZT_EXPORT(zd_key_owner)

// Sort keys (dest << 32 | row) with the rows, and the count per destination.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_dest_keys(const u32* dest, u32 n, u64* keys, u32* rows, u32* counts) {
    ZD_INDEX;
    if (i >= n) return;
    u32 d = dest[i];
    keys[i] = (u64)d << 32 | i;
    rows[i] = i;
    atomicAdd(&counts[d], 1u);
}
ZT_EXPORT(zd_dest_keys)

// src/geom/decomp.rs `Decomp::near_ranks` on the device, the same operations in the same
// order: which ranks other than the owner may hold a point within the radius of each row's
// point. The ranges' starts (128-bit, as (hi, lo) pairs), the boxes covering each rank's
// range (lo[D] then hi[D] per box; rank r's are boxes[box_at[r] .. box_at[r + 1]]), the
// interior table and the quantiser.
struct ZdRanges {
    const u64* starts;
    const u32* box_at;
    const double* boxes;
    const u8* interior;
    ZtQuant q;
    double len[3];
    double half_box;
    double max_r;
    double span;
    double eps;
    u32 ranks;
    u32 shift;
    u32 periodic;
    u32 owner;
};

typedef unsigned __int128 u128;

ZT_HD u128 zd_start(const ZdRanges& g, u32 r) { return (u128)g.starts[2 * r] << 64 | g.starts[2 * r + 1]; }

// The first r in [0, ranks) with starts[r + 1] > k (`starts[1..].partition_point(|s| s <= k)`),
// and with `strict`, starts[r + 1] >= k (`partition_point(|s| s < k)`).
ZT_HD u32 zd_partition(const ZdRanges& g, u128 k, bool strict) {
    u32 lo = 0, hi = g.ranks;
    while (lo < hi) {
        u32 mid = (lo + hi) / 2;
        u128 s = zd_start(g, mid + 1);
        if (strict ? s < k : s <= k) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

template <int D>
ZT_HD double zd_box_dist2(const ZdRanges& g, const double* p, const double* b) {
    double s = 0.0;
    for (int d = 0; d < D; ++d) {
        double lo = b[d], hi = b[D + d];
        double x = p[d];
        double gap = fmax(fmax(lo - x, x - hi), 0.0);
        if (g.periodic) {
            double l = g.len[d];
            double x1 = x - l, x2 = x + l;
            gap = fmin(fmin(gap, fmax(fmax(lo - x1, x1 - hi), 0.0)), fmax(fmax(lo - x2, x2 - hi), 0.0));
        }
        s += gap * gap;
    }
    return s;
}

template <int D>
ZT_HD u64 zd_cells_morton(const u64* c) {
    return D == 2 ? zt_spread2(c[0]) << 1 | zt_spread2(c[1]) : zt_spread3(c[0]) << 2 | zt_spread3(c[1]) << 1 | zt_spread3(c[2]);
}

// Visits every rank near point p (key `key`, radius `radius`): `f(rank)` in rank order.
template <int D, class F>
ZT_HD void zd_near_ranks(const ZdRanges& g, const double* p, u64 key, double radius, F f) {
    if (g.ranks == 1) return;
    double r = radius * (1.0 + 1e-9);
    if (r <= g.max_r && g.interior[key >> g.shift]) return;
    const int bits = D == 2 ? 32 : 21;
    const long long max_cell = (1ll << bits) - 1;
    long long qlo[3] = {0, 0, 0}, qhi[3] = {0, 0, 0};
    bool wraps = !(r < g.half_box);
    for (int d = 0; d < D; ++d) {
        double lo = floor((p[d] - r - g.q.lo[d]) * g.q.scale[d] - 2.0);
        double hi = floor((p[d] + r - g.q.lo[d]) * g.q.scale[d] + 2.0);
        // Finite: x - x is 0 (NaN for infinities and NaN).
        if (!(lo - lo == 0.0 && hi - hi == 0.0)) {
            wraps = true;
            break;
        }
        const double big = (double)(1ll << 62);
        long long l = (long long)fmax(lo, -big), h = (long long)fmin(hi, big);
        if (g.periodic) {
            wraps |= l < 0 || h > max_cell;
        } else {
            l = l < 0 ? 0 : (l > max_cell ? max_cell : l);
            h = h < 0 ? 0 : (h > max_cell ? max_cell : h);
        }
        qlo[d] = l;
        qhi[d] = h;
    }
    u32 cand_lo = 0, cand_hi = g.ranks - 1;
    if (!wraps) {
        u32 lev = 0;
        for (int d = 0; d < D; ++d) {
            u64 span = (u64)(qhi[d] - qlo[d]);
            u32 bl = span == 0 ? 0 : 64 - __clzll((long long)span);
            lev = bl > lev ? bl : lev;
        }
        u64 lc[3], hc[3];
        for (int d = 0; d < D; ++d) {
            lc[d] = (u64)qlo[d] >> lev;
            hc[d] = (u64)qhi[d] >> lev;
        }
        u32 sh = D * lev;
        u128 klo = sh >= 128 ? 0 : (u128)zd_cells_morton<D>(lc) << sh;
        u128 khi = sh >= 128 ? 0 : ((u128)zd_cells_morton<D>(hc) + 1) << sh;
        if (klo >= zd_start(g, g.owner) && khi <= zd_start(g, g.owner + 1)) return;
        cand_lo = zd_partition(g, klo, false);
        u32 c = zd_partition(g, khi, true);
        cand_hi = c < g.ranks - 1 ? c : g.ranks - 1;
    }
    double r2 = r * r;
    for (u32 s = cand_lo; s <= cand_hi; ++s) {
        if (s == g.owner) continue;
        for (u32 b = g.box_at[s]; b < g.box_at[s + 1]; ++b) {
            if (zd_box_dist2<D>(g, p, g.boxes + (u64)2 * D * b) <= r2) {
                f(s);
                break;
            }
        }
    }
}

// Per row: its point, the radius (fixed, or widened from the squared radius as
// `widened_radius`), then the near ranks: counted (pass 0, into counts) or written as
// (rank << 32 | row) at at[row] (pass 1).
template <class T, int D>
ZT_HD void zd_near(const T* pos, const u64* keys, u32 n, const T* r2, double fixed, ZdRanges g, u32 pass, u32* counts, const u32* at, u64* pairs) {
    ZD_INDEX;
    if (i >= n) return;
    double p[3];
    for (int d = 0; d < D; ++d) p[d] = (double)pos[(u64)i * D + d];
    double radius = fixed;
    if (r2) {
        double mag = g.span;
        for (int d = 0; d < D; ++d) mag = fmax(mag, fabs(p[d]));
        radius = sqrt((double)r2[i]) * (1.0 + 64.0 * g.eps) + 64.0 * g.eps * mag;
    }
    u32 c = 0;
    zd_near_ranks<D>(g, p, keys[i], radius, [&](u32 s) {
        if (pass == 1) pairs[at[i] + c] = (u64)s << 32 | i;
        c++;
    });
    if (pass == 0) counts[i] = c;
}

#define ZD_NEAR_RANKS(suffix, T, D)                                                                                               \
    extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_near_##suffix(const T* pos, const u64* keys, u32 n, const T* r2,    \
                                                                            double fixed, ZdRanges g, u32 pass, u32* counts,      \
                                                                            const u32* at, u64* pairs) {                          \
        zd_near<T, D>(pos, keys, n, r2, fixed, g, pass, counts, at, pairs);                                                      \
    }                                                                                                                             \
    ZT_EXPORT(zd_near_##suffix)
ZD_NEAR_RANKS(f32_2, float, 2)
ZD_NEAR_RANKS(f32_3, float, 3)
ZD_NEAR_RANKS(f64_2, double, 2)
ZD_NEAR_RANKS(f64_3, double, 3)

// Row and rank of each pair (rank << 32 | row), and the count per rank.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_pair_rows(const u64* pairs, u32 n, u32* rows, u32* counts) {
    ZD_INDEX;
    if (i >= n) return;
    rows[i] = (u32)(pairs[i] & 0xffffffffull);
    atomicAdd(&counts[(u32)(pairs[i] >> 32)], 1u);
}
ZT_EXPORT(zd_pair_rows)

// The rows with a flag, in order: out[at[i]] = i where flags[i] (at: the flags' scan).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_compact_flagged(const u32* flags, const u32* at, u32 n, u32* out) {
    ZD_INDEX;
    if (i < n && flags[i]) out[at[i]] = i;
}
ZT_EXPORT(zd_compact_flagged)

// ---- kNN: queries from other ranks against this rank's tree ----

// Each node's parent (the super nodes: themselves).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_parents(const u32* child_start, const u32* child_count, u32 n_nodes, u32* parent) {
    ZD_INDEX;
    if (i >= n_nodes) return;
    u32 c0 = child_start[i], cn = child_count[i];
    for (u32 c = c0; c < c0 + cn; ++c) parent[c] = i;
}
ZT_EXPORT(zd_parents)

// A candidate of a query's list: (distance², source index) with `own` first among equal
// distances, then by index.
template <class T>
ZT_HD bool zd_before(T da, u64 a, T db, u64 b, u64 own) {
    if (da != db) return da < db;
    bool na = a != own, nb = b != own;
    if (na != nb) return !na;
    return a < b;
}

template <class T>
struct ZdBall {
    ZtTree<T> t;
    const u32* parent;
    u32 top_first;
    u32 top_len;
    const T* src[3];
    const u32* orig;
    const T* q;
    const T* r2;
    const u32* first;
    u32 nq;
    u32 k;
    i64* idx;
    T* d2;
};

// One query per thread: a descent from every super node opening each node whose box lies
// within the radius, without a stack (from a node: its first child when opened, else its
// next sibling, else up); every source within the radius offered to the row's k best
// (src/backend/cpu/knn.rs `ball_query`, which the order of visits cannot change: the
// order of the list is total).
template <class T, int D>
ZT_HD void zd_ball(const ZdBall<T>& j, ZtMetric<T, D> m) {
    ZD_INDEX;
    if (i >= j.nq) return;
    T p[D];
    for (int d = 0; d < D; ++d) p[d] = j.q[(u64)i * D + d];
    T r = j.r2[i];
    u64 own = j.first ? (u64)j.first[i] : ~0ull;
    i64* ri = j.idx + (u64)i * j.k;
    T* rd = j.d2 + (u64)i * j.k;
    u32 held = 0;
    for (u32 s = j.top_first; s < j.top_first + j.top_len; ++s) {
        u32 n = s;
        for (;;) {
            bool open = j.t.src_count[n] > 0 && m.box_min2(p, p, j.t.src_lo + (u64)D * n, j.t.src_hi + (u64)D * n) <= r;
            if (open && j.t.child_count[n] > 0) {
                n = j.t.child_start[n];
                continue;
            }
            if (open) {
                u32 z0 = j.t.src_start[n], zn = j.t.src_count[n];
                for (u32 z = z0; z < z0 + zn; ++z) {
                    T sp[D];
                    for (int d = 0; d < D; ++d) sp[d] = j.src[d][z];
                    T dd = m.dist2(p, sp);
                    if (!(dd <= r)) continue;
                    u64 o = j.orig[z];
                    if (held == j.k && !zd_before(dd, o, rd[held - 1], (u64)ri[held - 1], own)) continue;
                    u32 at = held < j.k ? held++ : held - 1;
                    while (at > 0 && zd_before(dd, o, rd[at - 1], (u64)ri[at - 1], own)) {
                        rd[at] = rd[at - 1];
                        ri[at] = ri[at - 1];
                        at--;
                    }
                    rd[at] = dd;
                    ri[at] = (i64)o;
                }
            }
            // The next node: a later sibling, else up until one has one, else done.
            bool next = false;
            while (n != s) {
                u32 par = j.parent[n];
                if (n + 1 < j.t.child_start[par] + j.t.child_count[par]) {
                    n = n + 1;
                    next = true;
                    break;
                }
                n = par;
            }
            if (!next) break;
        }
    }
}

#define ZD_BALL(suffix, T, D)                                                                                         \
    extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_ball_##suffix(ZdBall<T> j, ZtMetric<T, D> m) { zd_ball<T, D>(j, m); } \
    ZT_EXPORT(zd_ball_##suffix)
ZD_BALL(f32_2, float, 2)
ZD_BALL(f32_3, float, 3)
ZD_BALL(f64_2, double, 2)
ZD_BALL(f64_3, double, 3)

// ---- kNN: the merge on a query's owner ----

template <class T>
struct ZdMerge {
    u32 nb;
    u32 k;
    const u32* boundary;
    const i64* own_idx;
    const T* own_d2;
    // Per boundary query, its pairs (CSR: pairs[pair_start[b] .. pair_start[b + 1]]), and
    // per pair where its candidates start and how many there are.
    const u32* pair_start;
    const u32* pairs;
    const u32* entry_at;
    const u32* reply_counts;
    const T* reply_d2;
    const u64* reply_gidx;
    const double* reply_mass;
    const double* reply_scalar;
    const u64* gidx;
    const double* mass;
    const double* scalar;
    u32 self_query;
    // Scratch: k per boundary query.
    T* sd2;
    u64* sg;
    double* sm;
    double* ss;
    // The completed rows (own queries' order; lists and reductions may be absent).
    T* kth_d2;
    double* density;
    double* smean;
    i64* idx;
    T* d2;
};

template <class T>
ZT_HD void zd_offer(const ZdMerge<T>& j, u64 b, u32* held, u64 me, T d, u64 g, double m, double s) {
    u32 k = j.k;
    T* sd = j.sd2 + b * k;
    u64* sg = j.sg + b * k;
    double* sm = j.sm + b * k;
    double* ss = j.ss + b * k;
    if (*held == k && !zd_before(d, g, sd[k - 1], sg[k - 1], me)) return;
    u32 at = *held < k ? (*held)++ : k - 1;
    while (at > 0 && zd_before(d, g, sd[at - 1], sg[at - 1], me)) {
        sd[at] = sd[at - 1];
        sg[at] = sg[at - 1];
        sm[at] = sm[at - 1];
        ss[at] = ss[at - 1];
        at--;
    }
    sd[at] = d;
    sg[at] = g;
    sm[at] = m;
    ss[at] = s;
}

// One boundary query per thread: its own k best and its candidates from other ranks, the
// k best by (distance², not itself, global index), then the k-th distance, the lists and
// the reductions as src/knn/reduce.rs computes them (sums in list order from -0.0).
template <class T, int D>
ZT_HD void zd_merge(const ZdMerge<T>& j) {
    ZD_INDEX;
    if (i >= j.nb) return;
    u64 b = i;
    u32 q = j.boundary[i], k = j.k;
    u64 me = j.self_query ? j.gidx[q] : ~0ull;
    u32 held = 0;
    for (u32 e = 0; e < k; ++e) {
        i64 u = j.own_idx[b * k + e];
        if (u < 0) continue;
        zd_offer(j, b, &held, me, j.own_d2[b * k + e], j.gidx[u], j.mass ? j.mass[u] : 0.0, j.scalar ? j.scalar[u] : 0.0);
    }
    for (u32 pp = j.pair_start[i]; pp < j.pair_start[i + 1]; ++pp) {
        u32 pr = j.pairs[pp];
        for (u32 e = j.entry_at[pr]; e < j.entry_at[pr] + j.reply_counts[pr]; ++e)
            zd_offer(j, b, &held, me, j.reply_d2[e], j.reply_gidx[e], j.reply_mass ? j.reply_mass[e] : 0.0, j.reply_scalar ? j.reply_scalar[e] : 0.0);
    }
    const T* sd = j.sd2 + b * k;
    T kth2 = held == k ? sd[k - 1] : zt_inf<T>();
    j.kth_d2[q] = kth2;
    if (j.idx) {
        for (u32 e = 0; e < k; ++e) {
            j.idx[(u64)q * k + e] = e < held ? (i64)j.sg[b * k + e] : -1;
            j.d2[(u64)q * k + e] = e < held ? sd[e] : zt_inf<T>();
        }
    }
    if (j.density) {
        double num = (double)held;
        if (j.mass) {
            num = -0.0;
            for (u32 e = 0; e < held; ++e) num = num + j.sm[b * k + e];
        }
        double r = (double)zt_sqrt(kth2);
        const double pi = 3.14159265358979323846;
        double vol = D == 2 ? pi * r * r : 4.0 / 3.0 * pi * r * r * r;
        j.density[q] = held < k ? 0.0 : num / vol;
    }
    if (j.smean) {
        double s = -0.0;
        for (u32 e = 0; e < held; ++e) s = s + j.ss[b * k + e];
        j.smean[q] = s / (double)held;
    }
}

#define ZD_MERGE(suffix, T, D)                                                                                  \
    extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_merge_##suffix(ZdMerge<T> j) { zd_merge<T, D>(j); } \
    ZT_EXPORT(zd_merge_##suffix)
ZD_MERGE(f32_2, float, 2)
ZD_MERGE(f32_3, float, 3)
ZD_MERGE(f64_2, double, 2)
ZD_MERGE(f64_3, double, 3)

// Local source indices of the rows not marked in skip replaced by their global indices.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_globalize(i64* idx, u32 nrows, u32 w, const u64* gidx, const u8* skip) {
    u64 t = (u64)blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (t >= (u64)nrows * w) return;
    if (skip[t / w]) return;
    i64 v = idx[t];
    if (v >= 0) idx[t] = (i64)gidx[v];
}
ZT_EXPORT(zd_globalize)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_mark(const u32* rows, u32 n, u8* marks) {
    ZD_INDEX;
    if (i < n) marks[rows[i]] = 1;
}
ZT_EXPORT(zd_mark)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_marked_flags(const u8* marks, u32 n, u32* flags) {
    ZD_INDEX;
    if (i < n) flags[i] = marks[i];
}
ZT_EXPORT(zd_marked_flags)

// ---- FoF: fragments ----

// first[root] = the smallest z of the group's owned points (first: NONE beforehand).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_frag_first(const u32* orig, const u32* roots, u32 nu, u32 n_own, u32* first) {
    ZD_INDEX;
    if (i < nu && orig[i] < n_own) atomicMin(&first[roots[i]], i);
}
ZT_EXPORT(zd_frag_first)

// flags[z] = 1 where z is its fragment's first owned point.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_frag_starts(const u32* orig, const u32* roots, u32 nu, u32 n_own, const u32* first, u32* flags) {
    ZD_INDEX;
    if (i < nu) flags[i] = orig[i] < n_own && first[roots[i]] == i;
}
ZT_EXPORT(zd_frag_starts)

// Each owned point's fragment (at: the starts' scan), and each ghost's (NONE when its
// group holds no owned point), by local row.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_frag_of(const u32* orig, const u32* roots, u32 nu, u32 n_own, const u32* first, const u32* at,
                                                                  u32* frag_of, u32* ghost_frag) {
    ZD_INDEX;
    if (i >= nu) return;
    u32 f = first[roots[i]];
    u32 fr = f == ZT_NONE ? ZT_NONE : at[f];
    u32 o = orig[i];
    if (o < n_own) frag_of[o] = fr;
    else ghost_frag[o - n_own] = fr;
}
ZT_EXPORT(zd_frag_of)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_not_none(const u32* v, u32 n, u32* flags) {
    ZD_INDEX;
    if (i < n) flags[i] = v[i] != ZT_NONE;
}
ZT_EXPORT(zd_not_none)

// Per fragment: member count and smallest tag (count zeroed, min_tag INT64_MAX beforehand).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_frag_sums(const u32* frag_of, const i64* tag, u32 n, u64* count, i64* min_tag) {
    ZD_INDEX;
    if (i >= n) return;
    u32 f = frag_of[i];
    atomicAdd(&count[f], 1ull);
    atomicMin(&min_tag[f], tag[i]);
}
ZT_EXPORT(zd_frag_sums)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_frag_labels(const u64* count, const i64* tag, u32 n, u64 min, i64* label) {
    ZD_INDEX;
    if (i < n) label[i] = count[i] >= min ? tag[i] : -1;
}
ZT_EXPORT(zd_frag_labels)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_count_flags(const u64* count, u32 n, u64 min, u32* flags) {
    ZD_INDEX;
    if (i < n) flags[i] = count[i] >= min;
}
ZT_EXPORT(zd_count_flags)

// Sort keys (group << 32 | point) of the points in a group, at at[p] (the flags' scan),
// and the count per group.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_group_keys(const u32* group_of, const u32* at, u32 n, u64* keys, u32* pts, u32* counts) {
    ZD_INDEX;
    if (i >= n) return;
    u32 g = group_of[i];
    if (g == ZT_NONE) return;
    keys[at[i]] = (u64)g << 32 | i;
    pts[at[i]] = i;
    atomicAdd(&counts[g], 1u);
}
ZT_EXPORT(zd_group_keys)

// The row of sorted (ascending) holding each value (the first at or above it).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zd_find_rows(const u64* sorted, u32 n, const u64* values, u32 m, u32* rows) {
    ZD_INDEX;
    if (i >= m) return;
    u64 v = values[i];
    u32 lo = 0, hi = n;
    while (lo < hi) {
        u32 mid = (lo + hi) / 2;
        if (sorted[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    rows[i] = lo;
}
ZT_EXPORT(zd_find_rows)
