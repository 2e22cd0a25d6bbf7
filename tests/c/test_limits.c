/* Regression tests of the findings of a hostile caller (the fuzz driver and review):
 * nothing aborts, every output pointer is valid, unreasonable values get a status and a
 * message, the README's promises hold (self first, particle_mass in both jobs, f32 positions with f64
 * velocities). Serial contexts. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztree.h"

#include "check.h"

static uint64_t rng = 99;
static double urand(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static ztree_particles soa(int64_t n, int32_t dtype, const void *x, const void *y, const void *z) {
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = n;
  p.pos[0] = (ztree_array){x, dtype, 0};
  p.pos[1] = (ztree_array){y, dtype, 0};
  p.pos[2] = (ztree_array){z, dtype, 0};
  return p;
}

static ztree_context *make(int periodic, double box, double particle_mass, int64_t memory_limit) {
  ztree_config c;
  ztree_config_init(&c);
  c.periodic = periodic;
  c.box_size[0] = c.box_size[1] = c.box_size[2] = box;
  c.threads = 2;
  c.particle_mass = particle_mass;
  c.memory_limit = memory_limit;
  ztree_context *ctx = NULL;
  if (ztree_create(&c, &ctx) != ZTREE_OK) {
    fprintf(stderr, "create: %s\n", ztree_last_error(NULL));
    exit(1);
  }
  return ctx;
}

enum { N = 3000 };
static double x[N], y[N], z[N];

int main(void) {
  for (int i = 0; i < N; i++) { x[i] = urand(); y[i] = urand(); z[i] = urand(); }
  ztree_context *ctx = make(1, 1.0, 1.0, 0);
  ztree_particles p = soa(N, ZTREE_DTYPE_F64, x, y, z);
  ztree_knn_params kp;
  ztree_knn_output ko;

  /* k far beyond the sources with lists: a memory status, not an abort. */
  ztree_knn_params_init(&kp);
  ztree_knn_output_init(&ko);
  kp.k = INT32_MAX;
  kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES;
  ztree_status s = ztree_knn(ctx, &p, NULL, &kp, &ko);
  CHECK(s == ZTREE_ERR_MEMORY && strstr(ztree_last_error(ctx), "bytes"), "k = INT32_MAX with lists: %d %s", (int)s, ztree_last_error(ctx));
  kp.k = 10000000;
  s = ztree_knn(ctx, &p, NULL, &kp, &ko);
  CHECK(s == ZTREE_ERR_MEMORY, "k = 1e7 with lists: %d %s", (int)s, ztree_last_error(ctx));

  /* k beyond the sources without lists: the k = N result. */
  static double kth_n[N], dens_n[N];
  kp.outputs = ZTREE_KNN_KTH_DISTANCE | ZTREE_KNN_DENSITY;
  kp.k = N;
  CHECK(ztree_knn(ctx, &p, NULL, &kp, &ko) == ZTREE_OK, "k = N: %s", ztree_last_error(ctx));
  memcpy(kth_n, ko.kth_distance, sizeof kth_n);
  memcpy(dens_n, ko.density, sizeof dens_n);
  kp.k = INT32_MAX;
  CHECK(ztree_knn(ctx, &p, NULL, &kp, &ko) == ZTREE_OK, "k = INT32_MAX: %s", ztree_last_error(ctx));
  int bad = 0;
  for (int i = 0; i < N; i++) bad += !isinf(ko.kth_distance[i]) || ko.density[i] != 0.0;
  CHECK(bad == 0 && ko.padded_queries == N, "k > N: %d rows not padded", bad);
  for (int i = 0; i < N; i++) bad += !(kth_n[i] > 0 && isfinite(kth_n[i]) && dens_n[i] > 0);
  CHECK(bad == 0, "k = N: %d rows without a k-th neighbour", bad);

  /* The memory estimate and the ceiling. */
  int64_t need = 0;
  kp.k = 16;
  kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES | ZTREE_KNN_DENSITY;
  ztree_knn_output_init(&ko);
  CHECK(ztree_knn_bytes(ctx, &p, NULL, &kp, &ko, &need) == ZTREE_OK && need >= (int64_t)N * 16 * 16, "knn bytes %lld", (long long)need);
  ztree_context *tight = make(1, 1.0, 1.0, need / 2), *roomy = make(1, 1.0, 1.0, need);
  s = ztree_knn(tight, &p, NULL, &kp, &ko);
  CHECK(s == ZTREE_ERR_MEMORY && strstr(ztree_last_error(tight), "memory_limit"), "over the limit: %d %s", (int)s, ztree_last_error(tight));
  CHECK(ztree_knn(roomy, &p, NULL, &kp, &ko) == ZTREE_OK, "at the limit: %s", ztree_last_error(roomy));
  ztree_stats st;
  ztree_stats_init(&st);
  ztree_get_stats(roomy, &st);
  CHECK(st.scratch_bytes > 0 && st.scratch_bytes <= need, "scratch %lld beyond the estimate %lld", (long long)st.scratch_bytes, (long long)need);
  ztree_fof_params fp;
  ztree_fof_output fo;
  ztree_fof_params_init(&fp);
  ztree_fof_output_init(&fo);
  fp.b = 0.6; /* groups of 5 and more in a uniform set */
  fp.min_members = 5;
  fp.members = 1;
  CHECK(ztree_fof_bytes(ctx, &p, &fp, &fo, &need) == ZTREE_OK && need > N * 8, "fof bytes %lld", (long long)need);
  ztree_destroy(tight);
  tight = make(1, 1.0, 1.0, need / 4);
  CHECK(ztree_fof(tight, &p, &fp, &fo) == ZTREE_ERR_MEMORY, "FoF over the limit: %s", ztree_last_error(tight));
  ztree_destroy(tight);
  ztree_destroy(roomy);

  /* Empty inputs: every output pointer valid, member_offsets has n_halos + 1 entries. */
  ztree_particles none = soa(0, ZTREE_DTYPE_F64, NULL, NULL, NULL);
  ztree_fof_output_init(&fo);
  CHECK(ztree_fof(ctx, &none, &fp, &fo) == ZTREE_OK, "empty FoF: %s", ztree_last_error(ctx));
  CHECK(fo.n_halos == 0 && fo.member_offsets && fo.member_offsets[0] == 0 && fo.halos && fo.labels && fo.member_indices, "empty FoF outputs");
  none.vel[0] = (ztree_array){x, ZTREE_DTYPE_F64, 0}; /* vel[1], vel[2] NULL: nothing is read */
  CHECK(ztree_fof(ctx, &none, &fp, &fo) == ZTREE_OK, "empty FoF with vel[0] only: %s", ztree_last_error(ctx));
  ztree_particles one = soa(1, ZTREE_DTYPE_F64, x, y, z);
  CHECK(ztree_fof(ctx, &one, &fp, &fo) == ZTREE_OK && fo.n_halos == 0 && fo.member_offsets[0] == 0, "one particle");
  fp.min_members = 1;
  CHECK(ztree_fof(ctx, &one, &fp, &fo) == ZTREE_OK && fo.n_halos == 1 && fo.member_offsets[1] == 1 && fo.member_indices[0] == 0, "one halo of one");
  fp.min_members = 5;
  ztree_knn_output_init(&ko);
  kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DENSITY;
  ztree_particles q0 = soa(0, ZTREE_DTYPE_F64, NULL, NULL, NULL);
  CHECK(ztree_knn(ctx, &p, &q0, &kp, &ko) == ZTREE_OK && ko.n_queries == 0 && ko.indices && ko.density, "no queries");

  /* Masses: zero, negative and non-finite rejected; huge but finite ones work. */
  static double m[N];
  for (int i = 0; i < N; i++) m[i] = 1.0;
  p.mass = (ztree_array){m, ZTREE_DTYPE_F64, 0};
  m[7] = 0.0;
  CHECK(ztree_fof(ctx, &p, &fp, &fo) == ZTREE_ERR_INVALID_ARGUMENT, "zero mass");
  m[7] = -1.0;
  CHECK(ztree_fof(ctx, &p, &fp, &fo) == ZTREE_ERR_INVALID_ARGUMENT, "negative mass");
  m[7] = INFINITY;
  CHECK(ztree_fof(ctx, &p, &fp, &fo) == ZTREE_ERR_NON_FINITE, "infinite mass");
  p.mass.data = NULL;
  ztree_context *big = make(1, 1e10, 1e300, 0);
  static double bx[N], by[N], bz[N];
  for (int i = 0; i < N; i++) { bx[i] = x[i] * 1e10; by[i] = y[i] * 1e10; bz[i] = z[i] * 1e10; }
  ztree_particles bp = soa(N, ZTREE_DTYPE_F64, bx, by, bz);
  ztree_fof_output_init(&fo); /* fo.labels is ctx's buffer: not big's, and too short */
  CHECK(ztree_fof(big, &bp, &fp, &fo) == ZTREE_OK && fo.n_halos > 0, "particle_mass 1e300: %s", ztree_last_error(big));
  bad = 0;
  for (int64_t h = 0; h < fo.n_halos; h++)
    bad += !(isfinite(fo.halos[h].pos[0]) && isfinite(fo.halos[h].pos[1]) && isfinite(fo.halos[h].pos[2]) && isfinite(fo.halos[h].inertia_radius) && fo.halos[h].mass > 0);
  CHECK(bad == 0, "%d halos with non-finite centres or masses", bad);
  ztree_destroy(big);

  /* particle_mass in the kNN density too: twice the mass, twice the density. */
  ztree_context *heavy = make(1, 1.0, 2.0, 0);
  kp.k = 8;
  kp.outputs = ZTREE_KNN_DENSITY;
  ztree_knn_output_init(&ko);
  static double d1[N];
  CHECK(ztree_knn(ctx, &p, NULL, &kp, &ko) == ZTREE_OK, "density");
  memcpy(d1, ko.density, sizeof d1);
  ztree_knn_output_init(&ko);
  CHECK(ztree_knn(heavy, &p, NULL, &kp, &ko) == ZTREE_OK, "density x2");
  bad = 0;
  for (int i = 0; i < N; i++) bad += ko.density[i] != 2.0 * d1[i];
  CHECK(bad == 0, "%d densities are not twice as large with particle_mass = 2", bad);
  ztree_destroy(heavy);

  /* Coordinates and boxes whose squared distances overflow: a status and a message. */
  x[5] = 1e200;
  ztree_context *open_ctx = make(0, 1.0, 1.0, 0);
  kp.outputs = ZTREE_KNN_KTH_DISTANCE;
  s = ztree_knn(open_ctx, &p, NULL, &kp, &ko);
  CHECK(s == ZTREE_ERR_INVALID_ARGUMENT && strstr(ztree_last_error(open_ctx), "rescale"), "coordinate 1e200: %d %s", (int)s, ztree_last_error(open_ctx));
  x[5] = 0.5;
  static float fx[N], fy[N], fz[N];
  for (int i = 0; i < N; i++) { fx[i] = (float)x[i]; fy[i] = (float)y[i]; fz[i] = (float)z[i]; }
  fx[9] = 1e30f;
  ztree_particles pf = soa(N, ZTREE_DTYPE_F32, fx, fy, fz);
  CHECK(ztree_knn(open_ctx, &pf, NULL, &kp, &ko) == ZTREE_ERR_INVALID_ARGUMENT, "f32 coordinate 1e30: %s", ztree_last_error(open_ctx));
  fx[9] = 0.5f;
  ztree_context *huge = make(1, 1e300, 1.0, 0);
  CHECK(ztree_knn(huge, &p, NULL, &kp, &ko) == ZTREE_ERR_INVALID_ARGUMENT && strstr(ztree_last_error(huge), "box"), "box 1e300: %s", ztree_last_error(huge));
  ztree_destroy(huge);
  huge = make(1, 1e20, 1.0, 0);
  CHECK(ztree_knn(huge, &pf, NULL, &kp, &ko) == ZTREE_ERR_INVALID_ARGUMENT, "f32 in a box of 1e20: %s", ztree_last_error(huge));
  CHECK(ztree_knn(huge, &p, NULL, &kp, &ko) == ZTREE_OK, "f64 in a box of 1e20: %s", ztree_last_error(huge));
  ztree_destroy(huge);

  /* A needle-shaped periodic box is refused at creation; a rod of points in an open
   * domain is fine (cubic cells). */
  {
    ztree_config c;
    ztree_config_init(&c);
    c.periodic = 1;
    c.box_size[0] = 100; c.box_size[1] = 9.4; c.box_size[2] = 1e6;
    ztree_context *needle = NULL;
    s = ztree_create(&c, &needle);
    CHECK(s == ZTREE_ERR_INVALID_ARGUMENT && needle == NULL && strstr(ztree_last_error(NULL), "aspect"), "needle box: %d %s", (int)s, ztree_last_error(NULL));
    static double rz[N];
    for (int i = 0; i < N; i++) rz[i] = 1e6 * urand();
    ztree_particles rod = soa(N, ZTREE_DTYPE_F64, x, y, rz);
    kp.k = 8;
    kp.outputs = ZTREE_KNN_KTH_DISTANCE;
    ztree_knn_output_init(&ko);
    CHECK(ztree_knn(open_ctx, &rod, NULL, &kp, &ko) == ZTREE_OK, "rod: %s", ztree_last_error(open_ctx));
  }

  /* Self first among duplicates, then ties by smaller index. */
  static double dx[64], dy[64], dz[64];
  for (int i = 0; i < 64; i++) { dx[i] = 0.25 + 0.5 * (i % 2); dy[i] = 0.5; dz[i] = 0.5; }
  ztree_particles dp = soa(64, ZTREE_DTYPE_F64, dx, dy, dz);
  kp.k = 5;
  kp.outputs = ZTREE_KNN_INDICES;
  ztree_knn_output_init(&ko);
  CHECK(ztree_knn(open_ctx, &dp, NULL, &kp, &ko) == ZTREE_OK, "duplicates");
  bad = 0;
  for (int i = 0; i < 64; i++) {
    bad += ko.indices[i * 5] != i;
    int64_t prev = -1;
    for (int j = 1; j < 5; j++) {
      int64_t nb = ko.indices[i * 5 + j];
      bad += nb == i || nb % 2 != i % 2 || nb <= prev;
      prev = nb;
    }
  }
  CHECK(bad == 0, "%d rows break self first / smaller index next", bad);

  /* f32 positions with f64 velocities and masses (the GADGET/HACC layout). */
  static double vx[N], vy[N], vz[N];
  for (int i = 0; i < N; i++) { vx[i] = urand(); vy[i] = urand(); vz[i] = urand(); m[i] = 1.0 + urand(); }
  pf.vel[0] = (ztree_array){vx, ZTREE_DTYPE_F64, 0};
  pf.vel[1] = (ztree_array){vy, ZTREE_DTYPE_F64, 0};
  pf.vel[2] = (ztree_array){vz, ZTREE_DTYPE_F64, 0};
  pf.mass = (ztree_array){m, ZTREE_DTYPE_F64, 0};
  ztree_fof_output_init(&fo);
  CHECK(ztree_fof(ctx, &pf, &fp, &fo) == ZTREE_OK && fo.n_halos > 0, "f32 positions, f64 velocities: %s", ztree_last_error(ctx));
  kp.outputs = ZTREE_KNN_DENSITY;
  ztree_knn_output_init(&ko);
  CHECK(ztree_knn(ctx, &pf, NULL, &kp, &ko) == ZTREE_OK, "f32 positions, f64 masses: %s", ztree_last_error(ctx));

  ztree_destroy(open_ctx);
  ztree_destroy(ctx);
  printf("test_limits: %d failures\n", failures);
  return failures != 0;
}
