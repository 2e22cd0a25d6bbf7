/* Fuzz driver of the C API, built with AddressSanitizer and UBSan (make fuzz):
 *   fuzz SECONDS [SEED]
 * Random configurations, particle descriptors (counts, dtypes, strides, NULLs, memory
 * spaces), coordinates (NaN, inf, huge, on box faces, duplicates), fields and parameters.
 * Checks after every call: the status is a known one with a message when not OK, inputs
 * are byte-for-byte unchanged, the guard bytes around caller output arrays are intact,
 * and successful results are well-formed (indices in range, halo members consistent).
 * Any failure prints the seed and the iteration to replay. Run with
 *   ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=2048
 * so that huge requests (k = INT32_MAX with lists) fail as they would on a small node. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ztree.h"

enum { GUARD = 64, MAXN = 1500 };
static uint64_t rs;
static uint64_t next(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static int pick(int n) { return (int)(next() % (uint64_t)n); }
static double unit(void) { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
static long iter;
/* Half the calls are clean (valid descriptors and parameters, odd but legal data), so
 * that the success paths get as much fuzzing as the error paths. */
static int clean;
static int bad(int one_in) { return !clean && pick(one_in) == 0; }
static uint64_t seed;

static void fail(const char *what, const char *msg) {
  fprintf(stderr, "fuzz: FAILED at seed %llu iteration %ld: %s (%s)\n", (unsigned long long)seed, iter, what, msg ? msg : "");
  exit(1);
}

/* A buffer with guard bytes on both sides; `copy` keeps the original for the check. */
typedef struct { unsigned char *raw, *copy; size_t bytes; } buf_t;
static buf_t bufs[32];
static int nbufs;
static void *new_buf(size_t bytes) {
  buf_t *b = &bufs[nbufs++];
  b->bytes = bytes;
  b->raw = malloc(bytes + 2 * GUARD);
  b->copy = malloc(bytes + 2 * GUARD);
  for (size_t i = 0; i < bytes + 2 * GUARD; i++) b->raw[i] = (unsigned char)(i * 131 + 7);
  return b->raw + GUARD;
}
static void snapshot(void) { for (int i = 0; i < nbufs; i++) memcpy(bufs[i].copy, bufs[i].raw, bufs[i].bytes + 2 * GUARD); }
/* Inputs unchanged; outputs (`out` = 1) only inside their bytes. */
static void check_bufs(const int *is_out) {
  for (int i = 0; i < nbufs; i++) {
    buf_t *b = &bufs[i];
    size_t lo = is_out[i] ? GUARD : 0, hi = is_out[i] ? GUARD + b->bytes : 0;
    for (size_t j = 0; j < b->bytes + 2 * GUARD; j++)
      if ((j < lo || j >= hi) && b->raw[j] != b->copy[j]) fail(is_out[i] ? "a guard byte of an output changed" : "an input changed", NULL);
  }
}
static void free_bufs(void) { for (int i = 0; i < nbufs; i++) { free(bufs[i].raw); free(bufs[i].copy); } nbufs = 0; }

static double coord(double box) {
  switch (clean ? 7 + pick(33) : pick(40)) {
    case 0: return NAN;
    case 1: return INFINITY;
    case 2: return 1e300;
    case 3: return -0.0;
    case 4: return box;                      /* on the far face: outside [0, L) */
    case 5: return nextafter(box, 0.0);
    case 6: return -1e-300;
    default: return box * unit();
  }
}

static int dtype(void) { return !bad(10) ? (pick(2) ? ZTREE_DTYPE_F64 : ZTREE_DTYPE_F32) : pick(9) - 1; }
static size_t dsize(int t) { return t == ZTREE_DTYPE_F32 || t == ZTREE_DTYPE_I32 || t == ZTREE_DTYPE_U32 ? 4 : 8; }

/* A strided array of n elements of type t (values from `gen`), or something broken. */
static ztree_array array(int64_t n, int t, double box, int is_id, int *inputs) {
  ztree_array a = {NULL, t, 0};
  /* Absent (NULL), or for unusable counts nothing; a non-NULL pointer is always valid for
   * n elements of its stride (the caller's side of the contract). */
  if (n <= 0 || n > MAXN || bad(30)) { a.stride = bad(8) ? -8 : 0; return a; }
  size_t es = dsize(t), stride = es * (size_t)(1 + pick(3));
  a.stride = pick(4) == 0 ? 0 : (int64_t)stride;
  if (a.stride == 0) stride = es;
  if (bad(50)) a.stride = -(int64_t)stride;
  unsigned char *p = new_buf((size_t)n * stride);
  inputs[nbufs - 1] = 0;
  for (int64_t i = 0; i < n; i++) {
    double v = is_id ? (double)(pick(3) ? i : pick(5)) : (i > 0 && pick(20) == 0 ? -1 : coord(box));
    unsigned char *e = p + i * stride;
    if (v == -1 && i > 0) { memcpy(e, e - stride, es); continue; } /* duplicates */
    switch (t) {
      case ZTREE_DTYPE_F32: { float f = (float)v; memcpy(e, &f, 4); break; }
      case ZTREE_DTYPE_F64: memcpy(e, &v, 8); break;
      case ZTREE_DTYPE_I32: case ZTREE_DTYPE_U32: { int32_t x = (int32_t)(isfinite(v) ? fmod(v, 1e9) : 3); memcpy(e, &x, 4); break; }
      default: { int64_t x = (int64_t)(isfinite(v) ? fmod(v, 1e18) : 3); if (pick(100) == 0) x = -1; memcpy(e, &x, 8); break; }
    }
  }
  a.data = p;
  return a;
}

static ztree_particles particles(int64_t n, double box, int *inputs) {
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = bad(40) ? (pick(2) ? -1 : (int64_t)1 << 62) : n;
  p.memory = bad(60) ? pick(3) : ZTREE_MEMORY_HOST;
  int t = dtype();
  for (int d = 0; d < 3; d++) p.pos[d] = array(n, bad(40) ? dtype() : t, box, 0, inputs);
  if (pick(3) == 0) { int vt = dtype(); for (int d = 0; d < 3; d++) p.vel[d] = array(n, vt, 10.0, 0, inputs); }
  if (pick(3) == 0) p.mass = array(n, dtype(), 2.0, 0, inputs);
  if (pick(3) == 0) p.ids = array(n, clean ? ZTREE_DTYPE_I32 + pick(4) : (pick(2) ? ZTREE_DTYPE_I64 : pick(7)), 0, 1, inputs);
  if (pick(3) == 0) p.types = array(n, clean ? ZTREE_DTYPE_I32 : pick(8), 0, 1, inputs);
  return p;
}

int main(int argc, char **argv) {
  double seconds = argc > 1 ? atof(argv[1]) : 10;
  seed = argc > 2 ? strtoull(argv[2], NULL, 10) : (uint64_t)time(NULL);
  rs = seed * 2654435761u + 1;
  printf("fuzz: %.0f s from seed %llu\n", seconds, (unsigned long long)seed);
  time_t end = time(NULL) + (time_t)seconds;
  long calls = 0, ok = 0;
  for (iter = 0; time(NULL) < end; iter++) {
    clean = pick(2);
    ztree_config cfg;
    ztree_config_init(&cfg);
    cfg.dims = !bad(20) ? 2 + pick(2) : pick(5);
    cfg.periodic = !bad(20) ? pick(2) : 7;
    double box = pick(10) ? 1.0 : (pick(2) ? 1e10 : 1e-10);
    for (int d = 0; d < 3; d++) cfg.box_size[d] = !bad(30) ? box : (pick(2) ? -1.0 : 1e300);
    cfg.threads = 1 + pick(2);
    if (pick(10) == 0) cfg.leaf_size = clean ? pick(6) : pick(5) - 2; /* 0: automatic */
    if (pick(10) == 0) cfg.particle_mass = clean || pick(2) ? 1e300 : -1.0;
    /* A ceiling, mostly generous (huge requests must fail with a status either way: the
     * driver runs with ASan's allocations capped, see `make fuzz`). */
    if (bad(10)) cfg.memory_limit = pick(3) == 0 ? -1 : pick(1 << 20);
    ztree_context *ctx = NULL;
    ztree_status s = ztree_create(&cfg, &ctx);
    calls++;
    if (s != ZTREE_OK) {
      if (ctx != NULL || !*ztree_last_error(NULL)) fail("failed create left a context or no message", NULL);
      continue;
    }
    for (int call = 0; call < 4; call++) {
      int inputs[32] = {0};
      int64_t n = pick(4) == 0 ? pick(8) : pick(MAXN);
      ztree_particles src = particles(n, box, inputs), qry = particles(pick(MAXN / 2), box, inputs);
      int job = pick(4), is_fof = job == 1, is_dbscan = job == 2, is_radius = job == 3;
      ztree_knn_params kp;
      ztree_knn_params_init(&kp);
      kp.k = bad(20) ? (pick(2) ? INT32_MAX : -pick(3)) : 1 + pick(40);
      kp.outputs = (uint32_t)pick(64) | (bad(30) ? 1u << 9 : 0);
      kp.order = bad(20) ? 5 : pick(2);
      if (pick(4) == 0) kp.source_type_mask = (uint32_t)pick(64);
      if (pick(4) == 0) kp.query_type_mask = (uint32_t)pick(64);
      if (kp.outputs & ZTREE_KNN_SCALAR_MEAN && (clean || pick(5))) kp.scalar = array(n, pick(2) ? ZTREE_DTYPE_F64 : ZTREE_DTYPE_F32, 1.0, 0, inputs);
      ztree_knn_output ko;
      ztree_knn_output_init(&ko);
      int use_q = pick(3) == 0;
      int64_t nq = use_q ? qry.count : src.count;
      /* A k-th distance hint of any values (it may not change the results), at times of a
       * type it does not allow. */
      if (pick(4) == 0) kp.kth_hint = array(nq, !bad(20) ? (pick(2) ? ZTREE_DTYPE_F64 : ZTREE_DTYPE_F32) : ZTREE_DTYPE_I32, box * 0.05, 0, inputs);
      /* Caller arrays (with guards) for some outputs when the sizes are sane. */
      int64_t kk = kp.k > 0 ? kp.k : 1;
      if (nq >= 0 && nq <= MAXN && kk <= 64 && pick(2)) {
        if (pick(2)) { ko.indices = new_buf((size_t)(nq * kk) * 8); inputs[nbufs - 1] = 1; }
        if (pick(2)) { ko.distances = new_buf((size_t)(nq * kk) * 8); inputs[nbufs - 1] = 1; }
        if (pick(2)) { ko.density = new_buf((size_t)nq * 8); inputs[nbufs - 1] = 1; }
      }
      ztree_fof_params fp;
      ztree_fof_params_init(&fp);
      fp.linking_length = !bad(10) ? box * (0.001 + 0.02 * unit()) : (pick(2) ? -1.0 : NAN);
      fp.b = pick(5) == 0 ? 0.2 : 0.0;
      if (fp.b > 0 && (clean || pick(2))) fp.linking_length = 0;
      fp.min_members = !bad(20) ? 1 + pick(30) : 0;
      fp.order = !bad(20) ? pick(2) : 9;
      fp.members = pick(2);
      if (pick(4) == 0) fp.type_mask = (uint32_t)pick(64);
      /* Halo property columns, at times with bits no column has, G, softening, rho_crit
       * and Omega_m of any sign or NaN. */
      if (pick(3) == 0) {
        fp.columns = (uint32_t)pick(32) | (bad(30) ? 1u << 7 : 0);
        fp.gravity_constant = !bad(20) ? 1.0 + unit() : (pick(2) ? 0.0 : NAN);
        fp.softening = !bad(20) ? 0.01 * box * unit() : -1.0;
        fp.rho_crit = !bad(20) ? 0.1 + unit() : (pick(2) ? -1.0 : INFINITY);
        fp.omega_m = !bad(20) ? 0.3 : 0.0;
      }
      ztree_fof_output fo;
      ztree_fof_output_init(&fo);
      ztree_dbscan_params dp;
      ztree_dbscan_params_init(&dp);
      dp.eps = fp.linking_length;
      dp.b = fp.b;
      dp.min_pts = !bad(20) ? 1 + pick(16) : -pick(3);
      dp.min_members = !bad(20) ? pick(5) : -1;
      dp.order = fp.order;
      dp.members = pick(2);
      dp.border = !bad(20) ? pick(2) : 7;
      dp.classes = pick(2);
      if (pick(4) == 0) dp.type_mask = (uint32_t)pick(64);
      dp.columns = fp.columns;
      dp.gravity_constant = fp.gravity_constant;
      dp.softening = fp.softening;
      dp.rho_crit = fp.rho_crit;
      dp.omega_m = fp.omega_m;
      ztree_dbscan_output dout;
      ztree_dbscan_output_init(&dout);
      ztree_radius_params rp;
      ztree_radius_params_init(&rp);
      rp.radius = !bad(10) ? box * 0.05 * unit() : (pick(2) ? -1.0 : NAN);
      rp.outputs = (uint32_t)pick(64) | (bad(30) ? 1u << 9 : 0);
      rp.list_order = !bad(20) ? pick(2) : 4;
      if (pick(4) == 0) rp.count_limit = !bad(20) ? pick(20) : -pick(5) - 1;
      if (pick(3) == 0) rp.radii = array(nq, !bad(20) ? (pick(2) ? ZTREE_DTYPE_F64 : ZTREE_DTYPE_F32) : ZTREE_DTYPE_I64, box * 0.05, 0, inputs);
      if (rp.outputs & (ZTREE_RADIUS_SCALAR_SUM | ZTREE_RADIUS_SCALAR_MEAN) && (clean || pick(5)))
        rp.scalar = array(n, pick(2) ? ZTREE_DTYPE_F64 : ZTREE_DTYPE_F32, 1.0, 0, inputs);
      ztree_radius_output ro;
      ztree_radius_output_init(&ro);
      if (nq >= 0 && nq <= MAXN && pick(2)) { ro.counts = new_buf((size_t)nq * 8); inputs[nbufs - 1] = 1; }
      if (bad(100)) rp.struct_size = pick(2) ? 0 : sizeof rp + 8;
      if (src.count >= 0 && src.count <= MAXN && pick(2)) { fo.labels = new_buf((size_t)src.count * 8); inputs[nbufs - 1] = 1; }
      /* Struct sizes no header has: every call must refuse them by name. */
      if (bad(100)) src.struct_size = pick(2) ? 0 : sizeof src + 8 * (1 + pick(4));
      if (bad(100)) kp.struct_size = pick(2) ? 0 : sizeof kp - 8;
      if (bad(100)) fo.struct_size = pick(2) ? 1 : sizeof fo + 8;
      snapshot();
      s = is_radius ? ztree_radius(ctx, &src, use_q ? &qry : NULL, !bad(50) ? &rp : NULL, &ro)
          : is_dbscan ? ztree_dbscan(ctx, &src, !bad(50) ? &dp : NULL, &dout)
          : is_fof ? ztree_fof(ctx, &src, !bad(50) ? &fp : NULL, &fo) : ztree_knn(ctx, &src, use_q ? &qry : NULL, !bad(50) ? &kp : NULL, &ko);
      calls++;
      if ((int)s < 0 || (int)s > ZTREE_ERR_DEVICE) fail("unknown status", NULL);
      if (s == ZTREE_ERR_INTERNAL) fail("internal error", ztree_last_error(ctx));
      if (s != ZTREE_OK && !*ztree_last_error(ctx)) fail("error without a message", NULL);
      check_bufs(inputs);
      if (s == ZTREE_OK) {
        ok++;
        if (!is_fof && (kp.outputs & ZTREE_KNN_INDICES))
          for (int64_t i = 0; i < ko.n_queries * kp.k; i++)
            if (ko.indices[i] < -1 || ko.indices[i] >= src.count) fail("neighbour index out of range", NULL);
        if (is_radius) {
          if (ro.n_queries != nq) fail("radius query count", NULL);
          if ((rp.outputs & ZTREE_RADIUS_COUNTS) && rp.count_limit > 0)
            for (int64_t q = 0; q < nq; q++)
              if (ro.counts[q] < 0 || ro.counts[q] > rp.count_limit) fail("radius count above its limit", NULL);
          if (rp.outputs & ZTREE_RADIUS_LISTS) {
            if (ro.offsets[0] != 0 || ro.offsets[nq] != ro.n_pairs) fail("radius offsets", NULL);
            for (int64_t i = 0; i < ro.n_pairs; i++)
              if (ro.indices[i] < 0 || ro.indices[i] >= src.count) fail("radius neighbour index", NULL);
            for (int64_t q = 0; q < nq; q++) {
              if (ro.offsets[q + 1] < ro.offsets[q]) fail("radius offsets decrease", NULL);
              if ((rp.outputs & ZTREE_RADIUS_COUNTS) && rp.count_limit == 0 && ro.counts[q] != ro.offsets[q + 1] - ro.offsets[q]) fail("radius counts vs lists", NULL);
            }
          }
        }
        if (is_dbscan) {
          int64_t counted = 0;
          for (int64_t i = 0; i < src.count; i++) {
            if (dout.labels[i] < -1) fail("dbscan label below -1", NULL);
            if (dp.classes && (dout.point_class[i] < 0 || dout.point_class[i] > 2)) fail("dbscan class", NULL);
          }
          for (int64_t c = 0; c < dout.n_clusters; c++) {
            counted += dout.clusters[c].count;
            if (dout.clusters[c].core_count < 1 || dout.clusters[c].core_count > dout.clusters[c].count) fail("cluster core count", NULL);
            if (!(dout.clusters[c].max_radius >= 0)) fail("cluster max radius", NULL);
          }
          if (dp.members && dout.member_offsets[dout.n_clusters] != counted) fail("dbscan member offsets", NULL);
          if (dout.n_core + dout.n_border + dout.n_noise != src.count) fail("dbscan class counts", NULL);
          if ((dout.centre_index != NULL) != !!(dp.columns & ZTREE_COLUMN_CENTRE) || (dout.len_type != NULL) != !!(dp.columns & ZTREE_COLUMN_TYPES))
            fail("dbscan column pointers differ from the columns asked for", NULL);
          for (int64_t c = 0; c < dout.n_clusters; c++)
            if (dout.centre_index && (dout.centre_index[c] < 0 || dout.centre_index[c] >= src.count)) fail("dbscan centre index", NULL);
        }
        if (is_fof) {
          for (int64_t i = 0; i < src.count; i++)
            if (fo.labels[i] < -1) fail("label below -1", NULL);
          if (fp.members) {
            if (!fo.member_offsets || fo.member_offsets[0] != 0) fail("member_offsets", NULL);
            int64_t total = 0;
            for (int64_t h = 0; h < fo.n_halos; h++) {
              if (fo.member_offsets[h + 1] - fo.member_offsets[h] != fo.halos[h].count) fail("member count", NULL);
              total += fo.halos[h].count;
            }
            for (int64_t m = 0; m < total; m++)
              if (fo.member_indices[m] < 0 || fo.member_indices[m] >= src.count) fail("member index", NULL);
          }
          for (int64_t h = 0; h < fo.n_halos; h++)
            if (!(fo.halos[h].mass > 0) || !isfinite(fo.halos[h].pos[0]) || !isfinite(fo.halos[h].inertia_radius)) fail("halo row not finite", NULL);
          /* Exactly the columns asked for, and their values sane. */
          if ((fo.centre_index != NULL) != !!(fp.columns & ZTREE_COLUMN_CENTRE) || (fo.so_mass != NULL) != !!(fp.columns & ZTREE_COLUMN_SO) ||
              (fo.vmax != NULL) != !!(fp.columns & ZTREE_COLUMN_DYNAMICS) || (fo.len_type != NULL) != !!(fp.columns & ZTREE_COLUMN_TYPES) ||
              (fo.most_bound_index != NULL) != !!(fp.columns & ZTREE_COLUMN_MOST_BOUND))
            fail("column pointers differ from the columns asked for", NULL);
          for (int64_t h = 0; h < fo.n_halos; h++) {
            if (fo.centre_index && (fo.centre_index[h] < 0 || fo.centre_index[h] >= src.count)) fail("centre index", NULL);
            if (fo.most_bound_index && (fo.most_bound_index[h] < 0 || fo.most_bound_index[h] >= src.count)) fail("most bound index", NULL);
            if (fo.so_mass)
              for (int k = 0; k < ZTREE_SO_DEFINITIONS; k++)
                if (!(fo.so_mass[h * ZTREE_SO_DEFINITIONS + k] >= 0) || !(fo.so_radius[h * ZTREE_SO_DEFINITIONS + k] >= 0)) fail("SO column", NULL);
            if (fo.len_type) {
              int64_t sum = 0;
              for (int64_t t = 0; t < fo.n_types; t++) sum += fo.len_type[h * fo.n_types + t];
              if (sum != fo.halos[h].count) fail("per-type counts", NULL);
            }
          }
        }
      }
      free_bufs();
    }
    ztree_destroy(ctx);
  }
  printf("fuzz: %ld iterations, %ld calls, %ld succeeded, no failures\n", iter, calls, ok);
  return 0;
}
