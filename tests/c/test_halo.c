/* C tests of the halo property columns of ztree_fof: the potential-minimum centre and
 * the most bound member against a brute-force sum over each halo's members, the SO
 * masses against a sort of every particle's distance, the per-type sums against the
 * members' types, the kinetic energy against a direct sum, ztree_gadget_cosmology, and
 * the argument checks. Run under valgrind by ctest. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztree.h"

#define ZT_PI 3.14159265358979323846

#include "check.h"

static uint64_t rng_state = 4242;
static double urand(void) {
  rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static double min_image(double x) { return x > 0.5 ? x - 1.0 : (x < -0.5 ? x + 1.0 : x); }

static ztree_array arr(const void *p, int32_t dtype, int64_t stride) {
  ztree_array a;
  a.data = p;
  a.dtype = dtype;
  a.stride = stride;
  return a;
}

enum { N = 4000 };
static double pos[N][3], vel[N][3], mass[N];
static uint8_t type[N];

static int cmp_pair(const void *a, const void *b) {
  const double *x = a, *y = b;
  return (x[0] > y[0]) - (x[0] < y[0]);
}

/* M_Delta by the definition: the mass inside the first radius (over the sorted particle
 * distances) where the mean enclosed density falls below rho; 0 with fewer than 5 inside. */
static double brute_so(const double c[3], double rho) {
  double(*prof)[2] = malloc(sizeof(double[2]) * N);
  for (int i = 0; i < N; i++) {
    double r2 = 0;
    for (int d = 0; d < 3; d++) r2 += min_image(pos[i][d] - c[d]) * min_image(pos[i][d] - c[d]);
    prof[i][0] = sqrt(r2);
    prof[i][1] = mass[i];
  }
  qsort(prof, N, sizeof *prof, cmp_pair);
  double inside = 0, result = -1;
  int count = 0, k = 0;
  while (k < N && result < 0) {
    double r = prof[k][0], m = inside;
    int n = count;
    while (k < N && prof[k][0] == r) {
      m += prof[k][1];
      n++;
      k++;
    }
    if (r > 0 && m / (4.0 / 3.0 * ZT_PI * r * r * r) < rho) result = count < 5 ? 0.0 : inside;
    inside = m;
    count = n;
  }
  free(prof);
  return result;
}

int main(void) {
  /* Four clumps (one across a corner of the box) in a uniform background. */
  const double centres[4][3] = {{0.01, 0.99, 0.5}, {0.3, 0.3, 0.3}, {0.7, 0.2, 0.8}, {0.5, 0.6, 0.1}};
  for (int i = 0; i < N; i++) {
    int clump = i % 5;
    double rad = clump < 4 ? 0.03 * urand() * urand() : 0;
    for (int d = 0; d < 3; d++) {
      double v = clump < 4 ? centres[clump][d] + rad * (2 * urand() - 1) : urand();
      v -= floor(v);
      pos[i][d] = v >= 1.0 ? 0.0 : v;
      vel[i][d] = 2 * urand() - 1;
    }
    mass[i] = 1.0 + (i % 3);
    type[i] = (uint8_t)((i % 7) == 3 ? 4 : 1);
  }
  ztree_config cfg;
  ztree_config_init(&cfg);
  cfg.periodic = 1;
  cfg.box_size[0] = cfg.box_size[1] = cfg.box_size[2] = 1.0;
  ztree_context *ctx = NULL;
  CHECK(ztree_create(&cfg, &ctx) == ZTREE_OK, "create");
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = N;
  for (int d = 0; d < 3; d++) {
    p.pos[d] = arr(&pos[0][d], ZTREE_DTYPE_F64, sizeof pos[0]);
    p.vel[d] = arr(&vel[0][d], ZTREE_DTYPE_F64, sizeof vel[0]);
  }
  p.mass = arr(mass, ZTREE_DTYPE_F64, 0);
  p.types = arr(type, ZTREE_DTYPE_U8, 0);

  /* G and rho_crit of a GADGET run in Mpc/h, 1e10 Msun/h, km/s at z = 0 (G = 43.0187). */
  double g = 0, rho_crit = 0, omega_m = 0;
  CHECK(ztree_gadget_cosmology(3.085678e24, 1.989e43, 1e5, 0.308, 0.692, 1.0, &g, &rho_crit, &omega_m) == ZTREE_OK, "cosmology");
  CHECK(fabs(g - 43.0187) < 1e-3 && fabs(omega_m - 0.308) < 1e-12, "G %g, Omega_m %g", g, omega_m);
  CHECK(fabs(rho_crit - 3e4 / (8 * ZT_PI * g)) < 1e-6 * rho_crit, "rho_crit %g", rho_crit);
  CHECK(ztree_gadget_cosmology(0, 1, 1, 0.3, 0.7, 1, &g, NULL, NULL) == ZTREE_ERR_INVALID_ARGUMENT, "bad units");

  ztree_fof_params fp;
  ztree_fof_params_init(&fp);
  fp.linking_length = 0.004;
  fp.min_members = 20;
  fp.order = ZTREE_CATALOGUE_GADGET;
  fp.members = 1;
  fp.columns = ZTREE_COLUMN_CENTRE | ZTREE_COLUMN_MOST_BOUND | ZTREE_COLUMN_SO | ZTREE_COLUMN_DYNAMICS | ZTREE_COLUMN_TYPES;
  fp.gravity_constant = 1.0;
  fp.softening = 0.001;
  fp.rho_crit = 1000.0; /* 200 Omega_m rho_crit: 7.5 times the mean density */
  fp.omega_m = 0.3;
  ztree_fof_output o;
  ztree_fof_output_init(&o);
  ztree_status s = ztree_fof(ctx, &p, &fp, &o);
  CHECK(s == ZTREE_OK, "fof with columns: %s", ztree_last_error(ctx));
  if (s != ZTREE_OK) return 1;
  CHECK(o.n_halos >= 4, "%lld halos", (long long)o.n_halos);
  CHECK(o.n_types == 5, "n_types %lld", (long long)o.n_types);
  int64_t type_before[5] = {0};
  for (int64_t h = 0; h < o.n_halos; h++) {
    const int64_t *m = o.member_indices + o.member_offsets[h];
    int64_t n = o.member_offsets[h + 1] - o.member_offsets[h];
    double(*x)[3] = malloc(sizeof(double[3]) * (size_t)n);
    for (int64_t a = 0; a < n; a++)
      for (int d = 0; d < 3; d++) x[a][d] = pos[m[0]][d] + min_image(pos[m[a]][d] - pos[m[0]][d]);
    /* Potential minimum and most bound member, brute force (ties: the first member). */
    const double *vm = o.halos[h].vel;
    double best_phi = INFINITY, best_e = INFINITY, phi_min = 0, kin = 0;
    int64_t at_phi = -1, at_e = -1;
    for (int64_t a = 0; a < n; a++) {
      double sum = 0;
      for (int64_t b = 0; b < n; b++) {
        if (b == a) continue;
        double r2 = 0;
        for (int d = 0; d < 3; d++) r2 += (x[a][d] - x[b][d]) * (x[a][d] - x[b][d]);
        sum += mass[m[b]] / sqrt(r2 + fp.softening * fp.softening);
      }
      double phi = -fp.gravity_constant * sum, k = 0;
      for (int d = 0; d < 3; d++) k += 0.5 * (vel[m[a]][d] - vm[d]) * (vel[m[a]][d] - vm[d]);
      kin += mass[m[a]] * k;
      if (phi < best_phi) best_phi = phi, at_phi = m[a], phi_min = phi;
      if (phi + k < best_e) best_e = phi + k, at_e = m[a];
    }
    CHECK(o.centre_index[h] == at_phi, "halo %lld: potential minimum %lld vs %lld", (long long)h, (long long)o.centre_index[h], (long long)at_phi);
    CHECK(fabs(o.centre_potential[h] - phi_min) <= 1e-12 * fabs(phi_min), "halo %lld: potential", (long long)h);
    CHECK(o.most_bound_index[h] == at_e, "halo %lld: most bound %lld vs %lld", (long long)h, (long long)o.most_bound_index[h], (long long)at_e);
    for (int d = 0; d < 3; d++) CHECK(o.centre_pos[3 * h + d] == pos[o.centre_index[h]][d], "centre position");
    CHECK(fabs(o.kinetic_energy[h] - kin) <= 1e-9 * kin, "halo %lld: kinetic energy %g vs %g", (long long)h, o.kinetic_energy[h], kin);
    CHECK(o.potential_energy[h] < 0 && o.vmax[h] > 0 && o.r_vmax[h] > 0 && o.spin[h] > 0, "halo %lld: dynamics", (long long)h);
    CHECK(o.inertia[3 * h] >= o.inertia[3 * h + 1] && o.inertia[3 * h + 1] >= o.inertia[3 * h + 2], "eigenvalues descending");
    /* SO around the potential minimum over every particle. */
    const double thresholds[4] = {200 * fp.rho_crit, 500 * fp.rho_crit, 200 * fp.omega_m * fp.rho_crit, -1};
    for (int k = 0; k < 3; k++) {
      double want = brute_so(&o.centre_pos[3 * h], thresholds[k]);
      double got = o.so_mass[ZTREE_SO_DEFINITIONS * h + k];
      CHECK(fabs(got - want) <= 1e-12 * want, "halo %lld, SO %d: %.17g vs %.17g", (long long)h, k, got, want);
      if (got > 0) CHECK(fabs(o.so_radius[ZTREE_SO_DEFINITIONS * h + k] - cbrt(3 * got / (4 * ZT_PI * thresholds[k]))) <= 1e-12, "SO radius");
    }
    /* Per type. */
    int64_t len[5] = {0};
    double mt[5] = {0};
    for (int64_t a = 0; a < n; a++) len[type[m[a]]]++, mt[type[m[a]]] += mass[m[a]];
    for (int t = 0; t < 5; t++) {
      CHECK(o.len_type[5 * h + t] == len[t] && o.mass_type[5 * h + t] == mt[t], "halo %lld, type %d", (long long)h, t);
      CHECK(o.offset_type[5 * h + t] == type_before[t], "halo %lld, type %d: offset", (long long)h, t);
      type_before[t] += len[t];
    }
    free(x);
  }

  /* DBSCAN on the type-4 particles takes the same columns: each cluster's potential
   * minimum among its members by brute force, and every member of type 4. */
  ztree_dbscan_params dp;
  ztree_dbscan_params_init(&dp);
  dp.eps = 0.006;
  dp.min_pts = 4;
  dp.min_members = 5;
  dp.members = 1;
  dp.type_mask = 1u << 4;
  dp.columns = ZTREE_COLUMN_CENTRE | ZTREE_COLUMN_TYPES;
  dp.gravity_constant = fp.gravity_constant;
  dp.softening = fp.softening;
  ztree_dbscan_output dout;
  ztree_dbscan_output_init(&dout);
  s = ztree_dbscan(ctx, &p, &dp, &dout);
  CHECK(s == ZTREE_OK && dout.n_clusters > 0, "dbscan with columns: %s", ztree_last_error(ctx));
  CHECK(dout.so_mass == NULL && dout.vmax == NULL && dout.n_types == 5, "the columns asked for");
  for (int64_t c = 0; s == ZTREE_OK && c < dout.n_clusters; c++) {
    const int64_t *m = dout.member_indices + dout.member_offsets[c];
    int64_t n = dout.member_offsets[c + 1] - dout.member_offsets[c], at = -1;
    double best = INFINITY;
    for (int64_t a = 0; a < n; a++) {
      double sum = 0;
      for (int64_t b = 0; b < n; b++) {
        if (b == a) continue;
        double r2 = 0;
        for (int d = 0; d < 3; d++) {
          /* Unwrapped about the first member, as the definition says. */
          double xa = pos[m[0]][d] + min_image(pos[m[a]][d] - pos[m[0]][d]);
          double xb = pos[m[0]][d] + min_image(pos[m[b]][d] - pos[m[0]][d]);
          double dx = xa - xb;
          r2 += dx * dx;
        }
        sum += mass[m[b]] / sqrt(r2 + dp.softening * dp.softening);
      }
      if (-dp.gravity_constant * sum < best) best = -dp.gravity_constant * sum, at = m[a];
    }
    CHECK(dout.centre_index[c] == at, "cluster %lld: potential minimum %lld vs %lld", (long long)c, (long long)dout.centre_index[c], (long long)at);
    CHECK(dout.len_type[5 * c + 4] == n, "cluster %lld: all of type 4", (long long)c);
  }

  /* Argument checks: status and a message naming the parameter. */
  ztree_fof_params bad = fp;
  bad.gravity_constant = 0;
  CHECK(ztree_fof(ctx, &p, &bad, &o) == ZTREE_ERR_INVALID_ARGUMENT && strstr(ztree_last_error(ctx), "gravity_constant"), "G = 0: %s",
        ztree_last_error(ctx));
  bad = fp;
  bad.columns = 1u << 20;
  CHECK(ztree_fof(ctx, &p, &bad, &o) == ZTREE_ERR_INVALID_ARGUMENT && strstr(ztree_last_error(ctx), "columns"), "bad bits: %s",
        ztree_last_error(ctx));
  bad = fp;
  bad.rho_crit = -1;
  CHECK(ztree_fof(ctx, &p, &bad, &o) == ZTREE_ERR_INVALID_ARGUMENT && strstr(ztree_last_error(ctx), "rho_crit"), "rho_crit: %s",
        ztree_last_error(ctx));
  ztree_particles nv = p;
  nv.vel[0].data = nv.vel[1].data = nv.vel[2].data = NULL;
  CHECK(ztree_fof(ctx, &nv, &fp, &o) == ZTREE_ERR_NULL_POINTER && strstr(ztree_last_error(ctx), "vel"), "no velocities: %s",
        ztree_last_error(ctx));
  /* Without columns every column pointer is NULL. */
  fp.columns = 0;
  CHECK(ztree_fof(ctx, &p, &fp, &o) == ZTREE_OK && o.centre_index == NULL && o.so_mass == NULL && o.len_type == NULL, "no columns");

  CHECK(ztree_destroy(ctx) == ZTREE_OK, "destroy");
  if (failures) {
    fprintf(stderr, "test_halo: %d checks failed\n", failures);
    return 1;
  }
  printf("test_halo: all checks passed\n");
  return 0;
}
