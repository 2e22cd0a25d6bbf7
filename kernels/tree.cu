// Plane construction on the device (src/backend/cpu/tree.rs): the split capacity of every
// gap (its Morton cell = the run between the nearest strictly higher levels on either
// side, found through a max pyramid over the levels), the splits of each plane by stream
// compaction, per-node statistics for the regularisation cap (decided on the host from
// node-sized data), and the node arrays of each plane with their bounds. Every node's
// bounds are reduced in point (child) order with the CPU's fmin/fmax, so the nodes are the
// CPU's bit for bit.
#include "zt_walk.cuh"

// Fan-out of the max pyramid over the gap levels.
#define ZT_PYR 256
#define ZT_PYR_DEPTH 5

// Level k of the pyramid holds the maxima of blocks of ZT_PYR entries of level k - 1
// (level 0: the gap levels); the top level has at most ZT_PYR entries.
struct ZtPyr {
    const u8* lv[ZT_PYR_DEPTH];
    u32 len[ZT_PYR_DEPTH];
    u32 depth;
};

// out[j] = the largest of in[j * ZT_PYR ..] (a block of the level below).
extern "C" __global__ void ZT_BOUNDS_2 zt_pyr_max(const u8* in, u32 m, u8* out) {
    u32 j = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (j >= (m + ZT_PYR - 1) / ZT_PYR) return;
    u32 e = j * ZT_PYR + ZT_PYR < m ? j * ZT_PYR + ZT_PYR : m;
    u8 v = 0;
    for (u32 i = j * ZT_PYR; i < e; ++i) v = in[i] > v ? in[i] : v;
    out[j] = v;
}
ZT_EXPORT(zt_pyr_max)

// The nearest gap to the left (dir = -1) or right (+1) of gap i whose level exceeds L;
// -1 when there is none. Searches i's block, then the blocks' maxima one level up, and so
// on; then descends into the block found, taking its nearest entry each time.
ZT_HD long long zt_nearest_greater(ZtPyr p, u32 i, u8 L, int dir) {
    long long pos = i;
    u32 k = 0;
    for (;;) {
        bool top = k + 1 >= p.depth;
        long long lo = top ? 0 : (pos / ZT_PYR) * ZT_PYR;
        long long hi = top ? (long long)p.len[k] : lo + ZT_PYR;
        if (hi > (long long)p.len[k]) hi = p.len[k];
        long long found = -1;
        if (dir < 0) {
            for (long long j = pos - 1; j >= lo; --j)
                if (p.lv[k][j] > L) {
                    found = j;
                    break;
                }
        } else {
            for (long long j = pos + 1; j < hi; ++j)
                if (p.lv[k][j] > L) {
                    found = j;
                    break;
                }
        }
        if (found >= 0) {
            while (k > 0) {
                --k;
                long long b0 = found * ZT_PYR, b1 = b0 + ZT_PYR < (long long)p.len[k] ? b0 + ZT_PYR : (long long)p.len[k];
                if (dir < 0) {
                    for (long long j = b1 - 1; j >= b0; --j)
                        if (p.lv[k][j] > L) {
                            found = j;
                            break;
                        }
                } else {
                    for (long long j = b0; j < b1; ++j)
                        if (p.lv[k][j] > L) {
                            found = j;
                            break;
                        }
                }
            }
            return found;
        }
        if (top) return -1;
        pos /= ZT_PYR;
        ++k;
    }
}

// The point counts by type of merged points [a, b): src_prefix null when every point is
// both a source and a query.
ZT_HD void zt_type_counts(const u32* src_prefix, u32 a, u32 b, u32* s, u32* q) {
    if (!src_prefix) {
        *s = *q = b - a;
        return;
    }
    *s = src_prefix[b] - src_prefix[a];
    *q = (b - a) - *s;
}

// caps[i]: the smallest plane capacity that does not split gap i by counts (cpu/tree.rs
// `split_caps`).
extern "C" __global__ void ZT_BOUNDS_2 zt_split_caps(ZtPyr p, const u32* src_prefix, u64 leaf, u64 coarsening, u32* caps) {
    u32 m = p.len[0], i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i >= m) return;
    u8 L = p.lv[0][i];
    long long l = zt_nearest_greater(p, i, L, -1), r = zt_nearest_greater(p, i, L, 1);
    u32 a = (u32)(l + 1), b = r < 0 ? m : (u32)r;
    u32 s, q;
    zt_type_counts(src_prefix, a, b + 1, &s, &q);
    u64 count = s > q ? s : q;
    if (L != 0 || count <= leaf) {
        caps[i] = count < 0xffffffffull ? (u32)count : 0xffffffffu;
        return;
    }
    // Identical keys: split every n_p points from the run start, for n_p < run size.
    u64 total = (u64)b + 1 - a, t = (u64)i + 1 - a, np = leaf, best = 0;
    while (np < total && t % np == 0) {
        best = np + 1;
        np = np > 0xffffffffffffffffull / coarsening ? 0xffffffffffffffffull : np * coarsening;
    }
    caps[i] = (u32)best;
}
ZT_EXPORT(zt_split_caps)

// Whether gap x splits the plane: by counts, or by level above the regularisation limit.
ZT_HD bool zt_splits(const u32* caps, const u8* levels, u64 capacity, u32 lim, u32 x) {
    return (u64)caps[x] > capacity || (u32)levels[x] > lim;
}

// flags[i] = whether gap idx[i] (i itself when idx is null) splits the plane.
extern "C" __global__ void ZT_BOUNDS_2
    zt_split_flags(const u32* idx, u32 len, const u32* caps, const u8* levels, u64 capacity, u32 lim, u32* flags) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < len) flags[i] = zt_splits(caps, levels, capacity, lim, idx ? idx[i] : i);
}
ZT_EXPORT(zt_split_flags)

// The splitting gaps, ascending, at out[offsets[i]].
extern "C" __global__ void ZT_BOUNDS_2
    zt_split_scatter(const u32* idx, u32 len, const u32* caps, const u8* levels, u64 capacity, u32 lim, const u32* offsets, u32* out) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i >= len) return;
    u32 x = idx ? idx[i] : i;
    if (zt_splits(caps, levels, capacity, lim, x)) out[offsets[i]] = x;
}
ZT_EXPORT(zt_split_scatter)

// Node j of a plane over n merged points with splits[0 .. nsplit): points [a, b).
ZT_HD void zt_node_range(const u32* splits, u32 nsplit, u32 n, u32 j, u32* a, u32* b) {
    *a = j == 0 ? 0 : splits[j - 1] + 1;
    *b = j == nsplit ? n : splits[j] + 1;
}

// The largest of levels [lo, hi) of the pyramid's level 0 (0 when empty), a warp together:
// the partial blocks at each end, then the whole blocks between them one level up. Every
// lane gets it; every lane must call it.
ZT_HD u32 zt_warp_range_max(ZtPyr p, u32 lo, u32 hi) {
    u32 lane = zt_lane(), v = 0;
    for (u32 k = 0; lo < hi; ++k) {
        const u8* lv = p.lv[k];
        u32 lo_up = (lo + ZT_PYR - 1) / ZT_PYR * ZT_PYR, hi_dn = hi / ZT_PYR * ZT_PYR;
        if (k + 1 >= p.depth || lo_up >= hi_dn) {
            for (u32 i = lo + lane; i < hi; i += 32) v = lv[i] > v ? lv[i] : v;
            break;
        }
        for (u32 i = lo + lane; i < lo_up; i += 32) v = lv[i] > v ? lv[i] : v;
        for (u32 i = hi_dn + lane; i < hi; i += 32) v = lv[i] > v ? lv[i] : v;
        lo = lo_up / ZT_PYR;
        hi = hi_dn / ZT_PYR;
    }
    for (int o = 16; o > 0; o >>= 1) {
        u32 w = __shfl_xor_sync(0xffffffffu, v, o);
        v = w > v ? w : v;
    }
    return v;
}

// For the regularisation cap: per node, the primary bit length of its cell (the largest
// gap level inside it, less 64) and its point count (warp per node; the largest level
// through the pyramid, so a node of millions of points costs a warp no more than ~30
// steps). With `hist`, the nodes are counted per (g, count) instead: hist[g * (cmax + 1) +
// count] (g <= 64), and hist[65 * (cmax + 1)] set when a count exceeds cmax.
extern "C" __global__ void ZT_BOUNDS_2
    zt_node_cells(ZtPyr p, const u32* splits, u32 nsplit, u32 n, u32* g, u32* count, u32* hist, u32 cmax) {
    u32 j = zt_grid_warp(), lane = zt_lane();
    if (j > nsplit) return;
    u32 a, b;
    zt_node_range(splits, nsplit, n, j, &a, &b);
    u32 v = zt_warp_range_max(p, a, b - 1);
    if (lane == 0) {
        u32 gj = v > 64 ? v - 64 : 0, c = b - a;
        if (!hist) {
            g[j] = gj;
            count[j] = c;
        } else if (c <= cmax) {
            atomicAdd(&hist[gj * (cmax + 1) + c], 1u);
        } else {
            hist[65 * (cmax + 1)] = 1u;
        }
    }
}
ZT_EXPORT(zt_node_cells)

// The node arrays of one plane (struct of arrays, this plane's part).
template <class T>
struct ZtPlaneOut {
    u32* start;
    u32* src_start;
    u32* src_count;
    u32* qry_start;
    u32* qry_count;
    T* src_lo;
    T* src_hi;
    T* qry_lo;
    T* qry_hi;
    u32* child_start;
    u32* child_count;
};

// The plane below (len 0 for the leaves): its first node, and its own start and box arrays.
template <class T>
struct ZtBelow {
    const u32* start;
    const T* src_lo;
    const T* src_hi;
    const T* qry_lo;
    const T* qry_hi;
    u32 first;
    u32 len;
};

// Empty box: lo = +inf, hi = -inf (cpu/tree.rs `points_box` / `union_box`).
template <class T, int D>
ZT_HD void zt_empty_box(T* lo, T* hi) {
    for (int d = 0; d < D; ++d) {
        lo[d] = zt_inf<T>();
        hi[d] = -zt_inf<T>();
    }
}

// The smallest c in [0, len) with start[c] >= x (`partition_point(|s| s < x)`).
ZT_HD u32 zt_partition(const u32* start, u32 len, u32 x) {
    u32 lo = 0, hi = len;
    while (lo < hi) {
        u32 mid = lo + (hi - lo) / 2;
        if (start[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

// Node j of the plane (thread per node): its ranges by type, its bounds (the leaves' from
// their points, in point order; upper nodes' from their children, in child order) and its
// children.
template <class T, int D>
__device__ void plane_nodes(const u32* splits, u32 nsplit, u32 n, const u32* src_prefix, const T* const* spos, const T* const* qpos,
                            ZtBelow<T> below, ZtPlaneOut<T> out) {
    u32 j = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (j > nsplit) return;
    u32 a, b;
    zt_node_range(splits, nsplit, n, j, &a, &b);
    u32 ss = src_prefix ? src_prefix[a] : a, qs = src_prefix ? a - src_prefix[a] : a, sc, qc;
    zt_type_counts(src_prefix, a, b, &sc, &qc);
    out.start[j] = a;
    out.src_start[j] = ss;
    out.src_count[j] = sc;
    out.qry_start[j] = qs;
    out.qry_count[j] = qc;
    T sl[3], sh[3], ql[3], qh[3];
    zt_empty_box<T, D>(sl, sh);
    zt_empty_box<T, D>(ql, qh);
    u32 c0 = 0, c1 = 0;
    if (below.len == 0) {
        for (int d = 0; d < D; ++d) {
            for (u32 z = ss; z < ss + sc; ++z) {
                sl[d] = zt_fmin(sl[d], spos[d][z]);
                sh[d] = zt_fmax(sh[d], spos[d][z]);
            }
            for (u32 z = qs; z < qs + qc; ++z) {
                ql[d] = zt_fmin(ql[d], qpos[d][z]);
                qh[d] = zt_fmax(qh[d], qpos[d][z]);
            }
        }
    } else {
        c0 = zt_partition(below.start, below.len, a);
        c1 = zt_partition(below.start, below.len, b);
        for (u32 c = c0; c < c1; ++c)
            for (int d = 0; d < D; ++d) {
                sl[d] = zt_fmin(sl[d], below.src_lo[D * c + d]);
                sh[d] = zt_fmax(sh[d], below.src_hi[D * c + d]);
                ql[d] = zt_fmin(ql[d], below.qry_lo[D * c + d]);
                qh[d] = zt_fmax(qh[d], below.qry_hi[D * c + d]);
            }
    }
    for (int d = 0; d < D; ++d) {
        out.src_lo[D * j + d] = sl[d];
        out.src_hi[D * j + d] = sh[d];
        out.qry_lo[D * j + d] = ql[d];
        out.qry_hi[D * j + d] = qh[d];
    }
    out.child_start[j] = below.len == 0 ? 0 : below.first + c0;
    out.child_count[j] = c1 - c0;
}

// Positions by dimension (null past D).
template <class T>
struct ZtPos {
    const T* p[3];
};

#define ZT_PLANE(suffix, T, D)                                                                                                       \
    extern "C" __global__ void ZT_BOUNDS_2                                                                           \
        zt_plane_nodes_##suffix(const u32* splits, u32 nsplit, u32 n, const u32* src_prefix, ZtPos<T> spos, ZtPos<T> qpos,          \
                                ZtBelow<T> below, ZtPlaneOut<T> out) {                                                               \
        plane_nodes<T, D>(splits, nsplit, n, src_prefix, spos.p, qpos.p, below, out);                                               \
    }                                                                                                                                \
    ZT_EXPORT(zt_plane_nodes_##suffix)
ZT_PLANE(f32_2, float, 2)
ZT_PLANE(f32_3, float, 3)
ZT_PLANE(f64_2, double, 2)
ZT_PLANE(f64_3, double, 3)

// Many word copies in one launch (the planes' arrays into the tree's, the top plane into
// one buffer for the host): row s of `table` is (src, dst, words, first block), and a
// block copies ZT_SEG_WORDS words of the row it falls in (the last row whose first block
// is not after it; rows of no words have no blocks).
#define ZT_SEG_WORDS (ZT_BLOCK * 4)
extern "C" __global__ void ZT_BOUNDS_2 zt_copy_segments(const u64* table, u32 nseg) {
    u32 lo = 0, hi = nseg - 1;
    while (lo < hi) {
        u32 mid = lo + (hi - lo + 1) / 2;
        if (table[4 * mid + 3] <= blockIdx.x)
            lo = mid;
        else
            hi = mid - 1;
    }
    const u32* src = (const u32*)table[4 * lo];
    u32* dst = (u32*)table[4 * lo + 1];
    u64 words = table[4 * lo + 2], base = (u64)(blockIdx.x - table[4 * lo + 3]) * ZT_SEG_WORDS;
    for (u32 j = threadIdx.x; j < ZT_SEG_WORDS; j += ZT_BLOCK) {
        u64 i = base + j;
        if (i < words) dst[i] = src[i];
    }
}
ZT_EXPORT(zt_copy_segments)

// dst[i] = src[i] for i < n words.
extern "C" __global__ void ZT_BOUNDS_2 zt_copy_words(const u32* src, u32 n, u32* dst) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) dst[i] = src[i];
}
ZT_EXPORT(zt_copy_words)
