/* In-situ driver: a toy particle simulation on MPI ranks that calls ztree every step
 * through one reused context — kNN density and FoF halos with a catalogue.
 *
 *   mpirun -np 2 ./insitu [total_particles] [steps]
 *
 * Each rank owns a share of clustered particles (halos with a power-law mass function in
 * a periodic unit box) that drift a little each step; its particles are spread over the
 * whole box, as after a simulation's own (non-spatial) decomposition. The context is
 * created on MPI_COMM_WORLD, so kNN and FoF run distributed over all ranks: each rank
 * gets the density of and the halo tag of exactly the particles it passed, and every
 * halo of the global catalogue is returned by exactly one rank. */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztree.h"

typedef struct {
  float pos[3];
  float vel[3];
  int64_t id;
} particle;

static uint64_t rng;
static double urand(void) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static float wrap(double v) {
  v -= floor(v);
  float f = (float)v;
  return f >= 1.0f ? 0.0f : f;
}

static void init_particles(particle *ps, int64_t n, int64_t first_id) {
  int64_t i = 0;
  while (i < n * 35 / 100) { /* smooth background */
    for (int d = 0; d < 3; d++) ps[i].pos[d] = wrap(urand());
    i++;
  }
  while (i < n) { /* halos: mass function ~ m^-1.9, cuspy profiles */
    int64_t m = (int64_t)pow(pow(20.0, -0.9) * (1.0 - urand()), -1.0 / 0.9);
    if (m > n / 200 + 20) m = n / 200 + 20; /* no halo larger than 0.5% of the particles */
    if (m > n - i) m = n - i;
    double c[3] = {urand(), urand(), urand()};
    double rv = 0.4 * cbrt((double)m) / cbrt((double)n * 2);
    double vc[3] = {urand() - 0.5, urand() - 0.5, urand() - 0.5};
    for (int64_t j = 0; j < m; j++, i++) {
      double r = rv * urand() * urand(), a = 2 * urand() - 1, b = 6.283185307179586 * urand();
      double s = sqrt(1 - a * a);
      ps[i].pos[0] = wrap(c[0] + r * s * cos(b));
      ps[i].pos[1] = wrap(c[1] + r * s * sin(b));
      ps[i].pos[2] = wrap(c[2] + r * a);
      for (int d = 0; d < 3; d++) ps[i].vel[d] = (float)(vc[d] * 1e-3 + (urand() - 0.5) * 1e-4);
    }
  }
  for (i = 0; i < n; i++) ps[i].id = first_id + i;
}

static void print_stages(const ztree_context *ctx, const char *what) {
  ztree_stats st;
  ztree_stats_init(&st);
  if (ztree_get_stats(ctx, &st) != ZTREE_OK) return;
  printf("    %-4s %7.1f ms:", what, st.total_seconds * 1e3);
  for (int s = 0; s < st.n_stages; s++) printf(" %s %.1f", st.stage_name[s], st.stage_seconds[s] * 1e3);
  printf(" (ms)\n");
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int64_t total = argc > 1 ? (int64_t)atof(argv[1]) : 2000000;
  int steps = argc > 2 ? atoi(argv[2]) : 3;
  int64_t n = total / size + (rank < total % size);
  rng = 1234567 + 7919 * (uint64_t)rank;
  particle *ps = malloc((size_t)n * sizeof *ps);
  init_particles(ps, n, (int64_t)rank * (total / size + 1));

  ztree_config cfg;
  ztree_config_init(&cfg);
  cfg.periodic = 1;
  cfg.box_size[0] = cfg.box_size[1] = cfg.box_size[2] = 1.0;
  /* Ranks on one node share its cores: ZTREE_THREADS sets the threads per rank. */
  cfg.threads = getenv("ZTREE_THREADS") ? atoi(getenv("ZTREE_THREADS")) : (size > 1 ? 1 : 0);
  ztree_context *ctx;
  if (ztree_create_mpi(&cfg, (int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), &ctx) != ZTREE_OK) {
    fprintf(stderr, "rank %d: ztree_create_mpi: %s\n", rank, ztree_last_error(NULL));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (rank == 0) {
    printf("ztree %s in-situ demo: %lld particles on %d ranks, %d steps (distributed kNN and FoF)\n",
           ztree_version(), (long long)total, size, steps);
  }

  /* Particle data is described in place: array of structs, byte strides. */
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = n;
  p.memory = ZTREE_MEMORY_HOST;
  for (int d = 0; d < 3; d++) {
    p.pos[d] = (ztree_array){&ps[0].pos[d], ZTREE_DTYPE_F32, sizeof(particle)};
    p.vel[d] = (ztree_array){&ps[0].vel[d], ZTREE_DTYPE_F32, sizeof(particle)};
  }
  p.ids = (ztree_array){&ps[0].id, ZTREE_DTYPE_I64, sizeof(particle)};

  double *density = malloc((size_t)n * sizeof *density);
  /* Each step's k-th neighbour distances are the next step's hint (the particles moved
   * little): a faster search, the same results. */
  double *kth = malloc((size_t)n * sizeof *kth), *kth_prev = malloc((size_t)n * sizeof *kth_prev);
  for (int step = 0; step < steps; step++) {
    for (int64_t i = 0; i < n; i++) /* drift */
      for (int d = 0; d < 3; d++) ps[i].pos[d] = wrap(ps[i].pos[d] + ps[i].vel[d]);
    double t0 = MPI_Wtime();

    ztree_knn_params kp;
    ztree_knn_params_init(&kp);
    kp.k = 16;
    kp.outputs = ZTREE_KNN_DENSITY | ZTREE_KNN_KTH_DISTANCE;
    if (step > 0) kp.kth_hint = (ztree_array){kth_prev, ZTREE_DTYPE_F64, 0};
    ztree_knn_output ko;
    ztree_knn_output_init(&ko);
    ko.density = density;
    ko.kth_distance = kth;
    if (ztree_knn(ctx, &p, NULL, &kp, &ko) != ZTREE_OK) {
      fprintf(stderr, "rank %d: ztree_knn: %s\n", rank, ztree_last_error(ctx));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    double *swap = kth_prev;
    kth_prev = kth;
    kth = swap;
    if (rank == 0) printf("step %d\n", step);
    if (rank == 0) print_stages(ctx, "kNN");
    ztree_stats ks;
    ztree_stats_init(&ks);
    ztree_get_stats(ctx, &ks);
    double t1 = MPI_Wtime();

    ztree_fof_params fp;
    ztree_fof_params_init(&fp);
    fp.b = 0.2;
    fp.min_members = 20;
    fp.order = ZTREE_CATALOGUE_GADGET;
    ztree_fof_output fo;
    ztree_fof_output_init(&fo);
    if (ztree_fof(ctx, &p, &fp, &fo) != ZTREE_OK) {
      fprintf(stderr, "rank %d: ztree_fof: %s\n", rank, ztree_last_error(ctx));
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (rank == 0) print_stages(ctx, "FoF");
    ztree_stats fs;
    ztree_stats_init(&fs);
    ztree_get_stats(ctx, &fs);
    double t2 = MPI_Wtime();

    double rho_max = 0;
    for (int64_t i = 0; i < n; i++) rho_max = density[i] > rho_max ? density[i] : rho_max;
    int64_t local[4] = {n, fo.n_halos, ks.bytes_sent, fs.bytes_sent}, global[4];
    int64_t largest = fo.n_halos > 0 ? fo.halos[0].count : 0, largest_all;
    double times[2] = {t1 - t0, t2 - t1}, tmax[2], rho_all;
    MPI_Reduce(local, global, 4, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&largest, &largest_all, 1, MPI_INT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(times, tmax, 2, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&rho_max, &rho_all, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("    particles %lld | halos (>= 20 members) %lld | largest halo %lld particles | max density %.3g x mean | kNN %.3f s, FoF %.3f s (slowest rank)\n",
             (long long)global[0], (long long)global[1], (long long)largest_all, rho_all / (double)total,
             tmax[0], tmax[1]);
      printf("    communicated: kNN %.1f B/particle, FoF %.1f B/particle (particle moves to the Morton decomposition included)\n",
             (double)global[2] / (double)total, (double)global[3] / (double)total);
    }
  }
  free(density);
  free(kth);
  free(kth_prev);
  free(ps);
  ztree_destroy(ctx);
  MPI_Finalize();
  return 0;
}
