// The FoF catalogue on the device (src/backend/cpu/catalogue.rs, src/fof/catalogue.rs):
// members per root, the kept groups (at least min_members), the members in canonical
// order (group, then ascending input index: a radix sort of (group << 32 | input index)),
// each group's row reduced by one thread in that order with the CPU's operations in the
// CPU's order, and every particle's label.
#include "zt_block.cuh"
#include "zt_field.cuh"
#include "zt_geom.cuh"

#define ZT_NONE 0xffffffffu

// cnt[roots[z]] += 1 (the group sizes, at their roots).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_cat_count(const u32* roots, u32 n, u32* cnt) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z < n) atomicAdd(&cnt[roots[z]], 1u);
}
ZT_EXPORT(zt_cat_count)

// Per point: whether it is a root (a group), and whether a kept group's root.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_cat_flags(const u32* roots, u32 n, const u32* cnt, u32 min_members, u32* is_root, u32* is_kept) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z >= n) return;
    bool root = roots[z] == z;
    is_root[z] = root;
    is_kept[z] = root && cnt[z] >= min_members;
}
ZT_EXPORT(zt_cat_flags)

// slot[z] = the group index of root z (kept_at: the exclusive scan of the kept flags), or
// ZT_NONE; and each kept group's size. Only the roots' slots are read.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_cat_slots(const u32* roots, u32 n, const u32* cnt, u32 min_members, const u32* kept_at, u32* slot, u32* sizes) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z >= n || roots[z] != z) return;
    bool kept = cnt[z] >= min_members;
    slot[z] = kept ? kept_at[z] : ZT_NONE;
    if (kept) sizes[kept_at[z]] = cnt[z];
}
ZT_EXPORT(zt_cat_slots)

// Whether point z belongs to a kept group.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_cat_member_flags(const u32* roots, u32 n, const u32* slot, u32* flags) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z < n) flags[z] = slot[roots[z]] != ZT_NONE;
}
ZT_EXPORT(zt_cat_member_flags)

// The kept points as sort keys (group << 32 | input index) and their z-indices, at at[z].
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_cat_member_keys(const u32* roots, u32 n, const u32* slot, const u32* orig, const u32* at, u64* keys, u32* zs) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z >= n) return;
    u32 g = slot[roots[z]];
    if (g == ZT_NONE) return;
    keys[at[z]] = (u64)g << 32 | orig[z];
    zs[at[z]] = z;
}
ZT_EXPORT(zt_cat_member_keys)

// What the reduction reads: positions (z-order), the caller's fields (input order), the
// box (periodic when len[0] > 0), and where the rows go (centre and vel: D per group).
template <class T>
struct ZtCatJob {
    const T* pos[3];
    ZtField vel[3];
    ZtField mass;
    ZtField ids;
    double particle_mass;
    double len[3];
    u32 periodic;
    // Elements between consecutive points in pos[d]: 1 (z-ordered columns) or D (one
    // column of points).
    u32 pos_stride;
};
struct ZtRows {
    i64* tag;
    double* mass;
    double* centre;
    double* radius;
    double* vel;
    double* disp;
};

// One group's member i: its z-index and input index, from the sorted keys.
template <class T, int D>
ZT_HD void zt_member(const ZtCatJob<T>& j, const u64* keys, const u32* zs, u32 at, double* x, double* v, double* m, i64* tag) {
    u32 z = zs[at], o = (u32)(keys[at] & 0xffffffffull);
    for (int d = 0; d < D; ++d) {
        x[d] = (double)j.pos[d][(u64)z * j.pos_stride];
        v[d] = j.vel[d].ty ? zt_real(j.vel[d], o) : 0.0;
    }
    *m = j.mass.ty ? zt_real(j.mass, o) : j.particle_mass;
    *tag = j.ids.ty ? zt_int(j.ids, o) : (i64)o;
}

// src/fof/catalogue.rs `reduce_group`, a warp per group. The sums must run over the
// members one after another in canonical order (the CPU's bits), so lane 0 does them; the
// lanes load 32 members at a time (scattered: positions by z, fields by input index) and
// compute each member's terms, rounded as the CPU rounds them, into shared memory, so
// lane 0's serial part, the tail of a large group, is additions alone.
#define ZT_CAT_SLOT 8  // doubles per staged member: w·offset[3], w·v[3], m, w (pass 2: w·qx, w·qv)
template <class T, int D>
__device__ void cat_reduce(ZtCatJob<T> j, const u64* keys, const u32* zs, const u32* offsets, u32 ng, ZtRows out) {
    __shared__ double s_m[ZT_WARPS][32][ZT_CAT_SLOT];
    u32 g = zt_grid_warp(), lane = zt_lane(), w = threadIdx.x >> 5;
    if (g >= ng) return;
    u32 a = offsets[g], b = offsets[g + 1];
    double x0[3], x[3], v[3], m;
    i64 t;
    zt_member<T, D>(j, keys, zs, a, x0, v, &m, &t);
    // Largest mass and smallest tag: order-free, so every lane takes its share.
    double m_max = 0.0;
    i64 tag = 0x7fffffffffffffffll;
    for (u32 i = a + lane; i < b; i += 32) {
        zt_member<T, D>(j, keys, zs, i, x, v, &m, &t);
        m_max = m > m_max ? m : m_max;  // f64::max (no NaN: masses are checked)
        tag = t < tag ? t : tag;
    }
    for (int o = 16; o > 0; o >>= 1) {
        double mo = __shfl_xor_sync(0xffffffffu, m_max, o);
        i64 to = __shfl_xor_sync(0xffffffffu, tag, o);
        m_max = mo > m_max ? mo : m_max;
        tag = to < tag ? to : tag;
    }
    double m_tot = 0.0, w_tot = 0.0, s[3] = {0.0, 0.0, 0.0}, sv[3] = {0.0, 0.0, 0.0};
    double c_off[3] = {0.0, 0.0, 0.0}, vm[3] = {0.0, 0.0, 0.0}, r2 = 0.0, v2 = 0.0;
    for (int pass = 0; pass < 2; ++pass) {
        for (u32 c0 = a; c0 < b; c0 += 32) {
            // Each lane its own member's terms (the CPU's operations, each rounded as there:
            // no FMA); lane 0 then only adds them up in member order.
            if (c0 + lane < b) {
                zt_member<T, D>(j, keys, zs, c0 + lane, x, v, &m, &t);
                double* e = s_m[w][lane];
                double wk = m / m_max, o[3];
                for (int d = 0; d < D; ++d) {
                    o[d] = x[d] - x0[d];  // the offset from the first member
                    if (j.periodic) o[d] = zt_min_image(o[d], j.len[d], 0.5 * j.len[d]);
                }
                if (pass == 0) {
                    for (int d = 0; d < D; ++d) {
                        e[d] = wk * o[d];
                        e[3 + d] = wk * v[d];
                    }
                    e[6] = m;
                    e[7] = wk;
                } else {
                    double qx = 0.0, qv = 0.0;
                    for (int d = 0; d < D; ++d) {
                        double q = o[d] - c_off[d];
                        qx = qx + q * q;
                        q = v[d] - vm[d];
                        qv = qv + q * q;
                    }
                    e[0] = wk * qx;
                    e[1] = wk * qv;
                }
            }
            __syncwarp();
            if (lane == 0) {
                u32 cn = b - c0 < 32 ? b - c0 : 32;
                for (u32 k = 0; k < cn; ++k) {
                    const double* e = s_m[w][k];
                    if (pass == 0) {
                        m_tot = m_tot + e[6];
                        w_tot = w_tot + e[7];
                        for (int d = 0; d < D; ++d) {
                            s[d] = s[d] + e[d];
                            sv[d] = sv[d] + e[3 + d];
                        }
                    } else {
                        r2 = r2 + e[0];
                        v2 = v2 + e[1];
                    }
                }
            }
            __syncwarp();
        }
        if (pass == 0)
            // The mean offset and velocity, from lane 0's sums, to every lane.
            for (int d = 0; d < D; ++d) {
                c_off[d] = __shfl_sync(0xffffffffu, s[d] / w_tot, 0);
                vm[d] = __shfl_sync(0xffffffffu, sv[d] / w_tot, 0);
            }
    }
    if (lane != 0) return;
    out.tag[g] = tag;
    out.mass[g] = m_tot;
    for (int d = 0; d < D; ++d) {
        double c = x0[d] + c_off[d];
        if (j.periodic) {
            // f64::rem_euclid, then [0, L).
            double r = fmod(c, j.len[d]);
            if (r < 0.0) r = r + (j.len[d] < 0.0 ? -j.len[d] : j.len[d]);
            c = r >= j.len[d] ? 0.0 : r;
        }
        out.centre[D * g + d] = c;
        out.vel[D * g + d] = vm[d];
    }
    out.radius[g] = zt_sqrt(r2 / w_tot);
    out.disp[g] = zt_sqrt(v2 / w_tot);
}

#define ZT_CAT(suffix, T, D)                                                                                                          \
    extern "C" __global__ void ZT_BOUNDS_2 zt_cat_reduce_##suffix(ZtCatJob<T> j, const u64* keys, const u32* zs, const u32* offsets, \
                                                                  u32 ng, ZtRows out) {                                            \
        cat_reduce<T, D>(j, keys, zs, offsets, ng, out);                                                                           \
    }                                                                                                                               \
    ZT_EXPORT(zt_cat_reduce_##suffix)
ZT_CAT(f32_2, float, 2)
ZT_CAT(f32_3, float, 3)
ZT_CAT(f64_2, double, 2)
ZT_CAT(f64_3, double, 3)

// labels[orig[z]] = the tag of z's group, or -1 when the group is not kept.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_cat_labels(const u32* roots, u32 n, const u32* slot, const u32* orig, const i64* tag, i64* labels) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z >= n) return;
    u32 g = slot[roots[z]];
    labels[orig[z]] = g == ZT_NONE ? -1 : tag[g];
}
ZT_EXPORT(zt_cat_labels)

// The caller's fields checked on the device (src/input/validate.rs): *first = the smallest
// i whose element fails, for mode 0 (not finite), 1 (<= 0; NaN passes, as on the host), 2
// (a u64 id beyond i64) or 3 (not finite, or negative: a radius).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_field_first_bad(ZtField f, u32 n, u32 mode, u32* first) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i >= n) return;
    bool bad;
    if (mode == 2) {
        bad = zt_raw<u64>(f.a, i) > 0x7fffffffffffffffull;
    } else {
        double v = zt_real(f, i);
        bad = mode == 0 ? !((v - v) == 0.0) : mode == 3 ? !((v - v) == 0.0 && v >= 0.0) : v <= 0.0;
    }
    if (bad) atomicMin(first, i);
}
ZT_EXPORT(zt_field_first_bad)

// *max = the bits of the largest element of a checked non-negative real field (their bits
// order as their values; *max starts at 0).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_field_max(ZtField f, u32 n, u64* max) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) atomicMax(max, zt_double_bits(zt_real(f, i) + 0.0));
}
ZT_EXPORT(zt_field_max)
