/* The C API on an MPI context: each rank passes a random share of one global point set;
 * results must equal a serial context's on the shares concatenated in rank order, and a
 * bad input on one rank must fail the call on every rank without hanging.
 *   mpirun -np 3 ./test_mpi */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ztree.h"

static int failures = 0;
#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (!(cond)) {                                            \
      failures++;                                             \
      fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
    }                                                         \
  } while (0)

static uint64_t rng = 88172645463325252ULL;
static double urand(void) {
  rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
  return (double)(rng >> 11) * (1.0 / 9007199254740992.0);
}

static ztree_particles soa(int64_t n, const double *x, const double *y, const double *z) {
  ztree_particles p;
  ztree_particles_init(&p);
  p.count = n;
  p.pos[0] = (ztree_array){x, ZTREE_DTYPE_F64, sizeof(double)};
  p.pos[1] = (ztree_array){y, ZTREE_DTYPE_F64, sizeof(double)};
  p.pos[2] = (ztree_array){z, ZTREE_DTYPE_F64, sizeof(double)};
  return p;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  enum { N = 6000, K = 12 };
  /* The same clustered set on every rank; owner[i] says which rank passes point i. */
  static double gx[N], gy[N], gz[N];
  static int owner[N];
  for (int i = 0; i < N; i++) {
    double c = (double)(i % 7) / 7.0, s = i % 3 ? 0.02 : 0.3;
    gx[i] = fmod(c + s * urand(), 1.0);
    gy[i] = fmod(0.5 * c + s * urand(), 1.0);
    gz[i] = urand();
    owner[i] = (int)(urand() * size) % size;
    if (size > 2 && owner[i] == 1) owner[i] = 0; /* rank 1 passes nothing */
  }
  static double cx[N], cy[N], cz[N], mx[N], my[N], mz[N];
  int64_t n = 0, lo = 0, m = 0;
  for (int r = 0; r < size; r++)
    for (int i = 0; i < N; i++)
      if (owner[i] == r) {
        if (r == rank) { mx[n] = gx[i]; my[n] = gy[i]; mz[n] = gz[i]; n++; }
        if (r < rank) lo++;
        cx[m] = gx[i]; cy[m] = gy[i]; cz[m] = gz[i]; m++;
      }

  ztree_config cfg;
  ztree_config_init(&cfg);
  cfg.periodic = 1;
  cfg.threads = 1;
  ztree_context *dist, *serial;
  CHECK(ztree_create_mpi(&cfg, (int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), &dist) == ZTREE_OK, "create_mpi: %s", ztree_last_error(NULL));
  CHECK(ztree_create(&cfg, &serial) == ZTREE_OK, "create");

  /* kNN: k-th distance and density bit for bit, neighbour indices global. */
  ztree_particles pd = soa(n, mx, my, mz), ps = soa(N, cx, cy, cz);
  ztree_knn_params kp;
  ztree_knn_params_init(&kp);
  kp.k = K;
  kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_KTH_DISTANCE | ZTREE_KNN_DENSITY;
  ztree_knn_output kd, ks;
  ztree_knn_output_init(&kd);
  ztree_knn_output_init(&ks);
  CHECK(ztree_knn(dist, &pd, NULL, &kp, &kd) == ZTREE_OK, "knn: %s", ztree_last_error(dist));
  CHECK(ztree_knn(serial, &ps, NULL, &kp, &ks) == ZTREE_OK, "serial knn");
  int bad = 0;
  for (int64_t i = 0; i < n; i++) {
    bad += kd.kth_distance[i] != ks.kth_distance[lo + i] || kd.density[i] != ks.density[lo + i];
    for (int j = 0; j < K; j++) bad += kd.indices[i * K + j] != ks.indices[(lo + i) * K + j];
  }
  CHECK(bad == 0, "%d kNN values differ from the serial context", bad);
  ztree_stats st;
  ztree_stats_init(&st);
  ztree_get_stats(dist, &st);
  CHECK(st.owned >= 0 && (size == 1 || st.bytes_sent >= 0), "stats");

  /* FoF: labels equal; gathered catalogue on rank 0 equals the serial one. */
  ztree_fof_params fp;
  ztree_fof_params_init(&fp);
  fp.linking_length = 0.004;
  fp.min_members = 5;
  fp.order = ZTREE_CATALOGUE_GADGET;
  fp.gather = 1;
  ztree_fof_output fd, fs;
  ztree_fof_output_init(&fd);
  ztree_fof_output_init(&fs);
  CHECK(ztree_fof(dist, &pd, &fp, &fd) == ZTREE_OK, "fof: %s", ztree_last_error(dist));
  CHECK(ztree_fof(serial, &ps, &fp, &fs) == ZTREE_OK, "serial fof");
  bad = 0;
  for (int64_t i = 0; i < n; i++) bad += fd.labels[i] != fs.labels[lo + i];
  CHECK(bad == 0, "%d labels differ", bad);
  CHECK(fd.n_groups_total == fs.n_groups_total, "groups %lld vs %lld", (long long)fd.n_groups_total, (long long)fs.n_groups_total);
  if (rank == 0) {
    CHECK(fd.n_halos == fs.n_halos && fs.n_halos > 0, "halos %lld vs %lld", (long long)fd.n_halos, (long long)fs.n_halos);
    for (int64_t h = 0; h < fd.n_halos && h < fs.n_halos; h++)
      CHECK(fd.halos[h].tag == fs.halos[h].tag && fd.halos[h].count == fs.halos[h].count, "halo %lld", (long long)h);
  } else {
    CHECK(fd.n_halos == 0, "gathered catalogue on rank %d", rank);
  }
  /* Distributed scope: every halo once over the ranks. */
  fp.gather = 0;
  CHECK(ztree_fof(dist, &pd, &fp, &fd) == ZTREE_OK, "fof: %s", ztree_last_error(dist));
  int64_t mine = fd.n_halos, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  CHECK(all == fs.n_halos, "%lld halos over the ranks, expected %lld", (long long)all, (long long)fs.n_halos);

  /* Radius queries: counts, SPH density and lists (global indices, by distance) equal. */
  ztree_radius_params rp;
  ztree_radius_params_init(&rp);
  rp.radius = 0.03;
  rp.outputs = ZTREE_RADIUS_COUNTS | ZTREE_RADIUS_DENSITY | ZTREE_RADIUS_LISTS | ZTREE_RADIUS_DISTANCES;
  ztree_radius_output rd, rs;
  ztree_radius_output_init(&rd);
  ztree_radius_output_init(&rs);
  CHECK(ztree_radius(dist, &pd, NULL, &rp, &rd) == ZTREE_OK, "radius: %s", ztree_last_error(dist));
  CHECK(ztree_radius(serial, &ps, NULL, &rp, &rs) == ZTREE_OK, "serial radius");
  bad = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t c = rd.counts[i];
    bad += c != rs.counts[lo + i] || rd.density[i] != rs.density[lo + i] || rd.offsets[i + 1] - rd.offsets[i] != c;
    for (int64_t j = 0; j < c && !bad; j++)
      bad += rd.indices[rd.offsets[i] + j] != rs.indices[rs.offsets[lo + i] + j] || rd.distances[rd.offsets[i] + j] != rs.distances[rs.offsets[lo + i] + j];
  }
  CHECK(bad == 0, "%d radius rows differ from the serial context", bad);
  CHECK(rd.n_queries == n && rd.n_pairs == rd.offsets[n], "radius n_queries %lld n_pairs %lld", (long long)rd.n_queries, (long long)rd.n_pairs);

  /* DBSCAN: labels and classes equal; the gathered catalogue on rank 0 equals the serial one. */
  ztree_dbscan_params dp;
  ztree_dbscan_params_init(&dp);
  dp.eps = 0.006;
  dp.min_pts = 5;
  dp.min_members = 3;
  dp.order = ZTREE_CATALOGUE_GADGET;
  dp.classes = 1;
  dp.gather = 1;
  ztree_dbscan_output dd, ds;
  ztree_dbscan_output_init(&dd);
  ztree_dbscan_output_init(&ds);
  CHECK(ztree_dbscan(dist, &pd, &dp, &dd) == ZTREE_OK, "dbscan: %s", ztree_last_error(dist));
  CHECK(ztree_dbscan(serial, &ps, &dp, &ds) == ZTREE_OK, "serial dbscan");
  bad = 0;
  for (int64_t i = 0; i < n; i++) bad += dd.labels[i] != ds.labels[lo + i] || dd.point_class[i] != ds.point_class[lo + i];
  CHECK(bad == 0, "%d DBSCAN labels or classes differ", bad);
  CHECK(dd.n_clusters_total == ds.n_clusters_total && ds.n_clusters > 0, "clusters %lld vs %lld", (long long)dd.n_clusters_total,
        (long long)ds.n_clusters_total);
  if (rank == 0) {
    CHECK(dd.n_clusters == ds.n_clusters, "gathered clusters %lld vs %lld", (long long)dd.n_clusters, (long long)ds.n_clusters);
    for (int64_t h = 0; h < dd.n_clusters && h < ds.n_clusters; h++)
      CHECK(dd.clusters[h].tag == ds.clusters[h].tag && dd.clusters[h].count == ds.clusters[h].count && dd.clusters[h].mass == ds.clusters[h].mass &&
                dd.clusters[h].max_radius == ds.clusters[h].max_radius,
            "cluster %lld", (long long)h);
  } else {
    CHECK(dd.n_clusters == 0, "gathered clusters on rank %d", rank);
  }

  /* Type masks (stars 4, dark matter 1): kNN of the stars among the dark matter and FoF on
   * the dark matter equal the serial context's; rank 1 passes no particles and no types. */
  static uint8_t tm[N], tc[N];
  for (int64_t i = 0; i < n; i++) tm[i] = (lo + i) % 5 == 0 ? 4 : 1;
  for (int64_t i = 0; i < N; i++) tc[i] = i % 5 == 0 ? 4 : 1;
  ztree_particles pdt = pd, pst = ps;
  if (n > 0) pdt.types = (ztree_array){tm, ZTREE_DTYPE_U8, 0};
  pst.types = (ztree_array){tc, ZTREE_DTYPE_U8, 0};
  kp.source_type_mask = 1u << 1;
  kp.query_type_mask = 1u << 4;
  CHECK(ztree_knn(dist, &pdt, NULL, &kp, &kd) == ZTREE_OK, "knn with masks: %s", ztree_last_error(dist));
  CHECK(ztree_knn(serial, &pst, NULL, &kp, &ks) == ZTREE_OK, "serial knn with masks: %s", ztree_last_error(serial));
  bad = 0;
  int64_t rows = 0;
  for (int64_t i = 0; i < n; i++) {
    rows += kd.indices[i * K] >= 0;
    bad += memcmp(&kd.kth_distance[i], &ks.kth_distance[lo + i], sizeof(double)) != 0;
    for (int j = 0; j < K; j++) {
      int64_t v = kd.indices[i * K + j];
      bad += v != ks.indices[(lo + i) * K + j] || (v >= 0 && tc[v] != 1);
    }
  }
  CHECK(bad == 0, "%d kNN values with type masks differ from the serial context", bad);
  CHECK(n == 0 || rows > 0, "no star rows computed");
  kp.source_type_mask = kp.query_type_mask = 0;
  /* Radius counts of the stars among the dark matter. */
  rp.source_type_mask = 1u << 1;
  rp.query_type_mask = 1u << 4;
  rp.outputs = ZTREE_RADIUS_COUNTS | ZTREE_RADIUS_LISTS;
  CHECK(ztree_radius(dist, &pdt, NULL, &rp, &rd) == ZTREE_OK, "radius with masks: %s", ztree_last_error(dist));
  CHECK(ztree_radius(serial, &pst, NULL, &rp, &rs) == ZTREE_OK, "serial radius with masks: %s", ztree_last_error(serial));
  bad = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t c = rd.counts[i];
    bad += c != rs.counts[lo + i] || (tm[i] == 1 && c != -1);
    for (int64_t j = 0; j < c && !bad; j++) bad += rd.indices[rd.offsets[i] + j] != rs.indices[rs.offsets[lo + i] + j];
  }
  CHECK(bad == 0, "%d radius rows with type masks differ", bad);
  rp.source_type_mask = rp.query_type_mask = 0;
  fp.type_mask = 1u << 1;
  fp.linking_length = 0.007;
  fp.gather = 1;
  CHECK(ztree_fof(dist, &pdt, &fp, &fd) == ZTREE_OK, "fof with a mask: %s", ztree_last_error(dist));
  CHECK(ztree_fof(serial, &pst, &fp, &fs) == ZTREE_OK, "serial fof with a mask: %s", ztree_last_error(serial));
  bad = 0;
  for (int64_t i = 0; i < n; i++) bad += fd.labels[i] != fs.labels[lo + i] || (tm[i] == 4 && fd.labels[i] != -1);
  CHECK(bad == 0, "%d labels with a type mask differ", bad);
  if (rank == 0) {
    CHECK(fd.n_halos == fs.n_halos && fs.n_halos > 0, "masked halos %lld vs %lld", (long long)fd.n_halos, (long long)fs.n_halos);
    for (int64_t h = 0; h < fd.n_halos && h < fs.n_halos; h++)
      CHECK(fd.halos[h].tag == fs.halos[h].tag && fd.halos[h].count == fs.halos[h].count && fd.halos[h].mass == fs.halos[h].mass,
            "masked halo %lld", (long long)h);
  }
  fp.type_mask = 0;

  /* A NaN on the last rank: every rank fails, nobody hangs, the next call works. */
  if (rank == size - 1 && n > 0) mx[0] = NAN;
  ztree_status s = ztree_knn(dist, &pd, NULL, &kp, &kd);
  if (size == 1 || (rank == size - 1 && n > 0))
    CHECK(s == ZTREE_ERR_NON_FINITE, "NaN rank got %d", (int)s);
  else
    CHECK(s == ZTREE_ERR_REMOTE, "rank got %d (%s)", (int)s, ztree_last_error(dist));
  if (rank == size - 1 && n > 0) mx[0] = 0.5;
  CHECK(ztree_knn(dist, &pd, NULL, &kp, &kd) == ZTREE_OK, "after the error: %s", ztree_last_error(dist));
  /* Disagreeing parameters are an error on every rank, not a hang. */
  kp.k = rank == 0 ? K : K + 1;
  s = ztree_knn(dist, &pd, NULL, &kp, &kd);
  CHECK(size == 1 ? s == ZTREE_OK : s == ZTREE_ERR_MPI, "mismatched k gave %d", (int)s);

  ztree_destroy(serial);
  ztree_destroy(dist);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_mpi: %d ranks, %d failures\n", size, total);
  MPI_Finalize();
  return total != 0;
}
