/* C tests of the ztree ABI: every entry point on good input (checked against brute
 * force computed here, with the arithmetic ztree documents), and every error path
 * (status, message, caller memory untouched). Run under valgrind by ctest. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztree.h"

#define ZT_PI 3.14159265358979323846

#include "check.h"

static uint64_t rng_state = 12345;
static double urand(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

/* Array-of-structs particles as a GADGET-like code holds them. */
typedef struct {
  float pos[3];
  float vel[3];
  uint32_t id;
} particle;

static ztree_array arr(const void *p, int32_t dtype, int64_t stride) {
  ztree_array a;
  a.data = p;
  a.dtype = dtype;
  a.stride = stride;
  return a;
}

static ztree_particles soa_f64(int64_t n, const double *x, const double *y, const double *z) {
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = n;
  p.memory = ZTREE_MEMORY_HOST;
  p.pos[0] = arr(x, ZTREE_DTYPE_F64, 0);
  p.pos[1] = arr(y, ZTREE_DTYPE_F64, 0);
  p.pos[2] = arr(z, ZTREE_DTYPE_F64, 0);
  return p;
}

static ztree_particles aos_f32(int64_t n, const particle *ps) {
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = n;
  p.memory = ZTREE_MEMORY_HOST;
  for (int d = 0; d < 3; d++) {
    p.pos[d] = arr(&ps[0].pos[d], ZTREE_DTYPE_F32, sizeof(particle));
    p.vel[d] = arr(&ps[0].vel[d], ZTREE_DTYPE_F32, sizeof(particle));
  }
  p.ids = arr(&ps[0].id, ZTREE_DTYPE_U32, sizeof(particle));
  return p;
}

/* Minimum image distance squared, in double, as DESIGN.md §4 (no contraction). */
static double d2_f64(const double *a, const double *b, double box) {
  double s = 0;
  for (int d = 0; d < 3; d++) {
    double x = a[d] - b[d];
    if (box > 0) {
      if (x > box * 0.5) x -= box;
      else if (x < -box * 0.5) x += box;
    }
    double xx = x * x;
    s = s + xx;
  }
  return s;
}

typedef struct {
  double d2;
  int64_t i;
} cand;

static int cand_cmp(const void *a, const void *b) {
  const cand *x = a, *y = b;
  if (x->d2 != y->d2) return x->d2 < y->d2 ? -1 : 1;
  return x->i < y->i ? -1 : (x->i > y->i);
}

static void test_knn_f64_soa(ztree_context *ctx, int n, double box) {
  double *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *z = malloc(n * sizeof *z);
  double *pts = malloc(3 * n * sizeof *pts);
  for (int i = 0; i < n; i++) {
    x[i] = pts[3 * i] = urand() * box;
    y[i] = pts[3 * i + 1] = urand() * box;
    z[i] = pts[3 * i + 2] = (i % 5 == 0) ? 0.5 : urand() * box; /* ties */
  }
  const int k = 7;
  ztree_particles src = soa_f64(n, x, y, z);
  ztree_knn_params kp;
  ztree_knn_params_init(&kp);
  kp.k = k;
  kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES | ZTREE_KNN_KTH_DISTANCE | ZTREE_KNN_DENSITY;
  int64_t *idx = malloc(n * k * sizeof *idx);
  double *dist = malloc(n * k * sizeof *dist);
  ztree_knn_output out;
  ztree_knn_output_init(&out);
  out.indices = idx;
  out.distances = dist;
  ztree_status s = ztree_knn(ctx, &src, NULL, &kp, &out);
  CHECK(s == ZTREE_OK, "knn failed: %s", ztree_last_error(ctx));
  CHECK(out.indices == idx && out.distances == dist, "caller arrays not used");
  CHECK(out.kth_distance != NULL && out.density != NULL, "context-owned outputs missing");
  CHECK(out.n_queries == n && out.padded_queries == 0, "counts");
  cand *c = malloc(n * sizeof *c);
  for (int q = 0; q < n && s == ZTREE_OK; q++) {
    for (int j = 0; j < n; j++) {
      c[j].d2 = d2_f64(&pts[3 * q], &pts[3 * j], box);
      c[j].i = j;
    }
    qsort(c, n, sizeof *c, cand_cmp);
    for (int j = 0; j < k; j++) {
      CHECK(idx[q * k + j] == c[j].i, "q=%d j=%d index %lld vs %lld", q, j, (long long)idx[q * k + j], (long long)c[j].i);
      CHECK(dist[q * k + j] == sqrt(c[j].d2), "q=%d j=%d distance", q, j);
    }
    CHECK(out.kth_distance[q] == sqrt(c[k - 1].d2), "kth of %d", q);
    double r = sqrt(c[k - 1].d2);
    CHECK(out.density[q] == k / (4.0 / 3.0 * ZT_PI * r * r * r), "density of %d", q);
  }
  /* kth_hint: the k-th distances just computed as the guess (f64), the same scaled into
   * floats at a stride, and garbage (NaN, 0, negative, +inf, huge, too small): the same
   * lists, bit for bit; an integer hint array is refused, the outputs untouched. */
  {
    double *hint = malloc(n * sizeof *hint);
    struct {
      float h;
      int32_t pad;
    } *hint32 = malloc(n * sizeof *hint32);
    int64_t *idx2 = malloc(n * k * sizeof *idx2);
    double *dist2 = malloc(n * k * sizeof *dist2);
    const double garbage[6] = {NAN, 0.0, -1.0, INFINITY, 1e300, 1e-9};
    /* (The context-owned k-th distances are valid until the next call: copied first.) */
    double *kth = malloc(n * sizeof *kth);
    memcpy(kth, out.kth_distance, n * sizeof *kth);
    for (int round = 0; round < 3; round++) {
      for (int q = 0; q < n; q++) {
        hint[q] = round == 2 ? garbage[q % 6] : kth[q] * (round == 0 ? 1.0 : 0.8);
        hint32[q].h = (float)(kth[q] * 1.1);
      }
      ztree_knn_params hp = kp;
      hp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES;
      hp.kth_hint = round == 1 ? arr(&hint32[0].h, ZTREE_DTYPE_F32, (int64_t)sizeof *hint32) : arr(hint, ZTREE_DTYPE_F64, 0);
      ztree_knn_output ho;
      ztree_knn_output_init(&ho);
      ho.indices = idx2;
      ho.distances = dist2;
      CHECK(ztree_knn(ctx, &src, NULL, &hp, &ho) == ZTREE_OK, "hinted knn (round %d): %s", round, ztree_last_error(ctx));
      CHECK(memcmp(idx2, idx, n * k * sizeof *idx) == 0 && memcmp(dist2, dist, n * k * sizeof *dist) == 0, "hinted lists differ (round %d)", round);
      if (round == 0) {
        hp.kth_hint = arr(hint, ZTREE_DTYPE_I32, 0);
        idx2[0] = -77;
        CHECK(ztree_knn(ctx, &src, NULL, &hp, &ho) == ZTREE_ERR_DTYPE && strstr(ztree_last_error(ctx), "kth_hint") != NULL, "integer hint: %s", ztree_last_error(ctx));
        CHECK(idx2[0] == -77, "outputs written despite the error");
      }
    }
    free(kth);
    free(hint);
    free(hint32);
    free(idx2);
    free(dist2);
  }
  /* The same with every output context-owned, in z-order with the permutation. */
  ztree_knn_output out2;
  ztree_knn_output_init(&out2);
  kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_PERMUTATION;
  kp.order = ZTREE_ORDER_ZORDER;
  s = ztree_knn(ctx, &src, NULL, &kp, &out2);
  CHECK(s == ZTREE_OK, "knn z-order failed: %s", ztree_last_error(ctx));
  for (int r = 0; r < n && s == ZTREE_OK; r++) {
    int64_t q = out2.permutation[r];
    CHECK(q >= 0 && q < n, "permutation");
    CHECK(memcmp(&out2.indices[r * k], &idx[q * k], k * sizeof(int64_t)) == 0, "z-order row %d", r);
  }
  /* Separate queries, k larger than the sources: padded. */
  double qx[2] = {0.1, 0.9}, qy[2] = {0.2, 0.8}, qz[2] = {0.3, 0.7};
  ztree_particles qry = soa_f64(2, qx, qy, qz);
  ztree_particles few = soa_f64(3, x, y, z);
  kp.order = ZTREE_ORDER_INPUT;
  kp.k = 5;
  kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES;
  ztree_knn_output out3;
  ztree_knn_output_init(&out3);
  s = ztree_knn(ctx, &few, &qry, &kp, &out3);
  CHECK(s == ZTREE_OK, "padded knn failed: %s", ztree_last_error(ctx));
  CHECK(out3.padded_queries == 2, "padded count %lld", (long long)out3.padded_queries);
  CHECK(out3.indices[3] == -1 && out3.indices[4] == -1 && isinf(out3.distances[4]), "padding");
  ztree_stats st;
  ztree_stats_init(&st);
  CHECK(ztree_get_stats(ctx, &st) == ZTREE_OK && st.n_stages > 0 && st.total_seconds >= 0, "stats");
  free(c);
  free(idx);
  free(dist);
  free(x);
  free(y);
  free(z);
  free(pts);
}

/* Union-find for the brute-force FoF oracle. */
static int64_t uf_find(int64_t *p, int64_t i) {
  while (p[i] != i) i = p[i] = p[p[i]];
  return i;
}

static void test_fof_f32_aos(ztree_context *ctx, int n) {
  particle *ps = malloc(n * sizeof *ps);
  for (int i = 0; i < n; i++) {
    /* Clumps so that groups of many sizes exist, some across the periodic faces. */
    double cx = (i % 10) * 0.1, spread = 0.02;
    for (int d = 0; d < 3; d++) {
      double v = (d == 0 ? cx : 0.0) + (urand() - 0.5) * spread * (1 + i % 3);
      v = v - floor(v);
      if (v >= 1.0) v = 0.0;
      ps[i].pos[d] = (float)v;
      if (ps[i].pos[d] >= 1.0f) ps[i].pos[d] = 0.0f;
      ps[i].vel[d] = (float)(urand() - 0.5);
    }
    ps[i].id = (uint32_t)(1000000 + (i * 7919) % n);
  }
  const double l = 0.004;
  ztree_particles p = aos_f32(n, ps);
  ztree_fof_params fp;
  ztree_fof_params_init(&fp);
  fp.linking_length = l;
  fp.min_members = 1;
  fp.order = ZTREE_CATALOGUE_GADGET;
  fp.members = 1;
  ztree_fof_output out;
  ztree_fof_output_init(&out);
  ztree_status s = ztree_fof(ctx, &p, &fp, &out);
  CHECK(s == ZTREE_OK, "fof failed: %s", ztree_last_error(ctx));
  if (s != ZTREE_OK) return;
  int64_t *parent = malloc(n * sizeof *parent);
  for (int i = 0; i < n; i++) parent[i] = i;
  for (int i = 0; i < n; i++) {
    for (int j = i + 1; j < n; j++) {
      double a[3], b[3];
      for (int d = 0; d < 3; d++) {
        a[d] = ps[i].pos[d];
        b[d] = ps[j].pos[d];
      }
      if (d2_f64(a, b, 1.0) <= l * l) {
        int64_t ri = uf_find(parent, i), rj = uf_find(parent, j);
        if (ri != rj) parent[ri < rj ? rj : ri] = ri < rj ? ri : rj;
      }
    }
  }
  /* Same partition: labels equal iff roots equal; the tag is the group's minimum id. */
  int64_t *minid = malloc(n * sizeof *minid);
  for (int i = 0; i < n; i++) minid[i] = INT64_MAX;
  for (int i = 0; i < n; i++) {
    int64_t r = uf_find(parent, i);
    if ((int64_t)ps[i].id < minid[r]) minid[r] = ps[i].id;
  }
  int64_t groups = 0;
  for (int i = 0; i < n; i++) {
    groups += uf_find(parent, i) == i;
    CHECK(out.labels[i] == minid[uf_find(parent, i)], "label of %d: %lld vs %lld", i, (long long)out.labels[i], (long long)minid[uf_find(parent, i)]);
  }
  CHECK(out.n_halos == groups, "halos %lld vs %lld", (long long)out.n_halos, (long long)groups);
  int64_t total = 0;
  for (int64_t h = 0; h < out.n_halos; h++) {
    CHECK(h == 0 || out.halos[h].count <= out.halos[h - 1].count, "GADGET order");
    CHECK(out.member_offsets[h + 1] - out.member_offsets[h] == out.halos[h].count, "members of %lld", (long long)h);
    CHECK(out.halos[h].mass == out.halos[h].count * 1.0, "mass = count * particle mass");
    for (int64_t m = out.member_offsets[h]; m < out.member_offsets[h + 1]; m++) {
      CHECK(out.labels[out.member_indices[m]] == out.halos[h].tag, "member label");
    }
    total += out.halos[h].count;
  }
  CHECK(total == n, "every particle in one halo (min_members 1)");
  /* Into a caller label array, with min_members 20: small groups get -1. */
  int64_t *labels = malloc(n * sizeof *labels);
  ztree_fof_output out2;
  ztree_fof_output_init(&out2);
  out2.labels = labels;
  fp.min_members = 20;
  fp.members = 0;
  s = ztree_fof(ctx, &p, &fp, &out2);
  CHECK(s == ZTREE_OK && out2.labels == labels && out2.member_offsets == NULL, "fof into caller labels");
  for (int i = 0; i < n && s == ZTREE_OK; i++) {
    int64_t r = uf_find(parent, i);
    int64_t size = 0;
    for (int j = 0; j < n; j++) size += uf_find(parent, j) == r;
    CHECK(labels[i] == (size >= 20 ? minid[r] : -1), "min_members label of %d", i);
    if (i > 200) break; /* O(n^2) check on a prefix is enough */
  }
  free(labels);
  free(minid);
  free(parent);
  free(ps);
}

/* Every error path: status, a message, and caller memory untouched. */
static void test_errors(ztree_context *ctx, ztree_context *open_ctx) {
  double x[4] = {0.1, 0.2, 0.3, 0.4}, y[4] = {0.5, 0.5, 0.5, 0.5}, z[4] = {0.9, 0.8, 0.7, 0.6};
  ztree_particles p = soa_f64(4, x, y, z);
  ztree_knn_params kp;
  ztree_knn_params_init(&kp);
  kp.k = 2;
  kp.outputs = ZTREE_KNN_INDICES;
  int64_t sentinel[8];
  for (int i = 0; i < 8; i++) sentinel[i] = 777;
  ztree_knn_output out;
  ztree_knn_output_init(&out);
  out.indices = sentinel;
#define EXPECT(call, status)                                                                         \
  do {                                                                                               \
    ztree_status s_ = (call);                                                                        \
    CHECK(s_ == (status), "%s returned %d (%s), expected %d: %s", #call, (int)s_, ztree_status_string(s_), \
          (int)(status), ztree_last_error(ctx));                                                     \
    CHECK(strlen(ztree_last_error(ctx)) > 0 || s_ == ZTREE_OK, "no message");                        \
    for (int i_ = 0; i_ < 8; i_++) CHECK(sentinel[i_] == 777, "caller memory written on error");     \
  } while (0)
  EXPECT(ztree_knn(ctx, NULL, NULL, &kp, &out), ZTREE_ERR_NULL_POINTER);
  EXPECT(ztree_knn(ctx, &p, NULL, NULL, &out), ZTREE_ERR_NULL_POINTER);
  EXPECT(ztree_knn(ctx, &p, NULL, &kp, NULL), ZTREE_ERR_NULL_POINTER);
  CHECK(ztree_knn(NULL, &p, NULL, &kp, &out) == ZTREE_ERR_NULL_POINTER, "null ctx");
  CHECK(strlen(ztree_last_error(NULL)) > 0, "thread error message");
  kp.k = 0;
  EXPECT(ztree_knn(ctx, &p, NULL, &kp, &out), ZTREE_ERR_INVALID_ARGUMENT);
  kp.k = 2;
  x[2] = NAN;
  EXPECT(ztree_knn(ctx, &p, NULL, &kp, &out), ZTREE_ERR_NON_FINITE);
  CHECK(strstr(ztree_last_error(ctx), "point 2") != NULL, "message names the point: %s", ztree_last_error(ctx));
  x[2] = 1.0; /* outside [0, 1) */
  EXPECT(ztree_knn(ctx, &p, NULL, &kp, &out), ZTREE_ERR_OUTSIDE_BOX);
  x[2] = 0.3;
  ztree_particles bad = p;
  bad.pos[1].dtype = ZTREE_DTYPE_F32;
  EXPECT(ztree_knn(ctx, &bad, NULL, &kp, &out), ZTREE_ERR_DTYPE);
  bad = p;
  bad.pos[0].dtype = ZTREE_DTYPE_I32;
  EXPECT(ztree_knn(ctx, &bad, NULL, &kp, &out), ZTREE_ERR_DTYPE);
  bad = p;
  bad.pos[2].data = NULL;
  EXPECT(ztree_knn(ctx, &bad, NULL, &kp, &out), ZTREE_ERR_NULL_POINTER);
  bad = p;
  bad.count = -1;
  EXPECT(ztree_knn(ctx, &bad, NULL, &kp, &out), ZTREE_ERR_SIZE);
  bad = p;
  bad.pos[0].stride = -8;
  EXPECT(ztree_knn(ctx, &bad, NULL, &kp, &out), ZTREE_ERR_INVALID_ARGUMENT);
  bad = p;
  bad.memory = ZTREE_MEMORY_CUDA_DEVICE;
  /* No GPU: a clear status. With one, these host pointers are not device memory. */
  EXPECT(ztree_knn(ctx, &bad, NULL, &kp, &out), ztree_cuda_device_count() > 0 ? ZTREE_ERR_INVALID_ARGUMENT : ZTREE_ERR_NO_DEVICE);
  bad = p;
  bad.count = 0;
  EXPECT(ztree_knn(ctx, &bad, NULL, &kp, &out), ZTREE_ERR_NO_SOURCES);
  kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_SCALAR_MEAN; /* no scalar given */
  EXPECT(ztree_knn(ctx, &p, NULL, &kp, &out), ZTREE_ERR_NULL_POINTER);
  kp.outputs = ZTREE_KNN_INDICES | 1024u;
  EXPECT(ztree_knn(ctx, &p, NULL, &kp, &out), ZTREE_ERR_INVALID_ARGUMENT);

  ztree_fof_params fp;
  ztree_fof_params_init(&fp);
  fp.min_members = 1;
  ztree_fof_output fo;
  ztree_fof_output_init(&fo);
  fo.labels = sentinel;
  fp.linking_length = 0;
  EXPECT(ztree_fof(ctx, &p, &fp, &fo), ZTREE_ERR_INVALID_ARGUMENT);
  fp.linking_length = -1;
  EXPECT(ztree_fof(ctx, &p, &fp, &fo), ZTREE_ERR_INVALID_ARGUMENT);
  fp.linking_length = NAN;
  EXPECT(ztree_fof(ctx, &p, &fp, &fo), ZTREE_ERR_INVALID_ARGUMENT);
  fp.linking_length = 0.1;
  fp.b = 0.2;
  EXPECT(ztree_fof(ctx, &p, &fp, &fo), ZTREE_ERR_INVALID_ARGUMENT);
  fp.b = 0;
  fp.min_members = 0;
  EXPECT(ztree_fof(ctx, &p, &fp, &fo), ZTREE_ERR_INVALID_ARGUMENT);
  fp.min_members = 1;
  EXPECT(ztree_fof(ctx, &p, NULL, &fo), ZTREE_ERR_NULL_POINTER);
  bad = p;
  bad.ids = arr(x, ZTREE_DTYPE_F64, 0);
  EXPECT(ztree_fof(ctx, &bad, &fp, &fo), ZTREE_ERR_DTYPE);
  /* b needs a box: the open context says so. */
  fp.linking_length = 0;
  fp.b = 0.2;
  ztree_status s = ztree_fof(open_ctx, &p, &fp, &fo);
  CHECK(s == ZTREE_ERR_INVALID_ARGUMENT && strstr(ztree_last_error(open_ctx), "box") != NULL, "b without a box: %s", ztree_last_error(open_ctx));
  for (int i = 0; i < 8; i++) CHECK(sentinel[i] == 777, "caller memory written on error");
  /* Zero particles is fine for FoF. */
  fp.b = 0;
  fp.linking_length = 0.1;
  bad = p;
  bad.count = 0;
  ztree_fof_output fz;
  ztree_fof_output_init(&fz);
  CHECK(ztree_fof(ctx, &bad, &fp, &fz) == ZTREE_OK && fz.n_halos == 0, "empty fof: %s", ztree_last_error(ctx));
#undef EXPECT
}

/* DBSCAN against the rules on the explicit eps-graph (brute force), min_pts = 2 against
 * FoF, the catalogue against the labels, and its argument checks. */
static void test_dbscan(ztree_context *ctx, int n, double box) {
  double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n), *z = malloc(sizeof(double) * n);
  for (int i = 0; i < n; i++) {
    int clump = i % 3 != 0; /* two thirds in 8 clumps, the rest uniform */
    double c[3] = {0.1 + 0.1 * (i % 8), 0.5, 0.3 + 0.05 * (i % 8)};
    x[i] = clump ? c[0] + 0.02 * (urand() - 0.5) : urand() * box;
    y[i] = clump ? c[1] + 0.02 * (urand() - 0.5) : urand() * box;
    z[i] = clump ? c[2] + 0.02 * (urand() - 0.5) : urand() * box;
  }
  ztree_particles p = soa_f64(n, x, y, z);
  const double eps = 0.012;
  const int min_pts = 6;
  ztree_dbscan_params dp;
  CHECK(ztree_dbscan_params_init(&dp) == ZTREE_OK && dp.struct_size == sizeof dp, "dbscan params init");
  dp.eps = eps;
  dp.min_pts = min_pts;
  dp.members = 1;
  dp.classes = 1;
  dp.order = ZTREE_CATALOGUE_GADGET;
  ztree_dbscan_output out;
  ztree_dbscan_output_init(&out);
  CHECK(ztree_dbscan(ctx, &p, &dp, &out) == ZTREE_OK, "dbscan: %s", ztree_last_error(ctx));
  int64_t *labels = malloc(sizeof(int64_t) * n);
  int8_t *cls = malloc((size_t)n);
  memcpy(labels, out.labels, sizeof(int64_t) * n);
  memcpy(cls, out.point_class, (size_t)n);
  int wrong_class = 0, wrong_label = 0, split = 0, ncore = 0;
  for (int i = 0; i < n; i++) {
    double a[3] = {x[i], y[i], z[i]};
    int cnt = 0;
    for (int j = 0; j < n; j++) {
      double b[3] = {x[j], y[j], z[j]};
      cnt += d2_f64(a, b, box) <= eps * eps;
    }
    int core = cnt >= min_pts;
    ncore += core;
    if (core != (cls[i] == ZTREE_POINT_CORE)) wrong_class++;
  }
  for (int i = 0; i < n; i++) {
    double a[3] = {x[i], y[i], z[i]};
    double best = INFINITY;
    int64_t nearest = -1;
    for (int j = 0; j < n; j++) {
      double b[3] = {x[j], y[j], z[j]};
      double d = d2_f64(a, b, box);
      if (cls[j] == ZTREE_POINT_CORE && d <= eps * eps) {
        if (cls[i] == ZTREE_POINT_CORE && labels[i] != labels[j]) split++;
        if (d < best || (d == best && j < nearest)) best = d, nearest = j;
      }
    }
    if (cls[i] == ZTREE_POINT_CORE) continue;
    if ((nearest >= 0) != (cls[i] == ZTREE_POINT_BORDER)) wrong_class++;
    if (labels[i] != (nearest >= 0 ? labels[nearest] : -1)) wrong_label++;
  }
  CHECK(wrong_class == 0 && wrong_label == 0 && split == 0 && out.n_core == ncore, "dbscan rules: %d classes, %d labels, %d split pairs wrong; %lld core of %d",
        wrong_class, wrong_label, split, (long long)out.n_core, ncore);
  CHECK(out.n_core + out.n_border + out.n_noise == n && out.n_clusters > 0 && out.eps == eps, "dbscan counts");
  int64_t in_rows = 0;
  for (int64_t c = 0; c < out.n_clusters; c++) {
    const ztree_cluster *r = &out.clusters[c];
    in_rows += r->count;
    CHECK(out.member_offsets[c + 1] - out.member_offsets[c] == r->count && r->core_count >= 1 && r->core_count <= r->count, "cluster %lld", (long long)c);
    CHECK(c == 0 || out.clusters[c - 1].count >= r->count, "GADGET order");
    for (int64_t k = out.member_offsets[c]; k < out.member_offsets[c + 1]; k++) {
      int64_t i = out.member_indices[k];
      double dd[3] = {x[i], y[i], z[i]};
      CHECK(labels[i] == r->tag && sqrt(d2_f64(dd, r->pos, box)) <= r->max_radius * (1 + 1e-12), "member %lld of cluster %lld", (long long)i, (long long)c);
    }
  }
  int64_t labelled = 0;
  for (int i = 0; i < n; i++) labelled += labels[i] >= 0;
  CHECK(in_rows == labelled, "cluster members %lld vs labelled %lld", (long long)in_rows, (long long)labelled);

  /* min_pts = 2: FoF's groups of two or more, tag for tag. */
  dp.min_pts = 2;
  dp.members = 0;
  CHECK(ztree_dbscan(ctx, &p, &dp, &out) == ZTREE_OK, "dbscan min_pts 2: %s", ztree_last_error(ctx));
  memcpy(labels, out.labels, sizeof(int64_t) * n);
  ztree_fof_params fp;
  ztree_fof_params_init(&fp);
  fp.linking_length = eps;
  fp.min_members = 2;
  ztree_fof_output fo;
  ztree_fof_output_init(&fo);
  CHECK(ztree_fof(ctx, &p, &fp, &fo) == ZTREE_OK, "fof");
  int differ = 0;
  for (int i = 0; i < n; i++) differ += labels[i] != fo.labels[i];
  CHECK(differ == 0 && out.n_border == 0, "min_pts 2 vs FoF: %d labels differ", differ);

  /* Estimates and bad arguments: a status and a message. */
#define EXPECT_D(call, status)                                                                              \
  do {                                                                                                      \
    ztree_status s_ = (call);                                                                               \
    CHECK(s_ == (status) && strlen(ztree_last_error(ctx)) > 0, "%s returned %d, expected %d: %s", #call, (int)s_, \
          (int)(status), ztree_last_error(ctx));                                                            \
  } while (0)
  int64_t bytes = 0;
  CHECK(ztree_dbscan_bytes(ctx, &p, &dp, &out, &bytes) == ZTREE_OK && bytes > n * 8, "dbscan bytes %lld", (long long)bytes);
  ztree_dbscan_params bad = dp;
  bad.min_pts = 0;
  EXPECT_D(ztree_dbscan(ctx, &p, &bad, &out), ZTREE_ERR_INVALID_ARGUMENT);
  bad = dp;
  bad.b = 0.2;
  EXPECT_D(ztree_dbscan(ctx, &p, &bad, &out), ZTREE_ERR_INVALID_ARGUMENT);
  bad = dp;
  bad.border = 3;
  EXPECT_D(ztree_dbscan(ctx, &p, &bad, &out), ZTREE_ERR_INVALID_ARGUMENT);
  bad = dp;
  bad.struct_size = 0;
  EXPECT_D(ztree_dbscan(ctx, &p, &bad, &out), ZTREE_ERR_INVALID_ARGUMENT);
  EXPECT_D(ztree_dbscan(ctx, &p, NULL, &out), ZTREE_ERR_NULL_POINTER);
  ztree_particles dev = p;
  dev.memory = ZTREE_MEMORY_CUDA_DEVICE;
  /* Host memory passed as device arrays: no device here, or not device memory on a GPU. */
  EXPECT_D(ztree_dbscan(ctx, &dev, &dp, &out), ztree_cuda_device_count() > 0 ? ZTREE_ERR_INVALID_ARGUMENT : ZTREE_ERR_NO_DEVICE);
  #undef EXPECT_D
  free(x), free(y), free(z), free(labels), free(cls);
}

/* Radius queries against brute force: counts, CSR lists by distance with distances,
 * by index, sums and means of a scalar, SPH density, per-query radii with separate
 * queries; the memory limit on the lists; bad arguments. */
static double sph_w(double r, double h) {
  if (h <= 0 || r > h) return 0;
  double q = r / h, w = q <= 0.5 ? 1 - 6 * q * q + 6 * q * q * q : 2 * (1 - q) * (1 - q) * (1 - q);
  return 8 / ZT_PI * w / (h * h * h);
}

static void test_radius(ztree_context *ctx, int n, double box) {
  double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n), *z = malloc(sizeof(double) * n);
  double *m = malloc(sizeof(double) * n), *s = malloc(sizeof(double) * n), *h = malloc(sizeof(double) * n);
  for (int i = 0; i < n; i++) {
    x[i] = urand() * box, y[i] = urand() * box, z[i] = urand() * box;
    if (i % 50 == 1) x[i] = x[i - 1], y[i] = y[i - 1], z[i] = z[i - 1]; /* duplicates */
    m[i] = 0.5 + urand(), s[i] = urand() - 0.25, h[i] = 0.05 + 0.1 * urand();
  }
  ztree_particles p = soa_f64(n, x, y, z);
  p.mass = arr(m, ZTREE_DTYPE_F64, 0);
  ztree_radius_params rp;
  CHECK(ztree_radius_params_init(&rp) == ZTREE_OK && rp.struct_size == sizeof rp, "radius params init");
  rp.radius = 0.08;
  rp.outputs = ZTREE_RADIUS_COUNTS | ZTREE_RADIUS_LISTS | ZTREE_RADIUS_DISTANCES | ZTREE_RADIUS_SCALAR_SUM | ZTREE_RADIUS_SCALAR_MEAN;
  rp.scalar = arr(s, ZTREE_DTYPE_F64, 0);
  ztree_radius_output out;
  ztree_radius_output_init(&out);
  int64_t *counts = malloc(sizeof(int64_t) * n);
  out.counts = counts;
  CHECK(ztree_radius(ctx, &p, NULL, &rp, &out) == ZTREE_OK, "radius: %s", ztree_last_error(ctx));
  CHECK(out.counts == counts && out.n_queries == n && out.offsets != NULL && out.distances != NULL && out.scalar_mean != NULL, "radius outputs");
  cand *c = malloc(sizeof(cand) * n);
  int wrong = 0;
  int64_t pairs = 0;
  for (int q = 0; q < n; q++) {
    double a[3] = {x[q], y[q], z[q]}, sum = 0;
    int nc = 0;
    for (int j = 0; j < n; j++) {
      double b[3] = {x[j], y[j], z[j]}, d2 = d2_f64(a, b, box);
      if (d2 <= rp.radius * rp.radius) c[nc].d2 = d2, c[nc].i = j, nc++, sum += s[j];
    }
    qsort(c, nc, sizeof *c, cand_cmp);
    pairs += nc;
    if (counts[q] != nc || out.offsets[q + 1] - out.offsets[q] != nc) { wrong++; continue; }
    for (int k = 0; k < nc; k++)
      if (out.indices[out.offsets[q] + k] != c[k].i || out.distances[out.offsets[q] + k] != sqrt(c[k].d2)) wrong++;
    if (fabs(out.scalar_sum[q] - sum) > 1e-12 * (1 + fabs(sum)) || fabs(out.scalar_mean[q] - sum / nc) > 1e-12 * (1 + fabs(sum))) wrong++;
  }
  CHECK(wrong == 0 && out.n_pairs == pairs, "radius vs brute force: %d wrong, %lld pairs vs %lld", wrong, (long long)out.n_pairs, (long long)pairs);
  /* Counts stopped at a limit: min(true count, limit). */
  {
    int64_t *capped = malloc(sizeof(int64_t) * n), *exact = malloc(sizeof(int64_t) * n);
    memcpy(exact, counts, sizeof(int64_t) * n);
    ztree_radius_params rc;
    ztree_radius_params_init(&rc);
    rc.radius = rp.radius;
    rc.outputs = ZTREE_RADIUS_COUNTS;
    rc.count_limit = 3;
    ztree_radius_output oc;
    ztree_radius_output_init(&oc);
    oc.counts = capped;
    CHECK(ztree_radius(ctx, &p, NULL, &rc, &oc) == ZTREE_OK, "radius with a count limit: %s", ztree_last_error(ctx));
    int off = 0;
    for (int q = 0; q < n; q++) off += capped[q] != (exact[q] < 3 ? exact[q] : 3);
    CHECK(off == 0, "%d counts differ from min(count, 3)", off);
    rc.outputs |= ZTREE_RADIUS_LISTS;
    CHECK(ztree_radius(ctx, &p, NULL, &rc, &oc) == ZTREE_ERR_INVALID_ARGUMENT, "a count limit with lists must be refused");
    free(capped);
    free(exact);
  }

  /* Separate queries (the first 300 points shifted), a radius each, lists by index, SPH density. */
  int nq = 300;
  double *qx = malloc(sizeof(double) * nq), *qy = malloc(sizeof(double) * nq), *qz = malloc(sizeof(double) * nq);
  for (int q = 0; q < nq; q++) qx[q] = fmod(x[q] + 0.013, box), qy[q] = y[q], qz[q] = z[q];
  ztree_particles qp = soa_f64(nq, qx, qy, qz);
  ztree_radius_params rq;
  ztree_radius_params_init(&rq);
  rq.radii = arr(h, ZTREE_DTYPE_F64, 0);
  rq.outputs = ZTREE_RADIUS_COUNTS | ZTREE_RADIUS_LISTS | ZTREE_RADIUS_DENSITY;
  rq.list_order = ZTREE_LIST_BY_INDEX;
  ztree_radius_output o2;
  ztree_radius_output_init(&o2);
  CHECK(ztree_radius(ctx, &p, &qp, &rq, &o2) == ZTREE_OK, "radius queries: %s", ztree_last_error(ctx));
  wrong = 0;
  for (int q = 0; q < nq; q++) {
    double a[3] = {qx[q], qy[q], qz[q]}, rho = 0;
    int64_t k = o2.offsets[q];
    for (int j = 0; j < n; j++) {
      double b[3] = {x[j], y[j], z[j]}, d2 = d2_f64(a, b, box);
      if (d2 <= h[q] * h[q]) {
        rho += m[j] * sph_w(sqrt(d2), h[q]);
        if (k >= o2.offsets[q + 1] || o2.indices[k++] != j) wrong++;
      }
    }
    if (k != o2.offsets[q + 1] || o2.counts[q] != k - o2.offsets[q] || fabs(o2.density[q] - rho) > 1e-12 * rho) wrong++;
  }
  CHECK(wrong == 0 && o2.distances == NULL, "radius queries vs brute force: %d wrong", wrong);

#define EXPECT_R(call, status)                                                                              \
  do {                                                                                                      \
    ztree_status s_ = (call);                                                                               \
    CHECK(s_ == (status) && strlen(ztree_last_error(ctx)) > 0, "%s returned %d, expected %d: %s", #call, (int)s_, \
          (int)(status), ztree_last_error(ctx));                                                            \
  } while (0)
  int64_t bytes = 0;
  CHECK(ztree_radius_bytes(ctx, &p, NULL, &rp, &out, &bytes) == ZTREE_OK && bytes > n * 8, "radius bytes %lld", (long long)bytes);
  ztree_radius_params bad = rp;
  bad.radius = -1;
  EXPECT_R(ztree_radius(ctx, &p, NULL, &bad, &out), ZTREE_ERR_INVALID_ARGUMENT);
  bad = rp;
  bad.outputs = ZTREE_RADIUS_DISTANCES;
  EXPECT_R(ztree_radius(ctx, &p, NULL, &bad, &out), ZTREE_ERR_INVALID_ARGUMENT);
  bad = rp;
  bad.list_order = 7;
  EXPECT_R(ztree_radius(ctx, &p, NULL, &bad, &out), ZTREE_ERR_INVALID_ARGUMENT);
  bad = rp;
  bad.scalar.data = NULL;
  EXPECT_R(ztree_radius(ctx, &p, NULL, &bad, &out), ZTREE_ERR_NULL_POINTER);
  bad = rp;
  bad.struct_size = 3;
  EXPECT_R(ztree_radius(ctx, &p, NULL, &bad, &out), ZTREE_ERR_INVALID_ARGUMENT);
  double nan_h = NAN;
  bad = rq;
  bad.radii = arr(&nan_h, ZTREE_DTYPE_F64, 0);
  qp.count = 1;
  EXPECT_R(ztree_radius(ctx, &p, &qp, &bad, &o2), ZTREE_ERR_INVALID_ARGUMENT);
  ztree_particles dev = p;
  dev.memory = ZTREE_MEMORY_CUDA_DEVICE;
  /* Host memory passed as device arrays: no device here, or not device memory on a GPU. */
  EXPECT_R(ztree_radius(ctx, &dev, NULL, &rp, &out), ztree_cuda_device_count() > 0 ? ZTREE_ERR_INVALID_ARGUMENT : ZTREE_ERR_NO_DEVICE);
  EXPECT_R(ztree_radius(ctx, &p, &dev, &rp, &out), ZTREE_ERR_INVALID_ARGUMENT); /* mixed memory spaces */
  /* Lists beyond the memory limit: refused after the counting pass, before they exist. */
  ztree_config cfg;
  ztree_config_init(&cfg);
  cfg.periodic = 1;
  cfg.box_size[0] = cfg.box_size[1] = cfg.box_size[2] = box;
  ztree_radius_output o3;
  ztree_radius_output_init(&o3);
  CHECK(ztree_radius_bytes(ctx, &p, NULL, &rp, &o3, &bytes) == ZTREE_OK, "radius bytes");
  cfg.memory_limit = bytes + 1000;
  ztree_context *small = NULL;
  CHECK(ztree_create(&cfg, &small) == ZTREE_OK, "context with a memory limit");
  ztree_status st = ztree_radius(small, &p, NULL, &rp, &o3);
  CHECK(st == ZTREE_ERR_MEMORY && strstr(ztree_last_error(small), "lists") != NULL, "lists over the limit: %d %s", (int)st, ztree_last_error(small));
  ztree_destroy(small);
#undef EXPECT_R
  free(x), free(y), free(z), free(m), free(s), free(h), free(counts), free(c), free(qx), free(qy), free(qz);
}

/* FoF, DBSCAN and kNN on type masks equal the same calls on copies of the selected particles
 * (tags and labels in input indices), and a mask without types is refused. */
static void test_types(ztree_context *ctx, int n) {
  double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n), *z = malloc(sizeof(double) * n);
  double *cx = malloc(sizeof(double) * n), *cy = malloc(sizeof(double) * n), *cz = malloc(sizeof(double) * n);
  uint8_t *type = malloc((size_t)n);
  int64_t *sel = malloc(sizeof(int64_t) * n), *labels = malloc(sizeof(int64_t) * n);
  int m = 0;
  for (int i = 0; i < n; i++) {
    double c = 0.1 + 0.1 * (i % 9);
    x[i] = c + 0.03 * (urand() - 0.5), y[i] = 0.5 + 0.03 * (urand() - 0.5), z[i] = 0.5 + 0.03 * (urand() - 0.5);
    type[i] = (uint8_t)(i % 3 == 0 ? 4 : 1); /* a third stars, the rest dark matter */
    if (type[i] == 4) cx[m] = x[i], cy[m] = y[i], cz[m] = z[i], sel[m++] = i;
  }
  ztree_particles p = soa_f64(n, x, y, z), c = soa_f64(m, cx, cy, cz);
  p.types = arr(type, ZTREE_DTYPE_U8, 0);
  ztree_fof_params fp;
  ztree_fof_params_init(&fp);
  fp.linking_length = 0.004;
  fp.min_members = 3;
  fp.type_mask = 1u << 4;
  ztree_fof_output fo;
  ztree_fof_output_init(&fo);
  CHECK(ztree_fof(ctx, &p, &fp, &fo) == ZTREE_OK, "fof on a type mask: %s", ztree_last_error(ctx));
  memcpy(labels, fo.labels, sizeof(int64_t) * n);
  int64_t halos = fo.n_halos;
  fp.type_mask = 0;
  CHECK(ztree_fof(ctx, &c, &fp, &fo) == ZTREE_OK, "fof on the copy");
  int wrong = 0;
  for (int j = 0; j < m; j++) wrong += labels[sel[j]] != (fo.labels[j] < 0 ? -1 : sel[fo.labels[j]]);
  for (int i = 0; i < n; i++) wrong += type[i] != 4 && labels[i] != -1;
  CHECK(wrong == 0 && halos == fo.n_halos && halos > 0, "type mask vs copy: %d labels differ, %lld vs %lld halos", wrong, (long long)halos,
        (long long)fo.n_halos);

  ztree_dbscan_params dp;
  ztree_dbscan_params_init(&dp);
  dp.eps = 0.006;
  dp.min_pts = 5;
  dp.type_mask = 1u << 4;
  ztree_dbscan_output dout;
  ztree_dbscan_output_init(&dout);
  CHECK(ztree_dbscan(ctx, &p, &dp, &dout) == ZTREE_OK, "dbscan on a type mask: %s", ztree_last_error(ctx));
  memcpy(labels, dout.labels, sizeof(int64_t) * n);
  dp.type_mask = 0;
  CHECK(ztree_dbscan(ctx, &c, &dp, &dout) == ZTREE_OK, "dbscan on the copy");
  wrong = 0;
  for (int j = 0; j < m; j++) wrong += labels[sel[j]] != (dout.labels[j] < 0 ? -1 : sel[dout.labels[j]]);
  CHECK(wrong == 0 && dout.n_core > 0, "dbscan type mask vs copy: %d labels differ", wrong);

  /* kNN of the stars among the dark matter (types 1) equals kNN from the copied stars to
   * a copy of the dark matter; the others' rows are not computed. */
  {
    double *dx = malloc(sizeof(double) * n), *dy = malloc(sizeof(double) * n), *dz = malloc(sizeof(double) * n);
    int64_t *dsel = malloc(sizeof(int64_t) * n);
    int md = 0;
    for (int i = 0; i < n; i++)
      if (type[i] == 1) dx[md] = x[i], dy[md] = y[i], dz[md] = z[i], dsel[md++] = i;
    ztree_particles dm = soa_f64(md, dx, dy, dz);
    enum { KK = 4 };
    ztree_knn_params kp;
    ztree_knn_params_init(&kp);
    kp.k = KK;
    kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES;
    kp.source_type_mask = 1u << 1;
    kp.query_type_mask = 1u << 4;
    ztree_knn_output ko;
    ztree_knn_output_init(&ko);
    CHECK(ztree_knn(ctx, &p, NULL, &kp, &ko) == ZTREE_OK, "knn on type masks: %s", ztree_last_error(ctx));
    int64_t *got = malloc(sizeof(int64_t) * n * KK);
    memcpy(got, ko.indices, sizeof(int64_t) * n * KK);
    kp.source_type_mask = kp.query_type_mask = 0;
    CHECK(ztree_knn(ctx, &dm, &c, &kp, &ko) == ZTREE_OK, "knn between copies: %s", ztree_last_error(ctx));
    int bad = 0;
    for (int j = 0, q = 0; q < n; q++) {
      for (int r = 0; r < KK; r++) {
        int64_t want = type[q] == 4 ? dsel[ko.indices[j * KK + r]] : -1;
        bad += got[q * KK + r] != want;
      }
      if (type[q] == 4) j++;
    }
    CHECK(bad == 0, "knn type masks vs copies: %d entries differ", bad);
    kp.query_type_mask = 1u << 4;
    kp.order = ZTREE_ORDER_ZORDER;
    CHECK(ztree_knn(ctx, &p, NULL, &kp, &ko) == ZTREE_ERR_INVALID_ARGUMENT, "masks in z-order: %s", ztree_last_error(ctx));
    /* Radius queries among the stars within 0.004 equal the self-query of the copied stars
     * (entries mapped to input indices); the others' rows are not computed (count -1). */
    ztree_radius_params rp;
    ztree_radius_params_init(&rp);
    rp.radius = 0.004;
    rp.outputs = ZTREE_RADIUS_COUNTS | ZTREE_RADIUS_LISTS;
    rp.list_order = ZTREE_LIST_BY_INDEX;
    rp.source_type_mask = 1u << 4;
    rp.query_type_mask = 1u << 4;
    ztree_radius_output ro;
    ztree_radius_output_init(&ro);
    CHECK(ztree_radius(ctx, &p, NULL, &rp, &ro) == ZTREE_OK, "radius on type masks: %s", ztree_last_error(ctx));
    int64_t *rc = malloc(sizeof(int64_t) * n), *roff = malloc(sizeof(int64_t) * (n + 1));
    memcpy(rc, ro.counts, sizeof(int64_t) * n);
    memcpy(roff, ro.offsets, sizeof(int64_t) * (n + 1));
    int64_t *ridx = malloc(sizeof(int64_t) * (roff[n] + 1));
    memcpy(ridx, ro.indices, sizeof(int64_t) * roff[n]);
    rp.source_type_mask = rp.query_type_mask = 0;
    CHECK(ztree_radius(ctx, &c, NULL, &rp, &ro) == ZTREE_OK, "radius among the copies: %s", ztree_last_error(ctx));
    bad = 0;
    for (int j = 0, q = 0; q < n; q++) {
      if (type[q] != 4) {
        bad += rc[q] != -1 || roff[q + 1] != roff[q];
        continue;
      }
      bad += rc[q] != ro.counts[j] || roff[q + 1] - roff[q] != ro.offsets[j + 1] - ro.offsets[j];
      for (int64_t e = 0; !bad && e < ro.counts[j]; e++) bad += ridx[roff[q] + e] != sel[ro.indices[ro.offsets[j] + e]];
      j++;
    }
    CHECK(bad == 0 && roff[n] > m, "radius type masks vs copies: %d rows differ, %lld pairs for %d stars", bad, (long long)roff[n], m);
    free(rc), free(roff), free(ridx);
    free(dx), free(dy), free(dz), free(dsel), free(got);
  }

  /* A mask needs types of an integer type. */
  fp.type_mask = 2;
  p.types.data = NULL;
  CHECK(ztree_fof(ctx, &p, &fp, &fo) == ZTREE_ERR_NULL_POINTER && strstr(ztree_last_error(ctx), "types"), "mask without types: %s",
        ztree_last_error(ctx));
  p.types = arr(x, ZTREE_DTYPE_F64, 0);
  CHECK(ztree_fof(ctx, &p, &fp, &fo) == ZTREE_ERR_DTYPE, "f64 types: %s", ztree_last_error(ctx));
  free(x), free(y), free(z), free(cx), free(cy), free(cz), free(type), free(sel), free(labels);
}

int main(void) {
  char v[64];
  snprintf(v, sizeof v, "%d.%d.%d", ZTREE_VERSION_MAJOR, ZTREE_VERSION_MINOR, ZTREE_VERSION_PATCH);
  CHECK(strcmp(v, ztree_version()) == 0, "header %s vs library %s", v, ztree_version());
  CHECK(ztree_config_init(NULL) == ZTREE_ERR_NULL_POINTER, "config_default(NULL)");
  ztree_config cfg;
  CHECK(ztree_config_init(&cfg) == ZTREE_OK && cfg.dims == 3 && cfg.leaf_size == 0, "defaults");
  ztree_context *ctx = (ztree_context *)1;
  CHECK(ztree_create(NULL, &ctx) == ZTREE_ERR_NULL_POINTER && ctx == NULL, "create(NULL)");
  CHECK(strlen(ztree_last_error(NULL)) > 0, "create error message");
  cfg.dims = 4;
  CHECK(ztree_create(&cfg, &ctx) == ZTREE_ERR_INVALID_ARGUMENT && ctx == NULL, "bad dims");
  cfg.dims = 3;
  cfg.periodic = 1;
  cfg.box_size[0] = cfg.box_size[1] = cfg.box_size[2] = 1.0;
  cfg.box_size[1] = -1;
  CHECK(ztree_create(&cfg, &ctx) == ZTREE_ERR_INVALID_ARGUMENT, "bad box");
  cfg.box_size[1] = 1.0;
  cfg.threads = 2;
  cfg.leaf_size = 8; /* small leaves: several planes even for small inputs */
  cfg.top_target = 16;
  CHECK(ztree_create(&cfg, &ctx) == ZTREE_OK && ctx != NULL, "create: %s", ztree_last_error(NULL));
  ztree_config ocfg;
  ztree_config_init(&ocfg);
  ztree_context *open_ctx = NULL;
  /* Without MPI_Init an MPI context is refused with a message (no crash); a build
   * without MPI (cmake -DZTREE_MPI=OFF) refuses it as unsupported. */
  open_ctx = (ztree_context *)&ocfg;
  ztree_status ms = ztree_create_mpi(&ocfg, 0, &open_ctx);
  CHECK(open_ctx == NULL &&
            ((ms == ZTREE_ERR_MPI && strstr(ztree_last_error(NULL), "MPI_Init") != NULL) ||
             (ms == ZTREE_ERR_UNSUPPORTED && strstr(ztree_last_error(NULL), "no MPI support") != NULL)),
        "create_mpi without MPI_Init: %s", ztree_last_error(NULL));
  CHECK(ztree_create(&ocfg, &open_ctx) == ZTREE_OK, "create (open)");
  CHECK(strcmp(ztree_status_string(ZTREE_ERR_DTYPE), "element type not allowed") == 0, "status string");

  test_knn_f64_soa(ctx, 1500, 1.0);
  test_fof_f32_aos(ctx, 3000);
  test_errors(ctx, open_ctx);
  test_dbscan(ctx, 2000, 1.0);
  test_types(ctx, 3000);
  test_radius(ctx, 2000, 1.0);

  CHECK(ztree_destroy(ctx) == ZTREE_OK, "destroy");
  CHECK(ztree_destroy(open_ctx) == ZTREE_OK, "destroy");
  CHECK(ztree_destroy(NULL) == ZTREE_OK, "destroy(NULL)");
  if (failures) {
    fprintf(stderr, "test_api: %d checks failed\n", failures);
    return 1;
  }
  printf("test_api: all checks passed\n");
  return 0;
}
