// The per-element maths of zt_geom.cuh on given inputs, for the tests that hold them to the
// host's definitions bit for bit (src/backend/cuda/tests.rs). Case i reads 4 points of 3
// coordinates from `in[12 i ..]`: q, s, and the boxes [a_lo, a_hi] = [min(q, s), max(q, s)]
// and [b_lo, b_hi] = the third and fourth points (ordered), and writes dist2(q, s),
// box_min2(a, b), box_max2(a, b) to out[3 i ..].
#include "zt_geom.cuh"

template <class T, int D>
__device__ void metric_probe(const T* in, u32 n, ZtMetric<T, D> m, T* out) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const T* p = in + 12 * i;
    T alo[3], ahi[3], blo[3], bhi[3];
    for (int d = 0; d < 3; ++d) {
        alo[d] = zt_fmin(p[d], p[3 + d]);
        ahi[d] = zt_fmax(p[d], p[3 + d]);
        blo[d] = zt_fmin(p[6 + d], p[9 + d]);
        bhi[d] = zt_fmax(p[6 + d], p[9 + d]);
    }
    out[3 * i] = m.dist2(p, p + 3);
    out[3 * i + 1] = m.box_min2(alo, ahi, blo, bhi);
    out[3 * i + 2] = m.box_max2(alo, ahi, blo, bhi);
}

#define ZT_PROBE(name, T, D)                                                        \
    extern "C" __global__ void name(const T* in, u32 n, ZtMetric<T, D> m, T* out) { \
        metric_probe<T, D>(in, n, m, out);                                          \
    }                                                                               \
    ZT_EXPORT(name)
ZT_PROBE(zt_metric_probe_f32_2, float, 2)
ZT_PROBE(zt_metric_probe_f32_3, float, 3)
ZT_PROBE(zt_metric_probe_f64_2, double, 2)
ZT_PROBE(zt_metric_probe_f64_3, double, 3)
